"""The true Fisher (``--fisher true``): curvature from labels sampled from the model instead of the data's labels.

The empirical Fisher (default, ``--fisher empirical``) is the covariance of the training gradients themselves, so it
comes free with the training pass. The true Fisher ``E_x E_{y~p(y|x)} [g g^T]`` takes, at every label position of a
training row, a token sampled from the fine-tuned model's own next-token distribution (as kronfluence does when
``use_empirical_fisher=False``, and bergson's EK-FAC): :func:`sampled_stats` fits the K-FAC factors on those
gradients (one extra forward+backward over this rank's rows) and :class:`SampledSource` yields the sampled per-row
gradients for the EK-FAC eigenvalues (the rows of the first pass, kept when they fit the cache, else recomputed with
the same samples). Scores still use the data-label gradients: only the curvature changes.

Samples are reproducible: each row draws its labels, at its own label positions, from a generator seeded with
``(seed, the row's training position)``, so a row's labels depend on neither its batch, the batch size, the order nor
the number of torchrun ranks. The rows run longest first within windows of about a store shard's size (256 MiB of
gradients), as the empirical pass's shards do, so a batch pads little; each window goes back in file order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import torch

from gradian.attribute.collector import Block, GradientCollector
from gradian.attribute.engine import _model_device, collate, longest_first
from gradian.attribute.plan import shard_rows
from gradian.attribute.source import GradSource, Stats
from gradian.dist import SINGLE, Dist

FISHERS = ("empirical", "true")


def sampled_losses(
    logits: torch.Tensor, loss_mask: torch.Tensor, generators: Sequence[torch.Generator]
) -> torch.Tensor:
    """Per-row SUM of the cross-entropy at label positions against tokens sampled from ``softmax(logits)`` (B,).
    ``generators``: one per row; a row samples at its own label positions only, so its labels do not depend on the
    batch's padding."""
    dt = torch.float64 if logits.dtype == torch.float64 else torch.float32
    lg = logits[:, :-1].to(dt)
    m = loss_mask[:, 1:].to(torch.bool)
    y = torch.zeros(lg.shape[:2], dtype=torch.long, device=lg.device)
    with torch.no_grad():
        for b, gen in enumerate(generators):
            at = m[b].nonzero().squeeze(1)
            if len(at):
                probs = torch.softmax(lg[b, at].detach(), dim=-1)
                y[b, at] = torch.multinomial(probs, 1, generator=gen).squeeze(1)
    nll = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1), reduction="none")
    return (nll.view(y.shape) * m.to(dt)).sum(dim=1)


def _generator(device: torch.device, seed: int, row: int) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed((int(seed) * 1_000_003 + int(row)) % (2**63 - 1))
    return gen


class Rows(Protocol):
    """Training rows read by position: a list, rows on disk, or a view of some of them."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> Any: ...


def _sampled_batches(
    model, blocks: Sequence[Block], fxs: Rows, pad_id: int, batch_size: int, seed: int, offsets, covariance: bool
) -> Iterator[tuple[dict[str, torch.Tensor], GradientCollector]]:
    """Per-example gradients (CPU) at sampled labels, one window of rows at a time in ``fxs``' order (the
    collector's covariance sums cover the window); ``offsets``: each row's training-row position. A window's rows
    run longest first."""
    dev = _model_device(model)
    window = shard_rows(sum(b.numel for b in blocks), batch_size)
    with GradientCollector(blocks, covariance=covariance) as col:
        for w0 in range(0, len(fxs), window):
            rows = [fxs[i] for i in range(w0, min(w0 + window, len(fxs)))]
            order = longest_first(rows)
            G: dict[str, torch.Tensor] = {}  # preallocated per window, rows in fxs' order (robust.gradients)
            for s in range(0, len(order), batch_size):
                at = order[s : s + batch_size]
                ids, am, lm = collate([rows[i] for i in at], pad_id, dev)
                gens = [_generator(dev, seed, offsets[w0 + i]) for i in at]
                with torch.enable_grad():
                    logits = model(input_ids=ids, attention_mask=am).logits
                    losses = sampled_losses(logits, lm, gens)
                    grads = col.collect(losses.sum(), token_mask=am.bool())
                del logits, losses
                if not G:
                    G = {k: torch.zeros((len(rows), *v.shape[1:]), dtype=v.dtype) for k, v in grads.items()}
                for k, v in grads.items():
                    G[k].index_copy_(0, torch.as_tensor(at, dtype=torch.long), v.cpu())
            yield G, col


class _Kept:
    """The chunks of one pass, kept while they fit ``limit`` bytes in all; ``chunks`` is None once they do not."""

    def __init__(self, limit: int) -> None:
        self.limit, self.size = limit, 0
        self.chunks: list[dict[str, torch.Tensor]] | None = []

    def add(self, g: dict[str, torch.Tensor]) -> None:
        self.size += sum(v.numel() * v.element_size() for v in g.values())
        if self.chunks is not None and self.size <= self.limit:
            self.chunks.append(g)
        else:
            self.chunks = None


class SampledSource(GradSource):
    """This rank's training rows' gradients at labels sampled from the model, computed as they are read (cached when
    they fit ``cache_bytes``). ``positions``: the training-row positions of ``fxs``' rows."""

    def __init__(
        self,
        model,
        blocks: Sequence[Block],
        fxs: Rows,
        positions: torch.Tensor,
        pad_id: int,
        batch_size: int,
        seed: int,
        dist: Dist = SINGLE,
        cache_bytes: int = 0,
    ) -> None:
        self.model, self.blocks, self.fxs, self.pad_id = model, list(blocks), fxs, pad_id
        self.batch_size, self.seed, self.dist = batch_size, seed, dist
        self.names = [b.name for b in blocks]
        self.positions = positions
        self.cache_bytes = cache_bytes
        self._cache: list[dict[str, torch.Tensor]] | None = None

    def chunks(self) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
        if self._cache is not None:
            off = 0
            for g in self._cache:
                yield off, g
                off += next(iter(g.values())).shape[0]
            return
        keep = _Kept(self.cache_bytes)
        off = 0
        pos = self.positions.tolist()
        for g, _ in _sampled_batches(
            self.model, self.blocks, self.fxs, self.pad_id, self.batch_size, self.seed, pos, False
        ):
            n = next(iter(g.values())).shape[0]
            keep.add(g)
            yield off, g
            off += n
        if keep.chunks is not None and off == self.n_local:
            self._cache = keep.chunks

    def stats(self) -> Stats:
        """K-FAC covariance sums at sampled labels over this rank's rows (one forward+backward; rows kept for
        :meth:`chunks` when they fit the cache)."""
        st = Stats.empty()
        keep = _Kept(self.cache_bytes)
        pos = self.positions.tolist()
        for g, col in _sampled_batches(
            self.model, self.blocks, self.fxs, self.pad_id, self.batch_size, self.seed, pos, True
        ):
            n = next(iter(g.values())).shape[0]
            st.add(dict(col.A), dict(col.S), col.n_tokens, n)
            col.A.clear()
            col.S.clear()
            col.n_tokens = 0
            col.n_examples = 0
            keep.add(g)
        if keep.chunks is not None:
            self._cache = keep.chunks
        return st
