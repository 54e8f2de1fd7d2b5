"""The verdict, typed (report.json ``verdict``): what :func:`gradian.verdict.make.make_verdict` decides, what the
renderers show and what ``gradian verify`` drops. ``to_dict`` writes report.json's keys in their order; ``from_dict``
reads a verdict back (missing keys empty: an older report loads)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gradian.numbers import finite_float
from gradian.record import Record


def _ints(v: Any) -> list[int]:
    return [int(r) for r in v or []]


@dataclass
class Confidence:
    """How sure, and its level. ``basis`` "head": the resampled heads' mean agreement with the head; "finding": the
    least share of the resamples in which a finding's flagged rows still carry the harm (no head stood out)."""

    stability: float | None = None
    level: str = "unmeasured"  # high | medium | low | unmeasured
    basis: str = "head"

    def to_dict(self) -> dict[str, Any]:
        return {"stability": self.stability, "level": self.level, "basis": self.basis}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Confidence:
        return cls(data.get("stability"), str(data.get("level") or "unmeasured"), str(data.get("basis") or "head"))


@dataclass
class SharedFinding(Record):
    """A finding as a culprit group's shared trait: how many of the group's rows it flags, and its fix (or, as a
    group's defining ``finding``, its code and name only)."""

    code: str | None = None
    name: str | None = None
    count: int = 0
    share: float = 0.0
    fix: Any = None  # the finding's fix as report.json holds it
    target: str | None = None  # the one completion the flagged rows share, when the finding names it (a label)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SharedFinding:
        return cls._read(data, **{k: data.get(k, cls.default_of(k)) for k in cls.typed()})

    @property
    def title(self) -> str:
        """``truncation (D106 truncation)``, as :attr:`gradian.diagnose.types.Finding.title`."""
        code = self.code or "?"
        return f"{self.name.replace('_', ' ')} ({code} {self.name})" if self.name else code


@dataclass
class VerdictGroup(Record):
    """Culprit rows that share one thing (:class:`gradian.verdict.culprits.Group` as report.json holds it; keys it
    gains later are kept)."""

    cause: str = ""  # mechanical | content
    rows: list[int] = field(default_factory=list)  # most harmful first
    size: int = 0
    harm_share: float = 0.0
    finding: SharedFinding | None = None  # the mechanical finding that defines it (code and name)
    shared: list[SharedFinding] = field(default_factory=list)
    terms: list[str] = field(default_factory=list)
    by_direction: int = 0  # rows that joined it by their gradient direction
    by_finding: int = 0  # rows that joined it because the carrying finding that describes it flags them
    tokens: list[str] = field(default_factory=list)  # the token keys its harm sits on
    token_hold: float | None = None  # share of the rows holding those tokens whose harm sits there too
    by_tokens: int = 0  # rows that joined it because their harm sits on its tokens
    off_tokens: list[int] = field(default_factory=list)  # rows it let go: none of their harm sits on its tokens
    label: str | None = None  # the one completion most of its rows share (a content group: what a label teaches)
    label_share: float | None = None  # the share of its rows with that completion
    aside: str = ""  # set aside: "" (too light or too few) or "bulk" (the top of a forgetting bulk)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VerdictGroup:
        f = data.get("finding")
        return cls._read(
            data,
            cause=str(data.get("cause") or ""),
            rows=_ints(data.get("rows")),
            size=data.get("size", len(data.get("rows") or [])),
            harm_share=data.get("harm_share") or 0.0,
            finding=SharedFinding.from_dict(f) if isinstance(f, Mapping) else None,
            shared=[SharedFinding.from_dict(s) for s in data.get("shared") or []],
            terms=[str(t) for t in data.get("terms") or []],
            by_direction=data.get("by_direction") or 0,
            by_finding=data.get("by_finding") or 0,
            tokens=[str(t) for t in data.get("tokens") or []],
            token_hold=data.get("token_hold"),
            by_tokens=data.get("by_tokens") or 0,
            off_tokens=_ints(data.get("off_tokens")),
            label=data.get("label"),
            label_share=data.get("label_share"),
            aside=str(data.get("aside") or ""),
        )


@dataclass
class ConfigChange:
    """A setup error's config key, its value now, and the fix."""

    code: str | None
    name: str | None
    key: str | None
    value: Any
    fix: Any

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "name": self.name, "key": self.key, "value": self.value, "fix": self.fix}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConfigChange:
        return cls(data.get("code"), data.get("name"), data.get("key"), data.get("value"), data.get("fix"))


@dataclass
class How(Record):
    """How the verdict was decided (report.json ``verdict.how``: :class:`gradian.verdict.culprits.Culprits`
    as it writes it, ``head`` cut to 200 rows; keys it gains later are kept)."""

    concentrated: bool = False
    head: list[int] = field(default_factory=list)
    head_share: float = 0.0
    stability: float | None = None
    basis: str = "head"  # what stability measures: "head" | "finding" (see Confidence)
    raw_head: int = 0  # rows whose harm stood out on their own in the full set
    groups: list[VerdictGroup] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)  # findings whose flagged rows carry the harm
    hints: list[dict[str, Any]] = field(default_factory=list)  # gradian.verdict.term_hints.TermHint.to_dict()
    leads: list[dict[str, Any]] = field(default_factory=list)  # gradian.verdict.label_leads.LabelLead.to_dict()
    finding_leads: list[dict[str, Any]] = field(default_factory=list)  # verdict.finding_leads.FindingLead.to_dict()
    undriven: list[dict[str, Any]] = field(default_factory=list)  # culprits.UndrivenRead: heads on undriven items
    set_aside: list[VerdictGroup] = field(default_factory=list)  # content groups too light or too few (culprits.minor)
    reason: str = ""
    driven: dict[str, Any] = field(default_factory=dict)  # gradian.verdict.driven.DrivenItems.to_dict() of drop_rows

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> How:
        return cls._read(
            data,
            concentrated=bool(data.get("concentrated")),
            head=_ints(data.get("head")),
            head_share=data.get("head_share") or 0.0,
            stability=data.get("stability"),
            basis=str(data.get("basis") or "head"),
            raw_head=int(data.get("raw_head") or 0),
            groups=[VerdictGroup.from_dict(g) for g in data.get("groups") or []],
            findings=[dict(f) for f in data.get("findings") or []],
            hints=[dict(h) for h in data.get("hints") or []],
            leads=[dict(x) for x in data.get("leads") or []],
            finding_leads=[dict(x) for x in data.get("finding_leads") or []],
            undriven=[dict(u) for u in data.get("undriven") or []],
            set_aside=[VerdictGroup.from_dict(g) for g in data.get("set_aside") or []],
            reason=str(data.get("reason") or ""),
            driven=dict(data.get("driven") or {}),
        )


@dataclass
class Verdict:
    """What the report says: the kind of outcome, its cause, the sentences and next steps, and the rows to drop.

    ``kind``: no_regression | no_harm | concentrated | spread | setup; ``cause``: mechanical | content |
    mechanical+content | setup | forgetting (a spread verdict whose harm the data carries as a whole:
    ``forgetting.found``) | unknown."""

    kind: str
    cause: str
    headline: str
    reliable: bool = True
    criterion: str = ""
    policy: dict[str, Any] = field(default_factory=dict)  # VerdictOptions.policy(): the thresholds it read
    confidence: Confidence = field(default_factory=Confidence)
    groups: list[VerdictGroup] = field(default_factory=list)
    culprit_clusters: list[int] = field(default_factory=list)
    drop_rows: list[int] = field(default_factory=list)  # most harmful first
    drop_ids: list[Any] = field(default_factory=list)
    config_changes: list[ConfigChange] = field(default_factory=list)
    how: How | None = None  # None when no culprit decision was made (no regression, no harm)
    sentences: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    # the share of the summed regression dropping drop_rows should bring back (gradian.verdict.recovery)
    expected_recovery: float | None = None
    forgetting: dict[str, Any] | None = None  # gradian.verdict.forgetting.Forgetting.to_dict()
    evidence: list[str] = field(default_factory=list)  # at most three bullets under the headline (report.headline)

    @property
    def text(self) -> str:
        return " ".join(self.sentences)

    @property
    def names_content_group(self) -> bool:
        """A concentrated verdict that names a content group: what token profiles (``--token-profiles``) are for."""
        return self.kind == "concentrated" and any(g.cause == "content" for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "reliable": self.reliable,
            "criterion": self.criterion,
            "policy": self.policy,
            "confidence": self.confidence.to_dict(),
            "groups": [g.to_dict() for g in self.groups],
            "culprit_clusters": self.culprit_clusters,
            "drop_rows": self.drop_rows,
            "drop_ids": self.drop_ids,
            "config_changes": [c.to_dict() for c in self.config_changes],
        }
        if self.how is not None:
            out["how"] = self.how.to_dict()
        if self.expected_recovery is not None:
            out["expected_recovery"] = self.expected_recovery
        if self.forgetting is not None:
            out["forgetting"] = self.forgetting
        return out | {
            "evidence": self.evidence,
            "kind": self.kind,
            "cause": self.cause,
            "headline": self.headline,
            "sentences": self.sentences,
            "next_steps": self.next_steps,
            "text": self.text,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        conf, how = data.get("confidence"), data.get("how")
        sentences = [str(s) for s in data.get("sentences") or []]
        if not sentences and data.get("text"):
            sentences = [str(data["text"])]
        return cls(
            kind=str(data.get("kind") or ""),
            cause=str(data.get("cause") or "unknown"),
            headline=str(data.get("headline") or ""),
            reliable=bool(data.get("reliable", True)),
            criterion=str(data.get("criterion") or ""),
            policy=dict(data.get("policy") or {}),
            confidence=Confidence.from_dict(conf) if isinstance(conf, Mapping) else Confidence(),
            groups=[VerdictGroup.from_dict(g) for g in data.get("groups") or []],
            culprit_clusters=_ints(data.get("culprit_clusters")),
            drop_rows=_ints(data.get("drop_rows")),
            drop_ids=list(data.get("drop_ids") or []),
            config_changes=[ConfigChange.from_dict(c) for c in data.get("config_changes") or []],
            how=How.from_dict(how) if isinstance(how, Mapping) else None,
            sentences=sentences,
            next_steps=[str(s) for s in data.get("next_steps") or []],
            expected_recovery=finite_float(data.get("expected_recovery")),
            forgetting=dict(data["forgetting"]) if isinstance(data.get("forgetting"), Mapping) else None,
            evidence=[str(s) for s in data.get("evidence") or []],
        )


def resample_size(items: int | None) -> str:
    """' (N items each, all of them when fewer)' for a resample size, '' when every resample draws them all."""
    return f" ({int(items)} items each, all of them when fewer)" if items else ""
