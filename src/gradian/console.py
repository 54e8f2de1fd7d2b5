"""The one place Gradian makes a rich Console. On a terminal rich wraps to the window; written to a pipe, a file or a
CI log the output is read by grep and by people scrolling a log, so nothing is wrapped: each message stays on one
line and tables take the width their cells need (no folded cells, columns still aligned)."""

from __future__ import annotations

from typing import IO, Any

# The width a table may take when the output is not a terminal: wide enough that no real cell is folded.
PIPE_WIDTH = 10_000
# A horizontal rule off a terminal: a fixed width instead of PIPE_WIDTH dashes.
PIPE_RULE_WIDTH = 100


def make_console(*, stderr: bool = False, file: IO[str] | None = None, **kwargs: Any):
    """A rich Console for stdout (or stderr, or ``file``) that hard-wraps only on a terminal."""
    from rich.console import Console

    con = Console(stderr=stderr, file=file, **kwargs)
    if not con.is_terminal:
        con.soft_wrap = True
        con.width = PIPE_WIDTH
    return con


def rule(con, title: str = "") -> None:
    """A titled horizontal rule: the terminal's width on a terminal, PIPE_RULE_WIDTH otherwise."""
    from rich.rule import Rule

    if con.is_terminal:
        con.rule(title)
    else:
        con.print(Rule(title), width=PIPE_RULE_WIDTH)
