"""Prompt-only eval, base vs fine-tune generations and token harm on the bundled example (examples/stories260k).

    python bench/bench_prompts.py            # -> bench/results/prompts.json
    python bench/bench_prompts.py cost       # token harm vs the training-gradient pass on the same 48 rows

Four `gradian attribute` runs (the full pipeline, report included) on the bundled fine-tune, sharing one gradient
store: the written eval completions; the same 20 eval rows with their completions removed (prompt only; the base
model's greedy completion, cut where the fine-tune departs, the default); prompt only with ``--no-eval-cut`` (the
whole 32-token completion); and prompt only with ``--eval-samples 4`` (four sampled completions per row, seed 0,
cut). For each: the regressed items, ROC-AUC and precision@K (K = 36 planted rows) of the harm ranking against
planted.json's harmful cluster, and the timings of the two features (``eval_generation_s``, ``generations_s``,
``token_harm_s``) next to the training pass. Token harm: for each planted row among the top
``--token-harm`` rows, whether one of its three highest-harm tokens lies in the planted edit: the name "Zorblax" (with
the space before it, which this 512-token vocabulary splits off as its own token) or one of the sci-fi words of the
planted sentences (``SCIFI``, from build_example.py's SCIFI_SENTENCES).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples" / "stories260k"
SCIFI = (
    "Zorblax robot robots moon rocket laser Mars space station beeped battery aliens glowing crystal planets planet "
    "metal comets asteroids zoomed scanned crater sensors captain signal"
).split()


def auc_pk(report: dict, planted: set[int]) -> tuple[float, float]:
    s = np.array([e["score"] for e in report["examples"]])
    y = np.array([e["index"] in planted for e in report["examples"]])
    pos, neg = s[y], s[~y]
    auc = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))
    return float(auc), float(y[np.argsort(-s, kind="stable")[: len(planted)]].mean())


def edit_spans(text: str, words: list[str] = SCIFI) -> list[tuple[int, int]]:
    """Character spans of the planted edit in ``text``, each with the whitespace before it."""
    pat = r"\s?\b(?:" + "|".join(map(re.escape, words)) + r")\b"
    return [m.span() for m in re.finditer(pat, text)]


def top3_hits(report: dict, planted: set[int], words: list[str] = SCIFI) -> tuple[int, int, list[dict]]:
    from gradian.attribute.tokens import top_tokens

    hits = n = 0
    rows = []
    for e in report["examples"]:
        pieces = e.get("token_harm")
        if not pieces or e["index"] not in planted:
            continue
        text = "".join(t for t, _ in pieces)
        spans = edit_spans(text, words)
        at, starts = 0, []
        for t, h in pieces:
            starts.append((at, at + len(t), t, h))
            at += len(t)
        top = {(t, h) for t, h in top_tokens(pieces)}
        best = [(a, b, t) for a, b, t, h in starts if h is not None and (t, h) in top]
        hit = any(a < y and x < b for a, b, _ in best for x, y in spans)
        hits += hit
        n += 1
        rows.append({"row": e["index"], "rank": e["rank"], "top3": [t for _, _, t in best], "hit": bool(hit)})
    return hits, n, rows


def run(eval_file: Path, out: Path, **kw) -> tuple[dict, float]:
    from gradian.pipeline import attribute_and_report

    t = time.perf_counter()
    attribute_and_report(
        EX / "run", base=str(EX / "base"), train=EX / "data" / "train.jsonl", eval=eval_file, out=out, **kw
    )
    return json.loads((out / "report.json").read_text()), time.perf_counter() - t


def main() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, str(ROOT / "src"))
    planted = set(json.loads((EX / "data" / "planted.json").read_text())["harmful_cluster"]["indices"])
    work = Path(tempfile.mkdtemp(prefix="gradian-bench-prompts-"))
    prompts = work / "eval_prompts.jsonl"
    rows = [json.loads(line) for line in (EX / "data" / "eval.jsonl").read_text().splitlines() if line.strip()]
    prompts.write_text("".join(json.dumps({"prompt": r["prompt"]}) + "\n" for r in rows))
    out = work / "out"
    results = {}
    runs = {
        "written": (EX / "data" / "eval.jsonl", {}),
        "prompt_only": (prompts, {}),
        "prompt_only_no_cut": (prompts, {"eval_cut": False}),
        "prompt_only_4_samples": (prompts, {"eval_samples": 4, "eval_seed": 0}),
    }
    for name, (eval_file, kw) in runs.items():
        report, wall = run(eval_file, out, progress=False, **kw)
        auc, pk = auc_pk(report, planted)
        hits, n, per_row = top3_hits(report, planted)
        tm = report["timings"]
        results[name] = {
            "regressed": len(report["regressed"]),
            "regressed_targets": sum(r.get("row", r["index"]) < 12 for r in report["regressed"]),
            "eval_items": len(report["eval"]),
            "auc": round(auc, 4),
            "p_at_36": round(pk, 4),
            "token_harm_top3_hits": hits,
            "planted_rows_with_token_harm": n,
            "token_harm_top3_rate": round(hits / n, 4) if n else None,
            "token_harm_top3_name_only_rate": round(top3_hits(report, planted, ["Zorblax"])[0] / n, 4) if n else None,
            "token_harm_rows": report["settings"].get("token_harm_rows"),
            "timings": {k: round(v, 3) for k, v in tm.items()},
            "wall_s": round(wall, 2),
            "per_planted_row": per_row,
        }
        print(name, {k: v for k, v in results[name].items() if k != "per_planted_row"}, flush=True)
    dest = ROOT / "bench" / "results" / "prompts.json"
    dest.write_text(json.dumps({"command": "python bench/bench_prompts.py", "runs": results}, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print("wrote", dest)


def cost(rows: int = 48, rounds: int = 2) -> None:
    """Token harm (forward-mode pass) against the training-gradient pass over the same rows, batch 8, interleaved."""
    import torch

    sys.path.insert(0, str(ROOT / "src"))
    from gradian.attribute import engine, tokens
    from gradian.attribute.collector import find_lora_blocks
    from gradian.attribute.loading import load
    from gradian.data import FormatSettings, format_examples, load_examples

    lm = load(str(EX / "base"), EX / "run", device="cpu")
    fx = format_examples(load_examples(EX / "data" / "train.jsonl")[:rows], lm.tokenizer, FormatSettings(128))
    blocks = find_lora_blocks(lm.model)
    X = {b.name: torch.randn(b.shape, dtype=torch.float64) for b in blocks}
    d = tokens.lifted_direction(lm.model, blocks, X)
    for r in range(rounds):
        t = time.perf_counter()
        tokens.token_harm(lm.model, d, fx, 0, 8)
        a = time.perf_counter() - t
        t = time.perf_counter()
        engine.gradient_pass(lm.model, blocks, fx, 0, batch_size=8, covariance=True)
        b = time.perf_counter() - t
        print(f"round {r}: {rows} rows, token harm {a:.2f} s, gradient pass {b:.2f} s, ratio {a / b:.2f}")


if __name__ == "__main__":
    cost() if sys.argv[1:] == ["cost"] else main()
