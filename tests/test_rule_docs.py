"""docs/rules/ is generated from the registry; a rule changed without regenerating the pages fails here."""

from __future__ import annotations

import importlib.util

from conftest import REPO


def test_rule_pages_match_registry():
    spec = importlib.util.spec_from_file_location("gen_rule_docs", REPO / "scripts" / "gen_rule_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    wanted = gen.pages()
    assert len(wanted) >= 51  # at least 50 rules + the index
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in (REPO / "docs" / "rules").glob("*.md")}
    stale = sorted(n for n in wanted if on_disk.get(n) != wanted[n])
    extra = sorted(set(on_disk) - set(wanted))
    assert not stale and not extra, f"run `python scripts/gen_rule_docs.py` (stale: {stale[:5]}, extra: {extra[:5]})"
