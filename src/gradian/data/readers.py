"""Read training/eval files into :class:`Example` rows.

Supported inputs: JSON Lines (``.jsonl``/``.ndjson``), JSON (``.json``: a top-level list of objects), CSV/TSV,
Parquet (needs ``pyarrow``: ``pip install gradian[parquet]``) and folders written by ``datasets.save_to_disk``
(read with ``pyarrow`` directly; ``pip install gradian[datasets]`` brings it).

Row numbering: ``Example.index`` is the 0-based position of the row among the file's *data rows*. In JSONL, blank
lines are skipped and do not count (so index != line number - 1 when the file has blank lines); errors name the
physical 1-based line (``train.jsonl line 7``), as an editor shows it. JSON, Parquet and datasets rows are named
``row N`` (1-based); CSV rows ``line N`` (the physical line where the record ends, header = line 1).

:func:`iter_examples` yields the rows lazily (for files larger than memory); :func:`load_examples` is its list, and
:func:`load_examples_with_problems` collects the bad rows instead of raising.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradian.data.rows import ACCEPTED_FORMATS, FORMAT_KEYS, RowError, RowProblem, normalize_row
from gradian.data.types import Example
from gradian.errors import GradianError
from gradian.gcpause import gc_paused

JSONL_EXT = (".jsonl", ".ndjson")
SUPPORTED = ".jsonl, .json, .csv, .tsv, .parquet or a datasets.save_to_disk folder"
_UTF8_FIX = "re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8 IN > OUT)"


@dataclass
class _Record:
    index: int
    where: str
    raw: Any = None
    error: RowError | None = None


def _utf8_error(path: Path, data: bytes, exc: UnicodeDecodeError, base: int = 0, line: int | None = None):
    offset = base + exc.start
    if line is None:
        line = data[: exc.start].count(b"\n") + 1
    bad = data[exc.start : exc.start + 1].hex()
    return GradianError(
        f"invalid UTF-8 at byte offset {offset} (byte 0x{bad})",
        where=f"{path} line {line}",
        fix=_UTF8_FIX,
    )


def _json_msg(e: json.JSONDecodeError) -> str:
    sep = " " if e.msg.endswith(" at") else " at "
    return f"{e.msg}{sep}column {e.colno}"


def _iter_jsonl(path: Path) -> Iterator[_Record]:
    index = 0
    offset = 0
    with open(path, "rb") as f:
        for lineno, bline in enumerate(f, start=1):
            start = offset
            offset += len(bline)
            if lineno == 1 and bline.startswith(b"\xef\xbb\xbf"):
                bline = bline[3:]
                start += 3
            where = f"{path} line {lineno}"
            try:
                line = bline.decode("utf-8")
            except UnicodeDecodeError as e:
                err = _utf8_error(path, bline, e, base=start, line=lineno)
                yield _Record(index, where, error=RowError(None, err.message, err.fix))
                index += 1
                continue
            if not line.strip():
                continue
            line = line.rstrip("\r\n")
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as e:
                truncated = "" if line.rstrip().endswith("}") else " (the line looks truncated)"
                yield _Record(
                    index,
                    where,
                    error=RowError(
                        None,
                        f"invalid JSON: {_json_msg(e)}{truncated}",
                        f"repair or delete line {lineno}; each line must be one complete JSON object",
                    ),
                )
                index += 1
                continue
            yield _Record(index, where, raw=raw)
            index += 1


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise _utf8_error(path, data, e) from None


def _iter_json(path: Path) -> Iterator[_Record]:
    text = _read_text(path)
    if not text.strip():
        raise GradianError("file is empty", where=str(path), fix="point at a file with training rows")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        fix = "repair the JSON (is the file truncated?)"
        if e.msg == "Extra data":
            fix = "this looks like JSON Lines (one object per line); rename the file to .jsonl"
        raise GradianError(f"invalid JSON: {_json_msg(e)}", where=f"{path} line {e.lineno}", fix=fix) from None
    if not isinstance(data, list):
        kind = "an object" if isinstance(data, dict) else type(data).__name__
        raise GradianError(
            f"top-level JSON is {kind}, expected a list of rows",
            where=str(path),
            fix="save the rows as a JSON list [{...}, ...] or as JSON Lines (.jsonl)",
        )
    for i, raw in enumerate(data):
        yield _Record(i, f"{path} row {i + 1}", raw=raw)


def _check_columns(path: Path, columns: list[str], kind: str, text_field: str = "text") -> None:
    if not FORMAT_KEYS.intersection(columns) and text_field not in columns:
        found = ", ".join(repr(c) for c in columns) or "none"
        raise GradianError(
            f"{kind} has no known columns (found: {found})",
            where=str(path),
            fix=f"name the columns for one of: {ACCEPTED_FORMATS}",
        )


def _iter_csv(path: Path, text_field: str = "text") -> Iterator[_Record]:
    """Read the file incrementally; on a UTF-8 fault, re-read it whole for the error's byte offset and line."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            if not any(line.strip() for line in f):
                raise GradianError("file is empty", where=str(path), fix="point at a file with training rows")
        with open(path, encoding="utf-8-sig", newline="") as f:
            yield from _csv_records(path, f, text_field)
    except UnicodeDecodeError:
        _read_text(path)  # raises the located error
        raise


def _csv_records(path: Path, f: io.TextIOBase, text_field: str = "text") -> Iterator[_Record]:
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    reader = csv.DictReader(f, delimiter=delimiter)
    _check_columns(path, list(reader.fieldnames or []), "CSV header", text_field)
    for i, row in enumerate(reader):
        where = f"{path} line {reader.line_num}"
        raw: dict[str, Any] = {k: v for k, v in row.items() if k is not None and v is not None}
        error = None
        for key in ("messages", "conversations"):
            value = raw.get(key)
            if isinstance(value, str):
                try:
                    raw[key] = json.loads(value)
                except json.JSONDecodeError as e:
                    error = RowError(
                        key,
                        f"'{key}' cell is not valid JSON ({e.msg} at column {e.colno})",
                        f"store '{key}' as a JSON list of messages",
                    )
        yield _Record(i, where, raw=raw, error=error)


def _import_pyarrow(extra: str):
    try:
        import pyarrow  # noqa: F401
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        what = "Parquet files" if extra == "parquet" else "datasets.save_to_disk folders"
        raise GradianError(
            f"reading {what} needs pyarrow, which is not installed", fix=f"pip install gradian[{extra}]"
        ) from None
    return pyarrow


def _drop_nulls(raw: dict[str, Any]) -> dict[str, Any]:
    """Arrow tables give every row every column, null where a row lacked the key; drop those (as TRL does)."""
    return {k: v for k, v in raw.items() if v is not None}


def _iter_parquet(path: Path, text_field: str = "text") -> Iterator[_Record]:
    pa = _import_pyarrow("parquet")
    try:
        pf = pa.parquet.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid/OSError for corrupt files
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise GradianError(f"not a readable Parquet file ({msg})", where=str(path), fix="re-export the file") from None
    _check_columns(path, pf.schema_arrow.names, "Parquet schema", text_field)
    if pf.metadata.num_rows == 0:
        raise GradianError("file is empty (0 rows)", where=str(path), fix="point at a file with training rows")
    i = 0
    for batch in pf.iter_batches(batch_size=4096):
        for raw in batch.to_pylist():
            yield _Record(i, f"{path} row {i + 1}", raw=_drop_nulls(raw))
            i += 1


def _arrow_files(path: Path) -> list[Path]:
    """The Arrow shards of a datasets.save_to_disk folder (a Dataset, or the train split of a DatasetDict)."""
    if (path / "dataset_dict.json").is_file():
        try:
            splits = json.loads((path / "dataset_dict.json").read_text("utf-8"))["splits"]
        except (ValueError, KeyError, TypeError):
            raise GradianError(
                "unreadable dataset_dict.json", where=str(path), fix="re-save with DatasetDict.save_to_disk"
            ) from None
        if "train" in splits:
            split = "train"
        elif len(splits) == 1:
            split = splits[0]
        else:
            raise GradianError(
                f"DatasetDict folder has splits {', '.join(splits)} and no 'train' split",
                where=str(path),
                fix=f"point at one split folder, e.g. {path / splits[0]}",
            )
        path = path / split
    state = path / "state.json"
    if not state.is_file():
        raise GradianError(
            "folder is not a datasets.save_to_disk folder (no state.json or dataset_dict.json)",
            where=str(path),
            fix=f"point at a data file ({SUPPORTED})",
        )
    try:
        files = [path / f["filename"] for f in json.loads(state.read_text("utf-8"))["_data_files"]]
    except (ValueError, KeyError, TypeError):
        raise GradianError("unreadable state.json", where=str(path), fix="re-save with Dataset.save_to_disk") from None
    return files


def _iter_datasets_dir(path: Path) -> Iterator[_Record]:
    files = _arrow_files(path)
    pa = _import_pyarrow("datasets")
    i = 0
    for f in files:
        try:
            try:
                reader = pa.ipc.open_stream(pa.memory_map(str(f)))
                batches = iter(reader)
            except pa.ArrowInvalid:
                reader = pa.ipc.open_file(pa.memory_map(str(f)))
                batches = (reader.get_batch(k) for k in range(reader.num_record_batches))
            for batch in batches:
                for raw in batch.to_pylist():
                    yield _Record(i, f"{path} row {i + 1}", raw=_drop_nulls(raw))
                    i += 1
        except (OSError, pa.ArrowException) as e:
            raise GradianError(
                f"unreadable Arrow shard {f.name} ({e})", where=str(path), fix="re-save with save_to_disk"
            ) from None


def _records(path: Path, text_field: str = "text") -> Iterator[_Record]:
    if path.is_dir():
        return _iter_datasets_dir(path)
    suffix = path.suffix.lower()
    if suffix in JSONL_EXT:
        return _iter_jsonl(path)
    if suffix == ".json":
        return _iter_json(path)
    if suffix in (".csv", ".tsv"):
        return _iter_csv(path, text_field)
    if suffix in (".parquet", ".pq"):
        return _iter_parquet(path, text_field)
    raise GradianError(f"unsupported file type '{suffix or path.name}'", where=str(path), fix=f"use {SUPPORTED}")


def _open(path: str | Path, text_field: str = "text") -> Iterator[_Record]:
    """File-level checks that come before any row (missing, empty, unsupported type); the file's raw records."""
    p = Path(path)
    if not p.exists():
        raise GradianError("file not found", where=str(path), fix="check the path")
    if p.is_file() and p.stat().st_size == 0:
        raise GradianError("file is empty", where=str(path), fix="point at a file with training rows")
    return _records(p, text_field)


def _checked(
    path: str | Path,
    records: Iterator[_Record],
    limit: int | None,
    prompt_only: bool = False,
    text_field: str = "text",
) -> Iterator[Example | RowProblem]:
    """Each data row in file order, normalized into an :class:`Example` or turned into a :class:`RowProblem`.

    The file's layout is the layout of its first good row; a later row with another layout is a problem. Raises
    :class:`GradianError` at the end when the file had no data rows at all.
    """
    source = str(path)
    file_layout: str | None = None
    file_layout_where = ""
    n_rows = 0
    for rec in records:
        if limit is not None and n_rows >= limit:
            break
        n_rows += 1
        err = rec.error
        if err is None:
            try:
                ex, layout = normalize_row(
                    rec.raw, index=rec.index, source=source, prompt_only=prompt_only, text_field=text_field
                )
            except RowError as e:
                err = e
            else:
                if file_layout is None:
                    file_layout, file_layout_where = layout, rec.where
                if layout == file_layout:
                    yield ex
                    continue
                err = RowError(
                    None,
                    f"row is {layout} but {file_layout_where} is {file_layout}; a file must use one row format",
                    f"convert every row to {file_layout} (or split the file)",
                )
        yield RowProblem(index=rec.index, key=err.key, message=err.message, where=rec.where, fix=err.fix)
    if n_rows == 0:
        raise GradianError("file has no data rows", where=source, fix="point at a file with training rows")


def iter_examples(
    path: str | Path,
    *,
    limit: int | None = None,
    strict: bool = True,
    prompt_only: bool = False,
    text_field: str = "text",
) -> Iterator[Example]:
    """Yield a data file's rows one at a time: :func:`load_examples` without holding the rows.

    ``prompt_only=True`` (eval files) accepts rows with a prompt and no completion (``Example.prompt_only``).

    Same validation, row numbering and errors: ``strict=True`` raises the first bad row's :class:`GradianError`
    when the iteration reaches it; ``strict=False`` skips bad rows. A missing file, an empty file or an unsupported
    type raise on the call itself; other file-level faults when iteration starts. JSONL, CSV/TSV, Parquet and
    datasets folders are read incrementally; a ``.json`` file (one JSON list) is parsed whole. ``text_field``: the
    column of language-modeling rows (TRL ``dataset_text_field``).
    """
    records = _open(path, text_field)

    def rows() -> Iterator[Example]:
        for item in _checked(path, records, limit, prompt_only, text_field):
            if isinstance(item, Example):
                yield item
            elif strict:
                raise item.to_error()

    return rows()


def load_examples_with_problems(
    path: str | Path, *, limit: int | None = None, prompt_only: bool = False, text_field: str = "text"
) -> tuple[list[Example], list[RowProblem]]:
    """Load every row that can be loaded, and list the rows that cannot (for ``diagnose`` to report as findings).

    File-level faults (missing file, empty file, unsupported type, JSON top level not a list, no known CSV/Parquet
    columns, missing pyarrow) raise :class:`GradianError`; row-level faults (bad JSON or UTF-8 on a line, unknown
    row format, missing key, wrong type, unknown role, a row whose format differs from the file's) become
    :class:`RowProblem` and the row is left out. The file's format is the format of its first good row.
    ``limit`` stops after that many data rows (good or bad).
    """
    examples: list[Example] = []
    problems: list[RowProblem] = []
    with gc_paused():  # 100k rows of dicts: see gradian.gcpause
        for item in _checked(path, _open(path, text_field), limit, prompt_only, text_field):
            if isinstance(item, Example):
                examples.append(item)
            else:
                problems.append(item)
    return examples, problems


def load_examples(
    path: str | Path,
    *,
    limit: int | None = None,
    strict: bool = True,
    prompt_only: bool = False,
    text_field: str = "text",
) -> list[Example]:
    """Load a data file as :class:`Example` rows (see the module docstring for formats and row numbering).

    ``strict=True`` (default) raises :class:`GradianError` for the first bad row; ``strict=False`` leaves bad rows
    out silently (use :func:`load_examples_with_problems` to see them). :func:`iter_examples` is the lazy form.
    """
    return list(iter_examples(path, limit=limit, strict=strict, prompt_only=prompt_only, text_field=text_field))
