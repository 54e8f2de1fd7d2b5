"""What the verdict reads, typed: the ranked rows and their harm, the per-item harm, the findings, the texts, the
labels, the gradient directions and the token profiles."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


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
