"""Forward-mode derivatives through a frozen linear layer at the cost of one product.

PyTorch's forward-mode rule for a matrix product ``x W^T`` computes ``x_t W^T + x W_t^T``, and when ``W`` carries no
tangent it multiplies ``x`` by a zero ``W_t`` it makes: a third product as large as the layer, for nothing. In a LoRA
model every base weight and the LM head are frozen, so most of a forward-mode pass's products are these.
:class:`FrozenLinearTangents` routes ``F.linear`` calls whose input is a dual tensor and whose weight and bias are not
through :class:`FrozenLinear`, whose tangent is ``x_t W^T`` alone: the same numbers, a fifth less time on the process
bench's top rows (CHANGELOG.md). Every other call, the LoRA weights' included, runs as PyTorch's.
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as fwad
from torch.nn import functional as F  # noqa: N812
from torch.overrides import TorchFunctionMode


class FrozenLinear(torch.autograd.Function):
    """``F.linear`` whose forward-mode derivative is ``x_t W^T`` only (the weight and bias carry no tangent)."""

    @staticmethod
    def forward(x, weight, bias):
        return F.linear(x, weight, bias)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.weight = inputs[1]

    @staticmethod
    def jvp(ctx, x_t, weight_t, bias_t):
        return F.linear(x_t, ctx.weight)


def has_tangent(t: torch.Tensor | None) -> bool:
    """Whether ``t`` is a dual tensor of the current forward-mode level."""
    return t is not None and fwad.unpack_dual(t).tangent is not None


class FrozenLinearTangents(TorchFunctionMode):
    """Active while a forward-mode pass runs: frozen linear layers with a dual input go through
    :class:`FrozenLinear`."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x = args[0] if args else kwargs["input"]
            weight = args[1] if len(args) > 1 else kwargs["weight"]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            if has_tangent(x) and not has_tangent(weight) and not has_tangent(bias):
                return FrozenLinear.apply(x, weight, bias)
        return func(*args, **kwargs)
