"""The verdict: from the harm the attribution measured, diagnose's findings and the regression call, what the report
says and which rows to drop.

API: ``make_verdict(...)`` -> :class:`Verdict` (report.json ``verdict`` is its ``to_dict()``, read back with
``Verdict.from_dict``).
"""

from __future__ import annotations

_WHERE = {
    "make_verdict": "make",
    "Verdict": "schema",
    "VerdictGroup": "schema",
}


def __getattr__(name: str):  # lazy: `gradian --help` must not pay for numpy
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"gradian.verdict.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'gradian.verdict' has no attribute {name!r}")


__all__ = ["Verdict", "VerdictGroup", "make_verdict"]
