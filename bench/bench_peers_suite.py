"""A peer's ranking on the planted-fault suite, next to gradian's (issue #14, item 5).

    OMP_NUM_THREADS=1 python bench/bench_peers_suite.py --threads 1                  # the 16 default runs
    OMP_NUM_THREADS=1 python bench/bench_peers_suite.py --only entity_s0_f10 --threads 1
    python bench/bench_peers_suite.py --table                                        # re-aggregate, no compute

For each suite run (``bench/scenarios``; made by ``bench/bench_verdict.py run``): the regressed eval items a default
``gradian attribute`` uses (the regression rule on the saved base / fine-tune NLL), then

* **gradian**: the saved ``--query all`` per-item harm (``attr/item_scores.npy``) summed over those items (scores are
  linear in the query, so this equals a default run), and the seconds of a fresh in-process
  ``run_attribution`` on the same rows and items (its summed scores are checked against the saved ones);
* **kronfluence**: EK-FAC (empirical Fisher, its default dtypes, damping 0.1 x mean eigenvalue) on the same LoRA
  modules, rows and loss conventions (``bench/common.py: kronfluence_scores``), pairwise scores summed over the same
  items and negated (kronfluence's sign means helpful).

Both get the same model (gradian's loader), the same rows as the trainer saw them (``gradian.run.loaded``) and the
same thread count. Metrics against ``planted.json``'s rows: ROC-AUC and precision@K (K = planted rows). Each run's
result is cached in bench/work/peers_suite/<run>.json (resumable); the summary goes to
bench/results/peers_suite.json.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import common  # noqa: E402
from calibrate_verdict import auc, explained  # noqa: E402

KINDS = ("entity", "pronoun", "mislabel", "early_stop", "no_eos", "repetition", "two_groups", "spread")
DEFAULT_RUNS = [f"{k}_s{s}_f10" for k in KINDS for s in (0, 1)]
CACHE = HERE / "work" / "peers_suite"
RESULT = HERE / "results" / "peers_suite.json"
# kronfluence EK-FAC: the empirical Fisher (gradian's default, so the same estimator) and its own default true Fisher
PEERS = {"kronfluence": True, "kronfluence_true": False}
BERGSON = ("bergson", "bergson_cos")  # its gradient inner product, raw and unit-normalised
WHO = ("gradian", *PEERS, *BERGSON)
LABEL = {
    "gradian": "gradian (EK-FAC)", "kronfluence": "kronfluence EK-FAC, emp. Fisher",
    "kronfluence_true": "kronfluence EK-FAC, true Fisher", "bergson": "bergson, dot", "bergson_cos": "bergson, cosine",
}  # fmt: skip


def resolve_base(d: Path, base: str) -> Path:
    """planted.json's ``base`` (a repo-relative path) against the repo the run was made in."""
    for root in (common.ROOT, *d.parents):
        if (root / base).is_dir():
            return root / base
    raise SystemExit(f"{d}/planted.json: base {base!r} not found; run from the repo that generated the suite")


def regressed_items(rep: dict) -> list[int]:
    """The eval items a default run attributes: the regression rule on the saved base / fine-tune NLL."""
    from gradian.attribute.regression import RegressionRule, call_regressions

    ev = rep.get("eval") or []
    nan = float("nan")
    base = np.array([nan if e["base_nll"] is None else e["base_nll"] for e in ev], dtype=float)
    ft = np.array([nan if e["finetuned_nll"] is None else e["finetuned_nll"] for e in ev], dtype=float)
    return np.flatnonzero(call_regressions(base, ft, RegressionRule()).regressed).tolist()


def load_suite_run(d: Path, base: Path):
    """(model, training rows, all eval rows) as ``gradian attribute`` saw them: its loader, the run's format settings,
    eval rows without EOS."""
    from gradian.attribute.loading import load
    from gradian.data import format_examples, load_examples
    from gradian.run.loaded import load_run

    lr = load_run(d / "run", train=d / "train.jsonl", eval=d / "eval.jsonl", config=d / "run" / "training_args.json",
                  base=str(base))  # fmt: skip
    fx = [f for f in lr.require_formatted() if not f.dropped]
    fs = dataclasses.replace(lr.format_settings, add_eos=False)
    efx = format_examples(load_examples(d / "eval.jsonl"), lr.tokenizer, fs)
    lm = load(str(base), d / "run", device=common.DEVICE, dtype="fp32")
    return lm.model, fx, efx


def ranking(scores: np.ndarray, cols: list[int], planted: set[int]) -> dict[str, float]:
    pos = np.array([c in planted for c in cols])
    top = np.argsort(-scores, kind="stable")[: len(planted)]
    return {"auc": auc(scores, pos), "p_at_k": float(pos[top].mean())}


def run_one(d: Path, threads: int, have: dict | None = None) -> dict:
    """One run's rankings; what ``have`` (a cached result) holds already is kept, only missing methods are run."""
    planted = json.loads((d / "planted.json").read_text())
    rep = json.loads((d / "attr" / "report.json").read_text())
    rows = {int(i) for i in planted.get("rows") or []}
    items = regressed_items(rep)
    query_items = [int(i) for i in rep["settings"]["query_items"]]
    cols = np.load(d / "attr" / "embeddings_index.npy").astype(int).tolist()
    S = np.load(d / "attr" / "item_scores.npy").astype(np.float64)
    out = {"run": d.name, "kind": planted.get("kind"), "seed": planted.get("seed"), "fraction": planted.get("fraction"),
           "n_rows": len(cols), "n_planted": len(rows), "n_regressed": len(items), "explained": explained(d),
           "threads": threads} | (have or {})  # fmt: skip
    if not items:
        return out | {"note": "no regressed item: a default run ranks nothing"}
    saved = S[[query_items.index(i) for i in items]].sum(0)
    if all(w in out for w in WHO):
        return out

    model, fx, efx = load_suite_run(d, resolve_base(d, str(planted.get("base") or "examples/stories260k/base")))
    if [f.index for f in fx] != cols:
        raise SystemExit(f"{d}: the formatted rows differ from attr/embeddings_index.npy; regenerate the run")
    qfx = [efx[i] for i in items]
    if "gradian" not in out:
        wall, cpu, res = common.timed(lambda: common.gradian_run(model, fx, qfx))
        fresh = np.asarray(res.item_scores, dtype=np.float64).sum(0)
        out["gradian"] = ranking(saved, cols, rows) | {
            "seconds": wall, "cpu_seconds": cpu, "fresh_auc": ranking(fresh, cols, rows)["auc"],
            "fresh_vs_saved_pearson": float(np.corrcoef(fresh, saved)[0, 1]),
        }  # fmt: skip
    for label, empirical in PEERS.items():
        if label in out:
            continue
        c0, t0 = time.process_time(), time.perf_counter()
        kf, f_s, s_s = common.kronfluence_scores(
            copy.deepcopy(model), fx, qfx, workdir=CACHE / "kf", empirical=empirical
        )
        kf_cpu = time.process_time() - c0
        harm = -kf.numpy().sum(0)  # kronfluence: positive = helpful
        out[label] = ranking(harm, cols, rows) | {
            "seconds": time.perf_counter() - t0, "factor_s": f_s, "score_s": s_s, "cpu_seconds": kf_cpu,
            "spearman_vs_gradian": spearman(harm, saved),
        }  # fmt: skip
    if any(w not in out for w in BERGSON):
        out |= bergson(model, fx, qfx, cols, rows, saved)
    return out


def bergson(model, fx, qfx, cols: list[int], rows: set[int], saved: np.ndarray) -> dict:
    """bergson's gradient inner product (``build`` / ``score`` defaults) and its unit-normalised (cosine) variant,
    summed over the queries; harm = minus the inner product (a descent step on a row moves the query loss by
    minus it)."""
    m = copy.deepcopy(model)
    wd = CACHE / "bergson"
    grads = lambda rows, mean: common.bergson_grads(m, rows, mean=mean, workdir=wd)  # noqa: E731
    wall, cpu, (G, Q) = common.timed(lambda: (grads(fx, False), grads(qfx, True)))
    unit = lambda X: X / X.norm(dim=1, keepdim=True).clamp_min(1e-30)  # noqa: E731
    out = {}
    for label, (g, q) in {"bergson": (G, Q), "bergson_cos": (unit(G), unit(Q))}.items():
        c0, t0 = time.process_time(), time.perf_counter()
        harm = -(g @ q.sum(0)).numpy()
        out[label] = ranking(harm, cols, rows) | {
            "seconds": wall + time.perf_counter() - t0, "cpu_seconds": cpu + time.process_time() - c0,
            "spearman_vs_gradian": spearman(harm, saved),
        }  # fmt: skip
    return out


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None and x == x]
    return float(np.mean(xs)) if xs else None


def summarise(results: list[dict]) -> dict:
    """Means per kind and culprit fraction (keys like ``entity 10%``) and per fraction over all kinds."""
    done = [r for r in results if all(w in r for w in WHO)]
    by_kind: dict[str, dict] = {}
    overall: dict[str, dict] = {}
    for pct in sorted({round(100 * r["fraction"]) for r in done}):
        at = [r for r in done if round(100 * r["fraction"]) == pct]
        for kind in [k for k in KINDS if any(r["kind"] == k for r in at)]:
            rs = [r for r in at if r["kind"] == kind]
            by_kind[f"{kind} {pct}%"] = {"runs": len(rs), "explained": sum(r["explained"] for r in rs)} | averages(rs)
        overall[f"{pct}%"] = {"runs": len(at), "explained": sum(r["explained"] for r in at)} | averages(at)
    return {"by_kind": by_kind, "by_fraction": overall, "all": {"runs": len(done)} | averages(done), "runs": results}


def averages(rs: list[dict]) -> dict:
    row = {}
    for who in WHO:
        for m in ("auc", "p_at_k", "seconds", "cpu_seconds"):
            row[f"{who}_{m}"] = mean([r[who][m] for r in rs])
        if who != "gradian":
            row[f"{who}_spearman"] = mean([r[who]["spearman_vs_gradian"] for r in rs])
    return row


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("kronfluence", "bergson", "torch", "transformers", "peft"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "–" if x is None else format(x, spec)


def table(summary: dict) -> str:
    """Per kind, each method's mean ROC-AUC · P@K; then, over all runs, Spearman with gradian and CPU seconds."""
    lines = ["| kind | runs | explained | " + " | ".join(LABEL[w] for w in WHO) + " |",
             "|---|---:|---:|" + "---:|" * len(WHO)]  # fmt: skip
    rows = [*summary["by_kind"].items(), *((f"**all kinds, {k}**", v) for k, v in summary["by_fraction"].items())]
    for kind, r in rows:
        cells = " | ".join(f"{fmt(r[f'{w}_auc'])} · {fmt(r[f'{w}_p_at_k'], '.2f')}" for w in WHO)
        lines.append(f"| {kind} | {r['runs']} | {r['explained']} | {cells} |")
    a = summary["all"]
    over = lambda name, vals: f"| {name} | " + " | ".join(vals) + " |"  # noqa: E731
    lines += [
        "", over("over all runs", [LABEL[w] for w in WHO]), "|---|" + "---:|" * len(WHO),
        over("Spearman with gradian's scores", ["–", *(fmt(a[f"{w}_spearman"]) for w in WHO[1:])]),
        over("CPU seconds per run (mean)", [fmt(a[f"{w}_cpu_seconds"], ".1f") for w in WHO]),
        over("wall seconds per run (mean)", [fmt(a[f"{w}_seconds"], ".1f") for w in WHO]),
    ]  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=Path, default=HERE / "work" / "scenarios", help="the suite's run folders")
    ap.add_argument("--only", nargs="*", default=DEFAULT_RUNS, help="run names (default: the 8 kinds x seeds 0-1, f10)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--redo", action="store_true", help="recompute runs already cached")
    ap.add_argument("--table", action="store_true", help="only re-aggregate the cached runs")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    CACHE.mkdir(parents=True, exist_ok=True)
    results = []
    for name in args.only:
        d, cached = args.runs / name, CACHE / f"{name}.json"
        if not (d / "attr" / "item_scores.npy").is_file():
            print(f"{name}: no attr/item_scores.npy under {args.runs}; run bench/bench_verdict.py run --only {name}")
            continue
        have = json.loads(cached.read_text()) if cached.is_file() and not args.redo else None
        if args.table or (have and all(w in have for w in WHO)):
            results += [have] if have else []
            continue
        r = run_one(d, args.threads, have)
        cached.write_text(json.dumps(r, indent=1))
        parts = [f"{w} AUC {fmt(r[w]['auc'])} ({fmt(r[w]['cpu_seconds'], '.1f')} CPU s)" for w in WHO if w in r]
        print(f"{name}: " + ", ".join(parts), flush=True)
        results.append(r)
    summary = summarise(results) | {"versions": versions(), "command": " ".join(["python", *sys.argv])}
    common.write_json(RESULT, summary)
    print(table(summary))


if __name__ == "__main__":
    main()
