"""One number, one source: every measured figure in README.md and docs/ is rendered from its bench/results file by
scripts/docs_numbers.py, and a page that disagrees with its source fails here. Also: the generated reference pages
are current, every relative link resolves, and the README and docs stay within their word budgets."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


docs_numbers = _script("docs_numbers")


def _values() -> dict[str, str]:
    return {k: fn() for k, (_, fn) in docs_numbers.SOURCES.items()}


def test_every_marked_figure_matches_its_results_file():
    diffs = docs_numbers.differences(_values())
    assert not diffs, "run python scripts/docs_numbers.py:\n" + "\n".join(diffs)


def test_the_pages_use_the_figures():
    text = "\n".join(p.read_text(encoding="utf-8") for p in docs_numbers.pages())
    used = set(docs_numbers.INLINE.findall(text) and [m[0] for m in docs_numbers.INLINE.findall(text)])
    used |= {m[1] for m in docs_numbers.BLOCK.findall(text)}
    assert {"suite_pass", "verify_suite", "overhead_10240", "t_suite", "t_heldout", "t_peers"} <= used


def test_a_page_that_disagrees_is_caught(tmp_path, monkeypatch):
    values = _values()
    page = tmp_path / "page.md"
    page.write_text(
        "passes <!-- n:suite_pass -->78 of 91<!-- /n -->.\n<!-- table:t_suite -->\n| x |\n<!-- /table -->\n"
    )
    monkeypatch.setattr(docs_numbers, "pages", lambda: [page])
    monkeypatch.setattr(docs_numbers, "REPO", tmp_path)
    diffs = docs_numbers.differences(values)
    assert len(diffs) == 2 and "suite_pass" in diffs[0] and "t_suite" in diffs[1], diffs
    page.write_text(docs_numbers.render(page.read_text(), values))
    assert docs_numbers.differences(values) == []


def test_generated_reference_pages_are_current():
    gen = _script("gen_cli_docs")
    assert (REPO / "docs" / "reference" / "cli.md").read_text(encoding="utf-8") == gen.render()
    assert (REPO / "docs" / "reference" / "versions.md").read_text(encoding="utf-8") == gen.render_versions()


def _md_pages() -> list[Path]:
    return [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence and (m := re.match(r"^#{1,6} (.*)", line)):
            out.add(re.sub(r"[^\w\- ]", "", m[1].strip().lower()).replace(" ", "-"))
    return out


def test_relative_links_resolve():
    bad = []
    for page in _md_pages():
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                bad.append(f"{page.relative_to(REPO)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                bad.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not bad, "\n".join(bad)


def _words(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").split())


def test_word_budgets_and_the_readme_opening():
    readme = REPO / "README.md"
    assert _words(readme) <= 900
    first = readme.read_text(encoding="utf-8").splitlines()[:40]
    assert any(line.startswith("gradian attribute --run") for line in first)
    docs = [p for p in (REPO / "docs").rglob("*.md") if "rules" not in p.relative_to(REPO / "docs").parts]
    assert sum(_words(p) for p in docs) <= 25_000


def test_no_development_history_in_the_docs_and_the_code():
    pages = [REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "src" / "gradian").rglob("*.py")]
    hits = [str(p.relative_to(REPO)) for p in pages if re.search(r"\bsessions?\b", p.read_text(encoding="utf-8"), re.I)]
    assert not hits, hits
