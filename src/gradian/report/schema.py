"""The report's typed schema: the parts of report.json that more than one module writes or reads.

A diagnose finding is :class:`gradian.diagnose.types.Finding` (written by diagnose, read back here with
``Finding.from_dict``). A cluster is :class:`Cluster`: :func:`gradian.report.clusters.summarize_clusters` makes them and
the renderers read them. ``to_dict`` gives exactly the dict report.json holds; ``from_dict`` reads one back (a report
is read, not trusted: a missing field takes the value an empty cluster has).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from gradian.diagnose.types import Finding, Fix

__all__ = ["Cluster", "ClusterFinding", "Finding", "Fix"]


@dataclass
class ClusterFinding:
    """A diagnose finding as it touches one cluster: how many of the cluster's rows it flags."""

    code: str | None
    name: str | None
    severity: str | None
    count: int
    percent: float  # of the cluster's rows, one decimal
    text: str  # "53% of this cluster is flagged: train eval overlap (D105 train_eval_overlap)"
    fix: Any = None  # the finding's fix as report.json holds it

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterFinding:
        return cls(
            code=data.get("code"),
            name=data.get("name"),
            severity=data.get("severity"),
            count=int(data.get("count") or 0),
            percent=float(data.get("percent") or 0.0),
            text=str(data.get("text") or ""),
            fix=data.get("fix"),
        )


@dataclass
class Cluster:
    """A group of training rows with similar gradients, ranked by the harm it carries (``id`` 1 carries the most)."""

    id: int
    size: int
    size_share: float  # of all clustered rows
    harm_share: float  # of the positive harm
    harm_total: float
    mean_harm: float
    n_harmful: int
    rows: list[int]
    top_rows: list[int]  # the most harmful first
    label: str  # its distinctive terms, joined; or a label saved with the report
    terms: list[str] = field(default_factory=list)
    findings: list[ClusterFinding] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cluster:
        return cls(
            id=int(data["id"]),
            size=int(data.get("size") or 0),
            size_share=float(data.get("size_share") or 0.0),
            harm_share=float(data.get("harm_share") or 0.0),
            harm_total=float(data.get("harm_total") or 0.0),
            mean_harm=float(data.get("mean_harm") or 0.0),
            n_harmful=int(data.get("n_harmful") or 0),
            rows=[int(r) for r in data.get("rows") or []],
            top_rows=[int(r) for r in data.get("top_rows") or []],
            label=str(data.get("label") or ""),
            terms=[str(t) for t in data.get("terms") or []],
            findings=[ClusterFinding.from_dict(f) for f in data.get("findings") or []],
        )
