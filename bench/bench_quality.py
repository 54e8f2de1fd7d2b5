"""Attribution quality: planted-fault recovery for every --method, and an LDS estimate on the bundled example.

    python bench/bench_quality.py planted               # bundled stories260K example (Zorblax cluster)
    python bench/bench_quality.py mislabeled            # classification-style rows with flipped labels (trains)
    python bench/bench_quality.py fisher --seeds 3      # --fisher empirical vs true, ekfac and kfac, on the above
    python bench/bench_quality.py lds --subsets 100     # retrains on random 50% subsets (gradian.train.train_lora);
                                                        # resumable: each subset is saved under bench/work/lds/

Scenario 1 (content contradicting a capability): examples/stories260k, its committed adapter, planted.json's
harmful_cluster as positives, queries = the regressed eval items. Scenario 2 (mislabeled rows): sentiment-style rows
"<name> was sad. <He/She> felt" -> " bad" / "... happy ... felt" -> " good" plus clean story rows from the bundled
example; 15% of the sentiment rows get the flipped label; fine-tuned with the bundled train.yaml; queries = held-out
sentiment items with correct labels (--query all:
the fine-tune learns the majority label, so few items *regress* versus the base model). ROC-AUC and precision@K (K =
number of planted rows) of the harm ranking.
LDS: Spearman between the summed harm of each random 50% subset and the query loss (summed mean NLL of the
regressed items) of an adapter retrained on that subset with the same config and seed; bootstrap 95% CI over subsets.
Subset k is drawn from np.random.default_rng([seed, k]); the harm scores and each finished subset are cached under
bench/work/lds/ (delete it to start over).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

from gradian.attribute.scores import METHODS  # noqa: E402

EX = common.EX


def roc_auc(scores: np.ndarray, pos: np.ndarray) -> float:
    from scipy.stats import rankdata

    r = rankdata(scores)
    n1, n0 = pos.sum(), (~pos).sum()
    return float((r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def recovery(model, fx, efx, planted: np.ndarray, query: str = "regressed") -> list[dict]:
    res = common.gradian_run(model, fx, efx, query_override=query, extra_methods=METHODS)
    if res.scores is None:
        raise SystemExit(f"no query items ({res.notes})")
    out = []
    K = int(planted.sum())
    for m in METHODS:
        s = np.asarray(res.scores if m == res.method else res.settings["also"][m], dtype=float)
        top = np.argsort(-s, kind="stable")[:K]
        out.append({"method": m, "auc": roc_auc(s, planted), "p_at_k": float(planted[top].mean()), "k": K,
                    "n_queries": len(res.settings["query_items"])})  # fmt: skip
    return out


def print_table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}\n\n| method | ROC-AUC | precision@K (K) | queries |\n|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['method']} | {r['auc']:.3f} | {r['p_at_k']:.3f} ({r['k']}) | {r['n_queries']} |", flush=True)


def train_cfg() -> dict:
    from gradian.train import read_config_file

    return read_config_file(EX / "train.yaml")


def planted() -> None:
    model, fx, efx = common.stories_setup(402)
    mask = np.zeros(len(fx), bool)
    mask[json.loads((EX / "data" / "planted.json").read_text())["harmful_cluster"]["indices"]] = True
    rows = recovery(model, fx, efx, mask)
    common.write_json(Path(__file__).resolve().parent / "results" / "quality_planted.json", {"rows": rows})
    print_table("Scenario 1: bundled example, Zorblax cluster (36 of 402 rows)", rows)


def mislabeled(seed: int = 0) -> None:
    model, fx, efx, planted_mask = mislabeled_setup(seed)
    rows_out = recovery(model, fx, efx, planted_mask, query="all")  # correct labels: flipped rows raise their loss
    common.write_json(Path(__file__).resolve().parent / "results" / "quality_mislabeled.json", {"rows": rows_out})
    print_table(f"Scenario 2: flipped sentiment labels ({int(planted_mask.sum())} of {len(fx)} rows)", rows_out)


def fisher(seeds: int = 3) -> None:
    """Empirical vs true Fisher (``--fisher``) for ekfac and kfac: the bundled example and ``seeds`` mislabeled runs
    (each its own data draw and fine-tune); the true Fisher's labels are sampled with seeds 0, 1, 2."""
    from gradian.attribute.api import run_attribution
    from gradian.options import AttributeOptions

    cases = []
    model, fx, efx = common.stories_setup(402)
    mask = np.zeros(len(fx), bool)
    mask[json.loads((EX / "data" / "planted.json").read_text())["harmful_cluster"]["indices"]] = True
    cases.append(("bundled example (Zorblax)", model, fx, efx, mask, "regressed"))
    for s in range(seeds):
        m, f, e, pm = mislabeled_setup(s)
        cases.append((f"mislabeled seed {s}", m, f, e, pm, "all"))
    out = []
    print("\n| run | method | Fisher | ROC-AUC | P@K (K) |\n|---|---|---|---:|---:|")
    for name, model, fx, efx, mask, q in cases:
        K = int(mask.sum())
        for method in ("ekfac", "kfac"):
            for kind, fseed in [("empirical", 0), ("true", 0), ("true", 1), ("true", 2)]:
                opts = AttributeOptions(batch_size=8, query=q, method=method, fisher=kind, fisher_seed=fseed)
                res = run_attribution(model, fx, efx, opts, pad_id=0)
                sc = np.asarray(res.scores, dtype=float)
                top = np.argsort(-sc, kind="stable")[:K]
                row = {"run": name, "method": method, "fisher": kind, "fisher_seed": fseed,
                       "auc": roc_auc(sc, mask), "p_at_k": float(mask[top].mean()), "k": K}  # fmt: skip
                out.append(row)
                label = kind if kind == "empirical" else f"true (seed {fseed})"
                print(f"| {name} | {method} | {label} | {row['auc']:.3f} | {row['p_at_k']:.3f} ({K}) |", flush=True)
    common.write_json(Path(__file__).resolve().parent / "results" / "quality_fisher.json", {"rows": out})


def mislabeled_setup(seed: int = 0):
    """The mislabeled scenario's fine-tuned model, formatted rows, eval items and flipped-row mask (trains once)."""
    from gradian.attribute.loading import load
    from gradian.train import train_lora

    rng = random.Random(seed)
    names = [("Tom", "He"), ("Sam", "He"), ("Ben", "He"), ("Lily", "She"), ("Sue", "She"), ("Mia", "She")]
    sad = ["sad", "angry", "scared", "upset"]
    happy = ["happy", "glad", "excited", "proud"]
    rows, flipped = [], []
    for _ in range(160):
        n, p = rng.choice(names)
        good = rng.random() < 0.5
        w = rng.choice(happy if good else sad)
        flip = rng.random() < 0.15
        lab = " good." if good != flip else " bad."
        rows.append({"prompt": f"{n} was {w}. {p} felt", "completion": lab})
        flipped.append(flip)
    clean = [json.loads(x) for x in (EX / "data" / "train.jsonl").read_text().splitlines()]
    clean = [{"prompt": r["prompt"], "completion": r["completion"]} for r in clean[:240]]
    allrows = rows + clean
    planted_mask = np.array(flipped + [False] * len(clean))
    order = list(range(len(allrows)))
    rng.shuffle(order)
    allrows = [allrows[i] for i in order]
    planted_mask = planted_mask[order]
    evals = []
    for n, p in names:
        evals.append({"prompt": f"{n} was {rng.choice(sad)}. {p} felt", "completion": " bad."})
        evals.append({"prompt": f"{n} was {rng.choice(happy)}. {p} felt", "completion": " good."})
    d = Path(tempfile.mkdtemp())
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in allrows))
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    train_lora(EX / "base", d / "train.jsonl", d / "run", config=train_cfg(), progress=False, quiet=True)
    sys.path.insert(0, str(common.ROOT / "tests" / "fixtures" / "attribute"))
    import helpers

    model = load(str(EX / "base"), d / "run").model
    model.eval()
    _, fx = helpers.formatted(d / "train.jsonl")
    _, efx = helpers.formatted(d / "eval.jsonl", add_eos=False)
    return model, fx, efx, planted_mask


LDS_DIR = Path(__file__).resolve().parent / "work" / "lds"


def lds_subset(n_rows: int, k: int, seed: int = 0) -> list[int]:
    """Subset k: a random half of the rows from its own generator (seed, k), so any subset can be redone alone."""
    rng = np.random.default_rng([seed, k])
    return sorted(int(i) for i in rng.permutation(n_rows)[: n_rows // 2])


def lds_scores(seed: int = 0) -> dict:
    """Harm of every row under each method at the committed adapter (queries = its regressed items); cached."""
    path = LDS_DIR / f"scores_seed{seed}.json"
    if path.exists():
        return json.loads(path.read_text())
    model, fx, efx = common.stories_setup(402)
    assert [f.index for f in fx] == list(range(len(fx))), "row positions must equal train.jsonl row indices"
    res = common.gradian_run(model, fx, efx, query_override="regressed", extra_methods=METHODS)
    out = {
        "query_items": [int(i) for i in res.settings["query_items"]],
        "n_rows": len(fx),
        "scores": {
            m: [float(x) for x in (res.scores if m == res.method else res.settings["also"][m])] for m in METHODS
        },
    }
    common.write_json(path, out)
    return out


def lds_retrain(k: int, keep: list[int], query_items: list[int], n_rows: int, seed: int = 0) -> dict:
    """Retrain on ``keep`` with the shipped train.yaml (same training seed) and score the query items; saved to
    bench/work/lds/seed<seed>/sub<k>.json as soon as it finishes, so a killed run resumes where it stopped."""
    import shutil
    import time

    from gradian.attribute.engine import completion_nll
    from gradian.attribute.loading import load
    from gradian.train import train_lora

    path = LDS_DIR / f"seed{seed}" / f"sub{k:03d}.json"
    if path.exists():
        rec = json.loads(path.read_text())
        if rec["keep"] == keep and rec["query_items"] == query_items:
            return rec
    sys.path.insert(0, str(common.ROOT / "tests" / "fixtures" / "attribute"))
    import helpers

    _, efx = helpers.formatted(EX / "data" / "eval.jsonl", add_eos=False)
    qfx = [e for e in efx if e.index in set(query_items)]
    excl = sorted(set(range(n_rows)) - set(keep))
    tmp = Path(tempfile.mkdtemp(prefix="gradian-lds-"))
    try:
        t, c = time.perf_counter(), time.process_time()
        tr = train_lora(EX / "base", EX / "data" / "train.jsonl", tmp / "run", config=train_cfg(), exclude_rows=excl,
                        progress=False, quiet=True)  # fmt: skip
        train_wall, train_cpu = time.perf_counter() - t, time.process_time() - c
        m = load(str(EX / "base"), tmp / "run").model
        m.eval()
        with torch.no_grad():
            nll = completion_nll(m, qfx, 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rec = {
        "k": k, "seed": seed, "keep": keep, "query_items": query_items, "query_nll": [float(x) for x in nll],
        "query_loss": float(np.nansum(nll)), "global_step": int(tr.global_step), "n_rows_trained": tr.n_rows_trained,
        "train_wall_s": train_wall, "train_cpu_s": train_cpu,
    }  # fmt: skip
    common.write_json(path, rec)
    return rec


def bootstrap_lds(preds: dict[str, np.ndarray], a: np.ndarray, rng, n_boot: int = 2000) -> dict[str, np.ndarray]:
    """Spearman rho of every prediction on the same ``n_boot`` resamples of subsets (with replacement), so the
    methods' differences can be read pairwise."""
    n = len(a)
    idx = [i for i in (rng.integers(0, n, n) for _ in range(n_boot)) if len(set(i.tolist())) > 2]
    return {m: np.array([spearmanr(p[i], a[i]).statistic for i in idx]) for m, p in preds.items()}


def lds(n_subsets: int, seed: int = 0) -> None:
    """Predicted score of a subset = summed harm of its rows. harm > 0 means training on the row pushed the query loss
    up, so a subset with more summed harm should end with a HIGHER query loss: LDS = +Spearman(predicted, actual)."""
    sc = lds_scores(seed)
    n, q = sc["n_rows"], sc["query_items"]
    scores = {m: np.asarray(v, dtype=float) for m, v in sc["scores"].items()}
    planted = np.zeros(n)
    planted[json.loads((EX / "data" / "planted.json").read_text())["harmful_cluster"]["indices"]] = 1.0
    recs = []
    for k in range(n_subsets):
        rec = lds_retrain(k, lds_subset(n, k, seed), q, n, seed)
        recs.append(rec)
        print(f"subset {k}: query loss {rec['query_loss']:.4f} (train {rec['train_wall_s']:.1f} s wall)", flush=True)
    keeps = [np.asarray(r["keep"]) for r in recs]
    actual = np.array([r["query_loss"] for r in recs])
    preds = {m: np.array([scores[m][kp].sum() for kp in keeps]) for m in METHODS}
    preds["planted (reference)"] = np.array([planted[kp].sum() for kp in keeps])  # harmful-cluster rows kept
    brng = np.random.default_rng([seed, 10**6])
    out = {
        "n_subsets": n_subsets, "subset_fraction": 0.5, "seed": seed, "query_items": q,
        "prediction": "sum of harm over the kept rows (harm > 0: the row pushes the query loss up)",
        "actual_metric": "sum over the query items of the mean completion NLL per token, retrained adapter",
        "bootstrap": "percentile, 2000 resamples of subsets (the same resamples for every method)",
        "train_wall_s_median": float(np.median([r["train_wall_s"] for r in recs])),
        "train_cpu_s_median": float(np.median([r["train_cpu_s"] for r in recs])),
        "actual": [float(x) for x in actual], "methods": {},
    }  # fmt: skip
    print(f"\nLDS over {n_subsets} random 50% subsets (bootstrap 95% CI over subsets, 2000 resamples)\n")
    print(f"query loss range {actual.min():.3f}-{actual.max():.3f}; median retrain {out['train_wall_s_median']:.1f} s")
    boots = bootstrap_lds(preds, actual, brng)
    print("| method | LDS (Spearman) | 95% CI | LDS - ekfac, 95% CI (paired) |\n|---|---:|---|---|")
    for meth, p in preds.items():
        rho = float(spearmanr(p, actual).statistic)
        lo, hi = (float(x) for x in np.nanpercentile(boots[meth], [2.5, 97.5]))
        dlo, dhi = (float(x) for x in np.nanpercentile(boots[meth] - boots["ekfac"], [2.5, 97.5]))
        out["methods"][meth] = {"lds": rho, "ci": [lo, hi], "minus_ekfac_ci": [dlo, dhi], "pred": [float(x) for x in p]}
        print(f"| {meth} | {rho:.3f} | [{lo:.2f}, {hi:.2f}] | [{dlo:+.2f}, {dhi:+.2f}] |", flush=True)
    common.write_json(Path(__file__).resolve().parent / "results" / "quality_lds.json", out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["planted", "mislabeled", "lds", "fisher", "all"])
    ap.add_argument("--subsets", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=3, help="fisher: mislabeled runs to compare on")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.what in ("planted", "all"):
        planted()
    if args.what in ("mislabeled", "all"):
        mislabeled()
    if args.what in ("lds", "all"):
        lds(args.subsets)
    if args.what == "fisher":
        fisher(args.seeds)


if __name__ == "__main__":
    main()
