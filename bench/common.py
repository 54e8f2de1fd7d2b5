"""Shared setup for the bench scripts: models, rows, timing, memory, and the kronfluence and bergson references.

kronfluence is a bench-only dependency (not in pyproject). Install it without its declared dependencies (its
torchvision pin breaks beside the CPU torch build; kronfluence 1.0.1 never imports torchvision on this path):

    pip install --no-deps kronfluence==1.0.1 einops einconv opt-einsum

bergson likewise (bench_peers_suite.py; its torchvision/torchaudio/torchopt/bitsandbytes pins are not imported here):

    pip install --no-deps bergson==2.5.1 jaxtyping wadler_lindig ml_dtypes natsort petname simple_parsing \
        docstring_parser
"""

from __future__ import annotations

import json
import logging
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples" / "stories260k"
DEVICE = os.environ.get("GRADIAN_BENCH_DEVICE", "cpu")  # bench/gpu_all.sh sets cuda
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def fx_row(index: int, ids: list[int], n_prompt: int):
    from gradian.data.types import FormattedExample

    mask = [i >= n_prompt for i in range(len(ids))]
    return FormattedExample(
        index=index, input_ids=list(ids), loss_mask=mask, n_tokens_before_truncation=len(ids),
        n_prompt_tokens=n_prompt, n_label_tokens=sum(mask),
    )  # fmt: skip


def stories_setup(n_rows: int, dtype=torch.float32):
    """The bundled stories260K fine-tune (LoRA r=8, all 7 projections) and its training rows repeated to n_rows."""
    sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "attribute"))
    import helpers

    from gradian.attribute.loading import load

    model = load(str(EX / "base"), EX / "run").model.to(device=DEVICE, dtype=dtype)
    model.eval()
    _, fx = helpers.formatted(EX / "data" / "train.jsonl")
    _, efx = helpers.formatted(EX / "data" / "eval.jsonl", add_eos=False)
    fx = (fx * (n_rows // len(fx) + 1))[:n_rows]
    return model, fx, efx


def wide_setup(n_rows: int, n_queries: int = 16, seq: int = 128, dtype=torch.float32, seed: int = 0):
    """A random-initialised Llama (hidden 192, 12 layers, ~5.4M params, vocab 512) with LoRA r=8 on all 7
    projections (B random, so lora_A gradients are not zero), random-token rows of ``seq`` tokens (first 16 prompt)."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=512, hidden_size=192, intermediate_size=512, num_hidden_layers=12, num_attention_heads=6,
        num_key_value_heads=6, max_position_embeddings=256, tie_word_embeddings=True,
    )  # fmt: skip
    base = LlamaForCausalLM(cfg).to(device=DEVICE, dtype=dtype)
    base.config._attn_implementation = "eager"
    model = get_peft_model(
        base, LoraConfig(r=8, lora_alpha=16, target_modules=ALL_LINEAR, lora_dropout=0.0, task_type="CAUSAL_LM")
    )
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    model.eval()
    g = torch.Generator().manual_seed(seed + 1)
    rows = torch.randint(3, 512, (n_rows + n_queries, seq), generator=g).tolist()
    fx = [fx_row(i, r, 16) for i, r in enumerate(rows[:n_rows])]
    qfx = [fx_row(i, r[:32], 16) for i, r in enumerate(rows[n_rows:])]
    return model, fx, qfx


def floor_pass(model, fx, bs: int = 8, by_length: bool = False) -> None:
    """One training-style forward+backward per batch (summed loss, parameter .grad): the floor. ``by_length``: the
    rows longest first, so a batch pads little (as gradian's training pass and bergson's token batches run)."""
    from gradian.attribute.collector import token_losses
    from gradian.attribute.engine import collate, longest_first

    if by_length:
        fx = [fx[i] for i in longest_first(fx)]
    for s in range(0, len(fx), bs):
        ids, am, lm = collate(fx[s : s + bs], 0, DEVICE)
        model.zero_grad(set_to_none=True)
        token_losses(model(input_ids=ids, attention_mask=am).logits, ids, lm).sum().backward()
    model.zero_grad(set_to_none=True)


def gradian_run(
    model, fx, qfx, bs: int = 8, method: str = "ekfac", proj_dim=None, store: bool = False, query_override=None, **kw
):
    from gradian.attribute.api import run_attribution
    from gradian.options import AttributeOptions

    d = Path(tempfile.mkdtemp()) if store else None
    q = query_override or "all"
    opts = AttributeOptions(batch_size=bs, query=q, method=method, proj_dim=proj_dim, **kw)
    return run_attribution(model, fx, qfx, opts, pad_id=0, store_dir=d)


def _sync() -> None:
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn):
    """(wall seconds, process CPU seconds, result). On a loaded shared machine a 1-thread process's CPU time is the
    steadier measure of its work (wall time includes the time it waited for a core)."""
    _sync()
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    _sync()
    return time.perf_counter() - t, time.process_time() - c, out


def interleaved(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Run each function once per round, in alternating order, ``repeats`` rounds: ``T[name]`` wall seconds and
    ``T[name + "_cpu"]`` process CPU seconds per round."""
    T: dict[str, list[float]] = {k: [] for k in fns} | {k + "_cpu": [] for k in fns}
    for r in range(repeats):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for k in order:
            w, c, _ = timed(fns[k])
            T[k].append(w)
            T[k + "_cpu"].append(c)
    return T


def med(xs: list[float]) -> float:
    return statistics.median(xs)


# ---------------------------------------------------------------------------------------------------- kronfluence

KF_CPU: list[float] = []  # process CPU seconds of the last kronfluence_scores call: [factors, scores]


def kronfluence_scores(
    model,
    fx,
    qfx,
    *,
    fp64: bool = False,
    bs: int = 8,
    damping=None,
    workdir=None,
    empirical: bool = True,
    by_length: bool = False,
):
    """kronfluence EK-FAC on the same LoRA modules: factors (covariance, eigendecomposition, lambda) + pairwise
    scores. Training loss = summed label-token NLL per row, measurement = mean NLL per completion token per query
    (gradian's conventions). ``empirical=False``: kronfluence's default true Fisher (labels sampled from the model,
    seeded). ``by_length``: the training rows run longest first and each batch pads to its own longest row (a
    ``collate_fn`` through kronfluence's ``DataLoaderKwargs``), as gradian's training pass does; otherwise every row
    is padded to the longest of all. Returns (scores (n_query, n_train) with kronfluence's sign, in ``fx``'s order,
    factor s, score s)."""
    from kronfluence.analyzer import Analyzer, prepare_model
    from kronfluence.arguments import FactorArguments, ScoreArguments
    from kronfluence.task import Task
    from kronfluence.utils.dataset import DataLoaderKwargs

    from gradian.attribute.collector import find_lora_blocks, token_losses
    from gradian.attribute.engine import longest_first

    order = longest_first(fx) if by_length else list(range(len(fx)))
    fx = [fx[i] for i in order]

    names = [f"{b.name.rsplit('.', 1)[0]}.{b.name.rsplit('.', 1)[1]}.default" for b in find_lora_blocks(model)]
    T = max(len(f.input_ids) for f in list(fx) + list(qfx))

    def tensors(rows):
        out = []
        for f in rows:
            n = len(f.input_ids)
            ids = torch.zeros(T, dtype=torch.long)
            ids[:n] = torch.tensor(f.input_ids)
            am = torch.zeros(T, dtype=torch.long)
            am[:n] = 1
            lm = torch.zeros(T, dtype=torch.bool)
            lm[:n] = torch.tensor(f.loss_mask)
            out.append({"input_ids": ids, "attention_mask": am, "loss_mask": lm})
        return out

    class LoraTask(Task):
        def compute_train_loss(self, batch, model, sample=False):
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            if not sample:
                return token_losses(logits, batch["input_ids"], batch["loss_mask"]).sum()
            with torch.no_grad():  # true Fisher (empirical=False): labels sampled from the model
                probs = torch.softmax(logits.detach().double(), -1)
                sampled = torch.multinomial(probs.view(-1, probs.shape[-1]), 1).view(probs.shape[:-1])
            ids = torch.cat([batch["input_ids"][:, :1], sampled[:, :-1]], 1)
            return token_losses(logits, ids, batch["loss_mask"]).sum()

        def compute_measurement(self, batch, model):
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            tot = token_losses(logits, batch["input_ids"], batch["loss_mask"])
            n = batch["loss_mask"][:, 1:].sum(1).clamp_min(1)
            return (tot / n).sum()

        def get_influence_tracked_modules(self):
            return names

        def get_attention_mask(self, batch):
            return batch["attention_mask"]

    task = LoraTask()
    model = prepare_model(model, task)
    wd = Path(workdir or tempfile.mkdtemp())
    analyzer = Analyzer("bench", model, task, cpu=DEVICE == "cpu", disable_tqdm=True, output_dir=str(wd))
    if by_length:

        def pad_to_batch(rows):  # every row is padded to T by tensors(); cut the batch to its longest row
            n = max(int(r["attention_mask"].sum()) for r in rows)
            return {k: torch.stack([r[k][:n] for r in rows]) for k in rows[0]}

        analyzer.set_dataloader_kwargs(DataLoaderKwargs(collate_fn=pad_to_batch))
    f64 = torch.float64
    fa = FactorArguments(strategy="ekfac", use_empirical_fisher=empirical)
    sa = ScoreArguments(damping_factor=damping)
    if fp64:
        fa = FactorArguments(
            strategy="ekfac", use_empirical_fisher=empirical, activation_covariance_dtype=f64,
            gradient_covariance_dtype=f64, eigendecomposition_dtype=f64, per_sample_gradient_dtype=f64,
            lambda_dtype=f64,
        )  # fmt: skip
        sa = ScoreArguments(
            damping_factor=damping, per_sample_gradient_dtype=f64, precondition_dtype=f64, score_dtype=f64
        )
    train_ds, query_ds = tensors(fx), tensors(qfx)
    torch.manual_seed(0)  # the true Fisher's sampled labels
    t0, c0 = time.perf_counter(), time.process_time()
    analyzer.fit_all_factors("f", train_ds, per_device_batch_size=bs, factor_args=fa, overwrite_output_dir=True)
    t1, c1 = time.perf_counter(), time.process_time()
    analyzer.compute_pairwise_scores(
        "s", "f", query_ds, train_ds, per_device_query_batch_size=bs, per_device_train_batch_size=bs,
        score_args=sa, overwrite_output_dir=True,
    )  # fmt: skip
    t2, c2 = time.perf_counter(), time.process_time()
    scores = analyzer.load_pairwise_scores("s")["all_modules"].double().cpu()
    KF_CPU[:] = [c1 - c0, c2 - c1]
    back = torch.empty_like(scores)
    back[:, torch.as_tensor(order)] = scores  # the rows' own order
    return back, t1 - t0, t2 - t1


def write_json(path: Path, data: dict) -> None:
    """Write ``data``; a result under bench/results from a GPU run (GRADIAN_BENCH_DEVICE=cuda) gets a ``gpu_`` prefix,
    so it never overwrites the CPU figures the docs quote."""
    if DEVICE != "cpu" and path.parent.name == "results" and not path.name.startswith("gpu_"):
        path = path.with_name(f"gpu_{path.name}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


# ---------------------------------------------------------------------------------------------------- bergson


def bergson_grads(model, rows, *, mean: bool, bs: int = 8, workdir=None) -> torch.Tensor:
    """bergson's per-example LoRA gradients (its in-memory collector, no projection, no normalizer: the defaults of
    ``bergson build``), one flat row per example in ``rows`` order. Loss: cross-entropy over the label tokens,
    summed per row (``mean=False``, training rows) or averaged per token (``mean=True``, queries: gradian's
    conventions). Install: see the module docstring."""
    from bergson import GradientProcessor, IndexConfig, InMemoryCollector
    from bergson.collector.collector import CollectorComputer
    from datasets import Dataset

    from gradian.attribute.collector import find_lora_blocks

    wd = Path(workdir or tempfile.mkdtemp())
    cfg = IndexConfig(run_path=str(wd / "index"), loss_reduction="mean" if mean else "sum")
    cfg.partial_run_path.mkdir(parents=True, exist_ok=True)
    labels = [[t if m else -100 for t, m in zip(f.input_ids, [False, *f.loss_mask[1:]], strict=True)] for f in rows]
    data = Dataset.from_dict({"input_ids": [list(f.input_ids) for f in rows], "labels": labels})
    names = {f"{b.name.removeprefix('base_model.')}.default" for b in find_lora_blocks(model)}
    collector = InMemoryCollector(model=model.base_model, cfg=cfg, processor=GradientProcessor(), data=data,
                                  target_modules=names)  # fmt: skip
    batches = [list(range(s, min(s + bs, len(rows)))) for s in range(0, len(rows), bs)]
    logging.disable(logging.INFO)  # bergson logs every tracked module's name per call
    computer = CollectorComputer(model=model, data=data, collector=collector, batches=batches, cfg=cfg)
    try:
        computer.run_with_collector_hooks()
    finally:
        logging.disable(logging.NOTSET)
    return torch.cat([collector.gradients[n].double() for n in sorted(collector.gradients)], 1)
