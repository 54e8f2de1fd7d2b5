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
from dataclasses import dataclass

import torch

from gradian.attribute import curvature as cv
from gradian.attribute.methods import (
    METHODS,
    Bases,
    Curvature,
    EigenRows,
    Factored,
    Layout,
    Method,
    Preconditioned,
    ekfac_eigenvalues,
    factors_of,
    layout,
    mean_sq_norms,
    method_of,
)
from gradian.attribute.plan import EMBED_CACHE_BYTES, EMBED_DIM
from gradian.attribute.source import GradSource, Stats, as_source

__all__ = ["METHODS", "EigenRows", "Preconditioned", "ekfac_eigenvalues", "gradient_embedding", "harm_scores",
           "mean_sq_norms", "precondition"]  # fmt: skip


def _fill(dst: torch.Tensor, blocks: dict[str, torch.Tensor], at: Layout) -> None:
    """``dst`` (n, F) fp64 <- the chunk's n rows (``blocks``), each block at its place in ``at``."""
    n = dst.shape[0]
    for name, (off, o, i) in at.items():
        dst[:, off : off + o * i].copy_(blocks[name].to(dst.device).reshape(n, o * i))  # converted on the device


def _in_bases(M: torch.Tensor, at: Layout, bases: Bases, back: bool = False) -> torch.Tensor:
    """The rows of ``M`` (m, F) with each block in ``bases`` rotated into its eigenbasis, ``QS^T M_b QA`` (``back``:
    out of it, ``QS M_b QA^T``); ``M`` itself when ``bases`` is empty."""
    if not bases:
        return M
    m = M.shape[0]
    out = torch.empty(m, M.shape[1], dtype=cv.F64, device=M.device)
    for name, (off, o, i) in at.items():
        x = M[:, off : off + o * i].reshape(m, o, i)
        if name in bases:
            QS, QA = bases[name]
            x = cv.rotate_rows(x, QS.T, QA.T) if back else cv.rotate_rows(x, QS, QA)
        out[:, off : off + o * i].view(m, o, i).copy_(x)
    return out


def precondition(
    method: str,
    V: dict[str, torch.Tensor],
    G: GradSource | dict[str, torch.Tensor],
    stats: Stats | None,
    damping: float | dict[str, float] | None = None,
    damping_factor: float = 0.1,
    device: torch.device | str = "cpu",
    keep_rows: bool = False,
    cache_bytes: int = EMBED_CACHE_BYTES,
    fisher: GradSource | None = None,
) -> Preconditioned:
    """Apply the method's damped inverse curvature to the query rows ``V[block]`` (M, out, in): the registered
    :class:`gradian.attribute.methods.Method` called ``method``.

    ``G`` is the training gradients (a :class:`GradSource`, read in chunks, or a dict of (N, out, in) tensors).
    ``damping`` (absolute: one number for every block, or a dict per block) overrides ``damping_factor x mean
    eigenvalue`` per block. ``keep_rows`` (EK-FAC): keep the training rows its eigenvalue pass rotates, when they fit
    in ``cache_bytes`` (fp64), as ``rotated``, so that :func:`harm_scores` and :func:`gradient_embedding` need not
    read and rotate them again. ``fisher`` (EK-FAC, ``--fisher true``): the rows the eigenvalues are fitted to,
    gradients at labels sampled from the model (:class:`gradian.attribute.fisher.SampledSource`); ``stats`` then
    holds its covariance sums, and the training rows are not kept (they are not the ones rotated). The other methods
    ignore ``fisher``."""
    if isinstance(damping, dict):
        per_block = damping
    else:
        per_block = {n: damping for n in V} if damping is not None else {}
    m = method_of(method)
    curvature = Curvature(as_source(G), stats, per_block, damping_factor, device, keep_rows, cache_bytes, fisher)
    return m.precondition(V, curvature)


def _padded(n: int) -> int:
    """``n`` rounded up to a multiple of 8: MKL's fp64 products with a few columns run much faster at such widths
    (the padding columns are zeros and are dropped)."""
    return -(-n // 8) * 8


def harm_scores(
    method: str,
    X: dict[str, torch.Tensor],
    G: GradSource | dict[str, torch.Tensor],
    device: torch.device | str = "cpu",
    rotated: EigenRows | None = None,
) -> torch.Tensor:
    """``harm[m, i] = -<X_m, G_i>`` summed over blocks (M, n rows of ``G``, in its order), fp64, on the CPU (computed
    on ``device``); for ``cosine`` the negated cosine similarity of the raw query and training gradients over all
    blocks. One pass over ``G``, or none with ``rotated`` (``G``'s rows in the eigenbases, from :func:`precondition`):
    then ``-<rot(X_m), rot(G_i)>``, the same number (the bases are orthogonal)."""
    src = as_source(G)
    normalized = method_of(method).normalized
    names = list(X)
    M = X[names[0]].shape[0]
    if rotated is not None and all(n in rotated.at for n in names):
        R = rotated.rows
        Xr = torch.zeros(_padded(M), R.shape[1], dtype=cv.F64, device=R.device)
        for n in names:
            off, o, i = rotated.at[n]
            x = X[n].reshape(M, o, i).to(R.device, cv.F64)
            Xr[:M, off : off + o * i] = (cv.rotate(x, *rotated.bases[n]) if n in rotated.bases else x).reshape(M, -1)
        dots = (R @ Xr.T)[:, :M].T
        if normalized:
            norms = Xr[:M].norm(dim=1)[:, None] * torch.linalg.vector_norm(R, dim=1)[None, :]
            dots = dots / norms.clamp_min(1e-300)
        return -dots.contiguous().cpu()
    N = src.n_local
    dots = torch.zeros(M, N, dtype=cv.F64, device=device)
    g_norm2 = torch.zeros(N, dtype=cv.F64, device=device)
    x_norm2 = torch.zeros(M, dtype=cv.F64, device=device)
    xs = {n: X[n].reshape(M, -1).to(device, cv.F64) for n in names}
    for n in names:
        x_norm2 += xs[n].pow(2).sum(1)
    for s, blocks in src.chunks():
        for n in names:
            g = cv.to_f64(blocks[n].reshape(blocks[n].shape[0], -1), device)
            e = s + g.shape[0]
            dots[:, s:e] += xs[n] @ g.T
            if normalized:
                g_norm2[s:e] += g.pow(2).sum(1)
    if normalized:
        dots = dots / (x_norm2.sqrt()[:, None] * g_norm2.sqrt()[None, :]).clamp_min(1e-300)
    return -dots.cpu()


_EMBED_DT = cv.F64  # fp32 is 3x faster here but flips the silhouette choice of k on the bundled example


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
    rotated: EigenRows | None = None,
) -> torch.Tensor:
    """Training rows embedded for clustering, (n rows of ``G``, dim) fp32 (computed in fp64): their top principal
    components over all ranks' rows.

    For EK-FAC / K-FAC each row is the half-preconditioned gradient ``H^-1/2 G_i`` in the block's eigenbasis,
    ``(QS^T G_i QA) / sqrt(Lambda + damping)`` (inner products of these are ``<G_i, H^-1 G_j>``, the metric the
    scores use); for the other methods the raw gradient. Per-row gradients of a fine-tuned model are nearly
    orthogonal in full dimension, so a random projection keeps mostly noise; the top principal directions keep what
    rows share, which is what a cluster is. They come from randomized subspace iteration in gradient space (seeded
    start ``Omega``, ``V <- orth(X^T X V)`` ``power_iters`` times, then Rayleigh-Ritz on ``X V``): each step is one
    streamed pass whose (P, k) sums are all-reduced, so ranks never exchange rows. The whitened rows
    ``X = G Q diag(w)`` (``Q`` the blocks' eigenbases, ``w = (Lambda + damping)^-1/2``) are never formed: the
    products are ``G (Q w V)`` and ``w Q^T (G^T Y)``, ``Q`` applied to the (P, k) side, or with ``rotated`` (the rows
    already in the eigenbases, from :func:`precondition` with its ``eig``) ``R (w V)`` and ``w (R^T Y)``. The rows
    (fp64) are kept between passes when they fit in ``cache_bytes``, else read again per pass. ``eig`` reuses the
    eigendecompositions `precondition` computed; ``shapes`` ({block: (out, in)}) is needed when a rank has no rows."""
    src = as_source(G)
    names = src.names
    N = src.n_global
    dim = max(1, min(dim, N - 1))
    k = min(N, dim + 10)
    m = method_of(method)
    eigen = m.factored and stats is not None
    eig = dict(eig or {}) if eigen else {}
    if not (eigen and rotated is not None and set(rotated.at) == set(names) and set(names) <= set(eig)):
        rotated = None
    R: torch.Tensor | None
    if rotated is not None:
        at, F, R = rotated.at, rotated.rows.shape[1], rotated.rows
    else:
        at, F = layout(names, shapes or src.shapes())
        R = None
    bases: Bases = {}  # the eigenbases raw rows are not in: applied to the (F, k) side of the products instead
    w = None
    if eigen and stats is not None:
        w = _whitening(m, src, stats, eig, at, F, damping_factor, device)
        if rotated is None:
            bases = {n: (eig[n][0].to(device, _EMBED_DT), eig[n][1].to(device, _EMBED_DT)) for n in names}
    if R is None and src.n_local * F * 8 <= cache_bytes:
        R = torch.empty(src.n_local, F, dtype=_EMBED_DT, device=device)
        for s, blocks in src.chunks():
            _fill(R[s : s + next(iter(blocks.values())).shape[0]], blocks, at)
    rows = _EmbeddingRows(src, R, F, at, device)
    del R  # rows holds the cache, and drops it once the last pass is done
    V, k = _top_directions(rows, bases, w, k, seed, power_iters)
    return _principal_components(rows, V, k, bases, w, dim)


def _whitening(
    m: Method,
    src: GradSource,
    stats: Stats,
    eig: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]],
    at: Layout,
    F: int,
    damping_factor: float,
    device: torch.device | str,
) -> torch.Tensor:
    """``w = (Lambda + damping)^-1/2`` per coordinate (F,); completes ``eig`` with the blocks it lacks (one pass)."""
    names = src.names
    assert isinstance(m, Factored)
    todo = {n: factors_of(stats, n, device) for n in names if n not in eig}
    refit = m.eigenvalues(src, todo, device) if todo else {}  # one pass for every block precondition did not cover
    for n, (QS, QA, _, _) in todo.items():
        eig[n] = (QS, QA, refit[n], cv.default_damping(refit[n], damping_factor))
    w = torch.ones(F, dtype=_EMBED_DT, device=device)
    for n in names:
        _, _, lam, d = eig[n]
        off, o, i = at[n]
        w[off : off + o * i] = (lam + d).rsqrt().reshape(-1).to(device, _EMBED_DT)
    return w


@dataclass
class _EmbeddingRows:
    """The training rows (n, F) fp64 in the layout ``at``: the cached ``R``, else read chunk by chunk."""

    src: GradSource
    R: torch.Tensor | None
    F: int
    at: Layout
    device: torch.device | str

    def __call__(self) -> Iterator[tuple[int, torch.Tensor]]:
        """(offset, rows (n, F) fp64) of every chunk: ``R``, else each chunk converted into one reused buffer."""
        if self.R is not None:
            yield 0, self.R
            return
        buf = torch.empty(0, self.F, dtype=_EMBED_DT, device=self.device)
        for s, blocks in self.src.chunks():
            n = next(iter(blocks.values())).shape[0]
            if buf.shape[0] < n:
                buf = torch.empty(n, self.F, dtype=_EMBED_DT, device=self.device)
            _fill(buf[:n], blocks, self.at)
            yield s, buf[:n]


def _top_directions(
    rows: _EmbeddingRows, bases: Bases, w: torch.Tensor | None, k: int, seed: int, power_iters: int
) -> tuple[torch.Tensor, int]:
    """Randomized subspace iteration on the whitened rows ``X``: ``V <- orth(X^T X V)`` from a seeded start,
    ``power_iters`` times; returns ``V`` (F, padded k) and ``k`` (fewer when the adapter has fewer parameters)."""
    src, at, F, device, dt = rows.src, rows.at, rows.F, rows.device, _EMBED_DT
    gen = torch.Generator().manual_seed(seed)
    V = torch.zeros(F, _padded(k), dtype=dt, device=device)  # zero padding columns: faster products
    for n in src.names:
        off, o, i = at[n]
        V[off : off + o * i, :k] = torch.randn(o * i, k, generator=gen, dtype=dt).to(device)
    for _ in range(power_iters + 1):
        if w is not None:
            V *= w[:, None]
        B = _in_bases(V.T, at, bases, back=True).T  # X V = R (Q w V): Q w V in the rows' coordinates
        del V
        Wt = torch.zeros(B.shape[1], F, dtype=dt, device=device) if src.n_local == 0 else None
        for _, x in rows():
            y = x @ B
            Wt = y.T @ x if Wt is None else Wt.addmm_(y.T, x)
        assert Wt is not None
        del B
        Wt = _in_bases(Wt, at, bases)  # X^T Y = w Q^T (R^T Y)
        if w is not None:
            Wt *= w
        Q, _ = torch.linalg.qr(src.dist.all_reduce(Wt[:k]).T)
        del Wt
        k = Q.shape[1]  # fewer than k when a tiny adapter has fewer than k parameters
        V = torch.zeros(F, _padded(k), dtype=dt, device=device)
        V[:, :k] = Q
        del Q
    return V, k


def _principal_components(
    rows: _EmbeddingRows, V: torch.Tensor, k: int, bases: Bases, w: torch.Tensor | None, dim: int
) -> torch.Tensor:
    """Rayleigh-Ritz on ``Y = X V``: the rows' coordinates on the top ``dim`` principal directions, fp32 on CPU."""
    src = rows.src
    if w is not None:
        V *= w[:, None]
    B = _in_bases(V.T, rows.at, bases, back=True).T
    Y = torch.zeros(src.n_local, B.shape[1], dtype=_EMBED_DT, device=rows.device)
    for s, x in rows():
        Y[s : s + x.shape[0]] = x @ B
    Y = Y[:, :k]
    rows.R = None  # the cached rows are no longer needed
    evals, evecs = torch.linalg.eigh(src.dist.all_reduce(Y.T @ Y))
    order = torch.argsort(evals, descending=True)[:dim]
    return (Y @ evecs[:, order]).float().cpu()
