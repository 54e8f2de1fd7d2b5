"""From stored per-example training gradients, covariance sums and query gradients to signed harm scores.

Sign. Let ``f`` be the query (summed completion NLL of the regressed eval items) and ``G_i`` the gradient of training
row i's loss. Training on row i (a step of a preconditioned optimizer, or up-weighting it in the influence-function
approximation) moves the adapter by ``-eta H^-1 G_i``, which changes ``f`` by ``-eta <grad f, H^-1 G_i>``. A row is
harmful when that change is positive (it pushed the regressed NLL up), so

    harm_i = -<H^-1 grad f, G_i>      (positive = training on row i moved the model toward the regression)

kronfluence reports the opposite sign. The planted-fault tests check the sign end to end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from gradian.attribute import curvature as cv

METHODS = ("ekfac", "kfac", "datainf", "exact", "identity", "cosine")


@dataclass
class Stats:
    """Covariance sums from the training pass (one entry per block)."""

    A_sum: dict[str, torch.Tensor]
    S_sum: dict[str, torch.Tensor]
    n_tokens: int
    n_examples: int


@dataclass
class Preconditioned:
    """Preconditioned query rows per block and what was used."""

    X: dict[str, torch.Tensor]
    damping: dict[str, float] = field(default_factory=dict)
    # EK-FAC / K-FAC only: per block (QS, QA, eigenvalues, damping), reused by gradient_embedding
    eig: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]] = field(default_factory=dict)


def precondition(
    method: str,
    V: dict[str, torch.Tensor],
    G: dict[str, torch.Tensor],
    stats: Stats | None,
    damping: float | dict[str, float] | None = None,
    damping_factor: float = 0.1,
    device: torch.device | str = "cpu",
) -> Preconditioned:
    """Apply the method's damped inverse curvature to the query rows ``V[block]`` (M, out, in).

    ``damping`` (absolute: one number for every block, or a dict per block) overrides ``damping_factor x mean
    eigenvalue`` per block."""
    if isinstance(damping, dict):
        per_block = damping
    else:
        per_block = {n: damping for n in V} if damping is not None else {}
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}")
    names = list(V)
    out: dict[str, torch.Tensor] = {}
    used: dict[str, float] = {}
    eig: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]] = {}
    if method in ("identity", "cosine"):
        return Preconditioned({n: V[n].to(cv.F64) for n in names})
    if method == "exact":
        Gs = [G[n].to(device) for n in names]
        ds = []
        for n, g in zip(names, Gs, strict=True):
            ds.append(per_block[n] if n in per_block else cv.datainf_damping(g, damping_factor))
            used[n] = ds[-1]
        Xs = cv.woodbury_precondition([V[n].to(device) for n in names], Gs, ds)
        return Preconditioned({n: x.cpu() for n, x in zip(names, Xs, strict=True)}, used)
    for n in names:
        v = V[n].to(device)
        g = G[n].to(device)
        if method == "datainf":
            d = per_block[n] if n in per_block else cv.datainf_damping(g, damping_factor)
            out[n] = cv.datainf_precondition(v, g, d).cpu()
        else:
            assert stats is not None
            A, S = cv.kfac_factors(
                stats.A_sum[n].to(device), stats.S_sum[n].to(device), stats.n_tokens, stats.n_examples
            )
            lam_A, QA = cv.eigh64(A)
            lam_S, QS = cv.eigh64(S)
            lam = cv.kfac_eigenvalues(lam_S, lam_A) if method == "kfac" else cv.ekfac_eigenvalues(g, QS, QA)
            d = per_block[n] if n in per_block else cv.default_damping(lam, damping_factor)
            out[n] = cv.eigen_precondition(v, QS, QA, lam, d).cpu()
            eig[n] = (QS, QA, lam, d)
        used[n] = d
    return Preconditioned(out, used, eig)


def harm_scores(method: str, X: dict[str, torch.Tensor], G: dict[str, torch.Tensor], chunk: int = 1024) -> torch.Tensor:
    """``harm[m, i] = -<X_m, G_i>`` summed over blocks (M, N), fp64; for ``cosine`` the negated cosine similarity of
    the raw query and training gradients over all blocks."""
    names = list(X)
    M = X[names[0]].shape[0]
    N = G[names[0]].shape[0]
    dots = torch.zeros(M, N, dtype=cv.F64)
    g_norm2 = torch.zeros(N, dtype=cv.F64)
    x_norm2 = torch.zeros(M, dtype=cv.F64)
    for n in names:
        x = X[n].reshape(M, -1).to(cv.F64)
        x_norm2 += x.pow(2).sum(1)
        for s in range(0, N, chunk):
            g = G[n][s : s + chunk].reshape(-1, x.shape[1]).to(cv.F64)
            dots[:, s : s + chunk] += x @ g.T
            g_norm2[s : s + chunk] += g.pow(2).sum(1)
    if method == "cosine":
        dots = dots / (x_norm2.sqrt()[:, None] * g_norm2.sqrt()[None, :]).clamp_min(1e-300)
    return -dots


def gradient_embedding(
    method: str,
    G: dict[str, torch.Tensor],
    stats: Stats | None,
    *,
    eig: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]] | None = None,
    damping_factor: float = 0.1,
    dim: int = 32,
    seed: int = 0,
    chunk: int = 512,
) -> torch.Tensor:
    """Training rows embedded for clustering, (N, dim) fp32 (computed in fp64): their top principal components.

    For EK-FAC / K-FAC each row is the half-preconditioned gradient ``H^-1/2 G_i`` in the block's eigenbasis,
    ``(QS^T G_i QA) / sqrt(Lambda + damping)`` (inner products of these are ``<G_i, H^-1 G_j>``, the metric the
    scores use); for the other methods the raw gradient. Per-row gradients of a fine-tuned model are nearly
    orthogonal in full dimension, so a random projection keeps mostly noise; the top principal directions
    (randomized SVD over all blocks, seeded) keep what rows share, which is what a cluster is. ``eig`` reuses the
    eigendecompositions `precondition` computed."""
    names = list(G)
    N = G[names[0]].shape[0]
    dim = max(1, min(dim, N - 1))
    gen = torch.Generator().manual_seed(seed)
    dt = cv.F64  # fp32 is 3x faster here but flips the silhouette choice of k on the bundled example
    rows: dict[str, torch.Tensor] = {}  # (N, P) per block, whitened where the method has curvature
    for n in names:
        g = G[n]
        P = g[0].numel()
        if method in ("ekfac", "kfac") and stats is not None:
            if eig and n in eig:
                QS, QA, lam, d = eig[n]
            else:
                A, S = cv.kfac_factors(stats.A_sum[n], stats.S_sum[n], stats.n_tokens, stats.n_examples)
                lam_A, QA = cv.eigh64(A)
                lam_S, QS = cv.eigh64(S)
                lam = cv.kfac_eigenvalues(lam_S, lam_A) if method == "kfac" else cv.ekfac_eigenvalues(g, QS, QA)
                d = cv.default_damping(lam, damping_factor)
            QSf, QAf, scale = QS.to(dt).cpu(), QA.to(dt).cpu(), (lam + d).rsqrt().to(dt).cpu()
            rows[n] = torch.cat(
                [((QSf.T @ g[s : s + chunk].to(dt) @ QAf) * scale).reshape(-1, P) for s in range(0, N, chunk)]
            )
        else:
            rows[n] = g.reshape(N, P).to(dt)
    k = min(N, dim + 10)
    Y = torch.zeros(N, k, dtype=dt)
    for n in names:  # range finder: Y = X Omega, then one power iteration
        Y += rows[n] @ torch.randn(rows[n].shape[1], k, generator=gen, dtype=dt)
    Q, _ = torch.linalg.qr(Y)
    Y = sum(rows[n] @ (rows[n].T @ Q) for n in names)
    Q, _ = torch.linalg.qr(Y)
    B_gram = sum((Q.T @ rows[n]) @ (rows[n].T @ Q) for n in names)  # B B^T with B = Q^T X, (k, k)
    evals, evecs = torch.linalg.eigh(B_gram)
    order = torch.argsort(evals, descending=True)[:dim]
    U = Q @ evecs[:, order]  # left singular vectors of X
    return (U * evals[order].clamp_min(0).sqrt()).float()
