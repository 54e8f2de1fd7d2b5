"""What an attribution returns (:class:`AttributionResult`, report.json's attribution part) and the adapter states
it runs over. No torch."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gradian.attribute.token_profiles import TokenProfiles


@dataclass
class AttributionResult:
    method: str
    settings: dict[str, Any]
    examples: list[dict[str, Any]]  # rank order: {"index", "id", "score", "rank"}
    regressed: list[dict[str, Any]]
    eval_items: list[dict[str, Any]]
    contributions: list[dict[str, Any]]  # top rows split by regressed item
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    no_regression: bool = False
    item_scores: np.ndarray | None = None  # (n query items, n training rows), not in JSON
    scores: np.ndarray | None = None  # (n training rows,) in training-file order (NaN for dropped rows)
    embeddings: np.ndarray | None = None  # (n scored rows, k) rows in gradient space, for clustering
    embedding_index: list[int] | None = None  # training-file row index of each embedding row
    partial: bool = False  # a torchrun rank other than 0: its rows went to rank 0, which holds the result
    eval_examples: list | None = None  # the eval items as scored (generated completions filled in), not in JSON
    options: dict[str, Any] | None = None  # the AttributeOptions as given (gradian.options), report.json "options"
    token_profiles: TokenProfiles | None = None  # where the top rows' harm sits by token; token_profiles.json

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": "gradian.report/1", "method": self.method, "settings": self.settings}
        if self.options is not None:
            out["options"] = self.options
        return out | {
            "no_regression": self.no_regression,
            "examples": self.examples,
            "regressed": self.regressed,
            "eval": self.eval_items,
            "contributions": self.contributions,
            "notes": self.notes,
            "timings": self.timings,
        }

    def write(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "report.json"
        path.write_text(json.dumps(self.to_json(), indent=1, allow_nan=False, default=_json_default))
        return path

    def top(self, k: int = 10) -> list[dict[str, Any]]:
        return self.examples[:k]


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o).__name__)


def finite(x: float | None) -> float | None:
    """``x`` as a float, or None when it is missing or not finite (JSON has no NaN)."""
    return None if x is None or not math.isfinite(x) else float(x)


@dataclass
class AdapterState:
    """One saved state of the adapter to attribute through (``--checkpoints``) and its weight."""

    label: str  # e.g. "checkpoint-41"
    weight: float
    path: Path | None  # adapter dir whose weights are loaded first; None: the model as loaded
    store_parts: dict[str, Any]  # what identifies its gradients in the store (the adapter's fingerprint)
    recorded: Path | None = None  # a GradianCallback record of its training gradients (gradian.attribute.recorded)


@dataclass(frozen=True)
class RowIds:
    """The ``id`` of every training row and every eval item (None where a row has none)."""

    train: Sequence[str | None]
    eval: Sequence[str | None]

    @classmethod
    def none(cls, n_train: int, n_eval: int) -> RowIds:
        return cls([None] * n_train, [None] * n_eval)
