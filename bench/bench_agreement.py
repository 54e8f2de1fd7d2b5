"""Agreement between gradian's and kronfluence's EK-FAC scores on the bundled stories260K fine-tune, in fp64.

    python bench/bench_agreement.py --rows 128 --queries 8

Same model (fp64), rows, queries and loss conventions (training loss: summed label-token NLL per row; query: mean NLL
per completion token per eval item), empirical Fisher, and the same damping rule (0.1 x mean EK-FAC eigenvalue per
block/module, which both compute from the same per-example gradients). kronfluence's score has the opposite sign
(helpfulness), so it is negated. Reports Spearman and Pearson over all (query, row) pairs and the median per query,
for gradian exact (no projection) and projected (--proj-dim).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import numpy as np
import torch
from scipy.stats import pearsonr, spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def agree(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    per_s = [spearmanr(a, b).statistic for a, b in zip(x, y, strict=True)]
    per_p = [pearsonr(a, b).statistic for a, b in zip(x, y, strict=True)]
    return {
        "spearman_all": float(spearmanr(x.ravel(), y.ravel()).statistic),
        "pearson_all": float(pearsonr(x.ravel(), y.ravel()).statistic),
        "spearman_median_per_query": float(np.median(per_s)),
        "pearson_median_per_query": float(np.median(per_p)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--proj-dim", type=int, default=32)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, fx, efx = common.stories_setup(args.rows, dtype=torch.float64)
    qfx = efx[: args.queries]
    kf, f_s, s_s = common.kronfluence_scores(copy.deepcopy(model), fx, qfx, fp64=True, damping=None)
    ref = -kf.numpy()  # kronfluence: positive = helpful; gradian: positive = harmful
    out = {"rows": len(fx), "queries": len(qfx), "kf_seconds": f_s + s_s}
    print("| gradian setting | Spearman (all pairs) | Pearson (all pairs) | Spearman, median per query | "
          "Pearson, median per query |\n|---|---:|---:|---:|---:|")  # fmt: skip
    for label, pd in (("exact (no projection)", 0), (f"projected (k={args.proj_dim})", args.proj_dim)):
        res = common.gradian_run(model, fx, qfx, proj_dim=pd)
        a = agree(res.item_scores, ref)
        out[label] = a
        print(f"| {label} | {a['spearman_all']:.4f} | {a['pearson_all']:.4f} | "
              f"{a['spearman_median_per_query']:.4f} | {a['pearson_median_per_query']:.4f} |", flush=True)  # fmt: skip
    common.write_json(Path(__file__).resolve().parent / "results" / "agreement.json", out)


if __name__ == "__main__":
    main()
