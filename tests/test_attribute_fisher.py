"""`--fisher true`: the curvature from labels sampled from the model (gradian.attribute.fisher).

Checked: the sampled-label loss has the true Fisher as its gradient covariance (``diag(p) - p p^T`` at the logits,
against a Monte Carlo estimate); on a real LoRA model the true-Fisher run is reproducible for a seed, differs between
seeds and from the empirical Fisher only in the curvature (the per-row gradients are the data-label ones), and gives
the same scores from memory and from the gradient store; option errors are one line."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "attribute"))
import helpers  # noqa: E402

from gradian.attribute.api import check_options, run_attribution  # noqa: E402
from gradian.attribute.fisher import sampled_losses  # noqa: E402
from gradian.errors import GradianError  # noqa: E402
from gradian.options import AttributeOptions  # noqa: E402


def test_sampled_labels_give_the_true_fisher_at_the_logits():
    """For softmax cross-entropy, E_{y~p}[(p - e_y)(p - e_y)^T] = diag(p) - p p^T (the data-label covariance is not)."""
    torch.manual_seed(0)
    V, n = 5, 40_000
    z = torch.randn(V, dtype=torch.float64)
    logits = z.expand(1, n + 1, V).clone().requires_grad_(True)  # one row: positions 0..n-1 predict labels 1..n
    mask = torch.ones(1, n + 1, dtype=torch.bool)
    mask[0, 0] = False
    gen = torch.Generator().manual_seed(1)
    sampled_losses(logits, mask, [gen]).sum().backward()
    g = logits.grad[0, :n]  # (n, V): p - e_y per position
    p = torch.softmax(z, 0)
    want = torch.diag(p) - torch.outer(p, p)
    got = g.T @ g / n
    assert torch.allclose(got, want, atol=4e-3), (got - want).abs().max()
    assert torch.allclose(g.mean(0), torch.zeros(V, dtype=torch.float64), atol=6e-3)  # E[p - e_y] = 0


@pytest.fixture(scope="module")
def setup():
    model = helpers.lora_model(dtype=torch.float64)
    _, fx = helpers.formatted(helpers.TRAIN)
    _, efx = helpers.formatted(helpers.EVAL, add_eos=False)
    return model, fx[:24], efx[:4]


def _run(setup, store_dir=None, **kw):
    model, fx, efx = setup
    opts = AttributeOptions(**{"batch_size": 8, "query": "all", **kw})
    return run_attribution(model, fx, efx, opts, pad_id=0, store_dir=store_dir)


def test_true_fisher_is_seeded_and_only_changes_the_curvature(setup, tmp_path):
    emp = _run(setup)
    a = _run(setup, fisher="true", fisher_seed=3)
    b = _run(setup, fisher="true", fisher_seed=3)
    c = _run(setup, fisher="true", fisher_seed=4)
    assert emp.settings["fisher"] == "empirical" and a.settings["fisher"] == "true"
    assert np.isfinite(a.scores).all()
    np.testing.assert_array_equal(a.scores, b.scores)  # same seed, same labels, same scores
    assert not np.allclose(a.scores, c.scores, rtol=1e-6)  # other labels, other curvature
    assert not np.allclose(a.scores, emp.scores, rtol=1e-3)
    # the store path samples the same labels per row as the in-memory path
    st = _run(setup, fisher="true", fisher_seed=3, store_dir=tmp_path / "grads", shard_rows=8)
    np.testing.assert_allclose(st.scores, a.scores, rtol=1e-6, atol=1e-9 * np.abs(a.scores).max())


def test_true_fisher_labels_belong_to_the_row_and_its_batches_are_sorted(setup):
    """Each row samples its labels from its own seed, so its sampled gradient and the covariance sums do not depend on
    the batch size (under the old per-batch seeds they did), and the sampled pass runs its rows longest first (batches
    that pad little)."""
    from gradian.attribute.collector import find_lora_blocks
    from gradian.attribute.fisher import SampledSource

    model, fx, _ = setup
    blocks = find_lora_blocks(model)

    def sampled(batch_size: int):
        src = SampledSource(model, blocks, fx, torch.arange(len(fx)), 0, batch_size, seed=3)
        st = src.stats()
        rows = {k: torch.cat([g[k] for _, g in src.chunks()]) for k in src.names}
        return rows, st

    # Other labels would move a row's gradient by O(1) of its size. The same labels leave only the model's own
    # round-off: its RMSNorm runs in fp32 even in an fp64 model, so a row's gradient depends on its batch by up to
    # ~4e-7 of the block's largest entry (measured single-threaded), hence 1e-5.
    (g8, st8), (g5, st5) = sampled(8), sampled(5)
    for k in g8:
        for got, want in ((g5[k], g8[k]), (st5.A_sum[k], st8.A_sum[k]), (st5.S_sum[k], st8.S_sum[k])):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))

    widths: list[int] = []
    hook = model.register_forward_pre_hook(
        lambda m, args, kw: widths.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    try:
        SampledSource(model, blocks, fx, torch.arange(len(fx)), 0, 4, seed=3).stats()
    finally:
        hook.remove()
    lengths = sorted((len(f.input_ids) for f in fx), reverse=True)
    assert widths == [lengths[s] for s in range(0, len(fx), 4)]  # each batch as wide as its longest row, longest first
    assert len(set(len(f.input_ids) for f in fx)) > 1 and [len(f.input_ids) for f in fx] != lengths  # not file order


def test_sampled_labels_of_a_row_do_not_depend_on_its_batch():
    """Per-row generators: a row padded in a batch draws the labels it draws alone."""
    torch.manual_seed(0)
    V = 7
    logits = torch.randn(2, 6, V, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[0, 1, 1, 1, 1, 1], [0, 1, 1, 0, 0, 0]], dtype=torch.bool)  # row 1: 2 labels, then padding

    def gens():
        return [torch.Generator().manual_seed(11), torch.Generator().manual_seed(12)]

    both = sampled_losses(logits, mask, gens())
    alone = sampled_losses(logits[1:, :3], mask[1:, :3], gens()[1:])
    torch.testing.assert_close(both[1:], alone, rtol=1e-12, atol=0)


@pytest.mark.parametrize(("fisher", "method", "needle"), [("sampled", "ekfac", "unknown --fisher"),
                                                          ("true", "exact", "--fisher true"),
                                                          ("true", "identity", "uses no curvature")])  # fmt: skip
def test_fisher_option_errors_are_one_line(fisher, method, needle):
    with pytest.raises(GradianError) as e:
        check_options(method, "uniform", "auto", fisher)
    assert needle in e.value.one_line() and "Fix:" in e.value.one_line()
