"""One error type for every bad input: a single line naming the file, the row or key, and the fix."""

from __future__ import annotations


class GradianError(Exception):
    """A user-facing error. The CLI prints ``error: <message>`` on one line and exits with code 2.

    ``where`` names the file (and row or key) at fault, ``fix`` what the user should do.
    """

    exit_code = 2

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None) -> None:
        self.message = message
        self.where = where
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = []
        if self.where:
            parts.append(f"{self.where}: ")
        parts.append(self.message.rstrip("."))
        if self.fix:
            parts.append(f". Fix: {self.fix.rstrip('.')}")
        return "".join(parts) + "."
