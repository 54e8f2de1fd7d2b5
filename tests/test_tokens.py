"""`gradian tokens` on the bundled tokenizer: JSON shape, row selection, coloured text, one-line errors; and the
chat templates Gradian carries for when TRL is not installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradian.cli import main

BASE = Path(__file__).resolve().parents[1] / "examples" / "stories260k" / "base"


def _run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(["tokens", *args])
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out, out.err


@pytest.fixture()
def train(tmp_path: Path) -> Path:
    rows = [
        {"id": "a", "prompt": "Hello", "completion": "world"},
        {"id": "b", "prompt": "Once upon a time", "completion": " there was a dog."},
        {"id": "c", "prompt": "Lily", "completion": " ran."},
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


def test_json_rows(capsys, train: Path) -> None:
    from transformers import AutoTokenizer

    code, out, _ = _run(capsys, "--train", str(train), "--base", str(BASE), "--format", "json", "--rows", "0,2")
    assert code == 0
    doc = json.loads(out)
    assert [r["index"] for r in doc["rows"]] == [0, 2] and [r["id"] for r in doc["rows"]] == ["a", "c"]
    tok = AutoTokenizer.from_pretrained(str(BASE))
    for r, (p, c) in zip(doc["rows"], [("Hello", "world"), ("Lily", " ran.")], strict=True):
        assert set(r) == {"index", "id", "input_ids", "labels", "dropped", "decisions"}
        assert r["input_ids"] == tok(p + c + tok.eos_token)["input_ids"]
        assert len(r["labels"]) == len(r["input_ids"]) and r["labels"][-1] == tok.eos_token_id
        n_masked = sum(lab == -100 for lab in r["labels"])
        assert 0 < n_masked < len(r["labels"])
        assert r["labels"][n_masked:] == r["input_ids"][n_masked:]  # one masked prefix, then the labels
        assert r["dropped"] is False and r["decisions"]
    assert doc["settings"]["format"]["mask"] == "completion_only"


def test_text_output_colours_tokens(capsys, train: Path) -> None:
    code, out, _ = _run(capsys, "--train", str(train), "--base", str(BASE), "--rows", "1")
    assert code == 0
    assert "row 1 (id b)" in out and "carry loss" in out and "▁Once(" in out
    assert "row 0" not in out


@pytest.mark.parametrize(("args", "where"), [(["--rows", "9"], "--rows"), (["--rows", "x"], "--rows")])
def test_bad_rows_is_one_line(capsys, train: Path, args: list[str], where: str) -> None:
    code, out, err = _run(capsys, "--train", str(train), "--base", str(BASE), *args)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {where}:") and err.count("\n") == 1


def test_no_tokenizer_is_one_line(capsys, train: Path) -> None:
    code, _, err = _run(capsys, "--train", str(train))
    assert code == 2 and "--tokenizer" in err and err.count("\n") == 1


def test_dropped_row_is_shown(capsys, tmp_path: Path) -> None:
    cfg = tmp_path / "training_args.json"
    cfg.write_text(json.dumps({"dataset_text_field": "text", "max_length": 4, "learning_rate": 1e-4}))
    train = tmp_path / "t.jsonl"
    rows = [{"prompt": "Once upon a time there was a dog", "completion": " ran."}, {"prompt": "A", "completion": "b"}]
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, _ = _run(capsys, "--train", str(train), "--config", str(cfg), "--base", str(BASE), "-f", "json")
    assert code == 0
    got = json.loads(out)["rows"]
    assert [r["dropped"] for r in got] == [True, False]
    assert all(lab == -100 for lab in got[0]["labels"]) and len(got[0]["input_ids"]) == 4


def test_vendored_templates_equal_what_trl_swaps_in() -> None:
    """The copies used without TRL give the same training template as the installed TRL, family by family."""
    trl_utils = pytest.importorskip("trl.chat_template_utils")
    from transformers import AutoTokenizer

    from gradian.data.templates import VENDORED, _vendored

    tok = AutoTokenizer.from_pretrained(str(BASE))
    src = Path(trl_utils.__file__).parent / "chat_templates"
    for name in VENDORED:
        tok.chat_template = (src / f"{name}.jinja").read_text("utf-8")
        assert _vendored()[tok.chat_template] == trl_utils.get_training_chat_template(tok), name
