"""Calibration data for ``verdict.expected_recovery`` on stories260K planted-fault runs.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python bench/expected_recovery_data.py --build NAME [NAME ...]
    .venv/bin/python bench/expected_recovery_data.py --summarize          # the markdown from the JSON alone

Per run (built one at a time: ``bench/scenarios/generate.py --only NAME``, then ``gradian attribute --query all``
as bench_verdict.attribute_run does it), with this checkout's code: the verdict as bench/calibrate_verdict.py
recomputes it (default regression rule and policy), `gradian verify` on its ``drop_rows`` (calibrate_verdict's
``verify_default``, cached in <run>/verify_default/), and predictors from the per-row scores summed over the
regressed items (what the verdict ranks):

- ``named_pos_share``: positive scores of drop_rows / all positive scores,
- ``named_signed_share``: scores of drop_rows / all scores,
- ``n_named``, ``n_rows``, ``n_regressed``;

and truths: ``verify_total_flagged`` / ``verify_total_random`` (verify's ``recovered_total_*``: the share of the
summed regression over the regressed items that retraining without the verdict's rows / as many random rows
removes), ``truth_planted_total`` / ``truth_random_total`` (truth.json's recovery of the summed target regression
by the planted-rows / random-rows retrains) and ``truth_reg_total_planted`` / ``truth_reg_total_random`` (the same
retrains, on the summed regression of the verdict's regressed items). Runs whose verdict names no rows get
predictors 0 and no verify.

Each finished run is appended to bench/results/expected_recovery_stories.json at once and the markdown rewritten.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import calibrate_verdict as CV  # noqa: E402
from scenarios import pool as P  # noqa: E402

from gradian.attribute.regression import RegressionRule, call_regressions  # noqa: E402
from gradian.options.verdict import VerdictOptions  # noqa: E402
from gradian.verdict.make import make_verdict  # noqa: E402

RESULTS = ROOT / "bench" / "results"
OUT_JSON = RESULTS / "expected_recovery_stories.json"
OUT_MD = RESULTS / "expected_recovery_stories.md"
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))


def build(name: str, root: Path) -> None:
    """generate.py --only NAME (data, fine-tune, truth retrains), then `gradian attribute --query all`."""
    from bench_verdict import attribute_run

    d = root / name
    if not (d / "truth.json").is_file():
        cmd = [sys.executable, str(ROOT / "bench" / "scenarios" / "generate.py"), "--only", name, "--root", str(root)]
        proc = subprocess.run(cmd, env=ENV, cwd=ROOT, capture_output=True, text=True)
        (root / f"{name}.generate.log").write_text(proc.stdout + proc.stderr, "utf-8")
        if proc.returncode != 0 or not (d / "truth.json").is_file():
            raise RuntimeError(f"generate failed (rc {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    attribute_run(d)


def summed_recovery(truth: dict, items: list[int], key: str) -> float | None:
    """Share of the summed regression over ``items`` that the truth retrain ``key`` removes."""
    by = {int(it["index"]): it for it in truth.get("items") or []}
    sel = [by[i] for i in items if i in by and by[i].get(key) is not None]
    gap = sum(it["finetuned_nll"] - it["base_nll"] for it in sel)
    return float(sum(it["finetuned_nll"] - it[key] for it in sel) / gap) if sel and gap > 0 else None


def measure(name: str, root: Path, run_verify: bool) -> dict:
    d = root / name
    run = CV.load_run(d)
    if run is None:
        raise RuntimeError("no attr/item_scores.npy")
    planted = json.loads((d / "planted.json").read_text())
    truth = json.loads((d / "truth.json").read_text())
    rule, policy = RegressionRule(), VerdictOptions()
    # the verdict exactly as calibrate_verdict.evaluate recomputes it
    call = call_regressions(run.base, run.ft, rule)
    reg_items = [i for i in range(len(run.base)) if call.regressed[i]]
    pick = [k for k, i in enumerate(run.items) if i in set(reg_items)]
    S = run.S[pick]
    s = S.sum(0) if pick else np.zeros(len(run.cols))
    examples = [{"index": r, "id": None, "score": float(v), "label": run.labels.get(r)}
                for r, v in zip(run.cols, s, strict=True)]  # fmt: skip
    v = make_verdict(
        [], run.findings, examples, [{"index": i} for i in reg_items], n_rows=len(run.cols),
        item_scores=S if pick else None, item_rows=run.cols, texts=run.texts, regression=call.to_dict(),
        policy=policy, embeddings=run.emb, token_profiles=run.profiles,
    ).to_dict()  # fmt: skip
    drop = [int(r) for r in v["drop_rows"]]
    named = np.array([c in set(drop) for c in run.cols])
    pos = np.clip(s, 0, None)
    out = {
        "name": name,
        "kind": run.kind,
        "seed": planted.get("seed"),
        "fraction": planted.get("fraction"),
        "verdict": v["kind"],
        "cause": v.get("cause"),
        "drop_rows": drop,
        "n_named": len(drop),
        "n_rows": len(run.cols),
        "n_regressed": len(reg_items),
        "n_planted": len(run.planted),
        "named_planted": len(set(drop) & run.planted),
        "named_pos_share": float(pos[named].sum() / pos.sum()) if drop and pos.sum() > 0 else 0.0,
        "named_signed_share": float(s[named].sum() / s.sum()) if drop and s.sum() != 0 else 0.0,
    }
    rec = truth.get("recovery") or {}
    out["truth_planted_total"] = (rec.get("drop_planted") or {}).get("recovered_total")
    out["truth_random_total"] = (rec.get("drop_random") or {}).get("recovered_total")
    out["truth_reg_total_planted"] = summed_recovery(truth, reg_items, "drop_planted_nll")
    out["truth_reg_total_random"] = summed_recovery(truth, reg_items, "drop_random_nll")
    out["verify_total_flagged"] = out["verify_total_random"] = None
    if run_verify and drop:
        t0 = time.time()
        got = CV.verify_default(d, v, reg_items, seeds=1)
        out["verify_s"] = round(time.time() - t0, 1)
        for k in ("verify_total_flagged", "verify_total_random", "verify_flagged", "verify_random"):
            out[k] = got.get(k)
    return out


def load() -> list[dict]:
    return json.loads(OUT_JSON.read_text()) if OUT_JSON.is_file() else []


def save(rows: list[dict]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    OUT_JSON.write_text(json.dumps(rows, indent=1) + "\n", "utf-8")
    OUT_MD.write_text(markdown(rows), "utf-8")


def _f(x: float | None, pct: bool = True) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.0f}%" if pct else f"{x:.3f}"


def stats(rows: list[dict], x: str, y: str, clip: bool = False) -> dict:
    """Pearson, Spearman, slope through the origin of y on x and the residual spread, on rows with both (``clip``:
    y clipped to [0, 1] first, as a share recovered can be reported)."""
    from scipy.stats import pearsonr, spearmanr

    pts = [(r[x], min(max(r[y], 0.0), 1.0) if clip else r[y])
           for r in rows if r.get(x) is not None and r.get(y) is not None]  # fmt: skip
    out: dict = {"n": len(pts)}
    if len(pts) < 3:
        return out
    a, b = np.array(pts, dtype=float).T
    out["pearson"] = float(pearsonr(a, b).statistic) if a.std() > 0 and b.std() > 0 else None
    out["spearman"] = float(spearmanr(a, b).statistic) if a.std() > 0 and b.std() > 0 else None
    slope = float((a * b).sum() / (a * a).sum()) if (a * a).sum() > 0 else None
    out["slope"] = slope
    if slope is not None:
        res = b - slope * a
        out["resid_sd"] = float(np.sqrt((res**2).sum() / max(len(res) - 1, 1)))
        out["resid_mad"] = float(np.median(np.abs(res)))
        out["median_ratio"] = float(np.median(b[a > 0] / a[a > 0])) if (a > 0).any() else None
        A = np.vstack([np.ones_like(a), a]).T
        out["intercept"], out["slope_free"] = (float(c) for c in np.linalg.lstsq(A, b, rcond=None)[0])
    return out


def markdown(rows: list[dict]) -> str:
    lines = [
        "# expected_recovery calibration data: stories260K planted-fault runs",
        "",
        f"{len(rows)} runs (bench/results/expected_recovery_stories.json), this checkout's verdict (default rule and "
        "policy, as bench/calibrate_verdict.py recomputes it) and `gradian verify` (one seed) on its drop_rows. "
        "Scores: per-row harm summed over the regressed items. verify = share of the summed regression over the "
        "regressed items recovered by retraining without drop_rows (`recovered_total_flagged`); random = the same "
        "for as many random rows; planted = truth.json's recovery of the summed target regression without the "
        "planted rows; planted@reg = the planted-rows retrain on the summed regression of the regressed items.",
        "",
        "| run | verdict | named (planted) / rows | regressed | named_pos_share | named_signed_share | verify | "
        "random | planted | planted@reg |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['name']} | failed: {r['error']} | | | | | | | | |")
            continue
        lines.append(
            f"| {r['name']} | {r['verdict']} | {r['n_named']} ({r['named_planted']}) / {r['n_rows']} "
            f"| {r['n_regressed']} | {_f(r['named_pos_share'], False)} | {_f(r['named_signed_share'], False)} "
            f"| {_f(r['verify_total_flagged'])} | {_f(r['verify_total_random'])} | {_f(r['truth_planted_total'])} "
            f"| {_f(r['truth_reg_total_planted'])} |"
        )
    ok = [r for r in rows if not r.get("error")]
    names = [r["name"] for r in rows]
    lines += ["", "## named_pos_share against the verify recovery (runs whose verdict names rows)", ""]
    lines += [
        "Slope: least squares through the origin (y = b·x); residual SD about it and the median |residual|; median "
        'y/x; and the free fit y = a + b·x. "clipped": the recovery clipped to [0, 1] first.',
        "",
        "| predictor → truth | n | Pearson | Spearman | slope through origin | residual SD | median abs residual "
        "| median ratio | free fit a, b |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for x, y, clip in (
        ("named_pos_share", "verify_total_flagged", False),
        ("named_pos_share", "verify_total_flagged", True),
        ("named_signed_share", "verify_total_flagged", False),
        ("named_pos_share", "truth_reg_total_planted", False),
    ):
        st = stats(ok, x, y, clip)
        lines.append(
            f"| {x} → {y}{' (clipped)' if clip else ''} | {st['n']} | {_f(st.get('pearson'), False)} "
            f"| {_f(st.get('spearman'), False)} | {_f(st.get('slope'), False)} | {_f(st.get('resid_sd'), False)} "
            f"| {_f(st.get('resid_mad'), False)} | {_f(st.get('median_ratio'), False)} "
            f"| {_f(st.get('intercept'), False)}, {_f(st.get('slope_free'), False)} |"
        )
    lines += ["", "## per kind (medians)", ""]
    lines += ["| kind | runs | named | named_pos_share | verify | random | planted |", "|---|---|---|---|---|---|---|"]
    for kind in sorted({r["kind"] for r in ok}):
        g = [r for r in ok if r["kind"] == kind]

        def med(key: str, g: list[dict] = g) -> float | None:
            xs = [r[key] for r in g if r.get(key) is not None]
            return float(np.median(xs)) if xs else None

        lines.append(
            f"| {kind} | {len(g)} | {sum(1 for r in g if r['n_named'])} | {_f(med('named_pos_share'), False)} "
            f"| {_f(med('verify_total_flagged'))} | {_f(med('verify_total_random'))} "
            f"| {_f(med('truth_planted_total'))} |"
        )
    lines += [
        "",
        "Notes:",
        "",
        "- `named_signed_share` divides by the sum of every row's score, a small difference of large positive and "
        "negative parts (often negative), so it swings wildly and predicts nothing; `named_pos_share` is the usable "
        "one.",
        "- `planted` (truth.json) is the recovery of the summed *target* regression, whose gap can be tiny "
        "(early_stop): ratios far above 100% there. `planted@reg` is the same retrain on the verdict's regressed "
        "items, comparable to `verify`.",
        "- verify ran with one seed, the run's own training seed, as truth.json's retrains: where drop_rows are "
        "exactly the planted rows, `verify` equals `planted@reg` (a check that both measure the same thing).",
        "- Runs whose verdict names no rows (controls, and faults the verdict calls spread) have predictors 0 and no "
        "verify; they are left out of the fits.",
        "",
        "Reproduce (one run at a time, one thread each):",
        "",
        "    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python bench/expected_recovery_data.py --build \\",
        *(
            f"        {' '.join(names[i : i + 6])}" + (" \\" if i + 6 < len(names) else "")
            for i in range(0, len(names), 6)
        ),
        "    .venv/bin/python bench/expected_recovery_data.py --summarize",
        "",
        "(--build runs `python bench/scenarios/generate.py --only NAME`, `gradian attribute --query all "
        "--token-profiles 0.3 --token-profiles-always` as bench/bench_verdict.py does, and calibrate_verdict's "
        "`verify_default`, i.e. `gradian verify` on the recomputed verdict.)",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", nargs="+", default=[], help="run names to build (if needed), measure and append")
    ap.add_argument("--root", type=Path, default=P.WORK)
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--deadline", help="UTC HH:MM: start no new run after it")
    ap.add_argument("--summarize", action="store_true")
    args = ap.parse_args()
    CV.RUNS_ROOT[:] = [args.root]
    rows = load()
    for name in args.build:
        if args.deadline and time.strftime("%H:%M", time.gmtime()) >= args.deadline:
            print(f"deadline {args.deadline} reached; stopping before {name}", flush=True)
            break
        if any(r["name"] == name and not r.get("error") for r in rows):
            continue
        t0 = time.time()
        try:
            build(name, args.root)
            row = measure(name, args.root, not args.no_verify)
        except Exception as e:  # noqa: BLE001 - a failed run is recorded and skipped
            traceback.print_exc()
            row = {"name": name, "error": f"{type(e).__name__}: {e}"[:300]}
        row["wall_s"] = round(time.time() - t0, 1)
        rows = [r for r in rows if r["name"] != name] + [row]
        save(rows)
        print(time.strftime("%H:%M:%S", time.gmtime()), json.dumps({k: v for k, v in row.items() if k != "drop_rows"}),
              flush=True)  # fmt: skip
    if args.summarize or not args.build:
        save(rows)
    print(markdown(rows))


if __name__ == "__main__":
    main()
