"""Curvature approximations and their damped inverses: pure functions on tensors, fp64 throughout.

Conventions. A block's per-example gradient ``G_i`` is an (out, in) matrix, flattened row-major, so
``vec(delta a^T) = delta (x) a`` and the Kronecker-factored Fisher is ``kron(S, A)`` with

* ``A = sum_tokens a a^T / n_tokens``   (input covariance, padding excluded)
* ``S = sum_tokens delta delta^T / n_examples``

so that ``kron(S, A)`` approximates the per-example Fisher ``F = mean_i vec(G_i) vec(G_i)^T`` (each example's
gradient is a sum over its tokens, and K-FAC drops the cross-token terms).

The Fisher is the *empirical* Fisher (data labels) by default: it comes out of the same forward+backward that produces
the training gradients, so it costs nothing extra, and at a fine-tuned adapter that fits its training data the
empirical and true Fisher are close where it matters (the rows with large gradients). EK-FAC then re-fits the
eigenvalues in the Kronecker eigenbasis to the per-example gradients (George et al. 2018), which removes most of the
K-FAC error; the damping default ``0.1 x mean eigenvalue`` per block is the kronfluence / LogIX / bergson heuristic.
For EK-FAC, DataInf and the dense Fisher, the mean eigenvalue of a block is the same number, ``mean_i |G_i|^2 / P``.
"""

from __future__ import annotations

import torch

from gradian.options import DEFAULTS

F64 = torch.float64


def eigh64(M: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigendecomposition of a symmetric matrix in fp64 (symmetrised first); eigenvalues clipped at 0."""
    M = M.to(F64)
    M = (M + M.T) / 2
    lam, Q = torch.linalg.eigh(M)
    return lam.clamp_min(0), Q


def kfac_factors(
    A_sum: torch.Tensor, S_sum: torch.Tensor, n_tokens: int, n_examples: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalise covariance sums into K-FAC factors (A per token, S per example; see the module docstring)."""
    return A_sum.to(F64) / max(n_tokens, 1), S_sum.to(F64) / max(n_examples, 1)


def rotate(G: torch.Tensor, QS: torch.Tensor, QA: torch.Tensor) -> torch.Tensor:
    """``QS^T G QA`` for a stack of (out, in) matrices (..., out, in)."""
    return QS.T @ G.to(F64) @ QA


def to_f64(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``t`` on ``device`` in fp64, converted there: one ``.to(cuda, float64)`` of a host tensor converts on the host
    and sends twice the bytes."""
    return t.to(device).to(F64)


def rotate_rows(G: torch.Tensor, QS: torch.Tensor, QA: torch.Tensor) -> torch.Tensor:
    """``QS^T G_i QA`` for every row of ``G`` (n, out, in), fp64 on ``QS``'s device, as two plain matrix products
    (the rows laid out (out, n * in), then (out * n, in)) instead of n small ones: an (n, out, in) view of an
    (out, n, in) tensor."""
    n, o, i = G.shape
    G = G.to(QS.device)  # a host tensor crosses in its stored dtype and is converted on the device (see to_f64)
    Gp = torch.empty(o, n, i, dtype=F64, device=QS.device)
    Gp.copy_(G.permute(1, 0, 2))
    return ((QS.T @ Gp.view(o, n * i)).view(o * n, i) @ QA).view(o, n, i).permute(1, 0, 2)


def unrotate(G: torch.Tensor, QS: torch.Tensor, QA: torch.Tensor) -> torch.Tensor:
    return QS @ G @ QA.T


def kfac_eigenvalues(lam_S: torch.Tensor, lam_A: torch.Tensor) -> torch.Tensor:
    """K-FAC eigenvalues of ``kron(S, A)`` arranged as (out, in)."""
    return torch.outer(lam_S.to(F64), lam_A.to(F64))


def default_damping(eigenvalues: torch.Tensor, factor: float = DEFAULTS.damping_factor) -> float:
    """``factor x mean eigenvalue`` (kronfluence's heuristic); a tiny floor keeps an all-zero block invertible."""
    return max(factor * float(eigenvalues.mean()), 1e-30)


def eigen_precondition(
    V: torch.Tensor, QS: torch.Tensor, QA: torch.Tensor, eigenvalues: torch.Tensor, damping: float
) -> torch.Tensor:
    """``(Q (Lambda + damping) Q^T)^-1 V`` with ``Q = QS (x) QA``: ``QS [(QS^T V QA) / (Lambda + damping)] QA^T``.
    ``V`` is (..., out, in); works for K-FAC and EK-FAC eigenvalues alike."""
    return unrotate(rotate(V, QS, QA) / (eigenvalues + damping), QS, QA)


def datainf_damping(G: torch.Tensor, factor: float = DEFAULTS.damping_factor) -> float:
    """DataInf's ``lambda = factor x mean_i |g_i|^2 / P`` (the same number as EK-FAC's mean eigenvalue heuristic)."""
    G = G.reshape(G.shape[0], -1).to(F64)
    return max(factor * float(G.pow(2).sum(1).mean()) / G.shape[1], 1e-30)


def datainf_correction(V2: torch.Tensor, G2: torch.Tensor, damping: float) -> torch.Tensor:
    """``sum_i g_i (g_i.v)/(lambda + |g_i|^2)`` for flattened query rows ``V2`` (M, P) and gradients ``G2`` (n, P):
    DataInf's Sherman-Morrison term, summable over chunks of rows."""
    coef = (V2 @ G2.T) / (damping + G2.pow(2).sum(1))  # (M, n)
    return coef @ G2


def datainf_precondition(V: torch.Tensor, G: torch.Tensor, damping: float) -> torch.Tensor:
    """DataInf (Kwon et al. 2024) per block: swap the inverse of the averaged damped rank-one terms for the average
    of their Sherman-Morrison inverses, ``H^-1 v ~= (1/lambda)(v - mean_i g_i (g_i.v)/(lambda + |g_i|^2))``.
    ``V`` (M, ...) and ``G`` (N, ...) are flattened per row."""
    shape = V.shape
    V2 = V.reshape(shape[0], -1).to(F64)
    G2 = G.reshape(G.shape[0], -1).to(F64)
    out = (V2 - datainf_correction(V2, G2, damping) / G2.shape[0]) / damping
    return out.reshape(shape)


def dense_fisher(G: torch.Tensor, damping: torch.Tensor) -> torch.Tensor:
    """Explicit damped empirical Fisher ``G^T G / N + diag(damping)`` (P, P) for tests and tiny adapters."""
    G2 = G.reshape(G.shape[0], -1).to(F64)
    return G2.T @ G2 / G2.shape[0] + torch.diag(damping.to(F64))


def woodbury_precondition(
    V_blocks: list[torch.Tensor], G_blocks: list[torch.Tensor], dampings: list[float]
) -> list[torch.Tensor]:
    """Exact ``(G^T G / N + D)^-1 V`` for the dense empirical Fisher over *all* blocks together, with ``D`` the
    per-block damping on the diagonal, via Woodbury on the N x N kernel (no P x P matrix ever exists):
    ``X = D^-1 V - D^-1 G^T (N I + G D^-1 G^T)^-1 G D^-1 V``. Blocks are lists of (M|N, out, in) tensors."""
    N = G_blocks[0].shape[0]
    M = V_blocks[0].shape[0]
    dev = G_blocks[0].device
    K = torch.zeros(N, N, dtype=F64, device=dev)
    GDV = torch.zeros(N, M, dtype=F64, device=dev)
    for V, G, d in zip(V_blocks, G_blocks, dampings, strict=True):
        G2 = G.reshape(N, -1).to(F64)
        K += G2 @ G2.T / d
        GDV += G2 @ V.reshape(M, -1).to(F64).T / d
    K += N * torch.eye(N, dtype=F64, device=dev)
    Y = torch.linalg.solve(K, GDV)  # (N, M)
    out = []
    for V, G, d in zip(V_blocks, G_blocks, dampings, strict=True):
        G2 = G.reshape(N, -1).to(F64)
        X = (V.reshape(M, -1).to(F64) - (G2.T @ Y).T) / d
        out.append(X.reshape(V.shape))
    return out
