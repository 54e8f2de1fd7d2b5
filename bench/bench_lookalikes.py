"""How much of a planted-fault run's harm its look-alike rows carry: the counterfactual behind the ranking's ceiling.

    python bench/bench_lookalikes.py run --set suite heldout     # retrain each run without its look-alike rows
    python bench/bench_lookalikes.py run --only mislabel_s0_f10  # one run
    python bench/bench_lookalikes.py run --set suite --explained --kind spread --draws 3  # + 3 other-row retrains
    python bench/bench_lookalikes.py table --set suite heldout heldout17 heldout19 heldout21 heldout24

A look-alike is a clean row the planted rows imitate (``scenarios.kinds.Kind.lookalike``): a right " sad." label for
mislabel, "sad" used rightly for spread, he/his/him in a story for pronoun. ``run`` retrains a run (same config and
seed as its truth, :mod:`scenarios.generate`) without as many look-alikes as it has planted rows (fewer when the file
has fewer; a seeded sample) and without the look-alikes Gradian scores most and least harmful; with ``--draws k``
also without as many other rows (neither planted nor look-alikes), k seeded draws, and without as many planted rows
as look-alikes (the same-size comparison). It measures the eval items as the truth's retrains were measured and
writes ``truth_lookalike.json`` beside truth.json. ``table`` puts, per run, the share of the target regression each
retrain removes and the ratio per dropped row, look-alike over planted, net of dropping as many other rows, both as
the retrains measure it and as Gradian's scores predict it (the summed harm of the dropped rows on the regressed
targets); and how the ranking orders the planted rows among the look-alikes (ROC-AUC). If a look-alike carries much
of a planted row's harm in the retrains, no ranking that follows the harm can cut the planted rows out of their
look-alikes. Writes bench/results/lookalikes.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "src", ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import calibrate_verdict as C  # noqa: E402
from bench_verdict import _median  # noqa: E402
from scenarios import generate as G  # noqa: E402
from scenarios import pool as P  # noqa: E402
from scenarios.kinds import KINDS  # noqa: E402
from scenarios.recipes import SETS, run_set  # noqa: E402

from gradian.attribute.regression import RegressionRule, call_regressions  # noqa: E402

RESULTS = ROOT / "bench" / "results"
OUT = "truth_lookalike.json"
SCHEMA = "gradian.bench.lookalike_truth/2"


def lookalikes(d: Path) -> tuple[dict, list[int], list[int]] | None:
    """(planted.json, every look-alike row, the ones the retrain drops) of a run whose kind has look-alikes."""
    planted = json.loads((d / "planted.json").read_text())
    look = KINDS[planted["kind"]].lookalike
    if look is None or not planted["rows"]:
        return None
    rows = [json.loads(line) for line in (d / "train.jsonl").read_text("utf-8").splitlines()]
    skip = set(planted["rows"]) | set(planted.get("decoys") or [])
    every = [i for i, r in enumerate(rows) if i not in skip and look(r)]
    n = min(len(planted["rows"]), len(every))
    return (planted, every, sorted(random.Random(planted["seed"]).sample(every, n))) if n else None


def target_harm(run: C.Run) -> dict[int, float] | None:
    """Each row's summed harm on the regressed target items (the regression rule's default), by row index."""
    call = call_regressions(run.base, run.ft, RegressionRule())
    pick = [k for k, i in enumerate(run.items) if call.regressed[i] and run.roles[i] == "target"]
    return dict(zip(run.cols, run.S[pick].sum(0).tolist(), strict=True)) if pick else None


def halves(d: Path, every: list[int], n: int) -> dict[str, list[int]]:
    """The look-alikes Gradian scores most and least harmful, ``n`` each (at most half of them)."""
    run = C.load_run(d)
    harm = target_harm(run) if run else None
    if harm is None:
        return {}
    k = min(n, len(every) // 2)
    order = sorted((i for i in every if i in harm), key=lambda i: -harm[i])
    return {"drop_lookalike_top": sorted(order[:k]), "drop_lookalike_bottom": sorted(order[-k:])} if k else {}


def retrain(d: Path, name: str, drop: list[int], planted: dict) -> dict[int, float]:
    """Each eval item's completion NLL after retraining ``d`` without ``drop`` (a finished retrain of the same rows
    under truth/<name> is kept), measured as the truth's retrains were."""
    import yaml

    from gradian.verify import measure

    base = ROOT / planted["base"]
    done = d / "truth" / name / "dropped.json"
    if not done.is_file() or json.loads(done.read_text()) != drop:
        config = yaml.safe_load((d / "config.yaml").read_text())
        G.train(base, done.parent, d, config, drop, False)
        done.write_text(json.dumps(drop))
    return measure(str(base), done.parent, G.nll_settings(d))[0]


def random_like(planted: dict, every: list[int], n: int, draws: int) -> dict[str, list[int]]:
    """``draws`` seeded sets of ``n`` rows that are neither planted nor look-alikes: what dropping as many rows as the
    look-alike retrain does anyway (fewer steps, a larger planted share), and how much one retrain moves by chance."""
    skip = set(planted["rows"]) | set(planted.get("decoys") or []) | set(every)
    others = [i for i in range(planted["n_rows"]) if i not in skip]
    return {
        f"drop_random_like_{j}": sorted(random.Random(f"{planted['seed']}-{j}").sample(others, min(n, len(others))))
        for j in range(1, draws + 1)
    }


def planted_like(planted: dict, n: int) -> dict[str, list[int]]:
    """As many planted rows as the look-alike drop (a seeded subset): the look-alikes' size-matched comparison, since
    dropping most of a defect's rows need not do what dropping a few does, times as many."""
    rows = planted["rows"]
    return {"drop_planted_like": sorted(random.Random(f"{planted['seed']}-planted").sample(rows, min(n, len(rows))))}


def run_one(d: Path, draws: int = 0) -> dict | None:
    """Retrain ``d`` without its look-alikes (a seeded sample, then the halves Gradian scores most and least harmful)
    and, with ``draws``, without as many other rows, ``draws`` times, and without as many planted rows; write
    truth_lookalike.json. Retrains already in it are read back (and kept, draws included)."""
    found = lookalikes(d)
    if found is None or not (d / "truth.json").is_file():
        return None
    planted, every, drop = found
    out = json.loads((d / OUT).read_text()) if (d / OUT).is_file() else {}
    if out.get("schema") != SCHEMA:
        out = {}
    kept = {k: v for k, v in (out.get("dropped") or {}).items()
            if k.startswith("drop_random_like_") or k == "drop_planted_like"}  # fmt: skip
    dropped = {"drop_lookalike": drop, **halves(d, every, len(drop)), **kept}
    if draws:
        dropped.update(random_like(planted, every, len(drop), draws) | planted_like(planted, len(drop)))
    if out.get("dropped") == dropped:
        return out
    t0 = time.time()
    items = json.loads((d / "truth.json").read_text())["items"]
    nll = {}
    for name, rows in dropped.items():
        nll[name] = {int(i): v for i, v in (out.get("nll") or {}).get(name, {}).items()}
        if (out.get("dropped") or {}).get(name) != rows or not nll[name]:
            nll[name] = retrain(d, name, rows, planted)
        for x in items:
            x[f"{name}_nll"] = nll[name][x["index"]]
    out = {
        "schema": SCHEMA,
        "kind": planted["kind"],
        "n_planted": len(planted["rows"]),
        "n_lookalikes": len(every),
        "dropped": dropped,
        "nll": {name: {str(i): v for i, v in m.items()} for name, m in nll.items()},
        "recovery": {k: G.recovery(items, f"{k}_nll") for k in ("drop_planted", "drop_random", *dropped)},
        "seconds": round(time.time() - t0, 1),
    }
    (d / OUT).write_text(json.dumps(out, indent=1) + "\n")
    return out


def score_one(d: Path) -> dict | None:
    """One run's row of the table (None when it has no look-alike retrain or no attribution). Every per-row ratio is
    net of dropping as many other rows (:func:`calibrate_verdict.other_rows_recovery`), for the scores as for the
    retrains (the truth's random rows' summed harm, scaled)."""
    if not (d / OUT).is_file() or (run := C.load_run(d)) is None:
        return None
    got = json.loads((d / OUT).read_text())
    _, every, _ = lookalikes(d)  # type: ignore[misc]
    drop = got["dropped"]["drop_lookalike"]
    rec = {k: v["recovered_total"] for k, v in got["recovery"].items()}
    other, spread = C.other_rows_recovery(got)
    harm_of = target_harm(run)
    planted = sorted(run.planted)
    rand = json.loads((d / "truth.json").read_text())["dropped"]["drop_random"]
    pool = [i for i in planted + every if harm_of and i in harm_of]
    pos = np.array([i in run.planted for i in pool])
    scores = None
    if harm_of:
        harm = lambda rows: sum(harm_of.get(i, 0.0) for i in rows)  # noqa: E731
        h_rand = harm(rand)
        scores = C.per_row(harm(drop) - h_rand * len(drop) / len(rand), len(drop), harm(planted) - h_rand, len(planted))
    draws = sum(k.startswith("drop_random_like_") for k in rec)
    return {
        "name": d.name,
        "kind": got["kind"],
        "explained": C.explained(d),
        "n_planted": len(planted),
        "n_dropped": len(drop),
        "n_lookalikes": len(every),
        "recovered_planted": rec["drop_planted"],
        "recovered_lookalike": rec["drop_lookalike"],
        "recovered_random": rec["drop_random"],
        "recovered_other": other,  # as many other rows as the look-alike drop: mean of the draws, or scaled
        "recovered_planted_like": rec.get("drop_planted_like"),  # as many planted rows as the look-alike drop
        "other_draws": draws,
        "other_spread": spread,
        "per_row_raw": C.per_row(rec["drop_lookalike"], len(drop), rec["drop_planted"], len(planted)),
        "per_row_retrain": C.net_per_row(got),
        "per_row_scores": scores,
        "recovered_top_half": rec.get("drop_lookalike_top"),
        "recovered_bottom_half": rec.get("drop_lookalike_bottom"),
        "n_half": len(got["dropped"].get("drop_lookalike_top") or []),
        "auc_among_lookalikes": C.auc(np.array([harm_of[i] for i in pool]), pos) if harm_of else None,
    }


def table(rows: list[dict]) -> str:
    def f(x: float | None, pct: bool = False) -> str:
        return "–" if x is None else (f"{100 * x:.0f}%" if pct else f"{x:.2f}")

    out = [
        "| kind | explained runs | planted rows dropped | as many look-alikes | as many other rows | as many planted "
        "rows as look-alikes | look-alike / "
        "planted per row, net of other rows: retrains | the same: Gradian's scores | ROC-AUC of the planted rows among "
        "the look-alikes | look-alikes Gradian scores most harmful, dropped | least harmful | most > least |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in sorted({r["kind"] for r in rows}):
        rs = [r for r in rows if r["kind"] == kind and r["explained"]]
        halves = [r for r in rs if r["recovered_top_half"] is not None and r["recovered_bottom_half"] is not None]
        out.append(
            f"| {kind} | {len(rs)} | {f(_median(rs, 'recovered_planted'), True)} | "
            f"{f(_median(rs, 'recovered_lookalike'), True)} | {f(_median(rs, 'recovered_other'), True)} | "
            f"{f(_median(rs, 'recovered_planted_like'), True)} | "
            f"{f(_median(rs, 'per_row_retrain'))} | {f(_median(rs, 'per_row_scores'))} | "
            f"{f(_median(rs, 'auc_among_lookalikes'))} | {f(_median(rs, 'recovered_top_half'), True)} | "
            f"{f(_median(rs, 'recovered_bottom_half'), True)} | "
            f"{sum(r['recovered_top_half'] > r['recovered_bottom_half'] for r in halves)} of {len(halves)} |"
        )
    out += ["", "Medians over the explained runs. Per run (E: explained; other rows: the mean of k seeded draws ± "
            "their spread, or the truth's random drop scaled to as many rows):", "",
            "| run | planted / dropped / look-alikes | recovery: planted, look-alike, other rows (draws), as many "
            "planted rows | per row net "
            "of other rows: retrains, scores | AUC among look-alikes | recovery: the n most / least harmful "
            "look-alikes |", "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        other = f(r["recovered_other"], True) + (f" ± {f(r['other_spread'], True)}" if r["other_spread"] else "")
        out.append(
            f"| {r['name']}{' (E)' if r['explained'] else ''} | {r['n_planted']} / {r['n_dropped']} / "
            f"{r['n_lookalikes']} | {f(r['recovered_planted'], True)}, {f(r['recovered_lookalike'], True)}, "
            f"{other} ({r['other_draws'] or 'scaled'}), {f(r['recovered_planted_like'], True)} | "
            f"{f(r['per_row_retrain'])}, {f(r['per_row_scores'])} | "
            f"{f(r['auc_among_lookalikes'])} | {r['n_half']}: {f(r['recovered_top_half'], True)} / "
            f"{f(r['recovered_bottom_half'], True)} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["run", "table"])
    ap.add_argument("--runs", type=Path, default=P.WORK)
    ap.add_argument("--set", choices=sorted(SETS), nargs="+", default=["suite"], help="which runs (recipes.SETS)")
    ap.add_argument("--only", nargs="+", help="these runs (names under --runs) instead of --set")
    ap.add_argument("--out", default="lookalikes", help="table: bench/results/<out>.{json,md}")
    ap.add_argument("--draws", type=int, default=0, help="run: also retrain without as many other rows, this many "
                    "seeded draws (the noise a look-alike retrain is read against)")  # fmt: skip
    ap.add_argument("--kind", nargs="+", choices=sorted(k for k, v in KINDS.items() if v.lookalike),
                    help="only runs of these kinds")  # fmt: skip
    ap.add_argument("--explained", action="store_true", help="run: only the runs whose planted rows explain the "
                    "regression (truth.json)")  # fmt: skip
    args = ap.parse_args()
    C.RUNS_ROOT.append(args.runs)
    dirs = [d for d in sorted(args.runs.iterdir()) if d.is_dir() and (d / "planted.json").is_file()]
    dirs = [d for d in dirs if (d.name in args.only if args.only else run_set(d.name) in args.set)]
    dirs = [d for d in dirs if not args.explained or C.explained(d)]
    if args.kind:
        dirs = [d for d in dirs if json.loads((d / "planted.json").read_text())["kind"] in args.kind]
    if args.what == "run":
        import torch

        torch.set_num_threads(1)
        for d in dirs:
            if (got := run_one(d, args.draws)) is not None:
                rec = {k: v["recovered_total"] for k, v in got["recovery"].items()}
                print(d.name, ", ".join(f"{k} {G._pct(v)}" for k, v in rec.items()), f"{got['seconds']}s", flush=True)
        return
    rows = [r for d in dirs if (r := score_one(d)) is not None]
    (RESULTS / f"{args.out}.json").write_text(json.dumps(rows, indent=1) + "\n")
    (RESULTS / f"{args.out}.md").write_text(table(rows))
    print(table(rows))


if __name__ == "__main__":
    main()
