"""What one training step costs GradianCallback, split: a step of the bundled stories260K example as TRL trains it (its
rows, LoRA r=8 on every linear layer, batch 8, completion-only labels) against the callback's work on that step's
backward, with and without the curvature sums (EK-FAC's covariances of each block's inputs and output gradients).

    OMP_NUM_THREADS=1 python bench/bench_capture.py [--setup smollm2] [--steps 30]

Times, per step (median over ``--steps`` steps of different rows, one thread): the forward+backward alone and with the
capture hooks on (they keep each block's input, projected where the adapter is, and project the output gradients);
``Capture.take`` as the callback runs it (per-row gradients, covariance sums); the same with the covariance off. The
adapter's projection is the callback's default (``auto_proj_dim``: none for the stories260K adapter, so its per-row
gradients and covariances are the blocks' full shapes). Writes bench/results/capture_cost.json and .md."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from callback_train import SETUPS

HERE = Path(__file__).resolve().parent


def batches(setup: str, n: int, batch: int):
    """``n`` batches of the setup's training rows, formatted as TRL does (Gradian's formatter, equal to TRL's)."""
    from gradian.attribute.engine import collate, pad_id_of
    from gradian.data import FormatSettings, format_examples, load_examples
    from gradian.data.tokenizer import load_tokenizer

    su = SETUPS[setup]
    tok = load_tokenizer(str(su.base))
    fx = format_examples(load_examples(su.train), tok, FormatSettings(max_length=su.max_length))
    for s in range(0, min(n * batch, len(fx) // batch * batch), batch):
        ids, am, lm = collate(fx[s : s + batch], pad_id_of(tok))
        labels = ids.masked_fill(~lm, -100)
        yield ids, am, labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup", choices=sorted(SETUPS), default="stories260k")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--results", default=None)
    a = ap.parse_args()
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from gradian.attribute.collector import GradientCollector, attach_projections, find_lora_blocks
    from gradian.attribute.plan import auto_proj_dim
    from gradian.integrations.capture import Capture

    torch.manual_seed(0)
    su = SETUPS[a.setup]
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(su.base)),
                           LoraConfig(r=su.rank, lora_alpha=2 * su.rank, target_modules="all-linear"))  # fmt: skip
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.01)  # a trained adapter's B is not zero
    model.train()
    blocks = find_lora_blocks(model)
    proj_dim = auto_proj_dim(blocks)
    attach_projections(blocks, proj_dim, 0)
    cols = {"covariance": GradientCollector(blocks, covariance=True), "no covariance": GradientCollector(blocks)}
    times: dict[str, list[float]] = {"forward+backward": [], "forward+backward, capture hooks on": [],
                                     **{f"take, {k}": [] for k in cols}}  # fmt: skip
    cap = Capture(model, blocks)

    def step(ids, am, labels) -> float:
        t = time.perf_counter()
        model(input_ids=ids, attention_mask=am, labels=labels).loss.backward()
        took = time.perf_counter() - t
        model.zero_grad(set_to_none=True)
        return took

    for ids, am, labels in batches(a.setup, a.steps + 2, 8):
        times["forward+backward"].append(step(ids, am, labels))
        with cap:
            times["forward+backward, capture hooks on"].append(step(ids, am, labels))
            saved = (list(cap.calls), list(cap.deltas), cap.batch, cap.logits, cap.dlogits, cap._probe)
            for k, col in cols.items():
                cap.calls, cap.deltas = list(saved[0]), list(saved[1])
                cap.batch, cap.logits, cap.dlogits, cap._probe = saved[2:]
                t = time.perf_counter()
                cap.take(col)
                times[f"take, {k}"].append(time.perf_counter() - t)
    med = {k: statistics.median(v[2:]) * 1e3 for k, v in times.items()}  # the first two steps warm up
    res = {"command": "OMP_NUM_THREADS=1 python bench/bench_capture.py " + " ".join(sys.argv[1:]), "setup": a.setup,
           "steps": a.steps, "proj_dim": proj_dim, "lora_floats_per_row": sum(b.numel for b in blocks),
           "median_ms": med}  # fmt: skip
    name = a.results or ("capture_cost.json" if a.setup == "stories260k" else f"capture_cost_{a.setup}.json")
    out = HERE / "results" / name
    out.write_text(json.dumps(res, indent=1))
    fb = med["forward+backward"]
    md = "\n".join([
        f"# GradianCallback's work per training step ({a.setup}, batch 8, one thread)", "", f"`{res['command']}`", "",
        f"Projection: {proj_dim or 'none'}; {res['lora_floats_per_row']} LoRA weights (floats per row's gradient).", "",
        "| per step | median ms | / forward+backward |", "|---|---|---|",
        *[f"| {k} | {v:.1f} | {v / fb:.3f} |" for k, v in med.items()], "",
    ])  # fmt: skip
    out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
