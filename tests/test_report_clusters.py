"""Clustering in gradient space: planted groups recovered, k chosen, labels and per-cluster findings."""

from __future__ import annotations

import numpy as np
import pytest

from gradian.report.clusters import (
    cosine_silhouette,
    distinctive_terms,
    fit_clusters,
    normalize_rows,
    pca_2d,
    summarize_clusters,
    terms_of,
)


def two_groups(n_a: int = 30, n_b: int = 20, dim: int = 12, noise: float = 0.3, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = np.eye(dim)[0] * 3 + rng.normal(0, noise, (n_a, dim))
    b = np.eye(dim)[1] * 3 + rng.normal(0, noise, (n_b, dim))
    x = np.vstack([a, b])
    perm = rng.permutation(len(x))
    truth = np.array([0] * n_a + [1] * n_b)[perm]
    # scale rows arbitrarily: cosine clustering must not care about gradient norms
    return x[perm] * rng.uniform(0.1, 10, (len(x), 1)), truth


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def test_planted_two_clusters_recovered_and_k_chosen():
    x, truth = two_groups()
    fit = fit_clusters(x, seed=0)
    assert fit.k == 2
    assert same_partition(fit.assignment, truth)
    assert fit.silhouette is not None and fit.silhouette > 0.5
    assert set(fit.scores_by_k) == set(range(2, 11))  # 50 rows -> k in 2..10
    assert "k=2" in fit.how and "silhouette" in fit.how
    assert fit.coords.shape == (50, 2)


def test_planted_four_clusters_k_chosen():
    rng = np.random.default_rng(3)
    dim = 10
    groups = [np.eye(dim)[g] * 2 + rng.normal(0, 0.2, (15, dim)) for g in range(4)]
    x = np.vstack(groups)
    fit = fit_clusters(x, seed=1)
    assert fit.k == 4
    assert same_partition(fit.assignment, np.repeat(np.arange(4), 15))


def test_deterministic():
    x, _ = two_groups(seed=5)
    a, b = fit_clusters(x, seed=0), fit_clusters(x, seed=0)
    assert np.array_equal(a.assignment, b.assignment) and a.k == b.k and a.how == b.how


def test_too_few_rows_is_one_cluster():
    fit = fit_clusters(np.random.default_rng(0).normal(size=(7, 4)))
    assert fit.k == 1 and set(fit.assignment.tolist()) == {0}
    assert "too few" in fit.how


def test_fixed_k_and_zero_rows():
    x, _ = two_groups()
    x[0] = 0.0  # an all-zero gradient must not crash normalisation
    fit = fit_clusters(x, k=3)
    assert fit.k == 3 and len(set(fit.assignment.tolist())) == 3
    assert np.all(np.isfinite(normalize_rows(x)))


def test_silhouette_and_pca():
    x, truth = two_groups()
    u = normalize_rows(x)
    assert cosine_silhouette(u, truth) > 0.5
    assert cosine_silhouette(u, np.zeros(len(u), dtype=int)) == 0.0
    coords = pca_2d(u)
    assert coords.shape == (len(u), 2)
    # the planted split is along the first principal component
    assert same_partition((coords[:, 0] > 0).astype(int), truth)


def test_distinctive_terms():
    inside = [terms_of("The girl named Zorbax sings"), terms_of("Zorbax the girl dances")]
    outside = [terms_of("A dog found a bone"), terms_of("The dog and the girl")]
    terms = distinctive_terms(inside, outside)
    assert terms[0] == "zorbax"
    assert "the" not in terms and "dog" not in terms


def test_summarize_orders_by_harm_and_joins_findings():
    rows = list(range(10, 20))
    assign = [0, 0, 0, 1, 1, 1, 1, 1, 1, 1]
    scores = {10: 3.0, 11: 2.0, 12: 1.0, 13: 0.1, 14: -0.5, 15: 0.0, 16: 0.0, 17: 0.0, 18: 0.0, 19: -1.0}
    texts = {r: ("zorbax girl" if r < 13 else "dog bone") for r in rows}
    findings = [
        {"code": "D101", "name": "completion_cut", "severity": "warning", "evidence": {"rows": [10, 11, 99]}},
        {"code": "D200", "name": "eval_dup", "severity": "info", "evidence": {"rows": [13], "split": "eval"}},
        {"code": "C1", "name": "lr", "severity": "warning", "evidence": {"key": "learning_rate"}},
    ]
    clusters, row_cluster = summarize_clusters(assign, rows, scores, texts=texts, findings=findings)
    c1, c2 = (c.to_dict() for c in clusters)  # as report.json holds them
    assert c1["id"] == 1 and c1["rows"] == [10, 11, 12] and c1["top_rows"][0] == 10
    assert c1["harm_share"] == pytest.approx(6.0 / 6.1)
    assert c2["harm_share"] == pytest.approx(0.1 / 6.1)
    assert c1["size_share"] == pytest.approx(0.3)
    assert c1["mean_harm"] == pytest.approx(2.0)
    assert c1["label"].startswith("girl") or c1["label"].startswith("zorbax")
    assert [f["code"] for f in c1["findings"]] == ["D101"]
    assert c1["findings"][0]["percent"] == pytest.approx(66.7)
    assert c1["findings"][0]["text"].startswith("67% of this cluster is flagged: completion cut (D101 completion_cut)")
    assert c2["findings"] == []  # eval-row finding and config finding carry no training rows
    assert row_cluster[10] == 1 and row_cluster[19] == 2


def test_summarize_rejects_mismatch():
    with pytest.raises(ValueError):
        summarize_clusters([0, 1], [1, 2, 3], {})
