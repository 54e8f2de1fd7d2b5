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
        if not isinstance(lora_A, nn.ModuleDict) or adapter_name not in lora_A:
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


def attach_projections(blocks: Sequence[Block], proj_dim: int, seed: int = 0) -> None:
    """Give every block whose wide side exceeds ``proj_dim`` a projection (``proj_dim`` 0: exact, none)."""
    for b in blocks:
        wide = b.d_in if b.kind == "A" else b.d_out
        b.proj = rademacher(proj_dim, wide, seed, b.name) if 0 < proj_dim < wide else None


def token_losses(logits: torch.Tensor, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Per-example SUM of next-token cross-entropy over label positions (B,). ``loss_mask[b, t]`` marks token t of
    row b as a label (HF ``labels != -100``); logits at t-1 predict token t, exactly as HF shifts labels. Computed in
    fp32 (fp64 if the logits are fp64)."""
    dt = torch.float64 if logits.dtype == torch.float64 else torch.float32
    lg = logits[:, :-1].to(dt)
    tgt = input_ids[:, 1:]
    m = loss_mask[:, 1:].to(dt)
    nll = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt.reshape(-1), reduction="none")
    return (nll.view(tgt.shape) * m).sum(dim=1)


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
        self.A: dict[str, torch.Tensor] = {}  # sum over tokens of a a^T
        self.S: dict[str, torch.Tensor] = {}  # sum over tokens of delta delta^T
        self.n_tokens = 0
        self.n_examples = 0

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
        ``token_mask`` (B, T) marks real (non-padding) tokens; padding never enters the statistics."""
        names = [b.name for b in self.blocks if b.name in self._outputs]
        if len(names) != len(self.blocks):
            missing = [b.name for b in self.blocks if b.name not in self._outputs]
            raise GradianError(f"LoRA block {missing[0]} was not called in the forward pass")
        outs = [o for n in names for o in self._outputs[n]]
        deltas = torch.autograd.grad(loss, outs, allow_unused=True)
        it = iter(deltas)
        result: dict[str, torch.Tensor] = {}
        m = token_mask.to(torch.bool)
        B = m.shape[0]
        a_cov_cache: dict[tuple, torch.Tensor] = {}  # q/k/v (and gate/up) LoRA-A blocks share one input
        for b in self.blocks:
            ins = self._inputs[b.name]
            g_sum = None
            for a_raw in ins:
                d = next(it)
                if d is None:
                    d = torch.zeros_like(self._outputs[b.name][0])
                wd = torch.float64 if a_raw.dtype == torch.float64 else torch.float32
                mf = m.to(wd).unsqueeze(-1)
                a = a_raw.detach().to(wd) * mf  # padding out of a; delta is exactly 0 there (masked loss, causal)
                d = d.detach().to(wd)
                if b.proj is not None:
                    P = b.proj.to(device=a.device, dtype=wd)
                    if b.kind == "A":
                        a = a @ P.T
                    else:
                        d = d @ P.T
                g = torch.einsum("bto,bti->boi", d, a)
                g_sum = g if g_sum is None else g_sum + g
                if self.covariance:
                    a2 = a.reshape(-1, a.shape[-1])
                    d2 = d.reshape(-1, d.shape[-1])
                    key = (
                        (a_raw.data_ptr(), tuple(a_raw.shape), a_raw.dtype) if b.proj is None or b.kind == "B" else None
                    )
                    A = a_cov_cache.get(key) if key is not None else None
                    if A is None:
                        A = (a2.T @ a2).to(self.stat_dtype)
                        if key is not None:
                            a_cov_cache[key] = A
                    S = (d2.T @ d2).to(self.stat_dtype)
                    self.A[b.name] = self.A[b.name] + A if b.name in self.A else A.clone()
                    self.S[b.name] = self.S[b.name] + S if b.name in self.S else S
            result[b.name] = g_sum
        if self.covariance:
            self.n_tokens += int(m.sum())
            self.n_examples += B
        self.reset()
        return result
