"""The options of `gradian diagnose` (and of ``gradian.diagnose(...)``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradian.options.base import Options, option

FORMATS = ("text", "json", "markdown")
FAIL_ON = ("error", "warning", "info", "never")


@dataclass(frozen=True)
class DiagnoseOptions(Options):
    """Which rules run, with which thresholds, and how the result is shown."""

    name: ClassVar[str] = "diagnose"

    format: str = option("text", "Output: text, json or markdown.", choices=FORMATS, decls=("--format", "-f"))
    fail_on: str | None = option(None, "Exit 1 at or above: error (default), warning, info, never.", choices=FAIL_ON)
    select: tuple[str, ...] | None = option(
        None, "Only these rules (codes, names, prefixes like D1, groups; comma-separated or repeated)."
    )
    ignore: tuple[str, ...] = option((), "Skip these rules (codes, names, prefixes, groups).")
    overrides: tuple[str, ...] = option((), "Override a threshold: rule.threshold=value (repeatable).", flag="--set")

    def __post_init__(self) -> None:
        split = {n: split_names(getattr(self, n)) for n in ("select", "ignore")}
        object.__setattr__(self, "select", split["select"] or None)
        object.__setattr__(self, "ignore", split["ignore"] or ())
        object.__setattr__(self, "overrides", tuple(self.overrides or ()))
        if self.fail_on is not None:
            object.__setattr__(self, "fail_on", self.fail_on.lower())
        super().__post_init__()


def split_names(values: tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """``--select D1,D2 --select D3`` → ``("D1", "D2", "D3")``."""
    return tuple(s.strip() for v in values or () for s in str(v).split(",") if s.strip())
