"""The objects a diagnose run produces: a severity, a finding with its evidence and fix, and a skip note."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 3, "warning": 2, "info": 1}[self.value]

    @classmethod
    def parse(cls, value: str | Severity) -> Severity:
        if isinstance(value, Severity):
            return value
        v = str(value).strip().lower()
        aliases = {"e": "error", "w": "warning", "warn": "warning", "i": "info"}
        v = aliases.get(v, v)
        return cls(v)


@dataclass
class Fix:
    """A concrete fix: the text, and where it applies, the config key and its new value, or a command to run."""

    text: str
    key: str | None = None
    value: Any = None
    command: str | None = None
    rows_file: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Finding:
    """One problem found by one rule.

    ``evidence`` uses these keys where they apply: ``rows`` (all affected 0-based row indices), ``file``, ``count``,
    ``total``, ``percent``, ``key``, ``value``, ``source`` (where the value came from), ``steps`` (log steps), plus
    rule-specific extras.
    """

    code: str
    name: str
    severity: Severity
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: Fix | None = None
    cause: str = ""  # the rule's kind of cause: mechanical, content or setup (gradian.diagnose.registry.CAUSES)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity.value,
            "cause": self.cause,
            "message": self.message,
            "evidence": _jsonable(self.evidence),
            "fix": self.fix.to_dict() if self.fix else None,
        }


@dataclass
class Note:
    """A rule that did not run, and why (no tokenizer, no logs, ...)."""

    code: str
    name: str
    reason: str


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)
        return value
    if isinstance(value, (int, str, bool)) or value is None:
        return value
    return str(value)
