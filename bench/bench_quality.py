"""Attribution quality: planted-fault recovery for every --method, and an LDS estimate on the bundled example.

    python bench/bench_quality.py planted               # bundled stories260K example (Zorblax cluster)
    python bench/bench_quality.py mislabeled            # classification-style rows with flipped labels (trains)
    python bench/bench_quality.py lds --subsets 8       # retrains on random 50% subsets (gradian.train.train_lora)

Scenario 1 (content contradicting a capability): examples/stories260k, its committed adapter, planted.json's
harmful_cluster as positives, queries = the regressed eval items. Scenario 2 (mislabeled rows): sentiment-style rows
"<name> was sad. <He/She> felt" -> " bad" / "... happy ... felt" -> " good" plus clean story rows from the bundled
example; 15% of the sentiment rows get the flipped label; fine-tuned with the bundled train.yaml; queries = held-out
sentiment items with correct labels (--query all:
the fine-tune learns the majority label, so few items *regress* versus the base model). ROC-AUC and precision@K (K =
number of planted rows) of the harm ranking.
LDS: Spearman between the summed harm of each random 50% subset and the query loss (summed mean NLL of the
regressed items) of an adapter retrained on that subset with the same config and seed; bootstrap 95% CI over subsets.
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
    rows_out = recovery(model, fx, efx, planted_mask, query="all")  # correct labels: flipped rows raise their loss
    common.write_json(Path(__file__).resolve().parent / "results" / "quality_mislabeled.json", {"rows": rows_out})
    print_table(f"Scenario 2: flipped sentiment labels ({int(planted_mask.sum())} of {len(fx)} rows)", rows_out)


def lds(n_subsets: int, seed: int = 0) -> None:
    from gradian.attribute.engine import completion_nll
    from gradian.attribute.loading import load
    from gradian.train import train_lora

    model, fx, efx = common.stories_setup(402)
    res = common.gradian_run(model, fx, efx, query_override="regressed", extra_methods=METHODS)
    q = res.settings["query_items"]
    qfx = [e for e in efx if e.index in set(q)]
    scores = {m: np.asarray(res.scores if m == res.method else res.settings["also"][m]) for m in METHODS}
    rng = np.random.default_rng(seed)
    preds = {m: [] for m in METHODS}
    actual = []
    for k in range(n_subsets):
        keep = rng.permutation(len(fx))[: len(fx) // 2]
        excl = sorted(set(range(len(fx))) - set(int(i) for i in keep))
        out = Path(tempfile.mkdtemp()) / f"sub{k}"
        train_lora(EX / "base", EX / "data" / "train.jsonl", out, config=train_cfg(), exclude_rows=excl,
                   progress=False, quiet=True)  # fmt: skip
        m = load(str(EX / "base"), out).model
        m.eval()
        actual.append(float(np.nansum(completion_nll(m, qfx, 0))))
        for meth in METHODS:
            preds[meth].append(float(scores[meth][keep].sum()))
        print(f"subset {k}: query loss {actual[-1]:.4f}", flush=True)
    actual_a = np.array(actual)
    out = {"n_subsets": n_subsets, "actual": actual, "methods": {}}
    print(f"\nLDS over {n_subsets} random 50% subsets (bootstrap 95% CI over subsets, 2000 resamples)\n")
    print("| method | LDS (Spearman) | 95% CI |\n|---|---:|---|")
    for meth in METHODS:
        p = np.array(preds[meth])
        rho = float(spearmanr(p, actual_a).statistic)
        boots = []
        for _ in range(2000):
            i = rng.integers(0, n_subsets, n_subsets)
            if len(set(i.tolist())) > 2:
                boots.append(spearmanr(p[i], actual_a[i]).statistic)
        lo, hi = np.nanpercentile(boots, [2.5, 97.5])
        out["methods"][meth] = {"lds": rho, "ci": [float(lo), float(hi)], "pred": preds[meth]}
        print(f"| {meth} | {rho:.3f} | [{lo:.2f}, {hi:.2f}] |", flush=True)
    common.write_json(Path(__file__).resolve().parent / "results" / "quality_lds.json", out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["planted", "mislabeled", "lds", "all"])
    ap.add_argument("--subsets", type=int, default=8)
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


if __name__ == "__main__":
    main()
