"""Helpers shared by the rules: row evidence, percentages, and the drop-rows fix."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from gradian.diagnose.types import Fix

SAMPLE = 10


def pct(n: int, total: int) -> float:
    return round(100.0 * n / total, 2) if total else 0.0


def rows_ev(rows: list[int], total: int, file: str | None, **extra: Any) -> dict[str, Any]:
    rows = sorted(set(rows))
    return {"rows": rows, "count": len(rows), "total": total, "percent": pct(len(rows), total), "file": file, **extra}


def key_ev(ctx: Any, key: str, value: Any, **extra: Any) -> dict[str, Any]:
    return {"key": key, "value": value, "source": ctx.src(key) or "unknown", **extra}


def drop_fix(text: str, rows: list[int], file: str | None, code: str) -> Fix:
    """A fix that removes rows: a ready command (inline row list when short, else via a saved findings file)."""
    f = file or "train.jsonl"
    p = Path(f)
    out = str(p.with_name(p.stem + ".clean" + (p.suffix or ".jsonl")))
    rows = sorted(set(rows))
    if len(rows) <= 20:
        sel = "--rows " + ",".join(map(str, rows))
    else:
        sel = f"--findings findings.json --select {code}"
        text += " (save the findings first: gradian diagnose ... --format json --out findings.json)"
    cmd = f"python -m gradian.diagnose.droprows {shlex.quote(f)} {sel} -o {shlex.quote(out)}"
    return Fix(text=text, command=cmd)


def fmt_num(x: float | int | None) -> str:
    if x is None:
        return "unset"
    if isinstance(x, float) and (abs(x) < 1e-3 or abs(x) >= 1e5):
        return f"{x:.1e}"
    return f"{x:g}" if isinstance(x, float) else str(x)
