"""Alternatives measured on the planted-fault suite and not kept (docs/benchmarks.md §8, "Where the misses are").

    python bench/tried_nulls_and_rankings.py null clip [--heldout]   # head's null refitted without the head
    python bench/tried_nulls_and_rankings.py null peak [--heldout]   # null fitted at the harm density's peak
    python bench/tried_nulls_and_rankings.py ranking                 # unit-norm gradients, per-item query weights
    python bench/tried_nulls_and_rankings.py tokens spread_s0_f10 …  # rows ranked by their most harmful token
    python bench/tried_nulls_and_rankings.py query-tokens spread_s0_f10 …  # query tokens weighted by their regression
    python bench/tried_nulls_and_rankings.py label-disagreement mislabel_s0_f20 …  # head rows the model relabels

``null`` swaps :func:`gradian.report.culprits.head_mask` for the variant and scores the verdict as
``calibrate_verdict.py`` does (the same runs, rule and policy); compare its ``--json`` with
``bench/results/verdict_suite_91.json``. ``ranking`` and ``tokens`` report ROC-AUC and precision@K of the planted rows
per kind or run. ``tokens`` runs ``gradian attribute --token-harm 1000`` on a run's fine-tune (about 20 s each on two
CPU cores) into ``bench/work/tokens/RUN``. ``query-tokens`` re-runs the attribution in process (about 15 s a run)
with each regressed item's query weighted per completion token by how much that token regressed.
``label-disagreement`` keeps, of the verdict's rows whose completion is one of the file's labels (a completion five
rows or more share), those for which the base model (or the fine-tune) prefers another of the labels. Every run dir
is ``bench/work/scenarios`` (``bench/scenarios/generate.py``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibrate_verdict as cal  # noqa: E402

import gradian.report.culprits as cu  # noqa: E402
from gradian.attribute.regression import RegressionRule  # noqa: E402

RUNS = cal.REPO / "bench" / "work" / "scenarios"


def clipped_head(s: np.ndarray, policy: cu.CulpritPolicy, first=cu.head_mask, rounds: int = 10) -> np.ndarray:
    """The shipped head (``first``), its null (median, robust spread) refitted on the rows outside it until no row
    joins."""
    s = np.asarray(s, dtype=np.float64)
    mask = first(s, policy)
    for _ in range(rounds):
        if not mask.any():
            break
        med, spread = cu._robust(s[~mask])
        new = cu.cap_head(s, mask | ((cu.local_fdr(s, med, spread) < policy.head_fdr) & (s > med) & (s > 0)), policy)
        if (new == mask).all():
            break
        mask = new
    return mask


def peak_null(s: np.ndarray, grid: int = 1024) -> tuple[float, float]:
    """A normal null at the harm density's mode, its spread from the half width at half maximum on the low side
    (the kernel's own width taken out): Efron's central matching at its simplest."""
    x = s[np.isfinite(s)]
    if len(x) < 3 or float(np.std(x)) <= 0:
        return cu._robust(x)
    centers, dens, h = cu.binned_density(x, grid)
    k = int(np.argmax(dens))
    left = k
    while left > 0 and dens[left] > dens[k] / 2:
        left -= 1
    sig = (centers[k] - centers[left]) / 1.1774
    return float(centers[k]), float(np.sqrt(max(sig**2 - h**2, (0.25 * sig) ** 2)))


def peak_head(s: np.ndarray, policy: cu.CulpritPolicy) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    med, spread = peak_null(s)
    return cu.cap_head(s, (cu.local_fdr(s, med, spread) < policy.head_fdr) & (s > med) & (s > 0), policy)


def run_null(variant: str, heldout: bool, out: Path | None) -> None:
    cu.head_mask = clipped_head if variant == "clip" else peak_head  # what stable_head and find_culprits call
    argv = ["--runs", str(RUNS)] + (["--heldout"] if heldout else []) + (["--json", str(out)] if out else [])
    sys.argv = ["calibrate_verdict.py", *argv]
    cal.main()


def planted_runs():
    for d in sorted(RUNS.iterdir()):
        run = cal.load_run(d) if d.is_dir() and not d.name.startswith("_") else None
        S = None if run is None or not run.planted else cal.regressed_scores(run, RegressionRule())
        if S is not None and len(S) >= 2:
            yield d, run, S


def auc_pk(v: np.ndarray, pos: np.ndarray) -> tuple[float, float]:
    return cal.auc(v, pos), float(pos[np.argsort(-v, kind="stable")[: int(pos.sum())]].mean())


def grad_norms(d: Path) -> dict[int, float]:
    """Each training row's LoRA gradient norm, from the run's gradient store (safetensors, never unpickled)."""
    from safetensors.numpy import load_file

    out: dict[int, float] = {}
    for f in sorted((d / "attr" / "grads").glob("*/shard_*.safetensors")):
        lo, hi = json.loads(f.with_suffix(".json").read_text())["rows"]
        sq = sum((a.astype(np.float64).reshape(a.shape[0], -1) ** 2).sum(1)
                 for a in load_file(str(f)).values() if a.shape[0] == hi - lo)  # fmt: skip
        out.update({r: float(np.sqrt(sq[k])) for k, r in enumerate(range(lo, hi))})
    return out


def run_ranking() -> None:
    names = ["row sum", "unit-norm gradients", "items at unit norm", "items as robust z"]
    per: dict[str, list[list[float]]] = collections.defaultdict(list)
    for d, run, S in planted_runs():
        pos = np.array([c in run.planted for c in run.cols])
        norms = grad_norms(d)
        med = np.median(S, axis=1, keepdims=True)
        mad = 1.4826 * np.median(np.abs(S - med), axis=1, keepdims=True)
        s = S.sum(0)
        variants = [s, s / np.array([norms.get(c, np.nan) for c in run.cols]),
                    (S / np.linalg.norm(S, axis=1, keepdims=True)).sum(0), ((S - med) / mad).sum(0)]  # fmt: skip
        per[run.kind].append([x for v in variants for x in auc_pk(v, pos)])
    print("| kind | runs | " + " | ".join(f"{n} AUC / P@K" for n in names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    for kind, rows in sorted(per.items()):
        m = np.nanmean(np.array(rows), axis=0)
        cells = " | ".join(f"{m[2 * i]:.2f} / {m[2 * i + 1]:.2f}" for i in range(len(names)))
        print(f"| {kind} | {len(rows)} | {cells} |")


def run_tokens(names: list[str]) -> None:
    print("| run | row sum AUC / P@K | max token | top-3 tokens |\n|---|---:|---:|---:|")
    for name in names:
        d, out = RUNS / name, cal.REPO / "bench" / "work" / "tokens" / name
        base = json.loads((d / "attr" / "report.json").read_text())["settings"]["base"]
        argv = [sys.executable, "-m", "gradian", "attribute", "--base", base, "--adapter", str(d / "run"),
                "--train", str(d / "train.jsonl"), "--eval", str(d / "eval.jsonl"), "--out", str(out),
                "--token-harm", "1000", "--no-progress"]  # fmt: skip
        subprocess.run(argv, check=True, capture_output=True, cwd=cal.REPO)
        planted = set(json.loads((d / "planted.json").read_text())["rows"])
        ex = [e for e in json.loads((out / "report.json").read_text())["examples"] if e.get("token_harm")]
        pos = np.array([e["index"] in planted for e in ex])
        tok = [np.array([h for _, h in e["token_harm"] if h is not None] or [0.0]) for e in ex]
        cells = [auc_pk(np.array(v), pos) for v in ([e["score"] for e in ex], [t.max() for t in tok],
                                                    [np.sort(t)[-3:].sum() for t in tok])]  # fmt: skip
        print(f"| {name} | " + " | ".join(f"{a:.2f} / {p:.2f}" for a, p in cells) + " |")


def token_weighted(model, qfx: list, power: float) -> list:
    """Copies of the query rows whose loss mask weighs each label token by its regression, relu(fine-tune NLL - base
    NLL) ** ``power``, scaled to sum to the label count (so the mean-per-token query keeps its scale); uniform when
    no token regressed."""
    import copy

    import torch

    from gradian.attribute import engine

    out = []
    for f in qfx:
        ids, am, lm = engine.collate([f], 0)
        nll = []
        for ctx in (model.disable_adapter(), contextlib.nullcontext()):
            with torch.no_grad(), ctx:
                lg = model(input_ids=ids, attention_mask=am).logits[0, :-1].float()
            nll.append(torch.nn.functional.cross_entropy(lg, ids[0, 1:], reduction="none").numpy())
        m = lm[0, 1:].numpy().astype(float)
        w = (np.clip(nll[1] - nll[0], 0, None) * m) ** power
        g = copy.copy(f)
        g.token_weight = np.r_[0.0, w / w.sum() * m.sum() if w.sum() > 0 else m]
        out.append(g)
    return out


def run_query_tokens(names: list[str]) -> None:
    """AUC / P@K of the default query against the same query with its tokens weighted by their regression."""
    import bench_peers_suite as bp
    import common
    import torch

    from gradian.attribute import engine

    plain = engine.collate

    def collate(fxs, pad_id, device="cpu"):  # a float loss mask where the rows carry token weights
        ids, am, lm = plain(fxs, pad_id, device)
        if not all(hasattr(f, "token_weight") for f in fxs):
            return ids, am, lm
        w = torch.zeros(lm.shape, dtype=torch.float32)
        for b, f in enumerate(fxs):
            w[b, : len(f.token_weight)] = torch.tensor(f.token_weight, dtype=torch.float32)
        return ids, am, w.to(device)

    engine.collate = collate  # what gradient_pass calls for the query rows
    print("| run | regressed items | default query AUC / P@K | tokens by regression | by regression squared |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        d = RUNS / name
        planted = json.loads((d / "planted.json").read_text())
        rep = json.loads((d / "attr" / "report.json").read_text())
        items = bp.regressed_items(rep)
        model, fx, efx = bp.load_suite_run(d, bp.resolve_base(d, str(planted.get("base") or "")))
        pos = np.array([f.index in set(planted["rows"]) for f in fx])
        qfx = [efx[i] for i in items]
        cells = []
        for q in (qfx, token_weighted(model, qfx, 1.0), token_weighted(model, qfx, 2.0)):
            res = common.gradian_run(model, fx, q)
            cells.append(auc_pk(np.asarray(res.item_scores, dtype=np.float64).sum(0), pos))
        print(f"| {name} | {len(items)} | " + " | ".join(f"{a:.2f} / {p:.2f}" for a, p in cells) + " |", flush=True)


def run_label_disagreement(names: list[str]) -> None:
    """Precision / recall of the verdict's rows against the planted ones, before and after keeping only the label rows
    the base model (or the fine-tune) would label otherwise."""
    print("| run | verdict rows: P / R | base model prefers another label: rows, P / R | fine-tune does: rows, P / R |")
    print("|---|---:|---:|---:|")
    for name in names:
        print(f"| {name} | " + " | ".join(label_disagreement_cells(RUNS / name)) + " |", flush=True)


def label_disagreement_cells(d: Path) -> list[str]:
    import bench_peers_suite as bp
    import torch
    from transformers import AutoTokenizer

    meta = json.loads((d / "planted.json").read_text())
    planted = set(meta["rows"])
    model, _, _ = bp.load_suite_run(d, bp.resolve_base(d, str(meta.get("base") or "")))
    tok = AutoTokenizer.from_pretrained(d / "run")
    rows = [json.loads(line) for line in (d / "train.jsonl").read_text().splitlines()]
    labels = [c for c, n in collections.Counter(r["completion"] for r in rows).items() if n >= 5]
    run = cal.load_run(d)
    S = cal.regressed_scores(run, RegressionRule())
    found = cu.find_culprits(S, S.sum(0), run.cols, findings=run.findings, embeddings=run.emb)
    named = [r for g in found.groups for r in g.rows] if found.concentrated else []

    def logp(prompt: str, completion: str, adapter: bool) -> float:
        p = tok(prompt, return_tensors="pt").input_ids
        x = torch.cat([p, tok(completion, add_special_tokens=False, return_tensors="pt").input_ids], 1)
        with torch.no_grad(), contextlib.nullcontext() if adapter else model.disable_adapter():
            lp = model(input_ids=x).logits[0, :-1].float().log_softmax(-1)
        return float(lp[p.shape[1] - 1 :].gather(1, x[0, p.shape[1] :, None]).sum())

    def pr(keep: list[int]) -> tuple[int, str]:
        hit = len(set(keep) & planted)
        return len(keep), f"{hit / max(1, len(keep)):.2f} / {hit / len(planted):.2f}"

    cells = [pr(named)[1]]
    for adapter in (False, True):
        keep = [r for r in named if rows[r]["completion"] not in labels or max(
            logp(rows[r]["prompt"], c, adapter) for c in labels if c != rows[r]["completion"]
        ) > logp(rows[r]["prompt"], rows[r]["completion"], adapter)]  # fmt: skip
        n, text = pr(keep)
        cells.append(f"{n}, {text}")
    return cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    nl = sub.add_parser("null")
    nl.add_argument("variant", choices=["clip", "peak"])
    nl.add_argument("--heldout", action="store_true")
    nl.add_argument("--json", type=Path)
    sub.add_parser("ranking")
    tk = sub.add_parser("tokens")
    tk.add_argument("runs", nargs="+")
    qt = sub.add_parser("query-tokens")
    qt.add_argument("runs", nargs="+")
    ld = sub.add_parser("label-disagreement")
    ld.add_argument("runs", nargs="+")
    args = ap.parse_args()
    if args.what == "null":
        run_null(args.variant, args.heldout, args.json)
    elif args.what == "ranking":
        run_ranking()
    elif args.what == "query-tokens":
        run_query_tokens(args.runs)
    elif args.what == "label-disagreement":
        run_label_disagreement(args.runs)
    else:
        run_tokens(args.runs)


if __name__ == "__main__":
    main()
