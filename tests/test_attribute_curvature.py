"""Curvature inverses equal explicit dense fp64 computations; every method's agreement with the dense damped
empirical Fisher is measured on a real (stories260K) LoRA adapter."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "attribute"))
import helpers  # noqa: E402

from gradian.attribute import curvature as cv  # noqa: E402
from gradian.attribute.collector import find_lora_blocks  # noqa: E402
from gradian.attribute.engine import gradient_pass  # noqa: E402
from gradian.attribute.scores import Stats, ekfac_eigenvalues, harm_scores, precondition  # noqa: E402
from gradian.attribute.source import as_source  # noqa: E402

F64 = torch.float64


def _random_block(o=5, i=7, n=40, t=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, t, i, generator=g, dtype=F64) @ torch.randn(i, i, generator=g, dtype=F64)
    d = torch.randn(n, t, o, generator=g, dtype=F64) @ torch.randn(o, o, generator=g, dtype=F64)
    G = torch.einsum("nto,nti->noi", d, a)
    A_sum = torch.einsum("nti,ntj->ij", a, a)
    S_sum = torch.einsum("nto,ntp->op", d, d)
    V = torch.randn(3, o, i, generator=g, dtype=F64)
    return G, A_sum, S_sum, n * t, n, V


def test_kfac_and_ekfac_equal_dense_kronecker_computation():
    G, A_sum, S_sum, n_tok, n, V = _random_block()
    A, S = cv.kfac_factors(A_sum, S_sum, n_tok, n)
    lam_A, QA = cv.eigh64(A)
    lam_S, QS = cv.eigh64(S)
    Q = torch.kron(QS, QA)  # row-major vec(G) = delta (x) a
    P = Q.shape[0]
    # K-FAC: (kron(S, A) + damping I)^-1 v, built densely
    lam_k = cv.kfac_eigenvalues(lam_S, lam_A)
    d = cv.default_damping(lam_k)
    H = torch.kron(S, A) + d * torch.eye(P, dtype=F64)
    want = torch.linalg.solve(H, V.reshape(3, -1).T).T.reshape(V.shape)
    got = cv.eigen_precondition(V, QS, QA, lam_k, d)
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)
    # EK-FAC: eigenvalues = diag(Q^T F Q) with F the dense empirical Fisher, then the same Q-basis inverse
    F = G.reshape(n, -1).T @ G.reshape(n, -1) / n
    lam_e = ekfac_eigenvalues(as_source({"b": G}), {"b": (QS, QA)})["b"]
    assert torch.allclose(lam_e.reshape(-1), torch.diagonal(Q.T @ F @ Q), rtol=1e-10)
    d = cv.default_damping(lam_e)
    assert d == pytest.approx(0.1 * float(torch.trace(F)) / P)  # same number as the dense Fisher's mean eigenvalue
    H = Q @ torch.diag(lam_e.reshape(-1) + d) @ Q.T
    want = torch.linalg.solve(H, V.reshape(3, -1).T).T.reshape(V.shape)
    assert torch.allclose(cv.eigen_precondition(V, QS, QA, lam_e, d), want, rtol=1e-10, atol=1e-12)


def test_woodbury_and_datainf_equal_dense():
    G1, *_ = _random_block(4, 6, n=30, seed=1)
    G2, *_ = _random_block(3, 5, n=30, seed=2)
    V1 = torch.randn(2, 4, 6, dtype=F64)
    V2 = torch.randn(2, 3, 5, dtype=F64)
    d1, d2 = 0.3, 2.0
    Gc = torch.cat([G1.reshape(30, -1), G2.reshape(30, -1)], 1)
    damp = torch.cat([torch.full((24,), d1), torch.full((15,), d2)]).to(F64)
    Vc = torch.cat([V1.reshape(2, -1), V2.reshape(2, -1)], 1)
    want = torch.linalg.solve(cv.dense_fisher(Gc, damp), Vc.T).T
    X1, X2 = cv.woodbury_precondition([V1, V2], [G1, G2], [d1, d2])
    got = torch.cat([X1.reshape(2, -1), X2.reshape(2, -1)], 1)
    assert float((got - want).norm() / want.norm()) < 1e-6  # condition number ~1e6 here
    # DataInf: mean of per-example damped rank-one inverses
    g = G1.reshape(30, -1)
    inv = sum(torch.linalg.inv(torch.outer(r, r) + d1 * torch.eye(24, dtype=F64)) for r in g) / 30
    assert torch.allclose(cv.datainf_precondition(V1, G1, d1).reshape(2, -1), V1.reshape(2, -1) @ inv, rtol=1e-9)


@pytest.fixture(scope="module")
def small_adapter_grads():
    model = helpers.lora_model(F64, r=2, targets=["q_proj", "v_proj"], seed=1)
    _, fx = helpers.formatted(helpers.TRAIN)
    _, efx = helpers.formatted(helpers.EVAL, add_eos=False)
    blocks = find_lora_blocks(model)
    G, col = gradient_pass(model, blocks, fx[:40], 0, batch_size=20, covariance=True)
    V, _ = gradient_pass(model, blocks, efx[:6], 0, batch_size=16, mean_per_token=True)
    return G, Stats(col.A, col.S, col.n_tokens, col.n_examples), V


def _pearson(a, b):
    return float(np.corrcoef(np.asarray(a).ravel(), np.asarray(b).ravel())[0, 1])


@pytest.mark.parametrize("factor", [0.1, 10.0])
def test_agreement_with_dense_damped_fisher(small_adapter_grads, factor):
    G, stats, V = small_adapter_grads
    names = list(G)
    N = G[names[0]].shape[0]
    damp = {n: cv.datainf_damping(G[n], factor) for n in names}  # factor x mean eigenvalue of each dense block
    Gc = torch.cat([G[n].reshape(N, -1) for n in names], 1)
    Vc = torch.cat([V[n].reshape(V[n].shape[0], -1) for n in names], 1)
    dvec = torch.cat([torch.full((G[n][0].numel(),), damp[n], dtype=F64) for n in names])
    assert Gc.shape[1] < 3000
    X = torch.linalg.solve(cv.dense_fisher(Gc, dvec), Vc.T).T
    ref = -(X @ Gc.T).numpy()  # (M, N) harm under the dense damped empirical Fisher
    r = {}
    for m in ("exact", "ekfac", "kfac", "datainf", "identity"):
        pre = precondition(m, V, G, stats, damping=damp)
        r[m] = _pearson(harm_scores(m, pre.X, G).numpy(), ref)
    print(
        f"\nPearson vs dense damped Fisher (damping {factor} x mean eigenvalue): "
        + str({k: round(v, 4) for k, v in r.items()})
    )
    assert r["exact"] > 0.999999


def test_rotate_rows_equals_rotate():
    g = torch.Generator().manual_seed(3)
    G = torch.randn(9, 5, 7, generator=g)  # fp32, as the store keeps them
    QS = torch.linalg.qr(torch.randn(5, 5, generator=g, dtype=F64))[0]
    QA = torch.linalg.qr(torch.randn(7, 7, generator=g, dtype=F64))[0]
    assert torch.allclose(cv.rotate_rows(G, QS, QA), cv.rotate(G, QS, QA), rtol=1e-12, atol=1e-14)


def test_kept_rotated_rows_give_the_streamed_scores_and_embedding(small_adapter_grads, monkeypatch):
    """EK-FAC: the rows precondition rotates for its eigenvalues, kept, give the same scores and embedding as
    streaming the gradients again (rotated per chunk, nothing kept), and as the embedding's own refit."""
    from gradian.attribute import methods, scores
    from gradian.attribute.source import MemorySource

    G, stats, V = small_adapter_grads
    monkeypatch.setattr(methods, "ROTATE_ROWS_CPU", 3)  # several rotation steps per chunk, one cut short
    src = MemorySource(G, chunk=16)  # 40 rows: three chunks, the last short
    kept = precondition("ekfac", V, src, stats, keep_rows=True)
    streamed = precondition("ekfac", V, src, stats)
    assert kept.rotated is not None and streamed.rotated is None
    assert precondition("ekfac", V, src, stats, keep_rows=True, cache_bytes=0).rotated is None  # does not fit
    h_stream = harm_scores("ekfac", streamed.X, src)
    h_kept = harm_scores("ekfac", kept.X, src, rotated=kept.rotated)
    assert torch.allclose(h_kept, h_stream, rtol=1e-10, atol=1e-10 * float(h_stream.abs().max()))
    ident = precondition("cosine", V, src, stats).X
    c_kept = harm_scores("cosine", ident, src, rotated=kept.rotated)
    assert torch.allclose(c_kept, harm_scores("cosine", ident, src), rtol=1e-10, atol=1e-12)

    kw = {"dim": 6, "seed": 1}
    e_kept = scores.gradient_embedding("ekfac", src, stats, eig=kept.eig, rotated=kept.rotated, **kw)
    e_stream = scores.gradient_embedding("ekfac", src, stats, eig=streamed.eig, cache_bytes=0, **kw)
    e_cached = scores.gradient_embedding("ekfac", src, stats, eig=streamed.eig, **kw)
    e_refit = scores.gradient_embedding("ekfac", src, stats, cache_bytes=0, **kw)  # its own eigenvalue pass
    assert e_kept.shape == (40, 6)
    for e in (e_stream, e_cached, e_refit):
        sign = torch.sign((e * e_kept).sum(0))  # principal components: each up to sign
        assert torch.allclose(e * sign, e_kept, rtol=1e-4, atol=1e-5 * float(e_kept.abs().max()))
    # with k = N the subspace is every row's span, so the embedding is the whitened rows' exact top components
    X = torch.cat(
        [(cv.rotate(G[n], QS, QA) / (lam + d).sqrt()).reshape(40, -1) for n, (QS, QA, lam, d) in kept.eig.items()], 1
    )
    U, S, _ = torch.linalg.svd(X, full_matrices=False)
    want = (U * S)[:, :6].float()
    for rot in (kept.rotated, None):
        e = scores.gradient_embedding("ekfac", src, stats, eig=kept.eig, rotated=rot, dim=39, seed=1)[:, :6]
        sign = torch.sign((e * want).sum(0))
        assert torch.allclose(e * sign, want, rtol=1e-4, atol=1e-5 * float(want.abs().max()))
