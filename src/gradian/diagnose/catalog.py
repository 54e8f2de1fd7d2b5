"""The rule catalogue: every registered rule (importing :mod:`gradian.diagnose.rules` registers them). Kept apart
from :mod:`gradian.diagnose.registry`, which the rules import, so the two never import each other."""

from __future__ import annotations

from gradian.diagnose.registry import REGISTRY, Rule


def all_rules() -> list[Rule]:
    """Every registered rule, sorted by code."""
    import gradian.diagnose.rules  # noqa: F401  (registers the rules)

    return [REGISTRY[c] for c in sorted(REGISTRY)]


def find_rule(code_or_name: str) -> Rule | None:
    key = code_or_name.strip()
    for r in all_rules():
        if r.code.lower() == key.lower() or r.name == key.lower().replace("-", "_"):
            return r
    return None
