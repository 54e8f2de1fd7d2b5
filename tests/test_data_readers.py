"""Readers and row formats: every file type x the main row formats, indices/ids, and exact error messages."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gradian.data import ALPACA_PROMPT_INPUT, ALPACA_PROMPT_NO_INPUT, load_examples, load_examples_with_problems
from gradian.errors import GradianError

FIX = Path(__file__).parent / "fixtures" / "data"

ROWS = {
    "prompt_completion": [
        {"id": 5, "prompt": "Once upon a time", "completion": " there was a cat."},
        {"id": 6, "prompt": "Lily went", "completion": " home."},
    ],
    "text": [{"_id": "a", "text": "The sky is blue."}, {"_id": "b", "text": "Tom ran."}],
    "alpaca": [
        {"uid": "u1", "instruction": "Add the numbers", "input": "2 and 3", "output": "5"},
        {"uid": "u2", "instruction": "Say hi", "input": "", "output": "hi"},
    ],
    "messages": [
        {"id": "m1", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]},
        {"id": "m2", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]},
    ],
    "sharegpt": [
        {"id": "g1", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]},
        {"id": "g2", "conversations": [{"from": "system", "value": "S"}, {"from": "function", "value": "1"}]},
    ],
}


def write(path: Path, rows: list[dict]) -> Path:
    """Write rows in the file type given by the path's suffix (a folder name without suffix: save_to_disk)."""
    suffix = path.suffix
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    elif suffix == ".csv":
        keys = list(dict.fromkeys(k for r in rows for k in r))
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            for r in rows:
                w.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
    elif suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:  # a datasets.save_to_disk folder, written the way datasets does (Arrow IPC stream + state.json)
        path.mkdir()
        table = pa.Table.from_pylist(rows)
        with pa.OSFile(str(path / "data-00000-of-00001.arrow"), "wb") as sink:
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
        state = {"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": "train"}
        (path / "state.json").write_text(json.dumps(state))
        (path / "dataset_info.json").write_text("{}")
    return path


@pytest.mark.parametrize("ext", [".jsonl", ".json", ".csv", ".parquet", ""])
@pytest.mark.parametrize("fmt", list(ROWS))
def test_every_file_type_and_row_format(tmp_path, ext, fmt):
    rows = ROWS[fmt]
    path = write(tmp_path / f"train{ext}", rows)
    examples = load_examples(path)
    assert [e.index for e in examples] == [0, 1]
    assert [e.source for e in examples] == [str(path)] * 2
    ids = [str(r.get("id", r.get("_id", r.get("uid")))) for r in rows]
    assert [e.id for e in examples] == ids
    want_format = {"sharegpt": "sharegpt"}.get(fmt, fmt)
    assert all(e.format == want_format for e in examples)
    a, b = examples
    if fmt == "prompt_completion":
        assert (a.prompt, a.completion) == ("Once upon a time", " there was a cat.")
    elif fmt == "text":
        assert b.text == "Tom ran."
    elif fmt == "alpaca":
        assert a.prompt == ALPACA_PROMPT_INPUT.format(instruction="Add the numbers", input="2 and 3")
        assert a.completion == "5"
        assert b.prompt == ALPACA_PROMPT_NO_INPUT.format(instruction="Say hi")
    elif fmt == "messages":
        assert a.messages == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
        assert a.target_text() == "Hello"
    else:
        assert a.messages == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
        assert b.messages == [{"role": "system", "content": "S"}, {"role": "tool", "content": "1"}]


def test_alpaca_template_is_the_standard_one():
    assert ALPACA_PROMPT_NO_INPUT == (
        "Below is an instruction that describes a task. Write a response that appropriately completes the request."
        "\n\n### Instruction:\n{instruction}\n\n### Response:\n"
    )
    assert ALPACA_PROMPT_INPUT.startswith(
        "Below is an instruction that describes a task, paired with an input that provides further context. "
    )


def test_gpteacher_response_is_the_alpaca_output(tmp_path: Path) -> None:
    """GPTeacher names Alpaca's output ``response`` (Axolotl's ``type: gpteacher``: the Alpaca template unchanged)."""
    path = tmp_path / "gpteacher.json"
    path.write_text(json.dumps([{"instruction": "Add 2 and 3.", "input": "", "response": "5."},
                                {"instruction": "Name a colour.", "input": "warm", "response": "Red."}]))  # fmt: skip
    rows = load_examples(path)
    assert [(r.format, r.completion) for r in rows] == [("alpaca", "5."), ("alpaca", "Red.")]
    assert rows[0].prompt == ALPACA_PROMPT_NO_INPUT.format(instruction="Add 2 and 3.")
    assert rows[1].prompt == ALPACA_PROMPT_INPUT.format(instruction="Name a colour.", input="warm")


def test_jsonl_blank_lines_do_not_count_and_ids_kept():
    examples = load_examples(FIX / "prompt_completion.jsonl")
    assert [(e.index, e.id) for e in examples] == [(0, "101"), (1, "102")]
    assert examples[1].prompt == "Lily went to"


def test_bom_is_tolerated():
    (ex,) = load_examples(FIX / "bom.jsonl")
    assert ex.text == "Hello world" and ex.format == "text"


def test_fixture_formats():
    (ex,) = load_examples(FIX / "sharegpt.json")
    assert ex.id == "s1"
    assert [m["role"] for m in ex.messages] == ["system", "user", "assistant", "tool"]
    rows = load_examples(FIX / "alpaca.csv")
    assert [e.id for e in rows] == ["7", "8"]
    assert "### Input:\n2 and 3" in rows[0].prompt and "### Input" not in rows[1].prompt


def test_conversational_prompt_completion(tmp_path):
    row = {
        "prompt": [{"role": "user", "content": "Hi"}],
        "completion": [{"role": "assistant", "content": "Hello", "tool_calls": None}],
    }
    (ex,) = load_examples(write(tmp_path / "c.jsonl", [row]))
    assert ex.format == "prompt_completion" and ex.n_prompt_messages == 1
    assert ex.messages[1] == {"role": "assistant", "content": "Hello"}  # None fields dropped, as TRL does
    assert ex.target_text() == "Hello"


def test_conversations_with_role_content_is_messages(tmp_path):
    row = {"conversations": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}
    (ex,) = load_examples(write(tmp_path / "c.jsonl", [row]))
    assert ex.format == "messages"


def test_gsm8k_question_answer_real_file():
    examples = load_examples("/work/shared/data/gsm8k/train.jsonl", limit=50)
    assert len(examples) == 50 and examples[49].index == 49
    assert examples[0].prompt.startswith("Natalia sold clips")
    assert examples[0].completion.endswith("#### 72")


def test_datasets_dict_folder_uses_train_split(tmp_path):
    root = tmp_path / "dd"
    root.mkdir()
    write(root / "train", ROWS["text"])
    write(root / "test", ROWS["text"][:1])
    (root / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    assert len(load_examples(root)) == 2


def test_parquet_nulls_from_mixed_keys_are_dropped(tmp_path):
    rows = [{"prompt": "a", "completion": "b", "id": None}, {"prompt": "c", "completion": "d", "id": 4}]
    examples = load_examples(write(tmp_path / "t.parquet", rows))
    assert [e.id for e in examples] == [None, "4"]
    assert "id" not in examples[0].raw


def test_limit(tmp_path):
    path = write(tmp_path / "t.jsonl", ROWS["text"] * 5)
    assert len(load_examples(path, limit=3)) == 3


def test_problems_are_collected_not_raised(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [
        json.dumps({"prompt": "a", "completion": "b"}),
        "",
        json.dumps({"prompt": "a", "completion": 3}),
        '{"prompt": "a", "compl',
        json.dumps({"text": "x"}),
        json.dumps({"prompt": "c", "completion": "d"}),
    ]
    path.write_text("\n".join(lines) + "\n")
    examples, problems = load_examples_with_problems(path)
    assert [e.index for e in examples] == [0, 4]
    assert [(p.index, p.key) for p in problems] == [(1, "completion"), (2, None), (3, None)]
    assert problems[0].one_line() == (
        f"{path} line 3: 'completion' is a number, expected a string. "
        "Fix: make 'completion' a string (quote numbers, join lists)."
    )
    assert [e.index for e in load_examples(path, strict=False)] == [0, 4]


# ---- exact error messages -------------------------------------------------------------------------------------


def error_of(path, **kw) -> str:
    with pytest.raises(GradianError) as info:
        load_examples(path, **kw)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def jsonl(tmp_path: Path, *rows, name: str = "train.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_error_missing_file(tmp_path):
    p = tmp_path / "nope.jsonl"
    assert error_of(p) == f"{p}: file not found. Fix: check the path."


def test_error_empty_file(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text("")
    assert error_of(p) == f"{p}: file is empty. Fix: point at a file with training rows."


def test_error_only_blank_lines(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text("\n\n  \n")
    assert error_of(p) == f"{p}: file has no data rows. Fix: point at a file with training rows."


def test_error_truncated_json_line():
    p = FIX / "truncated.jsonl"
    assert error_of(p) == (
        f"{p} line 2: invalid JSON: Unterminated string starting at column 31 (the line looks truncated). "
        "Fix: repair or delete line 2; each line must be one complete JSON object."
    )


def test_error_invalid_utf8():
    p = FIX / "bad_utf8.jsonl"
    assert error_of(p) == (
        f"{p} line 2: invalid UTF-8 at byte offset 30 (byte 0xe9). "
        "Fix: re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8 IN > OUT)."
    )


def test_error_unknown_row_format(tmp_path):
    p = jsonl(tmp_path, {"foo": 1, "bar": "x"})
    assert error_of(p) == (
        f"{p} line 1: unknown row format (keys: 'foo', 'bar'). Fix: use one of: prompt+completion (strings or "
        "lists of messages), messages (role/content), conversations (role/content or ShareGPT from/value), text, "
        "instruction+output (Alpaca), question+answer."
    )


def test_error_missing_completion(tmp_path):
    p = jsonl(tmp_path, {"prompt": "a", "completion": "b"}, {"prompt": "only"})
    assert error_of(p) == (
        f"{p} line 2: prompt/completion row without 'completion'. "
        "Fix: add a 'completion' string to every prompt/completion row."
    )


def test_error_completion_is_a_list_of_strings(tmp_path):
    p = jsonl(tmp_path, {"prompt": "a", "completion": ["b", "c"]})
    assert error_of(p) == (
        f"{p} line 1: 'prompt' is a string but the other half is a list of messages. "
        "Fix: make both 'prompt' and 'completion' strings, or both lists of messages."
    )


def test_error_messages_not_a_list(tmp_path):
    p = jsonl(tmp_path, {"messages": "hello"})
    assert error_of(p) == (
        f'{p} line 1: \'messages\' is a string, expected a list of {{"role", "content"}} objects. '
        "Fix: make 'messages' a list."
    )


def test_error_message_without_role(tmp_path):
    p = jsonl(tmp_path, {"messages": [{"role": "user", "content": "a"}, {"content": "b"}]})
    assert error_of(p) == f"{p} line 1: 'messages'[1] has no 'role'. Fix: give every message a 'role'."


def test_error_message_without_content(tmp_path):
    p = jsonl(tmp_path, {"messages": [{"role": "user"}]})
    assert error_of(p) == f"{p} line 1: 'messages'[0] has no 'content'. Fix: give every message a 'content' string."


def test_error_unknown_role(tmp_path):
    p = jsonl(tmp_path, {"messages": [{"role": "bot", "content": "a"}]})
    assert error_of(p) == (
        f"{p} line 1: 'messages'[0] has unknown role 'bot'. Fix: use one of system, user, assistant, tool."
    )


def test_error_unknown_sharegpt_from(tmp_path):
    p = jsonl(tmp_path, {"conversations": [{"from": "human", "value": "a"}, {"from": "robot", "value": "b"}]})
    assert error_of(p) == (
        f"{p} line 1: 'conversations'[1] has unknown 'from' value 'robot'. "
        "Fix: use human, gpt, system, tool, function, function_call or observation."
    )


def test_error_json_top_level_not_a_list(tmp_path):
    p = tmp_path / "train.json"
    p.write_text(json.dumps({"data": [{"text": "a"}]}))
    assert error_of(p) == (
        f"{p}: top-level JSON is an object, expected a list of rows. "
        "Fix: save the rows as a JSON list [{...}, ...] or as JSON Lines (.jsonl)."
    )


def test_error_json_that_is_jsonl(tmp_path):
    p = tmp_path / "train.json"
    p.write_text('{"text": "a"}\n{"text": "b"}\n')
    assert error_of(p) == (
        f"{p} line 2: invalid JSON: Extra data at column 1. "
        "Fix: this looks like JSON Lines (one object per line); rename the file to .jsonl."
    )


def test_error_csv_without_known_columns(tmp_path):
    p = tmp_path / "train.csv"
    p.write_text("a,b\n1,2\n")
    assert error_of(p) == (
        f"{p}: CSV header has no known columns (found: 'a', 'b'). Fix: name the columns for one of: "
        "prompt+completion (strings or lists of messages), messages (role/content), conversations (role/content "
        "or ShareGPT from/value), text, instruction+output (Alpaca), question+answer."
    )


def test_error_unsupported_extension(tmp_path):
    p = tmp_path / "train.txt"
    p.write_text("hello")
    assert error_of(p) == (
        f"{p}: unsupported file type '.txt'. "
        "Fix: use .jsonl, .json, .csv, .tsv, .parquet or a datasets.save_to_disk folder."
    )


def test_error_mixed_formats(tmp_path):
    p = jsonl(tmp_path, {"prompt": "a", "completion": "b"}, {"instruction": "i", "output": "o"})
    assert error_of(p) == (
        f"{p} line 2: row is alpaca but {p} line 1 is prompt_completion; a file must use one row format. "
        "Fix: convert every row to prompt_completion (or split the file)."
    )


def test_error_folder_not_a_dataset(tmp_path):
    assert error_of(tmp_path) == (
        f"{tmp_path}: folder is not a datasets.save_to_disk folder (no state.json or dataset_dict.json). "
        "Fix: point at a data file (.jsonl, .json, .csv, .tsv, .parquet or a datasets.save_to_disk folder)."
    )


def test_error_row_not_an_object(tmp_path):
    p = jsonl(tmp_path, "[1, 2]")
    assert error_of(p) == f"{p} line 1: row is a list, expected a JSON object. Fix: write one JSON object per row."


def test_real_datasets_save_to_disk_folder(tmp_path):
    """A folder written by the real `datasets` library (Dataset and DatasetDict) loads with indices and ids."""
    datasets = pytest.importorskip("datasets")
    rows = [{"id": f"r{i}", "prompt": f"Q{i}:", "completion": f" A{i}"} for i in range(5)]
    ds = datasets.Dataset.from_list(rows)
    ds.save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(str(tmp_path / "dict"))
    for folder, n in (("one", 5), ("dict", 5)):
        got = load_examples(tmp_path / folder)
        assert [e.index for e in got] == list(range(n))
        assert [e.id for e in got] == [f"r{i}" for i in range(n)]
        assert got[3].prompt == "Q3:" and got[3].completion == " A3"
