"""The package's shape: no import cycle between modules (imports inside functions included), and the layers of the
method (pyproject's import-linter contract: commands > pipeline > report > attribute / diagnose > run > data)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycle():
    g = grimp.build_graph("gradian", include_external_packages=False)
    edges = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    assert _cycles(edges) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_layers_contract_is_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]


MAX_LINES = 100  # issue 17: no function in src/gradian longer than this
MAX_PARAMS = 12  # ... and none but a CLI signature (typer.Option / typer.Argument defaults) with more parameters
# Functions still over a limit, each in a file another refactor is rewriting (issue 17, deliverables 1-2). Remove an
# entry when its function is split; the test fails on a stale entry so the list only shrinks.
STILL_LONG = {
    "attribute/api.py:run_attribution",
    "attribute/api.py:attribute",
    "attribute_command.py:attribute_command",
    "report/verdict.py:make_verdict",
    "train.py:train_lora",
    "verify.py:verify",
}
STILL_WIDE = {
    "attribute/api.py:run_attribution",
    "attribute/api.py:attribute",
    "attribute/api.py:_add_token_harm",
    "attribute/api.py:_training_gradients",
    "attribute/plan.py:make_plan",
    "diagnose/api.py:diagnose_full",
}


def _functions():
    """(``path:name``, lines, parameters, is a CLI signature) of every function in src/gradian."""
    import ast

    root = REPO / "src" / "gradian"
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            params = (
                len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
            )
            defaults = [*a.defaults, *(d for d in a.kw_defaults if d is not None)]
            cli = any(
                isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr in ("Option", "Argument")
                for d in defaults
            )
            name = f"{path.relative_to(root).as_posix()}:{node.name}"
            yield name, node.end_lineno - node.lineno + 1, params, cli


def test_functions_are_short_and_narrow():
    long = {name for name, lines, _, _ in _functions() if lines > MAX_LINES}
    wide = {name for name, _, params, cli in _functions() if params > MAX_PARAMS and not cli}
    assert long - STILL_LONG == set(), f"functions over {MAX_LINES} lines: split them by meaning"
    assert wide - STILL_WIDE == set(), f"signatures over {MAX_PARAMS} parameters: pass an options object"
    assert STILL_LONG - long == set() and STILL_WIDE - wide == set(), "fixed: remove them from STILL_LONG/WIDE"
