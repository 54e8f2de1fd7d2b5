"""The attribution methods: one class per ``--method``, each applying its damped inverse curvature to the query
gradients, registered by name in :data:`REGISTRY`.

- ``ekfac`` / ``kfac`` (:class:`EKFAC`, :class:`KFAC`): Kronecker factors per block, eigenvalues refitted to the
  training rows in the factors' eigenbasis (EK-FAC) or the products of the factors' eigenvalues (K-FAC);
- ``datainf`` (:class:`DataInf`): DataInf's closed form per block, damped by a share of the mean squared gradient;
- ``exact`` (:class:`Exact`): the damped empirical Fisher inverted through the Woodbury identity (N x N kernel);
- ``identity`` / ``cosine`` (:class:`Identity`, :class:`Cosine`): no curvature (cosine also normalises the scores).

The option layer is torch-free, so :data:`gradian.options.attribute.METHODS` keeps the names and a test checks that
the registry and that list agree (and :data:`~gradian.options.attribute.FACTOR_METHODS` the ``factored`` ones).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from gradian.attribute import curvature as cv
from gradian.attribute.plan import EMBED_CACHE_BYTES
from gradian.attribute.source import GradSource, Stats
from gradian.errors import GradianError

Layout = dict[str, tuple[int, int, int]]  # block: (offset, out, in) in a row of every block side by side
Bases = dict[str, tuple[torch.Tensor, torch.Tensor]]  # block: (QS, QA), the Kronecker eigenbasis
Factors = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # QS, QA, lam_S, lam_A
ROTATE_ROWS_CPU = 128  # rows rotated at a time on a CPU (one block's intermediates stay in cache)


@dataclass
class EigenRows:
    """This rank's training rows in the blocks' Kronecker eigenbases, kept by EK-FAC's :meth:`Method.precondition`
    for :func:`~gradian.attribute.scores.harm_scores` and :func:`~gradian.attribute.scores.gradient_embedding`:
    ``rows`` (n local rows, F) fp64 on the scoring device, row i holding ``QS^T G_i QA`` of every block flattened, at
    ``at[block] = (offset, out, in)``; ``bases`` {block: (QS, QA)}."""

    rows: torch.Tensor
    at: Layout
    bases: Bases


@dataclass
class Preconditioned:
    """Preconditioned query rows per block and what was used."""

    X: dict[str, torch.Tensor]
    damping: dict[str, float] = field(default_factory=dict)
    # EK-FAC / K-FAC only: per block (QS, QA, eigenvalues, damping), reused by gradient_embedding
    eig: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]] = field(default_factory=dict)
    # EK-FAC with ``keep_rows`` only, when they fit: the training rows in the eigenbases (the eigenvalue pass's)
    rotated: EigenRows | None = None


@dataclass(frozen=True)
class Curvature:
    """What a method may read besides the query rows: the training rows, their covariance sums and how to damp."""

    src: GradSource  # the training gradients
    stats: Stats | None  # their covariance sums (the Kronecker-factored methods)
    damping: dict[str, float]  # absolute damping per block, where given
    damping_factor: float = 0.1  # else this share of the block's mean eigenvalue
    device: torch.device | str = "cpu"
    keep_rows: bool = False  # EK-FAC: keep the rows its eigenvalue pass rotates (when they fit in cache_bytes)
    cache_bytes: int = EMBED_CACHE_BYTES
    fisher: GradSource | None = None  # EK-FAC, --fisher true: the sampled-label rows the eigenvalues are fitted to


class Method(ABC):
    """One ``--method``: its damped inverse curvature applied to the query rows ``V[block]`` (M, out, in)."""

    name: ClassVar[str]
    factored: ClassVar[bool] = False  # Kronecker factors: --fisher true applies, the clustering embedding is whitened
    normalized: ClassVar[bool] = False  # harm is the negated cosine similarity instead of the inner product

    @abstractmethod
    def precondition(self, V: dict[str, torch.Tensor], c: Curvature) -> Preconditioned: ...


class Identity(Method):
    """No curvature: the raw query gradients."""

    name = "identity"

    def precondition(self, V: dict[str, torch.Tensor], c: Curvature) -> Preconditioned:
        return Preconditioned({n: V[n].to(cv.F64) for n in V})


class Cosine(Identity):
    """No curvature, and the harm normalised: the negated cosine similarity of the query and training gradients."""

    name = "cosine"
    normalized = True


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


def _gradient_damping(names: list[str], c: Curvature) -> dict[str, float]:
    """Per block: the given damping, else ``damping_factor`` x the mean squared gradient (one pass when needed)."""
    if all(n in c.damping for n in names):
        return c.damping
    ms = mean_sq_norms(c.src)
    return {n: c.damping[n] if n in c.damping else max(c.damping_factor * ms[n], 1e-30) for n in names}


class Exact(Method):
    """The damped empirical Fisher of the training rows, inverted exactly (Woodbury, an N x N kernel)."""

    name = "exact"

    def precondition(self, V: dict[str, torch.Tensor], c: Curvature) -> Preconditioned:
        names = list(V)
        per_block = _gradient_damping(names, c)
        if c.src.dist.active:
            raise GradianError(
                "--method exact needs every training row in one process (an N x N kernel)",
                fix="run it without torchrun, or use --method ekfac",
            )
        Gm = c.src.materialize()
        Gs = [Gm[n].to(c.device) for n in names]
        ds = [per_block[n] for n in names]
        Xs = cv.woodbury_precondition([V[n].to(c.device) for n in names], Gs, ds)
        return Preconditioned({n: x.cpu() for n, x in zip(names, Xs, strict=True)}, dict(zip(names, ds, strict=True)))


class DataInf(Method):
    """DataInf: the inverse of each row's damped rank-one Fisher, averaged (one pass)."""

    name = "datainf"

    def precondition(self, V: dict[str, torch.Tensor], c: Curvature) -> Preconditioned:
        names = list(V)
        per_block = _gradient_damping(names, c)
        src, device = c.src, c.device
        V2 = {n: V[n].reshape(V[n].shape[0], -1).to(device=device, dtype=cv.F64) for n in names}
        corr = {n: torch.zeros_like(V2[n]) for n in names}
        for _, blocks in src.chunks():
            for n in names:
                g = cv.to_f64(blocks[n], device)
                corr[n] += cv.datainf_correction(V2[n], g.reshape(g.shape[0], -1), per_block[n])
        N = max(src.n_global, 1)
        out: dict[str, torch.Tensor] = {}
        used: dict[str, float] = {}
        for n in names:
            d = per_block[n]
            out[n] = ((V2[n] - src.dist.all_reduce(corr[n]) / N) / d).reshape(V[n].shape).cpu()
            used[n] = d
        return Preconditioned(out, used)


def factors_of(stats: Stats, n: str, device: torch.device | str) -> Factors:
    """Block ``n``'s Kronecker factors, eigendecomposed: (QS, QA, lam_S, lam_A)."""
    A, S = cv.kfac_factors(stats.A_sum[n].to(device), stats.S_sum[n].to(device), stats.n_tokens, stats.n_examples)
    lam_A, QA = cv.eigh64(A)
    lam_S, QS = cv.eigh64(S)
    return QS, QA, lam_S, lam_A


class Factored(Method):
    """The Kronecker-factored methods: factors per block, eigenvalues in their eigenbasis, damped inverse."""

    factored = True

    @abstractmethod
    def eigenvalues(
        self, src: GradSource, fac: dict[str, Factors], device: torch.device | str
    ) -> dict[str, torch.Tensor]:
        """The eigenvalues (out, in) of every block of ``fac`` in its factors' eigenbasis."""

    def _fit(self, V: dict[str, torch.Tensor], fac: dict[str, Factors], c: Curvature
             ) -> tuple[dict[str, torch.Tensor], EigenRows | None]:  # fmt: skip
        """The eigenvalues :meth:`precondition` uses, and the rotated training rows when it keeps them."""
        return self.eigenvalues(c.src, fac, c.device), None

    def precondition(self, V: dict[str, torch.Tensor], c: Curvature) -> Preconditioned:
        assert c.stats is not None
        names = list(V)
        fac = {n: factors_of(c.stats, n, c.device) for n in names}
        lams, rotated = self._fit(V, fac, c)
        out: dict[str, torch.Tensor] = {}
        used: dict[str, float] = {}
        eig: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]] = {}
        for n in names:
            QS, QA = fac[n][0], fac[n][1]
            lam = lams[n]
            d = c.damping[n] if n in c.damping else cv.default_damping(lam, c.damping_factor)
            out[n] = cv.eigen_precondition(V[n].to(c.device), QS, QA, lam, d).cpu()
            eig[n] = (QS, QA, lam, d)
            used[n] = d
        return Preconditioned(out, used, eig, rotated)


class KFAC(Factored):
    """K-FAC: a block's eigenvalues are the products of its factors' eigenvalues."""

    name = "kfac"

    def eigenvalues(
        self, src: GradSource, fac: dict[str, Factors], device: torch.device | str
    ) -> dict[str, torch.Tensor]:
        return {n: cv.kfac_eigenvalues(f[2], f[3]) for n, f in fac.items()}


class EKFAC(Factored):
    """EK-FAC: a block's eigenvalues refitted to the training rows (or the sampled-label rows) in the eigenbasis."""

    name = "ekfac"

    def eigenvalues(
        self, src: GradSource, fac: dict[str, Factors], device: torch.device | str
    ) -> dict[str, torch.Tensor]:
        return ekfac_eigenvalues(src, {n: (f[0], f[1]) for n, f in fac.items()}, device)

    def _fit(self, V: dict[str, torch.Tensor], fac: dict[str, Factors], c: Curvature
             ) -> tuple[dict[str, torch.Tensor], EigenRows | None]:  # fmt: skip
        names = list(V)
        bases = {n: (fac[n][0], fac[n][1]) for n in names}
        at, F = layout(names, {n: tuple(V[n].shape[1:]) for n in names})
        keep = rotated = None
        lam_src = c.fisher if c.fisher is not None else c.src
        if c.keep_rows and c.fisher is None and c.src.n_local * F * 8 <= c.cache_bytes:
            keep = torch.empty(c.src.n_local, F, dtype=cv.F64, device=c.device)
            rotated = EigenRows(keep, at, bases)
        return _ekfac_lams(square_sums(lam_src, at, F, bases, c.device, keep), lam_src, at, names), rotated


REGISTRY: dict[str, Method] = {m.name: m for m in (EKFAC(), KFAC(), DataInf(), Exact(), Identity(), Cosine())}
METHODS = tuple(REGISTRY)


def method_of(name: str) -> Method:
    """The registered method called ``name`` (ValueError for an unknown one; the options check names first)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown method {name!r}")
    return REGISTRY[name]


# --- the rows in the eigenbases (EK-FAC's eigenvalue pass, kept for the scores and the embedding) -----------------


def layout(names: list[str], shapes: dict[str, tuple[int, ...]]) -> tuple[Layout, int]:
    """Every block's (offset, out, in) in a row of the blocks side by side in ``names`` order, and the row's width."""
    at: Layout = {}
    off = 0
    for n in names:
        o, i = int(shapes[n][0]), int(shapes[n][1])
        at[n] = (off, o, i)
        off += o * i
    return at, off


def rotate_step(device: torch.device | str) -> int:
    """Rows rotated at a time: on a CPU few enough that one block's intermediates stay in cache."""
    return ROTATE_ROWS_CPU if torch.device(device).type == "cpu" else 4096


def square_sums(
    src: GradSource, at: Layout, F: int, bases: Bases, device: torch.device | str, keep: torch.Tensor | None = None
) -> torch.Tensor:
    """This rank's ``sum_i x_i^2`` (F,) over its rows ``x_i`` in the eigenbases (``bases`` has every block of ``at``),
    one pass; the rows are written to ``keep`` (n local, F) when it is given."""
    step = rotate_step(device)
    total = torch.zeros(F, dtype=cv.F64, device=device)
    for s, blocks in src.chunks():
        n = next(iter(blocks.values())).shape[0]
        for a in range(0, n, step):
            b = min(n, a + step)
            for name, (off, o, i) in at.items():
                z = cv.rotate_rows(blocks[name][a:b], *bases[name])
                total[off : off + o * i] += (z * z).sum(0).reshape(-1)
                if keep is not None:
                    keep[s + a : s + b, off : off + o * i].view(b - a, o, i).copy_(z)
    return total


def _ekfac_lams(sums: torch.Tensor, src: GradSource, at: Layout, names: list[str]) -> dict[str, torch.Tensor]:
    """The EK-FAC eigenvalues (out, in) of blocks ``names`` from this rank's square sums (all-reduced here)."""
    mean = src.dist.all_reduce(sums) / max(src.n_global, 1)
    return {n: mean[at[n][0] : at[n][0] + at[n][1] * at[n][2]].view(at[n][1], at[n][2]) for n in names}


def ekfac_eigenvalues(src: GradSource, bases: Bases, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """EK-FAC eigenvalues ``mean_i (QS^T G_i QA)^2`` of every block in ``bases`` ({block: (QS, QA)}), one pass."""
    at, F = layout(list(bases), {n: (QS.shape[0], QA.shape[0]) for n, (QS, QA) in bases.items()})
    return _ekfac_lams(square_sums(src, at, F, bases, device), src, at, list(bases))
