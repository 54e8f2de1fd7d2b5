"""Tokenized rows on disk: a training file formatted as the trainer would, without holding it in Python objects.

:func:`tokenize_to_disk` runs :func:`~gradian.data.format_examples` over an iterator of rows a chunk at a time and
appends the result to flat files in one folder; :class:`TokenizedRows` reads them back through ``np.memmap`` as a
read-only ``Sequence[FormattedExample]``. Peak memory is one chunk of rows, whatever the file's length.

Folder layout (all little-endian):

- ``input_ids.i32``: every kept row's token ids, concatenated (int32).
- ``loss_mask.u8``: the loss mask of each of those positions (0/1).
- ``offsets.i64``: ``n_rows + 1`` start offsets into the two files above.
- ``rows.bin``: one :data:`ROW_DTYPE` record per row: source index, token counts and the flags.
- ``ids.jsonl`` + ``ids_offsets.i64``: each row's ``Example.id`` (a JSON string or null per line) and where its
  line starts, for random access.
- ``meta.json``: the counts and the fingerprint of what the folder was made from (source file, tokenizer,
  settings), written last; a folder is complete only once it is renamed from ``<folder>.tmp`` into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from itertools import chain, islice
from pathlib import Path
from typing import Any, BinaryIO, overload

import numpy as np

from gradian.data.formatting import format_examples
from gradian.data.tokenizer import chat_template_text, tokenizer_name
from gradian.data.types import Example, FormatSettings, FormattedExample
from gradian.errors import GradianError

SCHEMA = 1
FLAGS = ("truncated", "cut_in_completion", "dropped", "eos_appended", "ends_with_eos", "prefix_mismatch")
ROW_DTYPE = np.dtype(
    [
        ("index", "<i8"),
        ("n_tokens_before_truncation", "<i4"),
        ("n_prompt_tokens", "<i4"),
        ("n_label_tokens", "<i4"),
        ("flags", "u1"),  # bit k set: FLAGS[k] is True
    ]
)
_FILES: dict[str, tuple[str, str | np.dtype[Any]]] = {
    "ids": ("input_ids.i32", "<i4"),
    "mask": ("loss_mask.u8", "u1"),
    "offsets": ("offsets.i64", "<i8"),
    "rows": ("rows.bin", ROW_DTYPE),
    "id_offsets": ("ids_offsets.i64", "<i8"),
}
_ID_FILE = "ids.jsonl"
_META = "meta.json"


def _path_stat(path: str | Path) -> dict[str, Any]:
    """Absolute path, size and mtime of a file (for a folder: the total size and newest mtime of its files)."""
    p = Path(path).resolve()
    if p.is_dir():
        stats = [f.stat() for f in sorted(p.rglob("*")) if f.is_file()]
        size = sum(s.st_size for s in stats)
        mtime = max((s.st_mtime_ns for s in stats), default=p.stat().st_mtime_ns)
    else:
        st = p.stat()
        size, mtime = st.st_size, st.st_mtime_ns
    return {"path": str(p), "size": size, "mtime_ns": mtime}


def _fingerprint_or_none(
    source: str | Path, tokenizer: Any, settings: FormatSettings, keep_dropped: bool
) -> dict[str, Any] | None:
    if not Path(source).exists():
        return None  # rows made in memory (Example.source names no file): nothing to match later
    return source_fingerprint(source, tokenizer, settings, keep_dropped=keep_dropped)


def source_fingerprint(
    source: str | Path, tokenizer: Any, settings: FormatSettings, *, keep_dropped: bool = False
) -> dict[str, Any]:
    """What a tokenized folder is made from: the source file (path, size, mtime), the tokenizer and the settings.

    Two folders with equal fingerprints hold the same rows. The tokenizer is named by ``name_or_path``, class,
    vocabulary size, special tokens and a hash of its chat template; ``settings.sources`` (provenance only) is left out.
    """
    template = chat_template_text(tokenizer)
    tok = {
        "name": tokenizer_name(tokenizer),
        "class": type(tokenizer).__name__,
        "vocab_size": len(tokenizer),
        "bos": getattr(tokenizer, "bos_token", None),
        "eos": getattr(tokenizer, "eos_token", None),
        "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest() if template else None,
    }
    fs = {k: v for k, v in asdict(settings).items() if k != "sources"}
    return {
        "schema": SCHEMA,
        "source": _path_stat(source),
        "tokenizer": tok,
        "settings": fs,
        "keep_dropped": keep_dropped,
    }


def _load(folder: Path, key: str, count: int) -> np.ndarray:
    name, dtype = _FILES[key]
    path = folder / name
    size = path.stat().st_size
    if size != count * np.dtype(dtype).itemsize:
        raise GradianError(
            f"{name} has {size} bytes, expected {count} x {np.dtype(dtype).itemsize}",
            where=str(folder),
            fix="delete the folder and tokenize again",
        )
    if count == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


class TokenizedRows(Sequence[FormattedExample]):
    """A folder written by :func:`tokenize_to_disk`, read as a ``Sequence[FormattedExample]`` (memory-mapped).

    ``rows[i]`` builds one :class:`FormattedExample` (``decisions`` empty); ``rows[a:b]`` a list of them. For bulk
    work without Python lists, :meth:`arrays` gives one row's ids and mask as numpy views, and :attr:`indices`,
    :attr:`offsets` the per-row tables. ``n_dropped`` counts the rows the trainer would drop.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        try:
            self.meta: dict[str, Any] = json.loads((self.folder / _META).read_text("utf-8"))
        except FileNotFoundError:
            raise GradianError(
                "not a tokenized-rows folder (no meta.json)", where=str(folder), fix="run tokenize_to_disk"
            ) from None
        except (OSError, ValueError) as e:
            raise GradianError(f"unreadable meta.json ({e})", where=str(folder), fix="delete the folder") from None
        if self.meta.get("schema") != SCHEMA:
            raise GradianError(
                f"tokenized-rows folder has schema {self.meta.get('schema')!r}, expected {SCHEMA}",
                where=str(folder),
                fix="delete the folder and tokenize again",
            )
        n, n_tok = int(self.meta["n_rows"]), int(self.meta["n_tokens"])
        self._ids = _load(self.folder, "ids", n_tok)
        self._mask = _load(self.folder, "mask", n_tok)
        self._offsets = _load(self.folder, "offsets", n + 1)
        self._rows = _load(self.folder, "rows", n)
        self._id_offsets = _load(self.folder, "id_offsets", n + 1)
        if self._offsets[-1] != n_tok or (self.folder / _ID_FILE).stat().st_size != self._id_offsets[-1]:
            raise GradianError(
                "tokenized-rows files disagree with meta.json", where=str(folder), fix="delete the folder"
            )

    @classmethod
    def open_if_matches(cls, folder: str | Path, source_fingerprint: dict[str, Any]) -> TokenizedRows | None:
        """The folder's rows when it is complete and was made from ``source_fingerprint``; None otherwise."""
        if not source_fingerprint:
            return None
        try:
            rows = cls(folder)
        except (GradianError, OSError, ValueError, KeyError, TypeError):
            return None
        return rows if rows.fingerprint == source_fingerprint else None

    @property
    def fingerprint(self) -> dict[str, Any]:
        """What the folder was made from (see :func:`source_fingerprint`)."""
        return self.meta["fingerprint"]

    @property
    def n_dropped(self) -> int:
        """Rows the trainer would drop (``FormattedExample.dropped``): left out, unless written with keep_dropped."""
        return int(self.meta["n_dropped"])

    @property
    def n_tokens(self) -> int:
        """Tokens of all rows together."""
        return int(self.meta["n_tokens"])

    @property
    def offsets(self) -> np.ndarray:
        """``len(self) + 1`` start offsets into the flat token files (row i is ``offsets[i]:offsets[i + 1]``)."""
        return self._offsets

    @property
    def indices(self) -> np.ndarray:
        """Each row's 0-based index in its source file (``FormattedExample.index``)."""
        return self._rows["index"]

    def __len__(self) -> int:
        return len(self._rows)

    def _pos(self, i: int) -> int:
        n = len(self)
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"row {i} out of range for {n} rows")
        return j

    def arrays(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Row ``i``'s token ids (int32) and loss mask (bool), as read-only numpy arrays."""
        j = self._pos(i)
        lo, hi = int(self._offsets[j]), int(self._offsets[j + 1])
        return self._ids[lo:hi], self._mask[lo:hi].view(np.bool_)

    def _row(self, j: int) -> FormattedExample:
        lo, hi = int(self._offsets[j]), int(self._offsets[j + 1])
        rec = self._rows[j]
        bits = int(rec["flags"])
        flags: dict[str, Any] = {name: bool(bits >> k & 1) for k, name in enumerate(FLAGS)}
        return FormattedExample(
            index=int(rec["index"]),
            input_ids=self._ids[lo:hi].tolist(),
            loss_mask=self._mask[lo:hi].astype(bool).tolist(),
            n_tokens_before_truncation=int(rec["n_tokens_before_truncation"]),
            n_prompt_tokens=int(rec["n_prompt_tokens"]),
            n_label_tokens=int(rec["n_label_tokens"]),
            **flags,
        )

    @overload
    def __getitem__(self, i: int) -> FormattedExample: ...

    @overload
    def __getitem__(self, i: slice) -> list[FormattedExample]: ...

    def __getitem__(self, i: int | slice) -> FormattedExample | list[FormattedExample]:
        if isinstance(i, slice):
            return [self._row(j) for j in range(*i.indices(len(self)))]
        return self._row(self._pos(i))

    def __iter__(self) -> Iterator[FormattedExample]:
        for j in range(len(self)):
            yield self._row(j)

    def content_sha256(self) -> str:
        """sha256 of every row's source index, token ids and loss mask (what the gradients depend on), read in
        blocks from the memory-mapped files."""
        h = hashlib.sha256()
        for arr in (np.ascontiguousarray(self.indices), self._offsets, self._ids, self._mask):
            view = np.ascontiguousarray(arr).data.cast("B")
            for s in range(0, len(view), 1 << 24):
                h.update(view[s : s + (1 << 24)])
        return h.hexdigest()

    def id(self, i: int) -> str | None:
        """Row ``i``'s ``Example.id`` (None when the row had none)."""
        j = self._pos(i)
        lo, hi = int(self._id_offsets[j]), int(self._id_offsets[j + 1])
        with open(self.folder / _ID_FILE, "rb") as f:
            f.seek(lo)
            return json.loads(f.read(hi - lo))

    def iter_ids(self) -> Iterator[str | None]:
        """Every row's ``Example.id``, in order, read from disk as it goes."""
        with open(self.folder / _ID_FILE, "rb") as f:
            for line in f:
                yield json.loads(line)

    def ids(self) -> list[str | None]:
        """Every row's ``Example.id`` as a list (one short string per row)."""
        return list(self.iter_ids())

    def __repr__(self) -> str:
        return (
            f"TokenizedRows({str(self.folder)!r}, rows={len(self)}, tokens={self.n_tokens}, dropped={self.n_dropped})"
        )


class _Writer:
    """Appends formatted rows to the flat files of a folder being written."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: dict[str, BinaryIO] = {key: open(folder / name, "wb") for key, (name, _) in _FILES.items()}
        self.id_file = open(folder / _ID_FILE, "wb")
        self.n_rows = self.n_tokens = self.id_bytes = 0
        self._put("offsets", np.zeros(1, dtype="<i8"))
        self._put("id_offsets", np.zeros(1, dtype="<i8"))

    def _put(self, key: str, arr: np.ndarray) -> None:
        self.files[key].write(np.ascontiguousarray(arr, dtype=_FILES[key][1]).tobytes())

    def append(self, fxs: list[FormattedExample], ids: list[str | None]) -> None:
        if not fxs:
            return
        lengths = np.fromiter((len(fx.input_ids) for fx in fxs), dtype="<i8", count=len(fxs))
        total = int(lengths.sum())
        tokens = np.fromiter(chain.from_iterable(fx.input_ids for fx in fxs), dtype="<i8", count=total)
        if total and (tokens.min() < 0 or tokens.max() > np.iinfo(np.int32).max):
            raise GradianError("token id outside the int32 range", where=str(self.folder), fix="report this bug")
        self._put("ids", tokens)
        self._put("mask", np.fromiter(chain.from_iterable(fx.loss_mask for fx in fxs), dtype="u1", count=total))
        self._put("offsets", self.n_tokens + np.cumsum(lengths))
        table = np.zeros(len(fxs), dtype=ROW_DTYPE)
        for k, fx in enumerate(fxs):
            bits = sum(1 << b for b, name in enumerate(FLAGS) if getattr(fx, name))
            table[k] = (fx.index, fx.n_tokens_before_truncation, fx.n_prompt_tokens, fx.n_label_tokens, bits)
        self._put("rows", table)
        lines = [json.dumps(i, ensure_ascii=False).encode() + b"\n" for i in ids]
        self.id_file.write(b"".join(lines))
        self._put("id_offsets", self.id_bytes + np.cumsum([len(line) for line in lines]))
        self.id_bytes += sum(len(line) for line in lines)
        self.n_rows += len(fxs)
        self.n_tokens += total

    def close(self) -> None:
        for f in (*self.files.values(), self.id_file):
            f.close()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def tokenize_to_disk(
    examples: Iterable[Example],
    tokenizer: Any,
    settings: FormatSettings,
    folder: str | Path,
    *,
    chunk: int = 2048,
    keep_dropped: bool = False,
    source: str | Path | None = None,
) -> TokenizedRows:
    """Format ``examples`` with :func:`format_examples`, ``chunk`` rows at a time, into ``folder``; return its rows.

    Rows the trainer would drop (``fx.dropped``) are counted (``n_dropped``) and left out unless
    ``keep_dropped``. The folder is written as ``<folder>.tmp`` and renamed into place when complete (an existing
    folder is replaced); on an error (a bad row from a strict :func:`iter_examples`, a failing chat template) the
    temporary folder is removed and the error propagates. ``source`` is the file the rows came from, for the
    fingerprint (default: the first row's ``Example.source``).
    """
    if chunk < 1:
        raise ValueError("chunk must be >= 1")
    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    _remove(tmp)
    tmp.mkdir(parents=True)
    n_dropped = 0
    fp = None if source is None else _fingerprint_or_none(source, tokenizer, settings, keep_dropped)
    try:
        writer = _Writer(tmp)
        try:
            it = iter(examples)
            while batch := list(islice(it, chunk)):
                if source is None:
                    source = batch[0].source
                    fp = _fingerprint_or_none(source, tokenizer, settings, keep_dropped)
                fxs = format_examples(batch, tokenizer, settings)
                n_dropped += sum(fx.dropped for fx in fxs)
                keep = [k for k, fx in enumerate(fxs) if keep_dropped or not fx.dropped]
                writer.append([fxs[k] for k in keep], [batch[k].id for k in keep])
                del batch, fxs
        finally:
            writer.close()
        if (
            fp is not None
            and source is not None
            and _fingerprint_or_none(source, tokenizer, settings, keep_dropped) != fp
        ):
            fp = None  # the source changed while it was read: record nothing a later run could reuse
        meta = {
            "schema": SCHEMA,
            "n_rows": writer.n_rows,
            "n_tokens": writer.n_tokens,
            "n_dropped": n_dropped,
            "fingerprint": fp,
        }
        (tmp / _META).write_text(json.dumps(meta, indent=1), "utf-8")
        if folder.exists() or folder.is_symlink():
            old = folder.with_name(f"{folder.name}.old-{os.getpid()}")
            _remove(old)
            folder.rename(old)
            tmp.rename(folder)
            _remove(old)
        else:
            tmp.rename(folder)
    except BaseException:
        _remove(tmp)
        raise
    return TokenizedRows(folder)
