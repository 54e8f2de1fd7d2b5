"""Stage 2 of an attribution: the training rows' per-example LoRA gradients and covariance sums, for one adapter
state, through the resumable gradient store or in memory (:func:`training_gradients`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradian.attribute.result import AdapterState
from gradian.attribute.source import Stats
from gradian.dist import Dist
from gradian.errors import GradianError


@dataclass(frozen=True)
class GradientPass:
    """What every adapter state's training pass shares: the model, its LoRA blocks, the rows and where they go."""

    model: Any
    blocks: list[Any]
    train_fx: Sequence
    pad_id: int
    batch_size: int
    dist: Dist
    store_dir: Path | None = None
    store_dtype: str = "fp32"
    shard_rows: int | None = None
    run_key: dict[str, Any] = field(default_factory=dict)  # proj_dim, proj_seed, dtype: part of the store key
    progress: bool = False

    def shard(self) -> int:
        return shard_size(self.blocks, self.batch_size, self.shard_rows)

    def rows_of(self) -> list[tuple[int, int]]:
        """Each shard's ``[lo, hi)`` row range."""
        n, shard = len(self.train_fx), self.shard()
        return [(min(i * shard, n), min((i + 1) * shard, n)) for i in range(max(1, -(-n // shard)))]


@dataclass
class TrainingGradients:
    """This rank's training gradients for one adapter state (the stage's result)."""

    source: Any  # a gradian.attribute.source.GradSource over this rank's rows
    stats: Stats  # covariance sums over *all* ranks
    skipped: list[tuple[int, str]]  # this rank's rows with non-finite gradients: (position, reason)
    notes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)  # report.json settings: store, train_rows_computed, ...
    fisher: Any = None  # --fisher true: the sampled-label source (gradian.attribute.fisher.SampledSource)


def shard_size(blocks, batch_size: int, shard_rows: int | None = None) -> int:
    """Rows per store shard (:func:`gradian.attribute.plan.shard_rows`): about 256 MiB of fp32 gradients, a multiple
    of the batch size. It does not depend on the number of ranks, so a store is reusable with another world size."""
    from gradian.attribute.plan import shard_rows as rule

    return rule(sum(b.numel for b in blocks), batch_size, shard_rows)


def rank_rows(blocks, n: int, batch_size: int, shard_rows: int | None, dist: Dist) -> int:
    """Training rows this rank computes and stores (its round-robin share of the shards)."""
    shard = shard_size(blocks, batch_size, shard_rows)
    return sum(min((i + 1) * shard, n) - i * shard for i in dist.mine(max(1, -(-n // shard))))


def training_gradients(p: GradientPass, state: AdapterState, tag: str = "") -> TrainingGradients:
    """This rank's per-example training gradients as a :class:`GradSource`, the covariance sums over *all* ranks, and
    this rank's skipped rows. Through the resumable, checksummed store when ``p.store_dir`` is given, else in memory.
    Robustness (see :mod:`gradian.attribute.robust`): OOM halves the batch size, rows with non-finite gradients are
    left out (zeros in the store, not yielded by the source) and returned as ``(position, reason)``."""
    from gradian.attribute import engine, robust

    recorded_note = None
    if state.recorded is not None:
        got, recorded_note = _from_record(p, state.recorded)
        if got is not None:
            return got
    rows_of = p.rows_of()
    mine = p.dist.mine(len(rows_of))
    n_mine = sum(rows_of[i][1] - rows_of[i][0] for i in mine)
    with engine.progress_bar("training gradients" + tag, n_mine, p.progress) as advance:
        ps = robust.PassState(p.batch_size, advance=advance)
        with robust.FaultInjector(p.model, p.train_fx, p.pad_id):
            if p.store_dir is None:
                out = _in_memory(p, ps, mine)
            else:
                out = _through_store(p, ps, mine, state)
    out.notes.extend(ps.notes if recorded_note is None else [recorded_note, *ps.notes])
    out.settings["gradient_source"] = "pass"
    if ps.oom_retries:
        out.settings["oom_retries"] = ps.oom_retries
    out.stats = out.stats.all_reduced(p.dist)
    return out


def _from_record(p: GradientPass, rec: Path) -> tuple[TrainingGradients | None, str]:
    """The training gradients a GradianCallback recorded (:mod:`gradian.attribute.recorded`), or None and why not."""
    from gradian.attribute.plan import cache_bytes
    from gradian.attribute.recorded import open_record

    src, skipped, note = open_record(rec, p.blocks, p.run_key, p.train_fx, p.dist, cache_bytes())
    stats = None
    if src is not None:
        try:
            stats = src.stats()  # reads every shard of this rank, checking its checksum
        except GradianError as err:
            src, note = None, f"recorded gradients in {rec} not used: {err.message}"
    if not p.dist.all_reduce_number(int(src is None)) == 0:  # every rank uses the record, or none does
        return None, note
    assert src is not None and stats is not None
    settings = {"gradient_source": "callback", "store": str(rec), "train_rows_computed": 0}
    return TrainingGradients(src, stats.all_reduced(p.dist), skipped, [note], settings), note


def _in_memory(p: GradientPass, ps: Any, mine: list[int]) -> TrainingGradients:
    import torch

    from gradian.attribute import robust
    from gradian.attribute.source import MemorySource

    rows_of = p.rows_of()
    names = [b.name for b in p.blocks]
    G: dict[str, list[torch.Tensor]] = {k: [] for k in names}
    stats = Stats.empty()
    skipped: list[tuple[int, str]] = []
    for i in mine:
        lo, hi = rows_of[i]
        ch = robust.gradients(p.model, p.blocks, p.train_fx[lo:hi], p.pad_id, ps, offset=lo)
        for k in names:
            G[k].append(ch.G[k])
        stats.add(ch.A, ch.S, ch.n_tokens, ch.n_examples)
        skipped += [(lo + q, why) for q, why in ch.skipped]
    positions = [q for i in mine for q in range(*rows_of[i])]
    bad = {q for q, _ in skipped}
    kept = torch.tensor([j for j, q in enumerate(positions) if q not in bad], dtype=torch.long)
    empty = {b.name: torch.zeros(0, *b.shape) for b in p.blocks}  # a rank with no shards
    Gc = {k: (torch.cat(v) if v else empty[k]).index_select(0, kept) for k, v in G.items()}
    src = MemorySource(Gc, torch.tensor(positions, dtype=torch.long)[kept], p.dist)
    return TrainingGradients(src, stats, skipped, settings={"train_rows_computed": len(p.train_fx)})


def _through_store(p: GradientPass, ps: Any, mine: list[int], state: AdapterState) -> TrainingGradients:
    from gradian.attribute.collector import PROJ_SCHEME
    from gradian.attribute.source import StoreSource
    from gradian.attribute.store import GradientStore, data_fingerprint, store_key

    assert p.store_dir is not None
    parts = dict(state.store_parts or {})
    parts |= {
        "data": data_fingerprint(p.train_fx),
        "proj_dim": p.run_key["proj_dim"],
        "proj_seed": p.run_key["proj_seed"],
        "proj_scheme": PROJ_SCHEME,
        "dtype": p.run_key["dtype"],
        "blocks": [[b.name, list(b.shape)] for b in p.blocks],
        "schema": 3,
    }
    meta = {
        "n_examples": len(p.train_fx),
        "shard_size": p.shard(),
        "batch_size": p.batch_size,
        "dtype": p.store_dtype,
        "blocks": [{"name": b.name, "kind": b.kind, "shape": list(b.shape)} for b in p.blocks],
        "parts": parts,
    }
    store = GradientStore(Path(p.store_dir), store_key(parts), meta, shards=mine)
    p.dist.barrier()  # every rank has opened (and cleared an outdated layout) before any writes
    fresh, computed, notes, settings = _fill_store(p, store, ps)
    src = StoreSource(store, [b.name for b in p.blocks], p.dist)
    stats = src.stats(known=fresh, skip=computed)  # the shards just written are not read back for it
    return TrainingGradients(src, stats, store.skipped, notes, settings)


def _fill_store(p: GradientPass, store: Any, ps: Any) -> tuple[Stats, set[int], list[str], dict[str, Any]]:
    """Compute this rank's shards the store does not hold yet (resume), and say what was reused. Returns the
    covariance sums of the shards it computed, which those are, the notes and the report's store settings."""
    from gradian.attribute import robust

    notes = [f"gradient store shard {i} not used ({why}); recomputed" for i, why in store.rejected]
    missing = store.missing()
    n_done = len(store.shards) - len(missing)
    if not missing:
        notes.append(f"reused stored training gradients {store.dir}")
    elif n_done:
        notes.append(
            f"resumed stored training gradients at row {store.resume_from()}: {n_done} of {len(store.shards)} shards "
            f"reused, recomputing shard(s) {', '.join(map(str, missing))} ({store.dir})"
        )
    ps.advance(sum(store.rows(i)[1] - store.rows(i)[0] for i in store.shards if i not in missing))
    fresh = Stats.empty()
    for i in missing:
        lo, hi = store.rows(i)
        ch = robust.gradients(p.model, p.blocks, p.train_fx[lo:hi], p.pad_id, ps, offset=lo)
        store.write_shard(i, ch.G, ch.A, ch.S, ch.n_tokens, ch.n_examples, [(lo + q, why) for q, why in ch.skipped])
        fresh.add(ch.A, ch.S, ch.n_tokens, ch.n_examples)
    computed = sum(store.rows(i)[1] - store.rows(i)[0] for i in missing)
    settings = {"store": str(store.dir), "train_rows_computed": int(p.dist.all_reduce_number(computed))}
    return fresh, set(missing), notes, settings


def with_sampled_fisher(p: GradientPass, tg: TrainingGradients, seed: int) -> TrainingGradients:
    """``--fisher true``: this rank's rows at labels sampled from the model, and their covariance sums over all
    ranks (:mod:`gradian.attribute.fisher`) in place of the empirical ones."""
    from gradian.attribute.fisher import SampledSource
    from gradian.attribute.plan import cache_bytes

    rows = _Rows(p.train_fx, tg.source.positions.tolist())
    fsrc = SampledSource(
        p.model, p.blocks, rows, tg.source.positions, p.pad_id, p.batch_size, seed, p.dist, cache_bytes()
    )
    tg.fisher, tg.stats = fsrc, fsrc.stats().all_reduced(p.dist)
    return tg


class _Rows:
    """The rows of ``fx`` at ``positions``, read as they are indexed (``fx`` may be rows on disk)."""

    def __init__(self, fx: Sequence, positions: list[int]) -> None:
        self.fx, self.positions = fx, positions

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i: int):
        return self.fx[self.positions[i]]
