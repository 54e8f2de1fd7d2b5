"""Per-example training gradients as the scoring reads them: chunk by chunk, from memory or from the store.

Every scoring function (:mod:`gradian.attribute.scores`) takes a :class:`GradSource` (or a plain ``{block: (N, out,
in)}`` dict, wrapped in :class:`MemorySource`), reads it in chunks and combines per-chunk sums, so:

* **Memory stays bounded.** :class:`StoreSource` reads one shard at a time (checksum verified on every read) and keeps
  at most ``cache_bytes`` of shards in memory between passes; the rest is re-read from disk.
* **Ranks compose.** Under torchrun each rank's source holds only its own shards; sums go through
  ``source.dist.all_reduce`` and per-row outputs (scores, embeddings) stay local until rank 0 gathers them.

Rows stored as zeros because their gradient was not finite are not yielded; ``positions`` lists the training-row
position of every yielded row, in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from gradian.attribute.plan import cache_bytes as default_cache_bytes
from gradian.dist import SINGLE, Dist


@dataclass
class Stats:
    """Covariance sums from the training pass (one entry per block) and the counts they are over."""

    A_sum: dict[str, torch.Tensor]
    S_sum: dict[str, torch.Tensor]
    n_tokens: int
    n_examples: int

    @classmethod
    def empty(cls) -> Stats:
        return cls({}, {}, 0, 0)

    def add(self, A: dict[str, torch.Tensor], S: dict[str, torch.Tensor], n_tokens: int, n_examples: int) -> None:
        """Add one batch's or shard's sums (new tensors: the arguments are never changed in place)."""
        for k, v in A.items():
            self.A_sum[k] = self.A_sum[k] + v if k in self.A_sum else v
        for k, v in S.items():
            self.S_sum[k] = self.S_sum[k] + v if k in self.S_sum else v
        self.n_tokens += n_tokens
        self.n_examples += n_examples

    def all_reduced(self, dist: Dist) -> Stats:
        """The sums over every rank (a rank with no rows contributes zeros: :meth:`Dist.all_reduce_dict`)."""
        return Stats(
            dist.all_reduce_dict(self.A_sum),
            dist.all_reduce_dict(self.S_sum),
            int(dist.all_reduce_number(self.n_tokens)),
            int(dist.all_reduce_number(self.n_examples)),
        )


class GradSource:
    """Training gradients read in chunks (``names``: blocks; ``positions``: training-row position per row)."""

    names: list[str]
    positions: torch.Tensor  # (n local rows,) int64
    dist: Dist = SINGLE

    def chunks(self) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
        """``(offset, {block: (n, out, in)})``: ``offset`` is the chunk's first row among this source's rows."""
        raise NotImplementedError

    @property
    def n_local(self) -> int:
        return int(self.positions.numel())

    @property
    def n_global(self) -> int:
        return int(self.dist.all_reduce_number(self.n_local))

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Per-row (out, in) of each block."""
        for _, blocks in self.chunks():
            return {n: tuple(v.shape[1:]) for n, v in blocks.items()}
        raise ValueError("no rows")

    def materialize(self) -> dict[str, torch.Tensor]:
        """Every row in memory (the exact method's N x N kernel needs them all anyway)."""
        parts: dict[str, list[torch.Tensor]] = {n: [] for n in self.names}
        for _, blocks in self.chunks():
            for n in self.names:
                parts[n].append(blocks[n])
        return {n: torch.cat(v) for n, v in parts.items()}


class MemorySource(GradSource):
    def __init__(
        self,
        G: dict[str, torch.Tensor],
        positions: torch.Tensor | None = None,
        dist: Dist = SINGLE,
        chunk: int = 1024,
    ) -> None:
        self.G = G
        self.names = list(G)
        n = next(iter(G.values())).shape[0] if G else 0
        self.positions = torch.arange(n) if positions is None else positions
        self.dist = dist
        self.chunk = chunk

    def chunks(self) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
        for s in range(0, self.n_local, self.chunk):
            yield s, {k: v[s : s + self.chunk] for k, v in self.G.items()}

    def materialize(self) -> dict[str, torch.Tensor]:
        return self.G


class StoreSource(GradSource):
    """The shards of a :class:`~gradian.attribute.store.GradientStore` this process owns, streamed."""

    def __init__(self, store, names: list[str], dist: Dist = SINGLE, cache_bytes: int | None = None) -> None:
        self.store = store
        self.names = list(names)
        self.dist = dist
        self.cache_bytes = default_cache_bytes() if cache_bytes is None else cache_bytes
        self._cache: dict[int, dict[str, torch.Tensor]] = {}
        self._cached = 0
        skip = {p for p, _ in store.skipped}
        pos: list[int] = []
        self._keep: dict[int, torch.Tensor | None] = {}
        for i in store.shards:
            lo, hi = store.rows(i)
            keep = [p for p in range(lo, hi) if p not in skip]
            self._keep[i] = None if len(keep) == hi - lo else torch.tensor([p - lo for p in keep], dtype=torch.long)
            pos += keep
        self.positions = torch.tensor(pos, dtype=torch.long)

    def _read(self, i: int) -> dict[str, torch.Tensor]:
        if i in self._cache:
            return self._cache[i]
        return self._remember(i, self.store.read_shard(i, self.names).G)

    def _remember(self, i: int, G: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Shard ``i``'s kept rows, cached while the cache has room."""
        if i in self._cache:
            return self._cache[i]
        keep = self._keep[i]
        if keep is not None:
            G = {k: v.index_select(0, keep) for k, v in G.items()}
        size = sum(v.numel() * v.element_size() for v in G.values())
        if self._cached + size <= self.cache_bytes:
            self._cache[i] = G
            self._cached += size
        return G

    def stats(self, known: Stats | None = None, skip: set[int] | frozenset[int] = frozenset()) -> Stats:
        """Covariance sums and counts of this source's shards: ``known`` (the sums of shards ``skip``, computed in
        this run) plus every other shard's, read (and cached) once."""
        total = Stats.empty()
        if known is not None:
            total.add(known.A_sum, known.S_sum, known.n_tokens, known.n_examples)
        for i in self.store.shards:
            if i in skip:
                continue
            sh = self.store.read_shard(i, self.names)
            self._remember(i, sh.G)
            total.add(sh.A, sh.S, sh.n_tokens, sh.n_examples)
        return total

    def chunks(self) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
        off = 0
        for i in self.store.shards:
            G = self._read(i)
            n = next(iter(G.values())).shape[0] if G else 0
            if n:
                yield off, G
            off += n


def as_source(G: GradSource | dict[str, torch.Tensor]) -> GradSource:
    return G if isinstance(G, GradSource) else MemorySource(G)
