"""The rule registry: every check is a small function registered with a stable code, a snake_case name, a
default severity, its documentation and its thresholds (like ruff's rules)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gradian.diagnose.types import Fix, Severity

if TYPE_CHECKING:
    from gradian.diagnose.context import DiagnoseContext

GROUPS = {"D": "dataset", "C": "config", "L": "logs", "X": "cross-cutting"}

# What a rule needs before it can run; the engine skips it with a note saying why when a need is missing.
NEEDS = ("train", "formatted", "tokenizer", "setup", "logs", "eval", "adapter")

# What kind of cause a rule's findings point to (the verdict reads it from each finding):
# mechanical: how rows became tokens (truncation, EOS, masks, templates, encoding, cut completions, loops);
# content: what the rows say (duplicates, overlap, placeholders, label noise, language, refusals, ...);
# setup: the training config, the trainer logs, the run as a whole.
CAUSES = ("mechanical", "content", "setup")


@dataclass
class Threshold:
    default: Any
    help: str


@dataclass
class Hit:
    """What a rule's run function yields; the engine turns it into a Finding with the rule's code and name."""

    message: str
    severity: Severity | str | None = None  # None: the rule's default severity
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: Fix | str | None = None


class Params(dict):
    """A rule's resolved thresholds, readable as attributes (``t.warn_percent``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as err:
            raise AttributeError(name) from err


@dataclass
class Rule:
    code: str
    name: str
    severity: Severity
    summary: str
    why: str
    example: str
    fix: str
    run: Callable[[DiagnoseContext, Params], Iterable[Hit]]
    needs: tuple[str, ...] = ()
    thresholds: dict[str, Threshold] = field(default_factory=dict)
    tiers: str = ""  # "W/E", "I/W" where the rule picks its severity per finding
    seen_in: str = ""
    cause: str = "setup"  # one of CAUSES

    @property
    def group(self) -> str:
        return GROUPS.get(self.code[0], "other")

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "group": self.group,
            "cause": self.cause,
            "severity": self.severity.value,
            "tiers": self.tiers or None,
            "needs": list(self.needs),
            "summary": self.summary,
            "why": self.why,
            "example": self.example,
            "fix": self.fix,
            "thresholds": {k: {"default": v.default, "help": v.help} for k, v in self.thresholds.items()},
            "seen_in": self.seen_in or None,
        }


REGISTRY: dict[str, Rule] = {}


def rule(
    code: str,
    name: str,
    severity: str,
    *,
    summary: str,
    why: str,
    example: str,
    fix: str,
    needs: tuple[str, ...] = (),
    thresholds: dict[str, tuple[Any, str]] | None = None,
    tiers: str = "",
    seen_in: str = "",
    cause: str = "",
) -> Callable[[Callable[..., Iterable[Hit]]], Callable[..., Iterable[Hit]]]:
    def deco(fn: Callable[..., Iterable[Hit]]) -> Callable[..., Iterable[Hit]]:
        if code in REGISTRY:
            raise ValueError(f"duplicate rule code {code}")
        if any(r.name == name for r in REGISTRY.values()):
            raise ValueError(f"duplicate rule name {name}")
        kind = cause or ("setup" if code[0] in "CLX" else "")
        if kind not in CAUSES:
            raise ValueError(f"{code}: cause must be one of {CAUSES} (dataset rules declare it)")
        for need in needs:
            if need not in NEEDS:
                raise ValueError(f"{code}: unknown need {need}")
        REGISTRY[code] = Rule(
            code=code,
            name=name,
            severity=Severity.parse(severity),
            summary=summary.strip(),
            why=why.strip(),
            example=example.strip(),
            fix=fix.strip(),
            run=fn,
            needs=needs,
            thresholds={k: Threshold(*v) for k, v in (thresholds or {}).items()},
            tiers=tiers,
            seen_in=seen_in,
            cause=kind,
        )
        return fn

    return deco


def match_selector(r: Rule, selectors: Iterable[str]) -> bool:
    """A selector is a code (D106), a code prefix (D1, D, C2), a name (truncation) or a group (dataset, logs)."""
    for s in selectors:
        s = s.strip()
        if not s:
            continue
        low = s.lower().replace("-", "_")
        if low in ("all",) or r.name == low or r.group == low.replace("_", "-") or r.group == low:
            return True
        if r.code.upper().startswith(s.upper()):
            return True
    return False
