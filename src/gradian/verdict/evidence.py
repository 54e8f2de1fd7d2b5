"""What the verdict reads, typed and built once: the ranked rows and their harm, the per-item harm, the findings,
the texts, the labels, the gradient directions and the token profiles (:class:`Evidence`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from gradian.attribute.token_profiles import TokenProfiles
from gradian.diagnose.minhash import normalize
from gradian.diagnose.types import Finding


class ClusterLike(Protocol):
    """What the verdict reads of a report cluster: its id and rows."""

    id: int
    rows: list[int]


@dataclass(frozen=True)
class Row:
    """A ranked training row: its index, id, harm and label (its completion when short enough to be one)."""

    index: int
    id: Any = None
    score: float = 0.0
    label: str | None = None

    @classmethod
    def of(cls, e: Any) -> Row:
        """A row from report.json's ``{"index", "id", "score", "label"}`` or any object with those attributes."""
        get: Any = e.get if isinstance(e, Mapping) else lambda k: getattr(e, k, None)
        label = get("label")
        return cls(int(get("index")), get("id"), float(get("score") or 0.0), str(label) if label else None)


def rows_of(examples: Sequence[Any]) -> list[Row]:
    return [e if isinstance(e, Row) else Row.of(e) for e in examples]


def typed_findings(findings: Sequence[Finding | Mapping[str, Any]]) -> list[Finding]:
    """Findings as :class:`Finding` (report.json's dicts read back)."""
    return [f if isinstance(f, Finding) else Finding.from_dict(f) for f in findings]


def label_of(example: Any, words: int) -> str | None:
    """An Example's completion, lowercased with its spaces collapsed, when it has at most ``words`` words (the
    verdict's ``label_words``); None for a longer one, a text row or anything that is not an Example."""
    if isinstance(example, Mapping) or not hasattr(example, "target_text") or example.text is not None:
        return None
    label = normalize(example.target_text())  # the key diagnose's label and repeated-target rules read targets by
    return label if label and len(label.split()) <= words else None


@dataclass
class ItemHarm:
    """The per-item harm as attribution saved it: ``S[i, j]`` is the harm of training row ``rows[j]`` to the
    regressed eval item ``items[i]`` (the items the verdict's rows drive are read from it)."""

    S: np.ndarray
    items: list[int]
    rows: list[int]


def matched_item_harm(
    item_scores: np.ndarray | None,
    query_items: Sequence[int],
    regressed: Sequence[int],
    embedding_index: Sequence[int] | None,
) -> ItemHarm | None:
    """The rows of ``item_scores`` (one per ``query_items`` entry; ``--query all`` scores every item) that belong to
    the ``regressed`` eval items, with the eval index of each and the training row of each column; None when they
    cannot be matched."""
    if item_scores is None:
        return None
    arr = np.asarray(item_scores)
    q = [int(i) for i in query_items]
    if arr.ndim != 2 or len(q) != arr.shape[0]:
        return None
    want = {int(i) for i in regressed}
    pick = [k for k, i in enumerate(q) if i in want]
    cols = [int(i) for i in embedding_index] if embedding_index is not None else list(range(arr.shape[1]))
    if not pick or len(cols) != arr.shape[1]:
        return None
    return ItemHarm(arr[pick], [q[k] for k in pick], cols)


@dataclass
class Evidence:
    """Everything the verdict decides from. ``rows`` are the ranked training rows (harm in ``Row.score``);
    ``S`` the per-item harm of the regressed items with its columns in ``rows`` order (None: no stability check);
    ``embeddings`` the rows' gradient directions in the same order; ``item_harm`` the per-item harm as saved, with the
    eval index of each item (the driven-items step reads it); ``item_texts`` the regressed items' texts."""

    rows: list[Row]
    findings: list[Finding]
    n_rows: int
    n_regressed: int
    S: np.ndarray | None = None
    embeddings: np.ndarray | None = None
    texts: Mapping[int, str] | None = None
    regression: Mapping[str, Any] | None = None
    token_profiles: TokenProfiles | None = None
    item_harm: ItemHarm | None = None
    item_texts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.index = [r.index for r in self.rows]
        self.scores = np.array([r.score for r in self.rows], dtype=np.float64)
        self.finding_dicts = [f.to_dict() for f in self.findings]  # the culprit tests read report.json's dicts
        self.labels = {r.index: r.label for r in self.rows if r.label}
        self.ids = {r.index: r.id for r in self.rows}

    @property
    def harm(self) -> dict[int, float]:
        """Each row's harm, finite (a row without a finite score counts 0)."""
        return {r.index: r.score if math.isfinite(r.score) else 0.0 for r in self.rows}

    def typed(self, finding: Mapping[str, Any]) -> Finding:
        """The typed finding behind one of :attr:`finding_dicts`."""
        for d, f in zip(self.finding_dicts, self.findings, strict=True):
            if d is finding:
                return f
        return Finding.from_dict(finding)


def evidence(
    examples: Sequence[Any],
    findings: Sequence[Finding | Mapping[str, Any]],
    n_regressed: int,
    *,
    n_rows: int | None = None,
    item_scores: np.ndarray | None = None,
    item_rows: Sequence[int] | None = None,
    texts: Mapping[int, str] | None = None,
    regression: Mapping[str, Any] | None = None,
    embeddings: np.ndarray | None = None,
    token_profiles: TokenProfiles | None = None,
    item_harm: ItemHarm | None = None,
    item_texts: Sequence[str] = (),
) -> Evidence:
    """The :class:`Evidence` from report.json's shapes: ``examples`` the ranked rows (``{"index", "id", "score",
    "label"}`` or objects with those attributes); ``item_scores`` the per-item harm of the regressed items (items x
    rows, columns in ``item_rows`` order); ``embeddings`` row j is training row ``item_rows[j]`` (default j)."""
    rows = rows_of(examples)
    index = [r.index for r in rows]
    return Evidence(
        rows,
        typed_findings(findings),
        n_rows if n_rows is not None else len(rows),
        n_regressed,
        aligned_item_scores(item_scores, item_rows, index),
        aligned_embeddings(embeddings, item_rows, index),
        texts,
        regression,
        token_profiles,
        item_harm,
        list(item_texts),
    )


def aligned_item_scores(
    item_scores: np.ndarray | None, item_rows: Sequence[int] | None, rows: Sequence[int]
) -> np.ndarray | None:
    """The per-item harm with its columns in ``rows`` order (zeros for a row it lacks), or None."""
    if item_scores is None or item_rows is None:
        return None
    S = np.asarray(item_scores, dtype=np.float64)
    if S.ndim != 2:
        return None
    col = {int(r): j for j, r in enumerate(item_rows)}
    keep = np.array([col.get(r, -1) for r in rows])
    return np.where(keep >= 0, S[:, np.maximum(keep, 0)], 0.0)


def aligned_embeddings(
    embeddings: np.ndarray | None, embedding_rows: Sequence[int] | None, rows: Sequence[int]
) -> np.ndarray | None:
    """The embeddings in ``rows`` order (zeros for a row without one), or None when there are none."""
    if embeddings is None:
        return None
    emb = np.asarray(embeddings, dtype=np.float64)
    if emb.ndim != 2 or not len(emb):
        return None
    index = list(range(len(emb)))
    if embedding_rows is not None and len(embedding_rows) == len(emb):
        index = [int(r) for r in embedding_rows]
    at = {r: j for j, r in enumerate(index)}
    out = np.zeros((len(rows), emb.shape[1]))
    for i, r in enumerate(rows):
        if r in at:
            out[i] = emb[at[r]]
    return out
