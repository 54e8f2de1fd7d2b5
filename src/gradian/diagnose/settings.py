"""Diagnose settings from `[tool.gradian.diagnose]` in ./pyproject.toml or `[diagnose]` in ./gradian.toml, and
`--set rule.threshold=value` overrides. Example::

    [tool.gradian.diagnose]
    ignore = ["big_batch", "L310"]
    fail-on = "warning"

    [tool.gradian.diagnose.truncation]   # a rule's name or code
    warn_percent = 2.0
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradian.errors import GradianError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass
class DiagnoseSettings:
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    fail_on: str | None = None
    thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)  # rule name -> threshold -> value
    source: str | None = None


def _as_list(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    return [str(s) for s in v]


def load_settings(cwd: Path | None = None) -> DiagnoseSettings:
    """Read the first of ./gradian.toml ([diagnose]) and ./pyproject.toml ([tool.gradian.diagnose])."""
    cwd = cwd or Path.cwd()
    table: dict[str, Any] | None = None
    source = None
    for name in ("gradian.toml", "pyproject.toml"):
        path = cwd / name
        if not path.is_file():
            continue
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as err:
            raise GradianError(f"cannot parse TOML: {err}", where=str(path), fix="fix the TOML syntax") from err
        if name == "gradian.toml":
            table = doc.get("diagnose") or doc.get("tool", {}).get("gradian", {}).get("diagnose")
        else:
            table = doc.get("tool", {}).get("gradian", {}).get("diagnose")
        if table is not None:
            source = f"{path}: diagnose"
            break
    settings = DiagnoseSettings(source=source)
    if not table:
        return settings
    for key, value in table.items():
        k = key.replace("-", "_")
        if k == "select":
            settings.select = _as_list(value)
        elif k == "ignore":
            settings.ignore = _as_list(value)
        elif k == "fail_on":
            settings.fail_on = str(value)
        elif isinstance(value, dict):
            for tk, tv in value.items():
                _put(settings.thresholds, key, tk, tv, where=source)
        else:
            raise GradianError(
                f"unknown setting {key!r}", where=source, fix="use select, ignore, fail-on or a rule table"
            )
    return settings


def _coerce(raw: Any, default: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    s = raw.strip()
    if isinstance(default, bool) or s.lower() in ("true", "false"):
        return s.lower() in ("1", "true", "yes", "on")
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    return s


def _put(out: dict[str, dict[str, Any]], rule_key: str, threshold: str, value: Any, *, where: str | None) -> None:
    from gradian.diagnose.catalog import find_rule

    r = find_rule(rule_key)
    if r is None:
        raise GradianError(f"unknown rule {rule_key!r}", where=where, fix="see `gradian rules` for codes and names")
    if threshold not in r.thresholds:
        known = ", ".join(r.thresholds) or "none"
        raise GradianError(
            f"rule {r.code} {r.name} has no threshold {threshold!r} (it has: {known})", where=where,
            fix=f"see `gradian diagnose --explain {r.code}`",
        )  # fmt: skip
    default = r.thresholds[threshold].default
    v = _coerce(value, default)
    if isinstance(default, (int, float)) and not isinstance(default, bool) and not isinstance(v, (int, float)):
        raise GradianError(f"{r.name}.{threshold} must be a number, got {value!r}", where=where)
    out.setdefault(r.name, {})[threshold] = v


def apply_overrides(settings: DiagnoseSettings, overrides: list[str]) -> None:
    """Apply `--set rule.threshold=value` (rule by name or code)."""
    for item in overrides:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise GradianError(
                f"bad --set {item!r}", fix="write --set rule.threshold=value, e.g. truncation.warn_percent=2"
            )
        lhs, value = item.split("=", 1)
        rule_key, threshold = lhs.strip().rsplit(".", 1)
        _put(settings.thresholds, rule_key, threshold.strip(), value, where="--set")
