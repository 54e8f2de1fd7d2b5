"""From stored per-example training gradients, covariance sums and query gradients to signed harm scores.

Sign. Let ``f`` be the query (summed completion NLL of the regressed eval items) and ``G_i`` the gradient of training
row i's loss. Training on row i (a step of a preconditioned optimizer, or up-weighting it in the influence-function
approximation) moves the adapter by ``-eta H^-1 G_i``, which changes ``f`` by ``-eta <grad f, H^-1 G_i>``. A row is
harmful when that change is positive (it pushed the regressed NLL up), so

    harm_i = -<H^-1 grad f, G_i>      (positive = training on row i moved the model toward the regression)

kronfluence reports the opposite sign. The planted-fault tests check the sign end to end.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from gradian.attribute import curvature as cv
from gradian.attribute.plan import EMBED_CACHE_BYTES, EMBED_DIM
from gradian.attribute.source import GradSource, Stats, as_source
from gradian.errors import GradianError

METHODS = ("ekfac", "kfac", "datainf", "exact", "identity", "cosine")


@dataclass
class Preconditioned:
    """Preconditioned query rows per block and what was used."""

    X: dict[str, torch.Tensor]
    damping: dict[str, float] = field(default_factory=dict)
    # EK-FAC / K-FAC only: per block (QS, QA, eigenvalues, damping), reused by gradient_embedding
    eig: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]] = field(default_factory=dict)


def _factors(stats: Stats, n: str, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    A, S = cv.kfac_factors(stats.A_sum[n].to(device), stats.S_sum[n].to(device), stats.n_tokens, stats.n_examples)
    lam_A, QA = cv.eigh64(A)
    lam_S, QS = cv.eigh64(S)
    return QS, QA, lam_S, lam_A


def ekfac_eigenvalues(
    src: GradSource, bases: dict[str, tuple[torch.Tensor, torch.Tensor]], device: torch.device | str = "cpu"
) -> dict[str, torch.Tensor]:
    """EK-FAC eigenvalues ``mean_i (QS^T G_i QA)^2`` of every block in ``bases`` ({block: (QS, QA)}), one pass."""
    total = {n: torch.zeros(QS.shape[0], QA.shape[0], dtype=cv.F64, device=device) for n, (QS, QA) in bases.items()}
    for _, blocks in src.chunks():
        for n, (QS, QA) in bases.items():
            total[n] += cv.rotate(blocks[n].to(device), QS, QA).pow(2).sum(0)
    N = max(src.n_global, 1)
    return {n: src.dist.all_reduce(t) / N for n, t in total.items()}


def mean_sq_norms(src: GradSource) -> dict[str, float]:
    """``mean_i |G_i|^2 / P`` per block (the mean eigenvalue of the block's empirical Fisher), one pass."""
    tot = {n: torch.zeros((), dtype=cv.F64) for n in src.names}
    P: dict[str, int] = {}
    for _, blocks in src.chunks():
        for n in src.names:
            g = blocks[n].to(cv.F64)
            tot[n] += g.pow(2).sum()
            P[n] = g[0].numel()
    N = max(src.n_global, 1)
    return {n: float(src.dist.all_reduce(t)) / N / max(P.get(n, 1), 1) for n, t in tot.items()}


def precondition(
    method: str,
    V: dict[str, torch.Tensor],
    G: GradSource | dict[str, torch.Tensor],
    stats: Stats | None,
    damping: float | dict[str, float] | None = None,
    damping_factor: float = 0.1,
    device: torch.device | str = "cpu",
) -> Preconditioned:
    """Apply the method's damped inverse curvature to the query rows ``V[block]`` (M, out, in).

    ``G`` is the training gradients (a :class:`GradSource`, read in chunks, or a dict of (N, out, in) tensors).
    ``damping`` (absolute: one number for every block, or a dict per block) overrides ``damping_factor x mean
    eigenvalue`` per block."""
    src = as_source(G)
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
    if method in ("exact", "datainf") and any(n not in per_block for n in names):
        ms = mean_sq_norms(src)
        per_block = {n: per_block[n] if n in per_block else max(damping_factor * ms[n], 1e-30) for n in names}
    if method == "exact":
        if src.dist.active:
            raise GradianError(
                "--method exact needs every training row in one process (an N x N kernel)",
                fix="run it without torchrun, or use --method ekfac",
            )
        Gm = src.materialize()
        Gs = [Gm[n].to(device) for n in names]
        ds = [per_block[n] for n in names]
        Xs = cv.woodbury_precondition([V[n].to(device) for n in names], Gs, ds)
        return Preconditioned({n: x.cpu() for n, x in zip(names, Xs, strict=True)}, dict(zip(names, ds, strict=True)))
    if method == "datainf":
        V2 = {n: V[n].reshape(V[n].shape[0], -1).to(device=device, dtype=cv.F64) for n in names}
        corr = {n: torch.zeros_like(V2[n]) for n in names}
        for _, blocks in src.chunks():
            for n in names:
                g = blocks[n].to(device=device, dtype=cv.F64)
                corr[n] += cv.datainf_correction(V2[n], g.reshape(g.shape[0], -1), per_block[n])
        N = max(src.n_global, 1)
        for n in names:
            d = per_block[n]
            out[n] = ((V2[n] - src.dist.all_reduce(corr[n]) / N) / d).reshape(V[n].shape).cpu()
            used[n] = d
        return Preconditioned(out, used)
    assert stats is not None
    fac = {n: _factors(stats, n, device) for n in names}
    if method == "kfac":
        lams = {n: cv.kfac_eigenvalues(fac[n][2], fac[n][3]) for n in names}
    else:
        lams = ekfac_eigenvalues(src, {n: (fac[n][0], fac[n][1]) for n in names}, device)
    for n in names:
        QS, QA = fac[n][0], fac[n][1]
        lam = lams[n]
        d = per_block[n] if n in per_block else cv.default_damping(lam, damping_factor)
        out[n] = cv.eigen_precondition(V[n].to(device), QS, QA, lam, d).cpu()
        eig[n] = (QS, QA, lam, d)
        used[n] = d
    return Preconditioned(out, used, eig)


def harm_scores(
    method: str,
    X: dict[str, torch.Tensor],
    G: GradSource | dict[str, torch.Tensor],
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """``harm[m, i] = -<X_m, G_i>`` summed over blocks (M, n rows of ``G``, in its order), fp64, on the CPU (computed
    on ``device``); for ``cosine`` the negated cosine similarity of the raw query and training gradients over all
    blocks. One pass over ``G``."""
    src = as_source(G)
    names = list(X)
    M = X[names[0]].shape[0]
    N = src.n_local
    dots = torch.zeros(M, N, dtype=cv.F64, device=device)
    g_norm2 = torch.zeros(N, dtype=cv.F64, device=device)
    x_norm2 = torch.zeros(M, dtype=cv.F64, device=device)
    xs = {n: X[n].reshape(M, -1).to(device, cv.F64) for n in names}
    for n in names:
        x_norm2 += xs[n].pow(2).sum(1)
    for s, blocks in src.chunks():
        for n in names:
            g = blocks[n].reshape(blocks[n].shape[0], -1).to(device, cv.F64)
            e = s + g.shape[0]
            dots[:, s:e] += xs[n] @ g.T
            g_norm2[s:e] += g.pow(2).sum(1)
    if method == "cosine":
        dots = dots / (x_norm2.sqrt()[:, None] * g_norm2.sqrt()[None, :]).clamp_min(1e-300)
    return -dots.cpu()


def gradient_embedding(
    method: str,
    G: GradSource | dict[str, torch.Tensor],
    stats: Stats | None,
    *,
    eig: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]] | None = None,
    damping_factor: float = 0.1,
    dim: int = EMBED_DIM,
    seed: int = 0,
    power_iters: int = 1,
    shapes: dict[str, tuple[int, ...]] | None = None,
    device: torch.device | str = "cpu",
    cache_bytes: int = EMBED_CACHE_BYTES,
) -> torch.Tensor:
    """Training rows embedded for clustering, (n rows of ``G``, dim) fp32 (computed in fp64): their top principal
    components over all ranks' rows.

    For EK-FAC / K-FAC each row is the half-preconditioned gradient ``H^-1/2 G_i`` in the block's eigenbasis,
    ``(QS^T G_i QA) / sqrt(Lambda + damping)`` (inner products of these are ``<G_i, H^-1 G_j>``, the metric the
    scores use); for the other methods the raw gradient. Per-row gradients of a fine-tuned model are nearly
    orthogonal in full dimension, so a random projection keeps mostly noise; the top principal directions keep what
    rows share, which is what a cluster is. They come from randomized subspace iteration in gradient space (seeded
    start ``Omega``, ``V <- orth(X^T X V)`` ``power_iters`` times, then Rayleigh-Ritz on ``X V``): each step is one
    streamed pass whose (P, k) sums are all-reduced, so ranks never exchange rows; the whitened rows are kept
    between passes when they fit in ``cache_bytes`` (fp64). ``eig`` reuses the
    eigendecompositions `precondition` computed; ``shapes`` ({block: (out, in)}) is needed when a rank has no rows."""
    src = as_source(G)
    names = src.names
    N = src.n_global
    dim = max(1, min(dim, N - 1))
    k = min(N, dim + 10)
    gen = torch.Generator().manual_seed(seed)
    dt = cv.F64  # fp32 is 3x faster here but flips the silhouette choice of k on the bundled example
    white: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None] = dict.fromkeys(names)
    if method in ("ekfac", "kfac") and stats is not None:
        eig = dict(eig or {})
        todo = {n: _factors(stats, n, "cpu") for n in names if n not in eig}
        refit = ekfac_eigenvalues(src, {n: f[:2] for n, f in todo.items()}) if method == "ekfac" and todo else {}
        for n, (QS, QA, lam_S, lam_A) in todo.items():  # one pass for every block precondition did not cover
            lam = refit[n] if method == "ekfac" else cv.kfac_eigenvalues(lam_S, lam_A)
            eig[n] = (QS, QA, lam, cv.default_damping(lam, damping_factor))
        for n, (QS, QA, lam, d) in eig.items():
            white[n] = (QS.to(device, dt), QA.to(device, dt), (lam + d).rsqrt().to(device, dt))

    def rows(blocks: dict[str, torch.Tensor]) -> Iterator[tuple[str, torch.Tensor]]:
        for n in names:
            g = blocks[n].to(device, dt)
            w = white[n]
            if w is not None:
                g = (w[0].T @ g @ w[1]) * w[2]
            yield n, g.reshape(g.shape[0], -1)

    shapes = shapes or src.shapes()
    P = {n: int(shapes[n][0]) * int(shapes[n][1]) for n in names}
    # the whitened rows are needed by every pass: kept when they fit in ``cache_bytes``, else recomputed per pass
    fits = src.n_local * sum(P.values()) * 8 <= cache_bytes
    kept: list[tuple[int, dict[str, torch.Tensor]]] = []

    def whitened() -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
        if kept:
            yield from kept
            return
        for s, blocks in src.chunks():
            xs = dict(rows(blocks))
            if fits:
                kept.append((s, xs))
            yield s, xs

    V = {n: torch.randn(P[n], k, generator=gen, dtype=dt).to(device) for n in names}
    for _ in range(power_iters + 1):
        W = {n: torch.zeros(P[n], k, dtype=dt, device=device) for n in names}
        for _, xs in whitened():
            Y = sum(xs[n] @ V[n] for n in names)
            for n in names:
                W[n] += xs[n].T @ Y
        stacked, _ = torch.linalg.qr(torch.cat([src.dist.all_reduce(W[n]) for n in names]))
        V = dict(zip(names, torch.split(stacked, [P[n] for n in names]), strict=True))
    Y = torch.zeros(src.n_local, k, dtype=dt, device=device)
    for s, xs in whitened():
        Y[s : s + next(iter(xs.values())).shape[0]] = sum(xs[n] @ V[n] for n in names)
    kept.clear()
    evals, evecs = torch.linalg.eigh(src.dist.all_reduce(Y.T @ Y))
    order = torch.argsort(evals, descending=True)[:dim]
    return (Y @ evecs[:, order]).float().cpu()
