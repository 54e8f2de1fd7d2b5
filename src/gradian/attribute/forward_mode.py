"""Forward-mode derivatives through frozen parts of a model without PyTorch's zero tangents.

PyTorch's forward-mode rule for a matrix product ``x W^T`` computes ``x_t W^T + x W_t^T``, and when ``W`` carries no
tangent it multiplies ``x`` by a zero ``W_t`` it makes: a third product as large as the layer, for nothing. In a LoRA
model every base weight and the LM head are frozen, so most of a forward-mode pass's products are these. The same
zero tangent makes an elementwise product or sum of a dual tensor and a constant (a norm's weight, the rotary
``cos``/``sin``, LoRA's scaling) run PyTorch's zero-tensor fallback, about ten times a plain product's time on a CPU.
:class:`FrozenLinearTangents` routes ``F.linear`` calls whose input is a dual tensor and whose weight and bias are not
through :class:`FrozenLinear`, whose tangent is ``x_t W^T`` alone, and computes ``mul``/``add``/``sub``/``div`` of a
dual tensor by a constant on the primal and the tangent apart (:func:`constant_operand`): the same numbers. Every
other call, the LoRA weights' included, runs as PyTorch's.
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


# the binary ops whose derivative in one operand, the other held constant, is the operand's tangent times a constant:
# func -> (op, whether the call's operands are reflected: ``a.__rsub__(b)`` is ``b - a``)
_BINARY = {
    **dict.fromkeys((torch.mul, torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__), ("mul", False)),
    **dict.fromkeys((torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__), ("add", False)),
    **dict.fromkeys((torch.sub, torch.Tensor.sub, torch.Tensor.__sub__), ("sub", False)),
    torch.Tensor.__rsub__: ("sub", True),
    **dict.fromkeys((torch.div, torch.Tensor.div, torch.Tensor.__truediv__), ("div", False)),
}


def constant_operand(func, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """``a op b`` for ``op`` in :data:`_BINARY` where one operand is a dual tensor and the other a constant (a tensor
    without tangent, or a number): the primal and the tangent computed apart and made one dual tensor. None where the
    call is not of that kind (keyword arguments, two duals, a dual divisor)."""
    op = _BINARY.get(func)
    if op is None or kwargs or len(args) != 2:
        return None
    duals = [isinstance(x, torch.Tensor) and has_tangent(x) for x in args]
    if duals[0] == duals[1]:
        return None
    k = duals.index(True)  # the dual argument
    const = args[1 - k]
    right = (k == 1) != op[1]  # the dual is the right-hand operand: b in a - b, a / b
    if (op[0] == "div" and right) or not isinstance(const, torch.Tensor | int | float) or isinstance(const, bool):
        return None
    primal, tangent = fwad.unpack_dual(args[k])
    out = func(*(primal if i == k else x for i, x in enumerate(args)))
    if op[0] == "mul":
        tangent = tangent * const
    elif op[0] == "div":
        tangent = tangent / const
    elif op[0] == "sub" and right:
        tangent = -tangent
    return fwad.make_dual(out, tangent.to(out.dtype).expand(out.shape))


class FrozenLinearTangents(TorchFunctionMode):
    """Active while a forward-mode pass runs: frozen linear layers with a dual input go through
    :class:`FrozenLinear`, a dual tensor's product, sum or quotient with a constant through
    :func:`constant_operand`."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x = args[0] if args else kwargs["input"]
            weight = args[1] if len(args) > 1 else kwargs["weight"]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            if has_tangent(x) and not has_tangent(weight) and not has_tangent(bias):
                return FrozenLinear.apply(x, weight, bias)
        elif func in _BINARY:
            out = constant_operand(func, args, kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)
