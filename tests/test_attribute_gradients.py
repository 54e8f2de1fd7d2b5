"""Hook per-example gradients equal torch.func per-sample gradients (fp64, padding + prompt masking in the batch)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "attribute"))
import helpers  # noqa: E402

from gradian.attribute.collector import attach_projections, find_lora_blocks, token_losses  # noqa: E402
from gradian.attribute.engine import collate, gradient_pass  # noqa: E402
from gradian.errors import GradianError  # noqa: E402


def _batch():
    _, fx = helpers.formatted(helpers.TRAIN)
    fx = fx[:5]
    assert len({len(f.input_ids) for f in fx}) > 1  # padding in the batch
    assert all(f.n_prompt_tokens > 0 for f in fx)  # prompt masking in the batch
    return fx


def _func_per_sample(model, fx):
    from torch.func import functional_call, grad, vmap

    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    ids, am, lm = collate(fx, 0)

    def loss_fn(p, i, a, m):
        out = functional_call(model, p, (i[None],), {"attention_mask": a[None]})
        return token_losses(out.logits, i[None], m[None])[0]

    try:
        return vmap(grad(loss_fn), in_dims=(None, 0, 0, 0))(params, ids, am, lm)
    except Exception:  # some HF mask code is not vmappable: torch.func.grad per row, same math
        rows = [grad(loss_fn)(params, ids[b], am[b], lm[b]) for b in range(len(fx))]
        return {k: torch.stack([r[k] for r in rows]) for k in params}


def _param_name(block_name: str) -> str:
    return "base_model.model." + block_name.removeprefix("base_model.model.") + ".default.weight"


@pytest.mark.parametrize("rslora", [False, True])
def test_hook_gradients_match_torch_func(rslora):
    model = helpers.lora_model(torch.float64, r=4, rslora=rslora)
    fx = _batch()
    blocks = find_lora_blocks(model)
    assert len(blocks) == 2 * 7 * 5
    grads, _ = gradient_pass(model, blocks, fx, pad_id=0, batch_size=len(fx))
    ref = _func_per_sample(model, fx)
    worst = 0.0
    for b in blocks:
        r = ref[_param_name(b.name.replace(".lora_A", ".lora_A").replace(".lora_B", ".lora_B"))]
        g = grads[b.name]
        assert g.dtype == torch.float64
        err = float((g - r).norm() / r.norm())
        worst = max(worst, err)
    print(f"\nrslora={rslora}: worst relative error over {len(blocks)} blocks = {worst:.2e}")
    assert worst < 1e-8


def test_padding_does_not_change_gradients():
    model = helpers.lora_model(torch.float64, r=4)
    fx = _batch()
    blocks = find_lora_blocks(model)
    together, c1 = gradient_pass(model, blocks, fx, pad_id=0, batch_size=len(fx), covariance=True)
    alone, c2 = gradient_pass(model, blocks, fx, pad_id=0, batch_size=1, covariance=True)
    assert c1.n_tokens == c2.n_tokens == sum(len(f.input_ids) for f in fx)

    # Llama's RMSNorm computes in fp32 even in an fp64 model, so batch shapes that change the fp64 matmuls'
    # reduction order move results by ~1e-7 relative; padding that leaked in would move them by O(1)
    def rel(x, y):
        return float((x - y).norm() / y.norm())

    for b in blocks:
        assert rel(together[b.name], alone[b.name]) < 1e-5
        # padding never enters the covariance statistics
        assert rel(c1.A[b.name], c2.A[b.name]) < 1e-5
        assert rel(c1.S[b.name], c2.S[b.name]) < 1e-5


def test_the_training_pass_batches_rows_of_one_length_and_returns_file_order():
    """robust.gradients runs the rows longest first (batches of about one length: little padding) and hands back one
    gradient per row in the rows' own order, equal to each row's gradient computed alone; the covariance sums too."""
    from gradian.attribute.robust import PassState, gradients

    model = helpers.lora_model(torch.float64, r=4)
    _, fx = helpers.formatted(helpers.TRAIN)
    fx = fx[:12]
    lengths = [len(f.input_ids) for f in fx]
    assert lengths != sorted(lengths, reverse=True)  # file order is not length order
    blocks = find_lora_blocks(model)
    seen: list[int] = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["input_ids"].shape), with_kwargs=True)
    try:
        chunk = gradients(model, blocks, fx, 0, PassState(batch_size=4))
    finally:
        hook.remove()
    padded = [max(lengths[i] for i in b) for b in _batches(lengths, 4)]  # each batch pads to its longest row
    assert [s[1] for s in seen] == padded and padded == sorted(padded, reverse=True)
    assert sum(s[0] * s[1] for s in seen) < sum(4 * max(lengths[i : i + 4]) for i in range(0, 12, 4))  # less padding
    alone, col = gradient_pass(model, blocks, fx, pad_id=0, batch_size=1, covariance=True)
    for b in blocks:
        assert float((chunk.G[b.name] - alone[b.name]).norm() / alone[b.name].norm()) < 1e-5
        assert float((chunk.A[b.name] - col.A[b.name]).norm() / col.A[b.name].norm()) < 1e-5
    assert chunk.n_tokens == col.n_tokens and chunk.n_examples == len(fx)


def _batches(lengths: list[int], size: int) -> list[list[int]]:
    """Positions in batches of ``size``, longest rows first (ties in file order)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[s : s + size] for s in range(0, len(order), size)]


def test_projection_is_jl_and_consistent():
    model = helpers.lora_model(torch.float64, r=4)
    fx = _batch()
    blocks = find_lora_blocks(model)
    exact, _ = gradient_pass(model, blocks, fx, pad_id=0, batch_size=len(fx))
    attach_projections(blocks, 16, seed=3)
    proj, _ = gradient_pass(model, blocks, fx, pad_id=0, batch_size=len(fx))
    for b in blocks:
        P = b.proj.to(torch.float64)
        want = exact[b.name] @ P.T if b.kind == "A" else P @ exact[b.name]
        assert torch.allclose(proj[b.name], want, rtol=1e-9, atol=1e-12)
        assert proj[b.name].shape[1:] == b.shape
    # lora_A blocks that read one input (q/k/v, gate/up) project it with one matrix; lora_B blocks each draw their own
    by = {b.name.rsplit(".", 2)[0] + "." + b.name.rsplit(".", 2)[1] + "." + b.kind: b for b in blocks}
    layer0 = next(iter(by)).split(".self_attn")[0]
    q, k, v = (by[f"{layer0}.self_attn.{m}_proj.A"] for m in "qkv")
    assert q.proj is not None and q.proj is k.proj is v.proj
    assert by[f"{layer0}.mlp.gate_proj.A"].proj is by[f"{layer0}.mlp.up_proj.A"].proj
    qb, kb = by[f"{layer0}.self_attn.q_proj.B"], by[f"{layer0}.self_attn.k_proj.B"]
    assert qb.proj is not None and kb.proj is not None and qb.proj is not kb.proj


def test_dora_is_refused_in_one_line():
    model = helpers.lora_model(torch.float32, r=4, dora=True, nonzero_b=False)
    with pytest.raises(GradianError) as e:
        find_lora_blocks(model)
    assert "DoRA" in str(e.value) and "\n" not in str(e.value)
