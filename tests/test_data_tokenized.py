"""Streaming rows: iter_examples is load_examples made lazy; TokenizedRows on disk equals format_examples in memory."""

from __future__ import annotations

import dataclasses
import json
import os
import tracemalloc
from pathlib import Path

import pytest

from gradian.data import (
    FormatSettings,
    format_examples,
    iter_examples,
    load_examples,
    load_examples_with_problems,
    load_tokenizer,
)
from gradian.data.tokenized import TokenizedRows, source_fingerprint, tokenize_to_disk
from gradian.errors import GradianError

REPO = Path(__file__).resolve().parents[1]
BASE = REPO / "examples" / "stories260k" / "base"
TRAIN = REPO / "examples" / "stories260k" / "data" / "train.jsonl"
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(BASE)


def fields(fx) -> dict:
    d = dataclasses.asdict(fx)
    d.pop("decisions")
    return d


def gen_jsonl(path: Path, n: int, *, bad_at: int | None = None) -> Path:
    """n short prompt/completion rows (ids r0, r1, ...); row ``bad_at`` has a number for its completion."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            completion: object = 7 if i == bad_at else f" saw a cat number {i % 97}. The end."
            f.write(json.dumps({"id": f"r{i}", "prompt": f"Once upon a time {i}, Lily", "completion": completion}))
            f.write("\n")
    return path


# ---- iter_examples ----------------------------------------------------------------------------------------------


def data_files(tmp_path: Path) -> list[Path]:
    files = sorted(p for p in (FIXTURES / "data").iterdir()) + sorted((FIXTURES / "bad_inputs").iterdir())
    rows = [{"id": 1, "prompt": "a", "completion": "b"}, {"prompt": "c", "completion": 3}, {"text": "t"}]
    (tmp_path / "mixed.tsv").write_text("id\tprompt\tcompletion\n1\ta\tb\n2\tc\td\n", encoding="utf-8")
    files += [TRAIN, tmp_path / "mixed.tsv"]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return files
    pq.write_table(
        pa.Table.from_pylist([r for r in rows if isinstance(r.get("completion", ""), str)]), tmp_path / "t.pq"
    )
    return [*files, tmp_path / "t.pq"]


def outcome(fn):
    try:
        return fn()
    except GradianError as e:
        return f"error: {e}"


@pytest.mark.parametrize("strict", [True, False])
def test_iter_examples_matches_load_examples_with_problems(tmp_path, strict):
    """Every fixture (good and bad, every file type): same rows, same first error, as the eager loader."""
    for path in data_files(tmp_path):
        got = outcome(lambda path=path: list(iter_examples(path, strict=strict)))

        def want(path=path):
            examples, problems = load_examples_with_problems(path)
            if strict and problems:
                return f"error: {problems[0].to_error()}"
            return examples

        assert got == outcome(want), path
        assert got == outcome(lambda path=path: load_examples(path, strict=strict)), path


def test_iter_examples_bundled_data_and_limit():
    eager = load_examples(TRAIN)
    assert len(eager) == 402
    assert list(iter_examples(TRAIN)) == eager
    assert list(iter_examples(TRAIN, limit=5)) == eager[:5]


def test_iter_examples_is_lazy_and_raises_at_the_bad_row(tmp_path):
    path = gen_jsonl(tmp_path / "t.jsonl", 10, bad_at=6)
    with pytest.raises(GradianError) as want:
        load_examples(path)
    it = iter_examples(path)
    assert [next(it).index for _ in range(6)] == list(range(6))  # the rows before the bad one come out first
    with pytest.raises(GradianError) as got:
        next(it)
    assert (
        str(got.value)
        == str(want.value)
        == (
            f"{path} line 7: 'completion' is a number, expected a string. "
            "Fix: make 'completion' a string (quote numbers, join lists)."
        )
    )
    assert [e.index for e in iter_examples(path, strict=False)] == [0, 1, 2, 3, 4, 5, 7, 8, 9]


def test_iter_examples_missing_file_raises_on_call(tmp_path):
    with pytest.raises(GradianError, match="file not found"):
        iter_examples(tmp_path / "nope.jsonl")


# ---- TokenizedRows equals format_examples ------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 7, 4096])
@pytest.mark.parametrize("settings", [FormatSettings(), FormatSettings(max_length=48)], ids=["default", "trunc48"])
def test_rows_equal_format_examples(tmp_path, tok, chunk, settings):
    want = format_examples(load_examples(TRAIN), tok, settings)
    rows = tokenize_to_disk(iter_examples(TRAIN), tok, settings, tmp_path / "tk", chunk=chunk)
    assert len(rows) == len(want) == 402 and rows.n_dropped == 0
    assert [fields(f) for f in rows] == [fields(f) for f in want]
    assert all(f.decisions == [] for f in rows[:3])
    if settings.max_length == 48:
        assert any(f.truncated and f.cut_in_completion for f in rows)
    assert rows.n_tokens == sum(len(f.input_ids) for f in want)
    assert rows.indices.tolist() == list(range(402))
    ids, mask = rows.arrays(5)
    assert ids.tolist() == want[5].input_ids and mask.tolist() == want[5].loss_mask
    assert rows.ids() == [None] * 402  # the bundled rows have no ids


def test_slices_and_negative_indices(tmp_path, tok):
    want = [fields(f) for f in format_examples(load_examples(TRAIN), tok)]
    rows = tokenize_to_disk(iter_examples(TRAIN), tok, FormatSettings(), tmp_path / "tk", chunk=100)
    n = len(rows)
    assert fields(rows[-1]) == want[-1] and fields(rows[-n]) == want[0]
    for sl in (slice(2, 10, 3), slice(None, None, -1), slice(-5, None), slice(100, 50), slice(-1000, 3), slice(None)):
        assert [fields(f) for f in rows[sl]] == want[sl]
    for bad in (n, -n - 1):
        with pytest.raises(IndexError):
            rows[bad]
    assert isinstance(rows[3:4], list)


def test_ids_kept_in_side_file(tmp_path, tok):
    path = tmp_path / "t.jsonl"
    rows_in = [
        {"id": "a\nb", "prompt": "p", "completion": "c"},
        {"prompt": "p", "completion": "c"},
        {"uid": 7, "prompt": "p", "completion": "c"},
        {"id": "é☃", "prompt": "p", "completion": "c"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows_in), encoding="utf-8")
    rows = tokenize_to_disk(iter_examples(path), tok, FormatSettings(), tmp_path / "tk", chunk=3)
    assert rows.ids() == ["a\nb", None, "7", "é☃"] == [e.id for e in load_examples(path)]
    assert [rows.id(i) for i in (0, 1, 2, 3, -1, -4)] == ["a\nb", None, "7", "é☃", "é☃", "a\nb"]


def test_dropped_rows_left_out_and_counted(tmp_path, tok):
    settings = FormatSettings(max_length=64, drop_long=True)
    examples = load_examples(TRAIN)
    want = format_examples(examples, tok, settings)
    kept = [f for f in want if not f.dropped]
    assert 0 < len(kept) < len(want)
    rows = tokenize_to_disk(iter_examples(TRAIN), tok, settings, tmp_path / "tk", chunk=50)
    assert len(rows) == len(kept) and rows.n_dropped == len(want) - len(kept)
    assert [fields(f) for f in rows] == [fields(f) for f in kept]
    assert rows.indices.tolist() == [f.index for f in kept]

    every = tokenize_to_disk(iter_examples(TRAIN), tok, settings, tmp_path / "all", chunk=50, keep_dropped=True)
    assert [fields(f) for f in every] == [fields(f) for f in want]
    assert every.n_dropped == rows.n_dropped and sum(f.dropped for f in every) == every.n_dropped


def test_empty_input(tmp_path, tok):
    rows = tokenize_to_disk(iter([]), tok, FormatSettings(), tmp_path / "tk")
    assert len(rows) == 0 and list(rows) == [] and rows.ids() == [] and rows[:] == [] and rows.fingerprint is None
    with pytest.raises(IndexError):
        rows[0]


# ---- the folder: atomic, fingerprinted -----------------------------------------------------------------------------


def test_reuse_only_when_the_fingerprint_matches(tmp_path, tok):
    src = tmp_path / "train.jsonl"
    src.write_bytes(TRAIN.read_bytes())
    folder = tmp_path / "tk"
    settings = FormatSettings(max_length=64)
    rows = tokenize_to_disk(iter_examples(src), tok, settings, folder, chunk=64)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tk", "train.jsonl"]  # no .tmp left behind
    fp = source_fingerprint(src, tok, settings)
    assert rows.fingerprint == fp and fp["source"]["path"] == str(src.resolve())
    assert json.loads(json.dumps(fp)) == fp  # it is what meta.json holds

    again = TokenizedRows.open_if_matches(folder, fp)
    assert again is not None and [fields(f) for f in again] == [fields(f) for f in rows]
    assert TokenizedRows.open_if_matches(folder, source_fingerprint(src, tok, FormatSettings(max_length=65))) is None
    assert TokenizedRows.open_if_matches(folder, source_fingerprint(src, tok, settings, keep_dropped=True)) is None
    assert source_fingerprint(src, tok, dataclasses.replace(settings, sources={"max_length": "cli"})) == fp
    assert TokenizedRows.open_if_matches(tmp_path / "missing", fp) is None

    tok2 = load_tokenizer(BASE)
    tok2.chat_template = "{{ messages[0]['content'] }}"
    assert TokenizedRows.open_if_matches(folder, source_fingerprint(src, tok2, settings)) is None

    st = src.stat()
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: same bytes, newer mtime
    assert TokenizedRows.open_if_matches(folder, source_fingerprint(src, tok, settings)) is None

    # rewriting replaces the folder; a damaged folder is not reused
    rows = tokenize_to_disk(iter_examples(src), tok, settings, folder, chunk=64)
    fp = source_fingerprint(src, tok, settings)
    assert TokenizedRows.open_if_matches(folder, fp) is not None
    with open(folder / "input_ids.i32", "ab") as f:
        f.write(b"\0\0\0\0")
    assert TokenizedRows.open_if_matches(folder, fp) is None
    with pytest.raises(GradianError, match="input_ids.i32 has"):
        TokenizedRows(folder)
    with pytest.raises(GradianError, match="no meta.json"):
        TokenizedRows(tmp_path)


def test_bad_row_mid_file_same_error_and_old_folder_kept(tmp_path, tok):
    path = gen_jsonl(tmp_path / "t.jsonl", 3000, bad_at=2500)
    with pytest.raises(GradianError) as want:
        load_examples(path)
    folder = tmp_path / "tk"
    old = tokenize_to_disk(iter_examples(TRAIN), tok, FormatSettings(), folder)
    with pytest.raises(GradianError) as got:
        tokenize_to_disk(iter_examples(path), tok, FormatSettings(), folder, chunk=512)
    assert str(got.value) == str(want.value)
    assert str(got.value).startswith(f"{path} line 2501: 'completion' is a number") and "\n" not in str(got.value)
    assert not (tmp_path / "tk.tmp").exists()
    assert len(TokenizedRows(folder)) == len(old) == 402  # the folder from before is untouched


def test_rows_made_in_memory_have_no_fingerprint(tmp_path, tok):
    examples = load_examples(TRAIN)[:5]
    for e in examples:
        e.source = "not/a/file.jsonl"
    rows = tokenize_to_disk(examples, tok, FormatSettings(), tmp_path / "tk")
    assert len(rows) == 5 and rows.fingerprint is None
    assert TokenizedRows.open_if_matches(tmp_path / "tk", rows.fingerprint) is None


# ---- memory -------------------------------------------------------------------------------------------------------


def traced_peak(fn) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_streaming_memory_is_bounded_by_the_chunk(tmp_path, tok):
    """The traced Python peak of iter_examples + tokenize_to_disk grows with the chunk, not with the rows.

    Measured (stories260K tokenizer, ~25-token rows): ~3.5 KB per row of a chunk streaming, ~3.4 KB per row of the
    file in memory; so at 60,000 rows and chunk 512 the stream peaks near 1.8 MB and load+format near 205 MB.
    """
    settings = FormatSettings()
    big = gen_jsonl(tmp_path / "big.jsonl", 60_000)
    small = gen_jsonl(tmp_path / "small.jsonl", 6_000)

    def stream(path: Path, chunk: int, name: str) -> int:
        def run():
            rows = tokenize_to_disk(iter_examples(path), tok, settings, tmp_path / name, chunk=chunk)
            assert rows.n_dropped == 0

        return traced_peak(run)

    per_chunk_row, fixed = 8 * 1024, 256 * 1024
    peak_small_512 = stream(small, 512, "s512")
    peak_small_2048 = stream(small, 2048, "s2048")
    peak_big_512 = stream(big, 512, "b512")
    for chunk, peak in ((512, peak_small_512), (2048, peak_small_2048), (512, peak_big_512)):
        assert peak < fixed + per_chunk_row * chunk, (chunk, peak)
    assert peak_small_2048 > 2 * peak_small_512  # it is the chunk that sets the peak ...
    assert peak_big_512 < 1.25 * peak_small_512 + fixed  # ... not the number of rows

    rows = TokenizedRows(tmp_path / "b512")
    assert len(rows) == 60_000 and rows.id(-1) == "r59999"

    peak_memory = traced_peak(lambda: format_examples(load_examples(big), tok, settings))
    assert peak_big_512 * 20 < peak_memory, (peak_big_512, peak_memory)
