"""Row positions as the user's editor shows them.

Findings carry 0-based data-row indices (``Example.index``; blank lines are not rows). Text and Markdown output
name rows by the 1-based line an editor shows for line-based files (JSONL, CSV/TSV: the line where the record
starts, header = line 1), and by 1-based row number for JSON arrays and Parquet; JSON output keeps the 0-based
indices.
"""

from __future__ import annotations

import csv
import io
import os
from functools import lru_cache
from pathlib import Path

LINE_BASED = (".jsonl", ".ndjson", ".csv", ".tsv")


def _jsonl_lines(data: bytes) -> list[int]:
    out = []
    for lineno, bline in enumerate(data.split(b"\n"), start=1):
        if lineno == 1 and bline.startswith(b"\xef\xbb\xbf"):
            bline = bline[3:]
        try:
            blank = not bline.decode("utf-8").strip()
        except UnicodeDecodeError:
            blank = False  # the reader counts an undecodable line as a (bad) row
        if not blank:
            out.append(lineno)
    return out


def _csv_lines(data: bytes, delimiter: str) -> list[int]:
    text = data.decode("utf-8-sig", errors="replace")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    out, end = [], 0
    for i, row in enumerate(reader):
        start, end = end + 1, reader.line_num
        if row and i:  # the first record is the header; csv.DictReader skips blank records
            out.append(start)
    return out


@lru_cache(maxsize=16)
def _cached(path: str, mtime_ns: int, size: int) -> tuple[int, ...] | None:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError:
        return None
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return tuple(_jsonl_lines(data))
    return tuple(_csv_lines(data, "\t" if suffix == ".tsv" else ","))


def editor_lines(path: str | None) -> tuple[int, ...] | None:
    """The 1-based editor line of each data row of a line-based file (index = ``Example.index``), or None when the
    file is not line-based or cannot be read."""
    if not path or Path(path).suffix.lower() not in LINE_BASED:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _cached(str(path), st.st_mtime_ns, st.st_size)


def describe_rows(rows: list[int], file: str | None) -> tuple[str, list[str]]:
    """("lines in train.jsonl", ["3", "7"]) for a line-based file; ("rows in data.json (1-based)", [...]) for a JSON
    array or Parquet file; the 0-based indices, said so, when the file cannot be read."""
    where = f" in {file}" if file else ""
    lines = editor_lines(file)
    if lines is not None and all(0 <= r < len(lines) for r in rows):
        return f"lines{where}", [str(lines[r]) for r in rows]
    if file and Path(file).exists() and Path(file).suffix.lower() not in LINE_BASED:
        return f"rows{where} (1-based)", [str(r + 1) for r in rows]
    return f"rows{where} (0-based)", [str(r) for r in rows]
