"""The objects a diagnose run produces: a severity, a finding with its evidence and fix, and a skip note."""

from __future__ import annotations

from collections.abc import Mapping
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

    @classmethod
    def from_dict(cls, data: Any) -> Fix | None:
        """A fix as report.json and findings.json hold it (:meth:`to_dict`, or plain text); None for none."""
        if data is None or data == "":
            return None
        if isinstance(data, Mapping):
            return cls(
                text=str(data.get("text") or ""),
                key=data.get("key"),
                value=data.get("value"),
                command=data.get("command"),
                rows_file=data.get("rows_file"),
            )
        return cls(text=str(data))

    def sentence(self) -> str:
        """The fix as one sentence without its full stop: the text, and the config change when there is one."""
        text = self.text.rstrip(".")
        if self.key and self.value is not None:
            text += f" (set {self.key} to {self.value})"
        return text


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        """A finding as report.json and findings.json hold it (:meth:`to_dict`), read back. Reports are read, not
        trusted: a missing field reads as empty, a severity it does not know as info."""
        try:
            severity = Severity.parse(data.get("severity") or "info")
        except ValueError:
            severity = Severity.INFO
        evidence = data.get("evidence")
        return cls(
            code=str(data.get("code") or ""),
            name=str(data.get("name") or ""),
            severity=severity,
            message=str(data.get("message") or ""),
            evidence=dict(evidence) if isinstance(evidence, Mapping) else {},
            fix=Fix.from_dict(data.get("fix")),
            cause=str(data.get("cause") or ""),
        )

    @property
    def title(self) -> str:
        """A short human name: ``truncation (D106 truncation)``; the code alone when there is no name."""
        code = self.code or "?"
        human = self.name.replace("_", " ") if self.name else code
        return f"{human} ({code} {self.name})".strip() if self.name else human

    def train_rows(self) -> list[int]:
        """The training rows the finding flags: ``evidence.rows``, unless the evidence says they are eval rows
        (``evidence.split == "eval"``); entries that are not row numbers are left out."""
        if str(self.evidence.get("split", "train")).lower() == "eval":
            return []
        out = []
        for r in self.evidence.get("rows") or []:
            try:
                out.append(int(r))
            except (TypeError, ValueError):
                continue
        return out


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
