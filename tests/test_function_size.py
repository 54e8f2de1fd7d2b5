"""Issue #17's limits: no function in src/gradian over 100 lines, and none but CLI (Typer ``*_command``) signatures
with more than 12 parameters."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "gradian"
MAX_LINES, MAX_PARAMS = 100, 12


def _oversized() -> dict[str, str]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = node.args
            n_params = len(a.posonlyargs + a.args + a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
            n_lines = node.end_lineno - node.lineno + 1
            cli = node.name.endswith("_command")
            if n_lines > MAX_LINES or (n_params > MAX_PARAMS and not cli):
                out[f"{path.relative_to(SRC).as_posix()}:{node.name}"] = f"{n_lines} lines, {n_params} parameters"
    return out


def test_no_function_over_the_limits():
    assert _oversized() == {}
