"""Reading the run's text files (JSON configs, trainer_state.json) with one-line errors. A leaf module: the config
and log readers both use it, so neither imports the other for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gradian.errors import GradianError


def read_text(path: Path) -> str:
    """A UTF-8 text file, or a one-line error naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise GradianError(f"not UTF-8 text (byte {exc.start})", where=str(path), fix="save the file as UTF-8") from exc
    except OSError as exc:
        raise GradianError(f"cannot read the file ({exc.strerror})", where=str(path), fix="check the path") from exc


def load_json_file(path: Path) -> Any:
    """JSON with Python's bare NaN / Infinity / -Infinity allowed; errors name the line and column."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise GradianError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            where=str(path),
            fix="repair the file, or copy it again from the training machine",
        ) from exc
