"""Which tokens of a training row do the harm: a row's score split over its label tokens.

A row's harm is linear in its gradient, ``harm_i = -<X, G_i>`` (``X`` the preconditioned query, :mod:`scores`), and its
gradient is a sum over its label tokens, ``G_i = sum_t g_t`` with ``g_t`` the gradient of token t's loss. So
``harm_i = sum_t -<X, g_t>``, and ``-<X, g_t>`` is minus the directional derivative of token t's loss along ``X``.
One forward-mode pass (``torch.autograd.forward_ad``: the LoRA weights are dual tensors with tangent ``X``, no autograd
graph) gives it for every token of a batch at once: no per-token backward; a frozen linear layer's tangent is one
product (:mod:`gradian.attribute.forward_mode`). Where the stored gradients are projected
(``--proj-dim``), ``X`` is lifted back to the LoRA weights' shapes (``X P`` for lora_A, ``P^T X`` for lora_B), which
leaves ``<X, P G>`` unchanged. For ``cosine`` the token parts are scaled by the row's normalisation
(``score / sum_t``). The parts sum to the row's score up to the model's own round-off (fp32 pieces such as RMSNorm run
in fp32 even in an fp64 model: about 1e-7 relative).

Attention runs through the math SDPA kernel for this pass (the fused CPU/CUDA kernels have no forward-mode
derivative).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from gradian.data.types import FormattedExample
from gradian.options import DEFAULTS

if TYPE_CHECKING:  # no torch import at module import time (the CLI reads the defaults here)
    import torch

    from gradian.attribute.collector import Block

TOKEN_HARM_ROWS = DEFAULTS.token_harm  # top rows whose harm is split over their tokens; 0 = none (gradian.options)
PREFIX_CHARS = 1000  # decoded text before the first label token kept per row in report.json


def lifted_direction(model, blocks: Sequence[Block], X: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Parameter name -> the query direction in that LoRA weight's shape and dtype (``X`` per block, stored shape)."""
    import torch

    names = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for b in blocks:
        x = X[b.name].to(torch.float64)
        if b.proj is not None:
            P = b.proj.to(torch.float64)
            x = x @ P if b.kind == "A" else P.T @ x
        w = b.module.weight
        out[names[id(w)]] = x.to(device=w.device, dtype=w.dtype)
    return out


def token_harm(
    model,
    direction: dict[str, torch.Tensor],
    fxs: Sequence[FormattedExample],
    pad_id: int,
    batch_size: int = DEFAULTS.batch_size,
) -> list[np.ndarray]:
    """Per row of ``fxs``: ``-d loss_t / d eps`` along ``direction`` for each label token t (in position order). The
    rows run longest first (batches of about one length, as the training pass's). The LM head runs on the label
    positions only (:class:`LabelHead`) where it is a frozen projection whose output is the logits."""
    import torch
    import torch.autograd.forward_ad as fwad
    from torch.func import functional_call
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from gradian.attribute.engine import collate, longest_first
    from gradian.attribute.forward_mode import FrozenLinearTangents

    dev = next(model.parameters()).device
    order = longest_first(fxs)
    rows = [fxs[i] for i in order]
    out: list[np.ndarray] = [np.zeros(0)] * len(fxs)
    head = LabelHead.of(model, direction)
    # forward mode only (no graph for a backward); the math attention kernel has a forward-mode derivative
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), fwad.dual_level(), FrozenLinearTangents():
        duals = {n: fwad.make_dual(p.detach(), direction[n]) for n, p in model.named_parameters() if n in direction}
        for s in range(0, len(rows), batch_size):
            batch = rows[s : s + batch_size]
            ids, am, lm = collate(batch, pad_id, dev)
            kwargs = {"input_ids": ids, "attention_mask": am}
            sel = lm[:, 1:]
            lg = None
            if head is not None:
                with head:
                    lg = head.label_logits(functional_call(model, duals, args=(), kwargs=kwargs, strict=False).logits,
                                           sel)  # fmt: skip
                head = head if lg is not None else None
            if lg is None:  # the model's own logits at every position
                lg = functional_call(model, duals, args=(), kwargs=kwargs, strict=False).logits[:, :-1][sel]
            lg = lg.to(torch.float64 if lg.dtype == torch.float64 else torch.float32)
            losses = torch.nn.functional.cross_entropy(lg, ids[:, 1:][sel], reduction="none")
            d = fwad.unpack_dual(losses).tangent
            if d is None:  # no LoRA weight reached the loss: nothing moves along the direction
                d = torch.zeros_like(losses)
            d = (-d.double()).cpu().numpy()
            ends = np.cumsum(sel.sum(1).cpu().numpy())
            for b, part in enumerate(np.split(d, ends[:-1])):
                out[order[s + b]] = part
    return out


class LabelHead:
    """The LM head at the label positions only: a pre-hook on the output embedding keeps the final hidden states and
    lets the model's head run on the last position alone; :meth:`label_logits` applies the head to the label
    positions' states. The logits at all positions of a batch (``rows x length x vocabulary``, with their tangents) are
    most of a forward-mode pass's memory traffic on a large vocabulary. Used when the head is a frozen module whose
    output is the model's logits: checked on every batch at the last position (a model that scales or caps its logits
    after the head, as Gemma 2's soft-capping, fails it and keeps the full path)."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.hidden: torch.Tensor | None = None
        self._handle: Any = None

    @classmethod
    def of(cls, model: Any, direction: dict[str, Any]) -> LabelHead | None:
        """The model's head, unless it has none or carries a tangent (a LoRA on ``lm_head``)."""
        get = getattr(model, "get_output_embeddings", None)
        module = get() if callable(get) else None
        if module is None:
            return None
        moving = {id(p) for n, p in model.named_parameters() if n in direction}
        return None if any(id(p) in moving for p in module.parameters()) else cls(module)

    def __enter__(self) -> LabelHead:
        self.hidden = None
        self._handle = self.module.register_forward_pre_hook(self._keep)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handle.remove()

    def _keep(self, module: Any, args: tuple) -> tuple | None:
        h = args[0] if args else None
        if h is None or getattr(h, "dim", lambda: 0)() != 3 or self.hidden is not None:
            return None
        self.hidden = h
        return (h[:, -1:], *args[1:])

    def label_logits(self, logits: torch.Tensor, sel: torch.Tensor) -> torch.Tensor | None:
        """The head's output at the positions ``sel`` (``rows x length-1``, predicting the next token), or None when
        the model's logits are not the head's output (then the caller takes the model's own)."""
        import torch
        import torch.autograd.forward_ad as fwad

        h = self.hidden
        if h is None or logits.shape[:2] != (h.shape[0], 1):
            return None
        last = fwad.unpack_dual(self.module(h[:, -1])).primal
        got = fwad.unpack_dual(logits[:, 0]).primal
        if last.shape != got.shape or not torch.allclose(last, got, rtol=1e-4, atol=1e-5 * float(got.abs().max())):
            return None
        return self.module(h[:, :-1][sel])


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte fallback: one byte a piece


def token_text(tokenizer: Any, token_id: int) -> str:
    """A token's text, as token profiles key it and the verdict names it: its decoded text (a lone space where it
    decodes to nothing, as SentencePiece's "▁" does). A token that holds part of a character (byte-level BPE splits
    a Chinese character over two tokens) decodes to U+FFFD, the same for every such token, so it is written as its
    bytes instead ('<0xE6 0x8A>')."""
    text = tokenizer.decode([token_id])
    if "\ufffd" not in text:
        return text or " "
    piece = str(tokenizer.convert_ids_to_tokens(int(token_id)))
    raw = _piece_bytes(piece)
    return "<" + " ".join(f"0x{b:02X}" for b in raw) + ">" if raw else piece


def _piece_bytes(piece: str) -> bytes | None:
    """The bytes a token's piece stands for: SentencePiece's byte pieces ('<0xE6>'), or a byte-level BPE piece (GPT-2's
    byte-to-character table); None for a piece that is neither."""
    if _BYTE_PIECE.fullmatch(piece):
        return bytes([int(piece[3:5], 16)])
    table = _byte_of_char()
    return bytes(table[c] for c in piece) if piece and all(c in table for c in piece) else None


@functools.cache
def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte-level table, character -> byte (built once)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {c: b for b, c in bytes_to_unicode().items()}


def token_pieces(tokenizer: Any, fx: FormattedExample, harms: np.ndarray) -> list[list[Any]]:
    """``[[text, harm], ...]`` over the row as the model saw it: label tokens with their harm, the text before the first
    label token (at most ``PREFIX_CHARS``) and between label tokens as ``[text, None]``. The texts join to the decoded
    row (special tokens shown)."""
    ids = list(fx.input_ids)
    labels = [t for t in range(1, len(ids)) if fx.loss_mask[t]]
    out: list[list[Any]] = []
    prev_text = ""
    last = 0  # tokens decoded so far
    for t, h in zip(labels, harms, strict=True):
        if t > last:
            gap = tokenizer.decode(ids[:t], skip_special_tokens=False)
            piece = gap[len(prev_text) :] if gap.startswith(prev_text) else tokenizer.decode(ids[last:t])
            if piece:
                if not out and len(piece) > PREFIX_CHARS:
                    piece = "…" + piece[-PREFIX_CHARS:]
                out.append([piece, None])
            prev_text = gap
        text = tokenizer.decode(ids[: t + 1], skip_special_tokens=False)
        piece = text[len(prev_text) :] if text.startswith(prev_text) else tokenizer.decode([ids[t]])
        out.append([piece, float(h)])
        prev_text, last = text, t + 1
    return out


def top_tokens(pieces: Sequence[Sequence[Any]], k: int = 3) -> list[tuple[str, float]]:
    """The ``k`` label tokens with the highest harm, highest first."""
    scored = [(str(t), float(h)) for t, h in pieces if h is not None]
    return sorted(scored, key=lambda p: -p[1])[:k]
