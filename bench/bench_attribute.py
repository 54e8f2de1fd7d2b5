"""Cost of `gradian attribute` versus one plain forward+backward pass over the same training rows.

    python bench/bench_attribute.py [--rows 256] [--adapter DIR]

Trains (or takes) a stories260K LoRA adapter on all 7 projections, then times, on the same rows and batch size:
  baseline  one training-style fwd+bwd per batch (summed loss, parameter .grad) - the floor for any gradient method
  pass      gradian's training pass: per-example gradients from hooks + covariance sums (no store)
  store     the same pass writing safetensors shards
  total     the whole core (eval NLLs, training pass, query gradients, EK-FAC and scores)
Each is the best of --repeats runs. Target: pass <= 1.3x baseline.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "attribute"))
import helpers  # noqa: E402

from gradian.attribute.api import run_attribution  # noqa: E402
from gradian.attribute.collector import find_lora_blocks, token_losses  # noqa: E402
from gradian.attribute.engine import collate, gradient_pass  # noqa: E402
from gradian.attribute.loading import load  # noqa: E402
from gradian.options import AttributeOptions  # noqa: E402


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--adapter", type=Path)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    adapter = args.adapter or helpers.train_planted(tmp / "adapter", epochs=2, lr=5e-3)["adapter"]
    lm = load(str(helpers.BASE), adapter)
    model = lm.model
    _, fx = helpers.formatted(helpers.TRAIN)
    _, efx = helpers.formatted(helpers.EVAL, add_eos=False)
    fx = (fx * (args.rows // len(fx) + 1))[: args.rows]
    blocks = find_lora_blocks(model)
    bs = args.batch_size
    n_tok = sum(len(f.input_ids) for f in fx)
    print(
        f"{len(fx)} rows, {n_tok} tokens, {len(blocks)} LoRA blocks, {sum(b.numel for b in blocks)} params, "
        f"batch {bs}, {torch.get_num_threads()} threads"
    )

    def baseline():
        for s in range(0, len(fx), bs):
            ids, am, lmask = collate(fx[s : s + bs], 0)
            model.zero_grad(set_to_none=True)
            token_losses(model(input_ids=ids, attention_mask=am).logits, ids, lmask).sum().backward()

    def our_pass():
        gradient_pass(model, blocks, fx, 0, batch_size=bs, covariance=True)

    def with_store():
        d = Path(tempfile.mkdtemp())
        run_attribution(model, fx, efx, AttributeOptions(batch_size=bs, query="all"), pad_id=0, store_dir=d)

    def total():
        run_attribution(model, fx, efx, AttributeOptions(batch_size=bs, query="all"), pad_id=0)

    baseline()  # warm-up
    b = best(baseline, args.repeats)
    p = best(our_pass, args.repeats)
    t = best(total, args.repeats)
    s = best(with_store, 1)
    print(f"baseline fwd+bwd      {b:7.3f} s")
    print(f"training pass         {p:7.3f} s  ({p / b:.2f}x)")
    print(f"whole core, no store  {t:7.3f} s  ({t / b:.2f}x)")
    print(f"whole core, store     {s:7.3f} s  ({s / b:.2f}x)")


if __name__ == "__main__":
    main()
