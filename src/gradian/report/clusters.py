"""Cluster training rows in gradient space and describe each cluster.

Two steps, both pure numpy and deterministic:

- :func:`fit_clusters` groups the rows of an ``(n_rows, k)`` embedding (the preconditioned, projected per-row
  gradients ``gradian attribute`` saves) by direction: rows are L2-normalised and grouped by spherical k-means
  (cosine similarity), k chosen by the mean cosine silhouette over k = 2..min(12, n // 5): each k is fitted on a
  fixed-seed sample of at most 3000 rows and scored on at most 1000 of them; ties (within 0.005) go to the smaller k;
  the chosen k is then fitted on all rows. It also returns a 2-D map (PCA of the
  normalised rows via SVD) for the scatter plot.
- :func:`summarize_clusters` turns an assignment into what the report shows: size, share of the total positive harm,
  mean harm, top rows, a label from distinctive terms, and the diagnose findings the cluster's rows carry.

Cluster ids are 1-based and ordered by harm: cluster 1 carries the most positive harm.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradian.diagnose.types import Finding
from gradian.report.schema import Cluster, ClusterFinding
from gradian.verdict.terms import distinctive_terms, terms_of

MAX_K = 12
MIN_ROWS_PER_CLUSTER = 5  # k <= n // 5
SILHOUETTE_SAMPLE = 1000
FIT_SAMPLE = 3000  # rows k-means sees while choosing k
TIE = 0.005  # silhouettes this close count as equal; the smaller k wins
WEAK = 0.1  # a best silhouette below this means the rows have no clear group structure
MAP_POINTS = 3000  # rows kept for the 2-D map
FLAG_SHARE = 0.5  # a finding "explains" a cluster when it flags at least this share of its rows


@dataclass
class Clustering:
    """The result of :func:`fit_clusters`: one cluster number (0-based, arbitrary order) per embedding row."""

    assignment: np.ndarray  # (n_rows,) int
    k: int
    how: str
    silhouette: float | None = None
    scores_by_k: dict[int, float] = field(default_factory=dict)
    coords: np.ndarray | None = None  # (n_rows, 2) PCA map of the normalised rows


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalise each row; all-zero rows stay zero."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"embeddings must be a 2-D (n_rows, k) array, got shape {x.shape}")
    x = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def _init_plusplus(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding with cosine distance (1 - cos) on unit rows."""
    n = x.shape[0]
    centers = [x[rng.integers(n)]]
    dist = 1.0 - x @ centers[0]
    for _ in range(1, k):
        d = np.clip(dist, 0.0, None)
        total = d.sum()
        idx = int(rng.integers(n)) if total <= 0 else int(rng.choice(n, p=d / total))
        centers.append(x[idx])
        dist = np.minimum(dist, 1.0 - x @ x[idx])
    return np.stack(centers)


def spherical_kmeans(
    x: np.ndarray, k: int, *, seed: int = 0, n_init: int = 3, max_iter: int = 60, tol: float = 1e-3
) -> tuple[np.ndarray, np.ndarray, float]:
    """Spherical k-means on unit rows. Returns (assignment, unit centers, total cosine similarity to the centers);
    the best of ``n_init`` seeded restarts. Stops when fewer than ``tol`` of the rows change cluster."""
    n = x.shape[0]
    k = max(1, min(k, n))
    best: tuple[np.ndarray, np.ndarray, float] | None = None
    for r in range(n_init):
        rng = np.random.default_rng(seed * 1009 + r)
        centers = _init_plusplus(x, k, rng)
        assign = np.full(n, -1)
        for _ in range(max_iter):
            sims = x @ centers.T
            new = np.argmax(sims, axis=1)
            changed = int((new != assign).sum())
            assign = new
            counts = np.bincount(assign, minlength=k)
            for j in np.flatnonzero(counts == 0):  # re-seed an empty cluster at the row farthest from its center
                far = int(np.argmin(sims[np.arange(n), assign]))
                assign[far] = j
                counts = np.bincount(assign, minlength=k)
            # each cluster's sum of rows, added in row order as np.add.at would, ten times faster
            sums = np.stack([np.bincount(assign, weights=x[:, j], minlength=k) for j in range(x.shape[1])], axis=1)
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            centers = np.divide(sums, norms, out=centers.copy(), where=norms > 0)
            if changed <= tol * n:
                break
        objective = float((x @ centers.T)[np.arange(n), assign].sum())
        if best is None or objective > best[2] + 1e-9:
            best = (assign.copy(), centers.copy(), objective)
    assert best is not None
    return best


def cosine_silhouette(x: np.ndarray, assign: np.ndarray) -> float:
    """Mean silhouette with cosine distance (1 - cos) on unit rows; rows alone in their cluster score 0."""
    labels = np.unique(assign)
    if len(labels) < 2:
        return 0.0
    onehot = (assign[:, None] == labels[None, :]).astype(np.float64)
    counts = onehot.sum(axis=0)
    dist = np.clip(1.0 - x @ x.T, 0.0, 2.0)
    sums = dist @ onehot  # (m, n_labels): summed distance to each cluster
    own = np.searchsorted(labels, assign)
    own_count = counts[own]
    a = np.where(own_count > 1, sums[np.arange(len(x)), own] / np.maximum(own_count - 1, 1), 0.0)
    mean_other = sums / counts[None, :]
    mean_other[np.arange(len(x)), own] = np.inf
    b = mean_other.min(axis=1)
    denom = np.maximum(a, b)
    s = np.where((own_count > 1) & (denom > 0), (b - a) / np.where(denom > 0, denom, 1.0), 0.0)
    return float(s.mean())


def pca_2d(x: np.ndarray) -> np.ndarray:
    """Project rows onto their first two principal components (numpy SVD). Pads with zeros below rank 2."""
    n = x.shape[0]
    if n == 0:
        return np.zeros((0, 2))
    centered = x - x.mean(axis=0, keepdims=True)
    _, s, vt = np.linalg.svd(centered, full_matrices=False)
    comps = vt[:2]
    out = centered @ comps.T
    if out.shape[1] < 2:
        out = np.hstack([out, np.zeros((n, 2 - out.shape[1]))])
    # deterministic sign: the largest-magnitude coordinate of each axis is positive
    for j in range(2):
        col = out[:, j]
        if col.size and col[np.argmax(np.abs(col))] < 0:
            out[:, j] = -col
    return out


def _one_blas_thread():
    """Small matrix products run fastest on one BLAS thread (and don't fight a busy machine's other work)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def fit_clusters(embeddings: np.ndarray, *, k: int | None = None, seed: int = 0, max_k: int = MAX_K) -> Clustering:
    """Cluster embedding rows by cosine similarity. ``k=None`` chooses k by silhouette (see the module docstring)."""
    with _one_blas_thread():
        return _fit_clusters(embeddings, k=k, seed=seed, max_k=max_k)


def _fit_clusters(embeddings: np.ndarray, *, k: int | None, seed: int, max_k: int) -> Clustering:
    x = normalize_rows(embeddings)
    n = x.shape[0]
    rng = np.random.default_rng(seed)
    coords = pca_2d(x)
    hi = min(max_k, n // MIN_ROWS_PER_CLUSTER)
    if k is not None:
        k = max(1, min(int(k), n))
        assign, _, _ = spherical_kmeans(x, k, seed=seed) if n else (np.zeros(0, int), None, 0.0)
        how = f"spherical k-means (cosine) on L2-normalised gradient embeddings, k={k} set by the caller, seed {seed}"
        return Clustering(np.asarray(assign, dtype=int), k, how, None, {}, coords)
    if hi < 2:
        how = f"one cluster: {n} rows is too few to split (k is chosen from 2..min({max_k}, n/{MIN_ROWS_PER_CLUSTER}))"
        return Clustering(np.zeros(n, dtype=int), 1, how, None, {}, coords)

    fit_idx = np.sort(rng.choice(n, size=FIT_SAMPLE, replace=False)) if n > FIT_SAMPLE else np.arange(n)
    xf = x[fit_idx]
    sil_pos = (
        np.sort(rng.choice(len(xf), size=SILHOUETTE_SAMPLE, replace=False))
        if len(xf) > SILHOUETTE_SAMPLE
        else np.arange(len(xf))
    )
    scores: dict[int, float] = {}
    for kk in range(2, hi + 1):
        assign, _, _ = spherical_kmeans(xf, kk, seed=seed)
        scores[kk] = cosine_silhouette(xf[sil_pos], assign[sil_pos])
    best_score = max(scores.values())
    best_k = min(kk for kk, s in scores.items() if s >= best_score - TIE)
    assign, _, _ = spherical_kmeans(x, best_k, seed=seed)
    sample_note = f" on a {len(sil_pos)}-row sample" if len(sil_pos) < n else ""
    how = (
        f"spherical k-means (cosine similarity) on L2-normalised gradient embeddings; k={best_k} chosen by the best "
        f"mean cosine silhouette ({scores[best_k]:.2f}) over k=2..{hi}{sample_note}, ties within {TIE} to the smaller "
        f"k; seed {seed}"
    )
    if scores[best_k] < WEAK:
        how += " (weak structure: a silhouette this low means the clusters split a continuum, not natural groups)"
    return Clustering(np.asarray(assign, dtype=int), best_k, how, scores[best_k], scores, coords)


def summarize_clusters(
    assignment: Sequence[int] | np.ndarray,
    row_indices: Sequence[int],
    scores: Mapping[int, float],
    *,
    texts: Mapping[int, str] | None = None,
    findings: Sequence[Finding | Mapping[str, Any]] = (),
    top_rows: int = 10,
    labels: Mapping[int, str] | None = None,
) -> tuple[list[Cluster], dict[int, int]]:
    """Describe each cluster. ``assignment[j]`` is the cluster of training row ``row_indices[j]``; ``scores`` maps a
    row index to its harm (missing rows count as 0). Returns (clusters, row index -> 1-based cluster id), clusters
    ordered by positive harm (id 1 = most harmful). ``labels`` (old cluster number -> label) is used where ``texts``
    cannot give one."""
    assignment = np.asarray(assignment, dtype=int)
    rows = [int(r) for r in row_indices]
    if len(rows) != len(assignment):
        raise ValueError(f"{len(assignment)} cluster assignments for {len(rows)} rows")
    n = len(rows)
    harm = np.array([float(scores.get(r, 0.0)) for r in rows])
    pos = np.clip(harm, 0.0, None)
    total_pos = float(pos.sum())
    groups = sorted(set(assignment.tolist()))
    order = sorted(groups, key=lambda g: (-float(pos[assignment == g].sum()), -int((assignment == g).sum()), g))
    new_id = {g: i + 1 for i, g in enumerate(order)}
    row_cluster = {rows[j]: new_id[int(assignment[j])] for j in range(n)}

    term_sets = {r: terms_of(texts[r]) for r in rows if texts and r in texts} if texts else {}
    typed = [f if isinstance(f, Finding) else Finding.from_dict(f) for f in findings]
    flagged = [(f, s) for f in typed if (s := set(f.train_rows()))]

    clusters = []
    for g in order:
        mask = assignment == g
        members = [rows[j] for j in np.flatnonzero(mask)]
        member_set = set(members)
        size = len(members)
        c_pos = float(pos[mask].sum())
        ranked = sorted(members, key=lambda r: (-float(scores.get(r, 0.0)), r))
        label = ""
        terms: list[str] = []
        if term_sets:
            inside = [term_sets[r] for r in members if r in term_sets]
            outside = [term_sets[r] for r in rows if r not in member_set and r in term_sets]
            terms = distinctive_terms(inside, outside)
            label = " / ".join(terms) if terms else "(no distinctive terms)"
        elif labels and g in labels:
            label = labels[g]
        cf: list[ClusterFinding] = []
        for f, frows in flagged:
            hit = len(frows & member_set)
            if not hit:
                continue
            share = hit / size if size else 0.0
            cf.append(
                ClusterFinding(
                    code=f.code,
                    name=f.name,
                    severity=f.severity.value,
                    count=hit,
                    percent=round(100.0 * share, 1),
                    text=f"{100.0 * share:.0f}% of this cluster is flagged: {f.title}",
                    fix=None if f.fix is None else f.fix.to_dict(),
                )
            )
        cf.sort(key=lambda d: (-d.count, str(d.code)))
        cluster = Cluster(
            id=new_id[g],
            size=size,
            size_share=size / n if n else 0.0,
            harm_share=c_pos / total_pos if total_pos > 0 else 0.0,
            harm_total=c_pos,
            mean_harm=float(harm[mask].mean()) if size else 0.0,
            n_harmful=int((harm[mask] > 0).sum()),
            rows=sorted(members),
            top_rows=ranked[:top_rows],
            label=label,
            terms=terms,
            findings=cf,
        )
        clusters.append(cluster)
    return clusters, row_cluster
