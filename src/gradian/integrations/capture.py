"""Per-row LoRA gradients from a trainer's own forward and backward (no extra pass).

Forward hooks keep each LoRA block's input and output and the batch the model was called with; tensor hooks on the
outputs catch the output gradients ``delta`` of the trainer's backward. The trainer's loss is the batch's summed token
loss times one constant (1 / label tokens of the accumulated batch, the ranks, a loss scale). The constant is read off
the gradient at the model's output: TRL's fused head returns each label token's log-probability, whose gradient is
``-constant``; full logits get ``(softmax - onehot) x constant`` for cross-entropy. So every row's gradient comes out
as the gradient of its *summed* token loss, the convention of :mod:`gradian.attribute.engine`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gradian.attribute.collector import Block, GradientCollector, shared_input_key, working_dtype


@dataclass
class Batch:
    """One micro-batch's per-row gradients and what identifies its rows."""

    G: dict[str, torch.Tensor]  # block -> (B, out, in), summed-loss convention
    input_ids: torch.Tensor  # (B, T) on the CPU
    attention_mask: torch.Tensor  # (B, T) bool
    labels: torch.Tensor  # (B, T) bool: token t is a label
    finite: torch.Tensor  # (B,) bool
    A: dict[str, torch.Tensor]
    S: dict[str, torch.Tensor]
    n_tokens: int
    n_examples: int  # rows in the covariance sums: 0 when this batch's were not taken
    scale: float
    misfit: float  # how far the output gradient is from the summed token cross-entropy's times ``scale`` (relative)


PROBE_TOKENS = 16  # label positions of a probed row (two rows) whose logits and gradient give the loss's constant
MISFIT_MAX = 0.05  # above: the trainer's loss is not the summed token cross-entropy times a constant


def error_line(e: BaseException) -> str:
    """An error in one line: its type and the first line of its message."""
    msg = str(e).splitlines()[0][:200] if str(e) else ""
    return f"{type(e).__name__}: {msg}"


def _guarded(hook: Callable[..., Any]) -> Callable[..., Any]:
    """A hook that never raises into the training: the first error stops the recording (``Capture.failed``)."""

    @functools.wraps(hook)
    def run(self: Capture, *args: Any) -> None:
        if self.failed is not None:
            return
        try:
            hook(self, *args)
        except Exception as e:  # noqa: BLE001 - whatever it is, the trainer's own step must go on
            self.failed = error_line(e)
            self.reset()

    return run


def packed(attention_mask: torch.Tensor, position_ids: Any) -> bool:
    """Whether a batch holds several rows in one sequence: position ids that restart inside a row (TRL's
    padding-free batches, transformers' ``DataCollatorWithFlattening``, Axolotl's sample packing) or an attention
    mask numbering each row's segments, or a 4D one (LLaMA-Factory's neat packing hands the model either)."""
    if attention_mask.dim() != 2:  # a 4D mask: LLaMA-Factory's neat packing (block-diagonal), or one of its kind
        return True
    if attention_mask.numel() and int(attention_mask.max()) > 1:
        return True
    if not isinstance(position_ids, torch.Tensor) or position_ids.dim() != 2 or position_ids.shape[1] < 2:
        return False
    on = attention_mask.bool() if attention_mask.shape == position_ids.shape else torch.ones_like(position_ids).bool()
    both = on[:, 1:] & on[:, :-1]  # padding's position ids (0 on the right, say) are no restart
    return bool(((position_ids[:, 1:] < position_ids[:, :-1]) & both).any())


class Capture:
    """Hooks on a PEFT model while recording; :meth:`take` returns the last micro-batch once its backward ran."""

    def __init__(self, model: Any, blocks: list[Block]) -> None:
        self.model, self.blocks = model, blocks
        self.handles: list[Any] = []
        self._projs: dict[tuple, torch.Tensor] = {}
        self.missed = 0  # micro-batches whose backward reached no LoRA output the forward hooks saw
        self.headless = 0  # micro-batches whose output gave no logits or log-probabilities (a fused loss kernel)
        self.packed = 0  # micro-batches with several rows in one sequence (position ids restart inside a row)
        self.failed: str | None = None  # the error that stopped the recording
        self.reset()

    def reset(self) -> None:
        self._last: tuple[torch.Tensor, tuple, torch.Tensor] | None = None  # the last lora_A input, its projection
        self.calls: list[tuple[Block, torch.Tensor, torch.Tensor]] = []
        self._held: set[str] = set()  # the blocks whose call this micro-batch holds
        self.deltas: list[torch.Tensor | None] = []
        self.batch: dict[str, torch.Tensor] | None = None
        self.logits: torch.Tensor | None = None  # at the probed positions; None with a fused head (log-probabilities)
        self._probe: tuple[torch.Tensor, torch.Tensor] | None = None
        self.dlogits: torch.Tensor | None = None  # the gradient at the output: logits' or log-probabilities'

    def __enter__(self) -> Capture:
        self.handles.append(self.model.register_forward_pre_hook(self._on_call, with_kwargs=True))
        self.handles.append(self.model.register_forward_hook(self._on_output, with_kwargs=True))
        for b in self.blocks:
            self.handles.append(b.module.register_forward_hook(lambda m, i, o, b=b: self._on_block(b, i, o)))
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
        self.reset()

    def _live(self) -> bool:
        return torch.is_grad_enabled() and self.model.training

    @_guarded
    def _on_call(self, module: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        if not self._live():
            return
        self.reset()  # a new forward: anything not taken was not backpropagated
        ids, am, labels = kwargs.get("input_ids"), kwargs.get("attention_mask"), kwargs.get("labels")
        if ids is None and args:
            ids = args[0]
        if isinstance(ids, torch.Tensor) and isinstance(labels, torch.Tensor):
            am = torch.ones_like(ids) if am is None else am
            if packed(am, kwargs.get("position_ids")):
                self.packed += 1
                return
            self.batch = {"input_ids": ids.detach(), "attention_mask": am.detach(), "labels": labels.detach()}

    @_guarded
    def _on_output(self, module: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        if self.batch is None:
            return
        lp, logits = getattr(out, "log_probs", None), getattr(out, "logits", None)
        if isinstance(lp, torch.Tensor) and lp.requires_grad:
            lp.register_hook(self._set_dlogits)
        elif isinstance(logits, torch.Tensor) and logits.requires_grad:
            self._probe = self._probe_at()
            self.logits = self._probed(logits)  # a few positions, not the batch's logits
            logits.register_hook(self._set_dlogits)

    def _probe_at(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The first ``PROBE_TOKENS`` label positions of the first and of the last row with labels, as (rows,
        positions) index pairs (the logits there give the loss's constant and its misfit, :meth:`_scale`; two rows,
        so a loss that weighs rows differently shows), or None when no row has a label."""
        assert self.batch is not None
        valid = self.batch["labels"][:, 1:] != -100
        rows = valid.any(1).nonzero().flatten()
        if not len(rows):
            return None
        probed = rows[[0, -1]].unique()
        at = [valid[int(b)].nonzero().flatten()[:PROBE_TOKENS] for b in probed]
        return torch.cat([torch.full_like(t, int(b)) for b, t in zip(probed, at, strict=True)]), torch.cat(at)

    @_guarded
    def _set_dlogits(self, g: torch.Tensor) -> None:
        # full logits: their gradient at the probed positions only
        self.dlogits = self._probed(g) if self.logits is not None else g.detach()

    def _probed(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (rows x length x vocabulary) at the probed positions, a copy (none when nothing is probed)."""
        b, t = self._probe or (torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
        return x.detach()[b, t].clone()

    @_guarded
    def _on_block(self, b: Block, inp: tuple, out: torch.Tensor) -> None:
        """Keep what the block's per-row gradient needs until the backward reaches it: its input, projected at once
        when the block's input side is projected (lora_A), and its output's shape only (a zero-stride view; the
        gradient comes from the output's hook, projected when the output side is, lora_B). So the recording holds
        no full-width activation the trainer itself would have freed (gradient checkpointing frees them)."""
        if self.batch is None or not out.requires_grad:
            return  # not recording, or a reentrant checkpoint's forward (no gradient there: taken at its recompute)
        if self.dlogits is not None and b.name in self._held:
            return  # non-reentrant checkpointing recomputing, inside the backward, a call the forward already holds
        self._held.add(b.name)
        j = len(self.calls)
        a, shape = inp[0].detach(), tuple(out.shape)
        if b.proj is not None and b.kind == "A":
            a = self._projected_input(b, a)
        elif b.proj is not None:
            shape = (*shape[:-1], b.proj.shape[0])
        self.calls.append((b, a, out.new_zeros(()).expand(shape)))
        self.deltas.append(None)
        out.register_hook(lambda g, j=j, b=b: self._set_delta(j, b, g))

    def _projected_input(self, b: Block, a: torch.Tensor) -> torch.Tensor:
        """``a P^T`` in the working dtype; q/k/v (gate/up) share one input and one projection, so one product."""
        key = shared_input_key(a, b)
        if self._last is not None and self._last[1] == key:  # the input held there keeps its memory from reuse
            return self._last[2]
        with torch.no_grad():
            x = a.to(working_dtype(a.dtype)) @ self._proj(b, a).T
        self._last = (a, key, x)
        return x

    def _proj(self, b: Block, like: torch.Tensor) -> torch.Tensor:
        assert b.proj is not None
        dt = working_dtype(like.dtype)
        key = (id(b.proj), dt, like.device)
        P = self._projs.get(key)
        if P is None:
            P = self._projs[key] = b.proj.to(device=like.device, dtype=dt)
        return P

    @_guarded
    def _set_delta(self, j: int, b: Block, g: torch.Tensor) -> None:
        g = g.detach()
        if b.proj is not None and b.kind == "B":
            with torch.no_grad():
                g = g.to(working_dtype(g.dtype)) @ self._proj(b, g).T
        self.deltas[j] = g

    def take(self, col: GradientCollector) -> Batch | None:
        """The last micro-batch's rows once its backward ran (None when there is none), and forget it."""
        if self.batch is not None and self.dlogits is not None and not self.calls:
            self.missed += 1  # the LoRA outputs seen had no gradient (a frozen adapter)
        if self.batch is not None and self.dlogits is None:
            self.headless += 1  # e.g. Liger's fused linear cross-entropy: the loss without the logits
        if self.batch is None or self.dlogits is None or not self.calls:
            self.reset()
            return None
        bt, am = self.batch, self.batch["attention_mask"].bool()
        scale, misfit = self._scale()  # G is linear in the output gradients, S quadratic, A does not depend on them
        col.A, col.S, col.n_tokens, col.n_examples = {}, {}, 0, 0
        with torch.no_grad():
            G = col.from_deltas(self.calls, self.deltas, am, projected=True, scale=scale)
        out = Batch({k: v.detach().float().cpu() for k, v in G.items()}, bt["input_ids"].cpu(), am.cpu(),
                    (bt["labels"] != -100).cpu(), col.rows_finite.cpu(), dict(col.A), dict(col.S), col.n_tokens,
                    col.n_examples, scale, misfit)  # fmt: skip
        self.reset()
        return out

    def _scale(self) -> tuple[float, float]:
        """The constant the trainer's loss is the summed token loss times (see the module docstring), and the misfit:
        the relative distance between the output gradient and the summed token cross-entropy's times that constant
        (0 up to rounding; far from 0 when the loss is another: label smoothing, DFT, a custom loss)."""
        assert self.dlogits is not None and self.batch is not None
        if self.logits is None:  # d loss / d log p(label) = -constant at every label token
            d = self.dlogits[self.dlogits != 0].double()
            if not d.numel():
                return 1.0, 0.0
            mean = float(d.mean())
            return -1.0 / mean, float((d - mean).norm() / (abs(mean) * d.numel() ** 0.5))
        if self._probe is None:
            return 1.0, 0.0
        b, t = self._probe
        p = torch.softmax(self.logits.double(), -1)
        p[torch.arange(len(t)), self.batch["labels"][b, t + 1]] -= 1
        d = self.dlogits.double()
        den = float((d * d).sum())
        if den <= 0:
            return 1.0, 0.0
        scale = float((p * d).sum()) / den
        return scale, float((p - scale * d).norm() / p.norm())
