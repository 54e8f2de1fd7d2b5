"""Reliability: a corpus of malformed inputs, each run through the real CLI (a subprocess, as a user runs it).

Every case ends in exactly one of these outcomes, and never in a traceback:

- ``error``   — exit code 2 and stderr is ONE line: ``error: <file or flag>: <what, row/line/key>. Fix: <what to do>.``
  File-level faults: empty or whitespace-only file, JSON top level not a list, CSV without known columns,
  unsupported extension, corrupt Parquet, missing path, a folder that is not a datasets folder, bad JSON in
  trainer_state.json / adapter_config.json, adapter_config.json without ``r``, YAML syntax error, YAML list,
  ``learning_rate: "fast"``, chat rows with a tokenizer that has no chat template.
- ``finding`` — `gradian diagnose` keeps going and reports the problem as a finding that names the file and the
  0-based row index (``evidence.rows``). Row-level faults, where one bad row should not hide what is wrong with
  the other rows: truncated JSONL line, invalid UTF-8, mixed row formats, missing keys, wrong types, a message
  without role, unknown role, ``content: null``, ShareGPT with an unknown ``from`` (all D101 ``schema``); NaN /
  Infinity in trainer_state.json (L301, accepted permissively); unknown YAML keys (C222, accepted).
- ``accepted`` — no error: a UTF-8 BOM, a one-row file, a 200,000-character row, adapter_config.json with unknown
  fields.
- ``doctor``  — `gradian doctor` is a checklist: a problem in an input is an ``error`` row in its table (exit 1)
  whose detail names the file and line and carries the ``Fix:``; a bad path or unreadable config stops it with
  exit 2 and one line, like every other command.

Static inputs live in tests/fixtures/bad_inputs/ (see its README); folders (runs, adapters, bases) and the big row
are built in tmp_path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import BASE_DIR, make_lora_adapter

FIX = Path(__file__).parent / "fixtures" / "bad_inputs"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "200", "TOKENIZERS_PARALLELISM": "false"}


def gradian(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gradian", *map(str, args)], capture_output=True, text=True, env=ENV, timeout=120
    )


def assert_no_traceback(res: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr


def assert_one_line_error(res: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, stderr exactly one line ``error: ... Fix: ...`` containing every needle."""
    assert_no_traceback(res)
    assert res.returncode == 2, f"rc={res.returncode}\nstdout={res.stdout}\nstderr={res.stderr}"
    lines = res.stderr.strip("\n").splitlines()
    assert len(lines) == 1, res.stderr
    line = lines[0]
    assert line.startswith("error: "), line
    assert "Fix:" in line, line
    for n in needles:
        assert n in line, f"{n!r} not in {line!r}"
    return line


def diagnose_json(*args: str | Path) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    res = gradian("diagnose", *args, "-f", "json")
    assert_no_traceback(res)
    assert res.returncode in (0, 1), f"rc={res.returncode}\nstdout={res.stdout}\nstderr={res.stderr}"
    assert "error:" not in res.stderr, res.stderr
    return res, {f["code"]: f for f in json.loads(res.stdout)}


def doctor_json(*args: str | Path) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    res = gradian("doctor", *args, "--format", "json")
    assert_no_traceback(res)
    assert res.returncode in (0, 1), f"rc={res.returncode}\nstdout={res.stdout}\nstderr={res.stderr}"
    checks: dict[str, dict] = {}
    for c in json.loads(res.stdout):
        checks.setdefault(c["name"], c)
    return res, checks


# --------------------------------------------------------------------------------------------------------------
# Shared folders, built once per module.


@pytest.fixture(scope="module")
def adapter(tmp_path_factory) -> Path:
    """One real PEFT adapter for the bundled stories260K base."""
    return make_lora_adapter(BASE_DIR, tmp_path_factory.mktemp("adapter") / "adapter")


@pytest.fixture(scope="module")
def long_row_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("long") / "long_row.jsonl"
    completion = " the cat ran." * 16_000
    row = {"prompt": "Once upon a time", "completion": completion[: 200_000 - len("Once upon a time")]}
    assert len(row["prompt"]) + len(row["completion"]) == 200_000
    p.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return p


def _adapter_variant(src: Path, out: Path, *, config: dict | None = None, raw: str | None = None, weights=True):
    out.mkdir(parents=True)
    (out / "adapter_config.json").write_text(raw if raw is not None else json.dumps(config), encoding="utf-8")
    if weights:
        shutil.copy(src / "adapter_model.safetensors", out / "adapter_model.safetensors")
    return out


def _config(adapter: Path) -> dict:
    return json.loads((adapter / "adapter_config.json").read_text("utf-8"))


# --------------------------------------------------------------------------------------------------------------
# 1. Data files: `gradian diagnose --train F` is fast (no torch), so it carries the data corpus.


@dataclass
class DataCase:
    id: str
    file: str  # under tests/fixtures/bad_inputs/
    kind: str  # "error" | "finding" | "accepted"
    needles: tuple[str, ...] = ()  # error: substrings of the one line; finding: substrings of a D101 reason
    row: int | None = None  # finding: the 0-based row index D101 must name
    flag: str = "--train"
    extra: tuple[str, ...] = field(default_factory=tuple)


DATA_CASES = [
    # row-level faults: a D101 finding naming the file and the row index
    DataCase("truncated_jsonl_line", "truncated_line.jsonl", "finding", ("invalid JSON", "Unterminated string"), row=1),
    DataCase("invalid_utf8", "invalid_utf8.jsonl", "finding", ("invalid UTF-8", "0xe9"), row=1),
    DataCase("mixed_row_formats", "mixed_formats.jsonl", "finding", ("row is text but",), row=1),
    DataCase("missing_key_completion", "missing_keys.jsonl", "finding", ("without 'completion'",), row=1),
    DataCase("completion_is_number", "completion_number.jsonl", "finding", ("'completion' is a number",), row=1),
    DataCase("messages_is_string", "messages_string.jsonl", "finding", ("'messages' is a string",), row=0),
    DataCase("message_without_role", "message_without_role.jsonl", "finding", ("has no 'role'",), row=0),
    DataCase("unknown_role", "unknown_role.jsonl", "finding", ("unknown role 'wizard'",), row=0),
    DataCase("message_content_null", "content_null.jsonl", "finding", ("'content' is null",), row=0),
    DataCase("sharegpt_unknown_from", "sharegpt_unknown_from.jsonl", "finding", ("unknown 'from' value",), row=0),
    DataCase(
        "eval_truncated_line",
        "truncated_line.jsonl",
        "finding",
        ("invalid JSON",),
        row=1,
        flag="--eval",
        extra=("--train", str(FIX / "one_row.jsonl")),
    ),
    # file-level faults: exit 2, one line
    DataCase("empty_file", "empty.jsonl", "error", ("empty.jsonl", "file is empty")),
    DataCase("whitespace_only_file", "whitespace_only.jsonl", "error", ("whitespace_only.jsonl", "no data rows")),
    DataCase("json_top_level_object", "top_level_object.json", "error", ("top_level_object.json", "an object")),
    DataCase("csv_no_known_columns", "no_known_columns.csv", "error", ("no_known_columns.csv", "'foo', 'bar'")),
    DataCase("unsupported_extension", "unsupported.txt", "error", ("unsupported.txt", "'.txt'")),
    DataCase("parquet_corrupt", "corrupt.parquet", "error", ("corrupt.parquet", "not a readable Parquet")),
    # accepted
    DataCase("utf8_bom_accepted", "bom.jsonl", "accepted"),
    DataCase("one_row_accepted", "one_row.jsonl", "accepted"),
]


@pytest.mark.parametrize("case", DATA_CASES, ids=lambda c: getattr(c, "id", None))
def test_data_file_through_diagnose(case: DataCase):
    path = FIX / case.file
    assert path.exists(), path
    args = (case.flag, path, *case.extra)
    if case.kind == "error":
        assert_one_line_error(gradian("diagnose", *args), *case.needles)
        return
    res, findings = diagnose_json(*args)
    if case.kind == "accepted":
        assert "D101" not in findings, findings.get("D101")
        assert "error:" not in res.stderr and "Traceback" not in res.stderr, res.stderr
        return
    d101 = findings.get("D101")
    assert d101 is not None, sorted(findings)
    assert d101["evidence"]["rows"] == [case.row]
    assert d101["evidence"]["file"] == str(path)
    reasons = " | ".join(d101["evidence"]["reasons"])
    for n in case.needles:
        assert n in reasons, f"{n!r} not in {reasons!r}"
    assert str(path) in (d101["fix"].get("command") or ""), d101["fix"]  # the droprows command names the file


def test_doctor_reports_bad_rows_as_error_checks():
    """doctor is a checklist: a bad row is an error row (exit 1) whose detail names file + line and the Fix."""
    train, eval_ = FIX / "truncated_line.jsonl", FIX / "invalid_utf8.jsonl"
    res, checks = doctor_json("--train", train, "--eval", eval_)
    assert res.returncode == 1
    assert res.stderr.strip() == "", res.stderr
    for name, path, what in (("train data", train, "invalid JSON"), ("eval data", eval_, "invalid UTF-8")):
        check = checks[name]
        assert check["status"] == "error", check
        assert check["detail"].startswith(f"{path} line 2: {what}"), check["detail"]
        assert "Fix:" in check["detail"] and check["fix"], check


def test_long_row_200k_chars_is_formatted(long_row_file):
    """A 200,000-character row: no crash; it is tokenized (so formatting ran) and reported as over max length."""
    res, findings = diagnose_json("--train", long_row_file, "--base", BASE_DIR)
    assert "D101" not in findings
    assert "D106" in findings, sorted(findings)  # exceeds the max length: the row was formatted and tokenized
    assert findings["D106"]["evidence"]["rows"] == [0]


def test_messages_with_tokenizer_without_chat_template_diagnose():
    """Chat rows + a tokenizer with no chat template: not a refusal but one D127 error finding, and every check that
    needs no tokens still runs (here the dataset-size check)."""
    res = gradian("diagnose", "--train", FIX / "messages_ok.jsonl", "--base", BASE_DIR)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert "D127" in res.stdout and "no chat template" in res.stdout
    assert "D115 size_small: only 1 training rows" in res.stdout


def test_messages_with_tokenizer_without_chat_template_doctor():
    res, checks = doctor_json("--train", FIX / "messages_ok.jsonl", "--base", BASE_DIR)
    assert res.returncode == 1
    bad = [c for c in checks.values() if c["status"] == "error"]
    assert bad and "chat template" in bad[0]["detail"]


# --------------------------------------------------------------------------------------------------------------
# 2. Paths.


@pytest.mark.parametrize(
    "cmd,flag,name,needles",
    [
        ("diagnose", "--train", "nope.jsonl", ("--train", "nope.jsonl", "does not exist")),
        ("diagnose", "--run", "no_such_run", ("--run", "no_such_run", "does not exist")),
        ("doctor", "--run", "no_such_run", ("--run", "no_such_run", "does not exist")),
    ],
    ids=["diagnose_train_missing", "diagnose_run_missing", "doctor_run_missing"],
)
def test_nonexistent_path(tmp_path, cmd, flag, name, needles):
    assert_one_line_error(gradian(cmd, flag, tmp_path / name), *needles)


def test_directory_as_train_not_datasets_dir(tmp_path):
    d = tmp_path / "just_a_folder"
    d.mkdir()
    (d / "notes.txt").write_text("hello")
    assert_one_line_error(gradian("diagnose", "--train", d), "just_a_folder", "datasets.save_to_disk")


# --------------------------------------------------------------------------------------------------------------
# 3. Run folders, trainer_state.json and configs.


def test_trainer_state_nan_infinity_accepted(tmp_path):
    """Python's json writes NaN / Infinity; they are read (not an error) and reported as non-finite losses."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "trainer_state.json").write_text(
        '{"global_step": 3, "log_history": [{"step": 1, "loss": 2.5, "learning_rate": 1e-4},'
        ' {"step": 2, "loss": NaN, "grad_norm": Infinity}, {"step": 3, "loss": -Infinity}]}'
    )
    _, findings = diagnose_json("--run", run)
    assert "L301" in findings, sorted(findings)
    assert findings["L301"]["evidence"]["steps"][0] == 2
    assert findings["L301"]["evidence"]["source"] == str(run / "trainer_state.json")


def test_trainer_state_bad_json(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "trainer_state.json").write_text('{"global_step": 2, "log_history": [{"step": 1, "loss": 1.0')
    assert_one_line_error(gradian("diagnose", "--run", run), "trainer_state.json", "invalid JSON", "line 1")


def test_yaml_unknown_keys_accepted_with_finding(tmp_path):
    cfg = tmp_path / "axolotl.yaml"
    cfg.write_text("base_model: ./base\nadapter: lora\nlora_r: 8\nlearning_rate: 0.0002\nmy_custom_flag: true\n")
    _, findings = diagnose_json("--config", cfg)
    assert "C222" in findings, sorted(findings)
    assert "my_custom_flag" in findings["C222"]["message"]
    assert findings["C222"]["evidence"]["source"] == str(cfg)


@pytest.mark.parametrize(
    "text,needles",
    [
        ("base_model: ./base\nlearning_rate: [0.1\n  foo: : bar\n", ("syntax error", "line 3")),
        ("- learning_rate: 0.0002\n- lora_r: 8\n", ("got a list",)),
        ('base_model: ./base\nadapter: lora\nlora_r: 8\nlearning_rate: "fast"\n', ("line 4", "'fast'")),
    ],
    ids=["yaml_syntax_error", "yaml_top_level_list", "yaml_learning_rate_fast"],
)  # fmt: skip
def test_bad_yaml_config(tmp_path, text, needles):
    cfg = tmp_path / "axolotl.yaml"
    cfg.write_text(text)
    assert_one_line_error(gradian("diagnose", "--config", cfg), "axolotl.yaml", *needles)


# --------------------------------------------------------------------------------------------------------------
# 4. Adapters.


def test_adapter_config_bad_json(tmp_path, adapter):
    a = _adapter_variant(adapter, tmp_path / "a", raw='{"r": 4, "peft_type": "LORA",')
    assert_one_line_error(gradian("diagnose", "--adapter", a), "adapter_config.json", "invalid JSON", "line 1")


def test_adapter_config_missing_r(tmp_path, adapter):
    cfg = _config(adapter)
    del cfg["r"]
    a = _adapter_variant(adapter, tmp_path / "a", config=cfg)
    assert_one_line_error(gradian("diagnose", "--adapter", a), "adapter_config.json", "missing r")


def test_adapter_config_unknown_fields_accepted(tmp_path, adapter):
    """Fields from a newer PEFT are ignored; the config is still read (its target_modules drive C209)."""
    cfg = {**_config(adapter), "some_future_peft_field": True, "another": {"nested": 1}}
    cfg["base_model_name_or_path"] = "org/not-a-local-model"  # no tokenizer to load: keeps this fast
    a = _adapter_variant(adapter, tmp_path / "a", config=cfg)
    res, findings = diagnose_json("--adapter", a)
    assert "C209" in findings, sorted(findings)  # LoRA on q/v only: read from this adapter_config.json
    assert "q_proj" in findings["C209"]["message"]


def test_adapter_without_weights(tmp_path, adapter):
    a = _adapter_variant(adapter, tmp_path / "a", config=_config(adapter), weights=False)
    res, checks = doctor_json("--adapter", a, "--base", BASE_DIR)
    assert res.returncode == 1
    assert checks["adapter weights"]["status"] == "error"
    assert "adapter_model.safetensors" in checks["adapter weights"]["detail"]
    assert str(a) in checks["adapter weights"]["detail"]


def test_adapter_model_bin_only_refused(tmp_path, adapter):
    """Only a pickled adapter_model.bin: refused with a note saying why, never unpickled (it is not even a pickle)."""
    a = _adapter_variant(adapter, tmp_path / "a", config=_config(adapter), weights=False)
    (a / "adapter_model.bin").write_bytes(b"this is not a pickle; unpickling it would raise")
    res, checks = doctor_json("--adapter", a, "--base", BASE_DIR)
    assert res.returncode == 1
    assert checks["adapter weights"]["status"] == "error"
    assert "is a pickle, which gradian never loads" in res.stdout
    assert "safetensors" in checks["run"]["detail"]


def test_adapter_for_a_base_of_another_shape(tmp_path, adapter):
    """A base whose hidden size differs: doctor names the mismatching tensor. The base is config-only (meta device)."""
    other = tmp_path / "other_base"
    shutil.copytree(BASE_DIR, other, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    cfg = json.loads((other / "config.json").read_text())
    cfg["hidden_size"] = cfg["hidden_size"] * 2
    (other / "config.json").write_text(json.dumps(cfg))
    res, checks = doctor_json("--adapter", adapter, "--base", other)
    assert res.returncode == 1
    check = checks["adapter ↔ base"]
    assert check["status"] == "error"
    assert "do not fit" in check["detail"] and "shape" in check["detail"]
    assert "base_model_name_or_path" in check["fix"]
