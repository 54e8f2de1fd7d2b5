"""The passes over data: completion NLL (base and fine-tuned), per-example gradients with covariance statistics.

Loss convention. Every per-example training gradient is the gradient of the row's *summed* token loss over its label
tokens (``FormattedExample.loss_mask``, identical to the trainer's labels). HF Trainer (transformers >= 4.46, with
``num_items_in_batch``) and TRL's SFTTrainer divide the summed token loss of a whole (accumulated) batch by the
number of label tokens in it, so a row's contribution to an update is its token-sum gradient times one constant shared
by all rows; the sum convention therefore ranks rows as the trainer weighted them (long rows weigh more). Eval items
are scored by their *mean* NLL per completion token (comparable across lengths), so a query gradient is the token-sum
gradient divided by the item's label count.

Batches are right-padded; the attention mask keeps padding out of the forward, the loss mask keeps it out of the
loss, and the collector masks it out of gradients and covariance statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext

import numpy as np
import torch

from gradian.attribute.collector import Block, GradientCollector, token_losses
from gradian.attribute.continuations import Continuations
from gradian.data.types import FormattedExample
from gradian.options import DEFAULTS


def collate(
    fxs: Sequence[FormattedExample], pad_id: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad to the longest row: (input_ids, attention_mask, loss_mask)."""
    T = max(max(len(f.input_ids) for f in fxs), 2)
    ids = torch.full((len(fxs), T), pad_id, dtype=torch.long)
    am = torch.zeros((len(fxs), T), dtype=torch.long)
    lm = torch.zeros((len(fxs), T), dtype=torch.bool)
    for b, f in enumerate(fxs):
        n = len(f.input_ids)
        ids[b, :n] = torch.tensor(f.input_ids, dtype=torch.long)
        am[b, :n] = 1
        lm[b, :n] = torch.tensor(f.loss_mask, dtype=torch.bool)
    return ids.to(device), am.to(device), lm.to(device)


def longest_first(fxs: Sequence[FormattedExample]) -> list[int]:
    """Positions of ``fxs`` by length, longest first (ties in file order): batches taken in this order pad little."""
    return sorted(range(len(fxs)), key=lambda i: -len(fxs[i].input_ids))


def pad_id_of(tokenizer) -> int:
    for attr in ("pad_token_id", "eos_token_id", "unk_token_id"):
        v = getattr(tokenizer, attr, None) if tokenizer is not None else None
        if v is not None:
            return int(v)
    return 0


@contextmanager
def progress_bar(description: str, total: int, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """A rich progress bar with ETA on stderr; yields ``advance(n)``."""
    if not enabled:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    cols = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*cols, TextColumn("eta"), TimeRemainingColumn(), console=Console(stderr=True), transient=False) as p:
        task = p.add_task(description, total=total)
        yield lambda n: p.advance(task, n)


def _model_device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def completion_nll(
    model,
    fxs: Sequence[FormattedExample],
    pad_id: int,
    *,
    batch_size: int = DEFAULTS.batch_size,
    adapter: bool = True,
    progress: bool = False,
    description: str = "eval NLL",
    memo: Continuations | None = None,
) -> np.ndarray:
    """Mean NLL per label token of each row (NaN for a row without label tokens), with the adapter on or off; a row
    whose tokens ``memo`` holds is read from it (:mod:`gradian.attribute.continuations`)."""
    dev = _model_device(model)
    out = np.full(len(fxs), np.nan)
    held = [memo.mean_nll(adapter, f) if memo is not None else None for f in fxs]
    for i, h in enumerate(held):
        if h is not None:
            out[i] = h
    todo = [i for i, h in enumerate(held) if h is None]
    ctx = nullcontext() if adapter else model.disable_adapter()
    with ctx, progress_bar(description, len(todo), progress) as advance:
        for s in range(0, len(todo), batch_size):
            at = todo[s : s + batch_size]
            ids, am, lm = collate([fxs[i] for i in at], pad_id, dev)
            logits = model(input_ids=ids, attention_mask=am).logits
            tot = token_losses(logits, ids, lm).double().cpu().numpy()
            n = lm[:, 1:].sum(1).cpu().numpy()
            with np.errstate(invalid="ignore", divide="ignore"):
                out[at] = np.where(n > 0, tot / np.maximum(n, 1), np.nan)
            advance(len(at))
    return out


def gradient_pass(
    model,
    blocks: Sequence[Block],
    fxs: Sequence[FormattedExample],
    pad_id: int,
    *,
    batch_size: int = DEFAULTS.batch_size,
    covariance: bool = False,
    mean_per_token: bool = False,
    on_batch: Callable[[int, dict[str, torch.Tensor], GradientCollector], None] | None = None,
    progress: bool = False,
    description: str = "gradients",
) -> tuple[dict[str, torch.Tensor] | None, GradientCollector]:
    """One forward+backward per batch. Per-example gradients go to ``on_batch(start, grads, collector)`` when given
    (e.g. to write a store shard), else they are concatenated and returned. ``mean_per_token`` divides each row's
    gradient by its label count (query items)."""
    dev = _model_device(model)
    kept: dict[str, list[torch.Tensor]] = {b.name: [] for b in blocks}
    with GradientCollector(blocks, covariance=covariance) as col, progress_bar(description, len(fxs), progress) as adv:
        for s in range(0, len(fxs), batch_size):
            batch = fxs[s : s + batch_size]
            ids, am, lm = collate(batch, pad_id, dev)
            with torch.enable_grad():
                logits = model(input_ids=ids, attention_mask=am).logits
                losses = token_losses(logits, ids, lm)
                grads = col.collect(losses.sum(), token_mask=am.bool())
            del logits, losses
            if mean_per_token:
                n = lm[:, 1:].sum(1).clamp_min(1).to(next(iter(grads.values())).dtype)
                grads = {k: v / n[:, None, None] for k, v in grads.items()}
            grads = {k: v.cpu() for k, v in grads.items()}
            if on_batch is not None:
                on_batch(s, grads, col)
            else:
                for k, v in grads.items():
                    kept[k].append(v)
            adv(len(batch))
    if on_batch is not None:
        return None, col
    return {k: torch.cat(v) if v else torch.empty(0) for k, v in kept.items()}, col
