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
    rows run longest first (batches of about one length, as the training pass's)."""
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
    # forward mode only (no graph for a backward); the math attention kernel has a forward-mode derivative
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), fwad.dual_level(), FrozenLinearTangents():
        duals = {n: fwad.make_dual(p.detach(), direction[n]) for n, p in model.named_parameters() if n in direction}
        for s in range(0, len(rows), batch_size):
            batch = rows[s : s + batch_size]
            ids, am, lm = collate(batch, pad_id, dev)
            kwargs = {"input_ids": ids, "attention_mask": am}
            lg = functional_call(model, duals, args=(), kwargs=kwargs, strict=False).logits[:, :-1]
            lg = lg.to(torch.float64 if lg.dtype == torch.float64 else torch.float32)
            losses = torch.nn.functional.cross_entropy(lg.transpose(1, 2), ids[:, 1:], reduction="none")
            d = fwad.unpack_dual(losses).tangent
            if d is None:  # no LoRA weight reached the loss: nothing moves along the direction
                d = torch.zeros_like(losses)
            d = (-d.double()).cpu().numpy()
            mask = lm[:, 1:].cpu().numpy()
            for b in range(len(batch)):
                out[order[s + b]] = d[b][mask[b]]
    return out


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
