"""The training-gradient pass, made robust: out-of-memory retries and rows with non-finite gradients.

:func:`gradients` runs :func:`gradian.attribute.engine.gradient_pass` over a contiguous range of training rows (one
store shard) and returns their per-example gradients and covariance sums, with two guarantees:

* **Out of memory.** An accelerator OOM (``torch.OutOfMemoryError``, or a ``RuntimeError`` saying "out of memory",
  as MPS raises) during a batch keeps every batch already finished, halves the batch size and retries from the failed
  batch; the smaller size is kept for the rest of the pass. A single row that still does not fit is a one-line error.
* **Non-finite gradients.** A row whose per-example gradient holds NaN or Inf (or whose activations make the batch's
  covariance sums non-finite) is left out: its gradient is stored as zeros, it is excluded from the covariance sums
  and example count (its batch is recomputed without it), and it is reported by position in :attr:`Chunk.skipped`.

Test seam (hidden, for the reliability tests): ``GRADIAN_TEST_FAULTS="oom@ROW,..."`` makes the model's forward raise
``torch.OutOfMemoryError`` the first time a batch of more than one row containing training row ``ROW`` (0-based
position in the scored rows) runs, exactly where a real allocation failure would surface. Unset, nothing is hooked.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from gradian.errors import GradianError

FAULTS_ENV = "GRADIAN_TEST_FAULTS"


@dataclass
class PassState:
    """Shared across the chunks of one training pass: the current batch size (lowered by OOM retries)."""

    batch_size: int
    advance: Callable[[int], None] = lambda n: None
    notes: list[str] = field(default_factory=list)
    oom_retries: int = 0


@dataclass
class Chunk:
    """Gradients of a contiguous range of rows. ``G`` has one row per input row (zeros where skipped)."""

    G: dict[str, torch.Tensor]
    A: dict[str, torch.Tensor]
    S: dict[str, torch.Tensor]
    n_tokens: int
    n_examples: int  # rows that entered the covariance sums (skipped rows excluded)
    skipped: list[tuple[int, str]]  # (position within the range, reason)


def is_oom(e: BaseException) -> bool:
    oom_types = tuple(
        t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if t
    )
    if oom_types and isinstance(e, oom_types):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


def free_accelerator_memory() -> None:
    """After an out-of-memory error: collect garbage and empty the CUDA / MPS caches before the retry."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    mps = getattr(torch, "mps", None)
    if mps is not None and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        mps.empty_cache()


def _why(grads: dict[str, torch.Tensor], row: int) -> str:
    has_nan = any(bool(torch.isnan(v[row]).any()) for v in grads.values())
    return "nan gradient" if has_nan else "inf gradient"


def _raw_pass(model, blocks, fxs, pad_id, state: PassState, advance: bool, where: Sequence[int], consume) -> None:
    """Batches over ``fxs``, each handed to ``consume(start, n, grads, A, S, n_tokens, rows_finite, stats_finite)``
    as it finishes (the finiteness flags come from the collector, checked per group of blocks); on OOM the batch size
    is halved and the pass retried from the first unfinished batch. ``where[i]``: the training row of ``fxs[i]``
    (for messages)."""
    from gradian.attribute import engine

    pos = 0
    while pos < len(fxs):
        start = pos
        done = [start]  # end of the finished batches

        def on_batch(s, grads, col, start=start, done=done):
            n = next(iter(grads.values())).shape[0]
            A, S, ntok = dict(col.A), dict(col.S), col.n_tokens
            col.A.clear()
            col.S.clear()
            col.n_tokens = 0
            col.n_examples = 0
            consume(start + s, n, grads, A, S, ntok, col.rows_finite, col.stats_finite)
            done[0] = start + s + n
            if advance:
                state.advance(n)

        oom = False
        try:
            engine.gradient_pass(
                model, blocks, fxs[start:], pad_id, batch_size=state.batch_size, covariance=True, on_batch=on_batch
            )
            pos = len(fxs)
        except Exception as e:
            if not is_oom(e):
                raise
            if state.batch_size <= 1:
                raise GradianError(
                    "out of memory on a single training row",
                    fix="lower --max-length, pass --dtype bf16, or use a device with more memory",
                ) from e
            oom = True
        if oom:
            pos = done[0]
            old = state.batch_size
            state.batch_size = max(1, old // 2)
            state.oom_retries += 1
            state.notes.append(
                f"out of memory at training row {where[pos]} with batch size {old}; retried with batch size "
                f"{state.batch_size} (finished batches kept)"
            )
            free_accelerator_memory()


def gradients(
    model,
    blocks,
    fxs: Sequence,
    pad_id: int,
    state: PassState,
    *,
    offset: int = 0,
    _advance: bool = True,
    _where: Sequence[int] | None = None,
) -> Chunk:
    """Per-example gradients and covariance sums of ``fxs`` (see the module docstring), one row of ``G`` per row of
    ``fxs`` in its order; ``offset`` is the position of ``fxs[0]`` among the training rows (for messages).

    The rows run longest first, so each batch holds rows of about one length (as ``group_by_length`` in the HF
    Trainer, and bergson's token batches): padding is computed for nothing, and on variable-length SFT rows it can be
    most of the work (bench/bench_process.py's rows: 1.84x the real tokens in file order, 1.01x sorted). A row's
    gradient does not depend on its batch; the covariance sums are sums. The longest batch also runs first, so an
    out-of-memory retry happens at once.

    Each finished batch is copied at once into one preallocated (rows, out, in) tensor per block: keeping the
    batches' own small tensors alive between the large temporaries of later batches fragments the heap (measured:
    6x the gradients' size in RSS on CPU)."""
    from gradian.attribute.engine import longest_first
    from gradian.attribute.source import Stats

    names = [b.name for b in blocks]
    G: dict[str, torch.Tensor] = {}
    st = Stats.empty()
    skipped: list[tuple[int, str]] = []
    deferred: list[tuple] = []  # batches with something non-finite: redone after the pass, row by row if needed
    where = list(_where) if _where is not None else [offset + i for i in range(len(fxs))]  # training row of each
    order = longest_first(fxs)  # run position -> position in fxs
    run = [fxs[i] for i in order]
    at = torch.as_tensor(order, dtype=torch.long)

    def consume(start, n, grads, bA, bS, ntok, ok, stats_ok):
        if not G:
            G.update({k: v.new_zeros((len(fxs), *v.shape[1:])) for k, v in grads.items()})
        if stats_ok and bool(ok.all()):
            for k in names:
                G[k].index_copy_(0, at[start : start + n], grads[k])
            st.add(bA, bS, ntok, n)
        else:
            deferred.append((start, n, grads, ok))

    _raw_pass(model, blocks, run, pad_id, state, _advance, [where[i] for i in order], consume)
    for start, n, grads, ok in deferred:
        # Recompute this batch without the offending rows (or, when the gradients are finite but the covariance
        # sums are not, split it until the offending row is alone). Their rows stay zero in G.
        if n == 1:
            skipped.append((order[start], _why(grads, 0) if not bool(ok[0]) else "non-finite activations"))
            continue
        if bool(ok.all()):
            groups = [list(range(n // 2)), list(range(n // 2, n))]
        else:
            bad = [i for i in range(n) if not bool(ok[i])]
            skipped += [(order[start + i], _why(grads, i)) for i in bad]
            groups = [[i for i in range(n) if bool(ok[i])]]
        for g in groups:
            if not g:
                continue
            rows = [order[start + i] for i in g]
            sub = gradients(
                model, blocks, [fxs[i] for i in rows], pad_id, state, _advance=False, _where=[where[i] for i in rows]
            )
            for j, i in enumerate(rows):
                for k in names:
                    G[k][i] = sub.G[k][j]
            st.add(sub.A, sub.S, sub.n_tokens, sub.n_examples)
            skipped += [(rows[p], why) for p, why in sub.skipped]
    return Chunk(G, st.A_sum, st.S_sum, st.n_tokens, st.n_examples, sorted(skipped))


class FaultInjector:
    """The ``GRADIAN_TEST_FAULTS`` seam: a forward pre-hook on the model that raises an injected OOM once per
    listed row (see the module docstring). Use as a context manager; a no-op when the variable is unset."""

    def __init__(self, model, fxs: Sequence, pad_id: int):
        self.model = model
        self.handle = None
        self.targets: list[list[int]] = []
        spec = os.environ.get(FAULTS_ENV, "").strip()
        for item in filter(None, (s.strip() for s in spec.split(","))):
            kind, _, row = item.partition("@")
            if kind != "oom" or not row.isdigit():
                raise GradianError(f"bad {FAULTS_ENV} entry {item!r}", fix="use oom@ROW[,oom@ROW...]")
            if int(row) < len(fxs):
                self.targets.append(list(fxs[int(row)].input_ids))

    def __enter__(self) -> FaultInjector:
        if self.targets:
            self.handle = self.model.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        if self.handle is not None:
            self.handle.remove()

    def _hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None or ids.shape[0] <= 1 or not torch.is_grad_enabled():
            return None
        for t in list(self.targets):
            n = len(t)
            want = torch.tensor(t, dtype=ids.dtype, device=ids.device)
            if n <= ids.shape[1] and bool((ids[:, :n] == want).all(dim=1).any()):
                self.targets.remove(t)
                raise torch.OutOfMemoryError(f"injected by {FAULTS_ENV}: CUDA out of memory (test seam)")
        return None
