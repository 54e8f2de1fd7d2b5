"""Per-example LoRA gradients and K-FAC covariance statistics from hooks, in one forward+backward per batch.

A PEFT LoRA layer computes ``y = W0 x + s * lora_B(lora_A(dropout(x)))``. ``lora_A`` and ``lora_B`` are plain
``nn.Linear`` modules, so each is treated as one linear *block* with input ``a`` and output gradient ``delta``:

* lora_A: ``a = x`` (d_in), ``delta = s * B^T dL/dy`` (r)
* lora_B: ``a = A x`` (r),   ``delta = s * dL/dy`` (d_out)

Forward hooks keep each block's input and output; after the forward, ``torch.autograd.grad(loss, outputs)`` returns
every ``delta`` without materialising any parameter gradient, and the per-example gradient of a block is
``G_i = sum_t delta_t a_t^T`` (``einsum('bto,bti->boi')``). The loss must be a *sum* over examples of each example's
loss (see :func:`token_losses`), so the rows of a batch do not mix. The LoRA scaling (``alpha/r``, or ``alpha/sqrt(r)``
for rsLoRA) needs no special case: PEFT multiplies lora_B's *output* by ``s``, so the gradient arriving at that output
already carries it.

Large adapters: the wide side of each block (d_in of lora_A, d_out of lora_B) is multiplied by a seeded Rademacher
matrix ``P`` (k x d, entries +-1/sqrt(k), so ``E[P^T P] = I``) inside the hook, so the full gradient never exists.
The covariance statistics are then those of the projected ``a`` / ``delta`` (the curvature lives in projected space).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gradian.errors import GradianError


@dataclass
class Block:
    """One LoRA linear (lora_A or lora_B of one adapted module)."""

    name: str  # e.g. "model.layers.0.self_attn.q_proj.lora_A"
    module: nn.Linear
    kind: str  # "A" | "B"
    d_in: int
    d_out: int
    proj: torch.Tensor | None = None  # (k, wide) projection of the wide side, or None (exact)

    @property
    def side(self) -> str:
        """Which side is wide: the input of lora_A, the output of lora_B."""
        return "in" if self.kind == "A" else "out"

    @property
    def shape(self) -> tuple[int, int]:
        """Shape (out, in) of the stored (possibly projected) per-example gradient."""
        k = self.proj.shape[0] if self.proj is not None else None
        if self.kind == "A":
            return (self.d_out, k or self.d_in)
        return (k or self.d_out, self.d_in)

    @property
    def numel(self) -> int:
        o, i = self.shape
        return o * i


def find_lora_blocks(model: nn.Module, adapter_name: str = "default") -> list[Block]:
    """Every Linear LoRA block of ``adapter_name`` in module order. Refuses DoRA (its magnitude vector and the
    column norm of W0 + BA are not a linear block) and ignores LoRA on embeddings (noted by the loader)."""
    blocks: list[Block] = []
    for name, mod in model.named_modules():
        lora_A = getattr(mod, "lora_A", None)
        lora_B = getattr(mod, "lora_B", None)
        if not isinstance(lora_A, nn.ModuleDict) or not isinstance(lora_B, nn.ModuleDict) or adapter_name not in lora_A:
            continue
        variants = getattr(mod, "lora_variant", {}) or {}
        magnitude = getattr(mod, "lora_magnitude_vector", None)
        if adapter_name in variants or (isinstance(magnitude, nn.ModuleDict) and adapter_name in magnitude):
            raise GradianError(
                "DoRA adapters are not supported by `gradian attribute` (the magnitude vector makes the update "
                "non-linear in lora_A/lora_B)",
                where=name,
                fix="attribute a plain LoRA or rsLoRA adapter",
            )
        a, b = lora_A[adapter_name], lora_B[adapter_name]
        if not isinstance(a, nn.Linear) or not isinstance(b, nn.Linear):
            continue
        blocks.append(Block(f"{name}.lora_A", a, "A", a.in_features, a.out_features))
        blocks.append(Block(f"{name}.lora_B", b, "B", b.in_features, b.out_features))
    return blocks


def rademacher(k: int, d: int, seed: int, name: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Seeded k x d Rademacher matrix scaled by 1/sqrt(k) (JL); the seed mixes in the block name."""
    h = int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") & ((1 << 63) - 1)
    g = torch.Generator().manual_seed(h)
    signs = torch.randint(0, 2, (k, d), generator=g, dtype=torch.int8)
    return (signs.to(dtype) * 2 - 1) / (k**0.5)


PROJ_SCHEME = "shared-input/1"  # part of the store key: how projections are drawn


def projection_seed_name(b: Block) -> str:
    """What a block's projection is seeded by. lora_A blocks of one parent module (``...self_attn``, ``...mlp``) with
    the same input width share one projection, so blocks that read the same input (q/k/v, gate/up) project it once;
    every lora_B block has its own."""
    if b.kind == "A":
        return f"{b.name.rsplit('.', 2)[0]}:A:{b.d_in}"
    return b.name


def attach_projections(blocks: Sequence[Block], proj_dim: int, seed: int = 0) -> None:
    """Give every block whose wide side exceeds ``proj_dim`` a projection (``proj_dim`` 0: exact, none). Blocks with
    the same :func:`projection_seed_name` get the same tensor."""
    drawn: dict[str, torch.Tensor] = {}
    for b in blocks:
        wide = b.d_in if b.kind == "A" else b.d_out
        if not 0 < proj_dim < wide:
            b.proj = None
            continue
        name = projection_seed_name(b)
        if name not in drawn:
            drawn[name] = rademacher(proj_dim, wide, seed, name)
        b.proj = drawn[name]


def token_losses(logits: torch.Tensor, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Per-example SUM of next-token cross-entropy over label positions (B,). ``loss_mask[b, t]`` marks token t of
    row b as a label (HF ``labels != -100``); logits at t-1 predict token t, exactly as HF shifts labels. Computed in
    fp32 (fp64 if the logits are fp64)."""
    dt = working_dtype(logits.dtype)
    lg = logits[:, :-1].to(dt)
    tgt = input_ids[:, 1:]
    m = loss_mask[:, 1:].to(dt)
    nll = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt.reshape(-1), reduction="none")
    return (nll.view(tgt.shape) * m).sum(dim=1)


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype per-example gradients are computed in: fp64 for an fp64 model, else fp32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def shared_input_key(a: torch.Tensor, b: Block) -> tuple:
    """What identifies one lora_A input and its projection: q/k/v (gate/up) read the same tensor with the same
    projection, so their calls share one input product."""
    return (a.data_ptr(), tuple(a.shape), a.stride(), a.dtype, id(b.proj))


STACK_NUMEL = 1 << 17  # units whose input + output gradient hold more elements than this are not stacked


class GradientCollector:
    """Context manager: hooks the blocks while active; :meth:`collect` turns one batch's loss into per-example
    gradients (and accumulates covariance sums when ``covariance=True``).

    Use::

        with GradientCollector(blocks, covariance=True) as col:
            logits = model(input_ids, attention_mask=am).logits
            grads = col.collect(token_losses(logits, input_ids, mask).sum(), token_mask=am.bool())
    """

    def __init__(self, blocks: Sequence[Block], covariance: bool = False, stat_dtype: torch.dtype = torch.float64):
        self.blocks = list(blocks)
        self.covariance = covariance
        self.stat_dtype = stat_dtype
        self._handles: list = []
        self._inputs: dict[str, list[torch.Tensor]] = {}
        self._outputs: dict[str, list[torch.Tensor]] = {}
        self._proj_cache: dict[tuple, torch.Tensor] = {}
        self.A: dict[str, torch.Tensor] = {}  # sum over tokens of a a^T
        self.S: dict[str, torch.Tensor] = {}  # sum over tokens of delta delta^T
        self.n_tokens = 0
        self.n_examples = 0
        # of the last batch: which rows have finite gradients (B,), and whether its covariance sums are finite
        self.rows_finite: torch.Tensor = torch.ones(0, dtype=torch.bool)
        self.stats_finite = True

    def __enter__(self) -> GradientCollector:
        for b in self.blocks:

            def hook(mod, inp, out, name=b.name):
                self._inputs.setdefault(name, []).append(inp[0])
                self._outputs.setdefault(name, []).append(out)

            self._handles.append(b.module.register_forward_hook(hook))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._inputs.clear()
        self._outputs.clear()

    def reset(self) -> None:
        self._inputs.clear()
        self._outputs.clear()

    def collect(self, loss: torch.Tensor, token_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """Backpropagate ``loss`` (a sum of per-example losses) to the hooked outputs and return
        ``{block name: (B, out, in) per-example gradients}`` (fp32, or fp64 for an fp64 model).
        ``token_mask`` (B, T) marks real (non-padding) tokens; padding never enters the statistics.

        Cost: blocks whose calls have the same shapes (e.g. q/k/v/o/gate/up lora_A of every layer) are stacked and
        handled by one batched matmul for the gradients and one for each covariance, so the per-op overhead is paid
        per *shape group* (5 groups for a Llama with LoRA on all 7 projections), not per block."""
        missing = [b.name for b in self.blocks if b.name not in self._outputs]
        if missing:
            raise GradianError(f"LoRA block {missing[0]} was not called in the forward pass")
        calls = [
            (b, a, o) for b in self.blocks for a, o in zip(self._inputs[b.name], self._outputs[b.name], strict=True)
        ]
        deltas = torch.autograd.grad(loss, [o for _, _, o in calls], allow_unused=True)
        result = self._from_deltas(calls, deltas, token_mask)
        self.reset()
        return result

    def from_deltas(self, calls: list, deltas: Sequence, token_mask: torch.Tensor, projected: bool = False,
                    scale: float = 1.0) -> dict[str, torch.Tensor]:  # fmt: skip
        """Per-example gradients (and covariance sums) from output gradients another backward produced (a trainer's,
        :mod:`gradian.integrations`): ``calls`` are ``(block, input, output)`` per call, ``deltas`` the gradient at
        each output (None: not reached) of the summed loss over ``scale``. ``projected``: the wide sides are already
        projected (the inputs of lora_A blocks and the output gradients of lora_B blocks, by ``block.proj``, in the
        working dtype); an output then only gives its (projected) shape. The gradients returned may be views of one
        tensor per same-shape group."""
        return self._from_deltas(calls, deltas, token_mask, projected, scale)

    def _from_deltas(self, calls: list, deltas: Sequence, token_mask: torch.Tensor, projected: bool = False,
                     scale: float = 1.0) -> dict[str, torch.Tensor]:  # fmt: skip
        """The per-example gradients (and covariance sums) from every call's input and output gradient."""
        m = token_mask.to(torch.bool)
        B = m.shape[0]
        # units: calls that share one input tensor and projection (q/k/v lora_A, gate/up lora_A) are one wider block
        units: dict[tuple, list[int]] = {}
        for j, (b, a, _) in enumerate(calls):
            shared = b.kind == "A"
            key = shared_input_key(a, b) if shared else ("call", j)
            units.setdefault(key, []).append(j)
        # groups: same-shape units stacked into one batched matmul when they are small (per-op overhead dominates);
        # large ones run one by one (stacking would copy them, which costs more than the op overhead it saves)
        groups: dict[tuple, list[list[int]]] = {}
        for js in units.values():
            b, a, o = calls[js[0]]
            shape_key = (b.kind, tuple(a.shape), tuple(o.shape), a.dtype, b.proj is not None and tuple(b.proj.shape))
            group_key: tuple[Any, ...] = (*shape_key, len(js))
            if a.numel() + o.numel() * len(js) > STACK_NUMEL:
                group_key = (*group_key, js[0])
            groups.setdefault(group_key, []).append(js)
        result: dict[str, torch.Tensor] = {}
        self.rows_finite = torch.ones(B, dtype=torch.bool, device=m.device)
        self._stats_ok = torch.ones((), dtype=torch.bool, device=m.device)
        real = None if not self.covariance or bool(m.all()) else m.reshape(-1).nonzero().squeeze(1)
        for us in groups.values():
            self._collect_group(calls, deltas, us, real, result, projected, scale)
        self.rows_finite = self.rows_finite.cpu()
        self.stats_finite = bool(self._stats_ok)
        if self.covariance:
            self.n_tokens += int(m.sum())
            self.n_examples += B
        return result

    def _collect_group(self, calls, deltas, units, real, result: dict[str, torch.Tensor], projected: bool = False,
                       scale: float = 1.0) -> None:  # fmt: skip
        """Gradients (and covariance sums) of same-shape units (each: the calls sharing one input, their output
        gradients concatenated), along a leading group axis: one bmm for all their per-example gradients, scaled
        once (G by ``scale``, S by its square) before they are split by block.

        Padding needs no mask here: the loss is masked and attention is causal with right padding, so ``delta`` is
        exactly 0 at padded positions and they add nothing to ``G``; the covariance sums take the real tokens only
        (``real``; None when there is no padding)."""
        first = calls[units[0][0]]
        kind, proj = first[0].kind, first[0].proj is not None and not projected
        wd = working_dtype(first[1].dtype)
        mult = len(units[0])

        def delta(j):
            g = deltas[j]
            return torch.zeros_like(calls[j][2]) if g is None else g

        def unit_delta(js):
            return delta(js[0]) if len(js) == 1 else torch.cat([delta(j) for j in js], dim=-1)

        if len(units) == 1:  # no stacking copy
            a = calls[units[0][0]][1].detach().unsqueeze(0)
            d = unit_delta(units[0]).detach().unsqueeze(0)
        else:
            a = torch.stack([calls[js[0]][1].detach() for js in units])  # (s, B, T, i)
            d = torch.stack([unit_delta(js) for js in units]).detach()  # (s, B, T, mult * o)
        a, d = a.to(wd), d.to(wd)
        s_, Bsz, T = d.shape[:3]
        if proj:
            P = self._proj_stack([calls[js[0]][0] for js in units], wd, d.device)  # (s, k, wide)
            if kind == "A":
                a = (a.reshape(s_, Bsz * T, -1) @ P.transpose(1, 2)).view(s_, Bsz, T, -1)
            else:
                d = (d.reshape(s_, Bsz * T, -1) @ P.transpose(1, 2)).view(s_, Bsz, T, -1)
        i_dim, od = a.shape[-1], d.shape[-1]
        o_dim = od // mult
        # G_i = sum_t delta_t a_t^T for every (block, example) of the group in one bmm; computed as (a^T delta)^T
        # when the output side is the wider one (a tall-thin product runs ~3x slower than a short-wide one)
        d3, a3 = d.reshape(s_ * Bsz, T, od), a.reshape(s_ * Bsz, T, i_dim)
        if od > i_dim:
            g = torch.matmul(a3.transpose(1, 2), d3).transpose(1, 2)
        else:
            g = torch.matmul(d3.transpose(1, 2), a3)
        g = g.view(s_, Bsz, od, i_dim)
        if scale != 1.0:
            g.mul_(scale)
        self.rows_finite &= torch.isfinite(g.sum((-2, -1))).all(0)  # a NaN or Inf anywhere makes its sum one
        for u, js in enumerate(units):
            for c, j in enumerate(js):
                name = calls[j][0].name
                gj = g[u, :, c * o_dim : (c + 1) * o_dim] if mult > 1 else g[u]
                result[name] = gj if name not in result else result[name] + gj
        if not self.covariance:
            return
        a2 = a.reshape(s_, Bsz * T, i_dim)
        d2 = d.reshape(s_, Bsz * T, od)
        if real is not None:  # padding: ~30% of a length-mixed batch
            a2, d2 = a2.index_select(1, real), d2.index_select(1, real)
        A = (a2.transpose(1, 2) @ a2).to(self.stat_dtype)  # (s, i, i)
        S = (d2.transpose(1, 2) @ d2).to(self.stat_dtype)  # (s, mult*o, mult*o): diagonal blocks per call
        if scale != 1.0:
            S.mul_(scale**2)
        self._stats_ok &= torch.isfinite(A.sum() + S.sum())
        for u, js in enumerate(units):
            for c, j in enumerate(js):
                name = calls[j][0].name
                Au, Sj = A[u], S[u, c * o_dim : (c + 1) * o_dim, c * o_dim : (c + 1) * o_dim]
                self.A[name] = self.A[name] + Au if name in self.A else Au  # never changed in place
                self.S[name] = self.S[name] + Sj if name in self.S else Sj

    def _proj_stack(self, blocks: list[Block], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        key = (tuple(b.name for b in blocks), dtype, str(device))
        P = self._proj_cache.get(key)
        if P is None:
            P = torch.stack([b.proj for b in blocks]).to(device=device, dtype=dtype)  # type: ignore[misc]
            self._proj_cache[key] = P
        return P
