"""Reliability: every path option of every command, given a bad path, ends in one line (exit 2), never a traceback.

For each command (`gradian --help`: doctor, diagnose, attribute, report, verify, train, demo) and each of its path
options, the option's good value is replaced by a faulty one:

- ``missing``     a path that does not exist;
- ``file``        a file where a folder is expected (an input folder, or an output folder ``--out``);
- ``dir``         a folder where a file is expected;
- ``under_file``  an output path inside a file (``a-file.txt/out``: its parent cannot be created);
- ``truncated``   the file cut short (the folder's key file: weights, tokenizer.json, report.json, a JSON config);
- ``other``       another model's: an adapter trained on a base of other widths with the same module names, that
                  base for the bundled adapter, a tokenizer whose vocabulary is larger than the base's embeddings, a
                  folder that is not a `gradian attribute` output;
- ``unreadable``  chmod 000 (skipped as root, which reads it anyway).

Outcome: exit 2 and exactly one ``error: ... Fix: ...`` line naming the path. Documented exceptions: `gradian
doctor` is a checklist, so a problem it can name is an error row of its table (exit 1); `gradian diagnose` reports a
truncated data row as a D101 finding (one bad row should not hide the others), and never reads model weights, so
truncated weights or another model's adapter or tokenizer are findings (X404, C211), not a stop. Runs in process
(``gradian.cli.main``) to keep the sweep fast; ``tests/test_reliability_inputs.py`` runs the CLI as a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import BASE_DIR, REPO, make_lora_adapter

E = REPO / "examples" / "stories260k"
RUN = E / "run"

# command -> {option: kind}; kind: "in_dir", "in_file", "out_dir", "out_file"
OPTIONS: dict[str, dict[str, str]] = {
    "doctor": {"--run": "in_dir", "--adapter": "in_dir", "--base": "in_dir", "--tokenizer": "in_dir",
               "--train": "in_file", "--eval": "in_file", "--out": "out_dir"},
    "diagnose": {"--run": "in_dir", "--adapter": "in_dir", "--base": "in_dir", "--tokenizer": "in_dir",
                 "--train": "in_file", "--eval": "in_file", "--config": "in_file", "--logs": "in_file",
                 "--out": "out_file"},
    "attribute": {"--run": "in_dir", "--adapter": "in_dir", "--base": "in_dir", "--tokenizer": "in_dir",
                  "--train": "in_file", "--eval": "in_file", "--config": "in_file", "--logs": "in_file",
                  "--out": "out_dir"},
    "report": {"OUT_DIR": "in_dir"},
    "verify": {"OUT_DIR": "in_dir"},
    "train": {"--base": "in_dir", "--train": "in_file", "--eval": "in_file", "--config": "in_file",
              "--exclude-rows": "in_file", "--out": "out_dir"},
    "demo": {"--example": "in_dir", "--out": "out_dir"},
}  # fmt: skip
FAULTS = {
    "in_dir": ("missing", "file", "truncated", "other", "unreadable"),
    "in_file": ("missing", "dir", "truncated", "unreadable"),
    "out_dir": ("file", "under_file", "unreadable"),
    "out_file": ("dir", "under_file"),
}
NO_SUCH_CASE = {  # (command, option, fault) that has no meaning
    ("doctor", "--out", "unreadable"),  # doctor only reads free disk space there
    ("report", "OUT_DIR", "other"),  # "another model's" output folder: see test_report_of_a_foreign_folder
    ("verify", "OUT_DIR", "other"),
    ("train", "--base", "other"),  # any base is a base to train on
    ("train", "--config", "truncated"),  # YAML has no end marker: a cut file is often a valid shorter config
}
WEIGHTS_UNREAD = {"truncated", "other"}  # diagnose reads configs, not weights: findings (X404, C211), not a stop


def _cases():
    for cmd, opts in OPTIONS.items():
        for opt, kind in opts.items():
            for fault in FAULTS[kind]:
                if (cmd, opt, fault) not in NO_SUCH_CASE:
                    yield pytest.param(cmd, opt, fault, id=f"{cmd}{opt.lower()}-{fault}")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """Good inputs (a 40-row training file, an attribute output folder) and the faulty variants, built once."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from gradian.cli import main

    t = tmp_path_factory.mktemp("paths")
    w: dict[str, Path] = {"tmp": t}
    w["train"] = t / "train.jsonl"
    w["train"].write_text("".join((E / "data" / "train.jsonl").read_text().splitlines(keepends=True)[:40]))
    w["a_file"] = t / "a-file.txt"
    w["a_file"].write_text("just text\n")
    w["a_dir"] = t / "a-folder"
    w["a_dir"].mkdir()
    # another model: the bundled base's layout at other widths (same module names), and an adapter trained on it
    narrow = t / "narrow-base"
    cfg = AutoConfig.from_pretrained(BASE_DIR)
    cfg.hidden_size, cfg.intermediate_size = 32, 96
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(narrow)
    for f in BASE_DIR.glob("tokenizer*"):
        shutil.copy(f, narrow / f.name)
    w["narrow_base"] = narrow
    w["narrow_adapter"] = make_lora_adapter(narrow, t / "narrow-adapter")
    # a tokenizer of another vocabulary: ids past the base's 512 embeddings
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    texts = [
        json.loads(line)["prompt"] + json.loads(line)["completion"] for line in w["train"].read_text().splitlines()
    ]
    tok.train_from_iterator(texts * 20, trainers.BpeTrainer(vocab_size=2000, special_tokens=["<unk>", "<s>", "</s>"]))
    big = t / "big-vocab-tokenizer"
    big.mkdir()
    tok.save(str(big / "tokenizer.json"))
    (big / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
            }
        )  # fmt: skip
    )
    assert tok.get_vocab_size() > 512
    w["big_tokenizer"] = big
    # an attribute output folder (report / verify read it)
    out = t / "attr-out"
    _call(main, ["attribute", "--run", str(RUN), "--base", str(BASE_DIR), "--train", str(w["train"]), "--eval",
                 str(E / "data" / "eval.jsonl"), "--out", str(out), "--no-progress"])  # fmt: skip
    assert (out / "report.json").is_file()
    w["attr_out"] = out
    return w


def _call(main, argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as e:
        return int(e.code or 0) if not isinstance(e.code, str) else 1
    return 0


def _truncate(src: Path, dst: Path, keep: float = 0.5) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * keep)])
    return dst


def _copy_with_truncated(src_dir: Path, dst: Path, name: str) -> Path:
    shutil.copytree(src_dir, dst)
    _truncate(src_dir / name, dst / name)
    return dst


def _good(cmd: str, w: dict[str, Path], out: Path) -> dict[str, str]:
    train, ev = str(w["train"]), str(E / "data" / "eval.jsonl")
    return {
        "doctor": {"--run": str(RUN), "--base": str(BASE_DIR), "--train": train, "--eval": ev, "--out": str(out)},
        "diagnose": {"--run": str(RUN), "--base": str(BASE_DIR), "--train": train, "--eval": ev},
        "attribute": {"--run": str(RUN), "--base": str(BASE_DIR), "--train": train, "--eval": ev, "--out": str(out),
                      "--no-progress": ""},
        "report": {"OUT_DIR": str(w["attr_out"])},
        "verify": {"OUT_DIR": str(w["attr_out"]), "--max-steps": "1", "--no-progress": ""},
        "train": {"--base": str(BASE_DIR), "--train": train, "--out": str(out), "--max-steps": "1",
                  "--no-progress": ""},
        "demo": {"--out": str(out)},
    }[cmd]  # fmt: skip


def _faulty(cmd: str, opt: str, fault: str, w: dict[str, Path], t: Path) -> Path:
    """The bad value of ``opt`` for ``fault`` (built in ``t``)."""
    kind = OPTIONS[cmd][opt]
    if fault == "missing":
        return t / f"no-such-{opt.strip('-').lower()}"
    if fault == "file":
        return w["a_file"]
    if fault == "dir":
        return w["a_dir"]
    if fault == "under_file":
        return w["a_file"] / "out"
    if fault == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads a chmod 000 path anyway")
        target = t / "locked"
        if kind == "in_file":
            shutil.copy(_good_file(cmd, opt, w), target)
        else:
            target.mkdir()
        target.chmod(0)
        return target
    if fault == "truncated":
        if opt in ("--run", "--adapter"):
            return _copy_with_truncated(RUN, t / "run", "adapter_model.safetensors")
        if opt == "--base":
            return _copy_with_truncated(BASE_DIR, t / "base", "model.safetensors")
        if opt == "--tokenizer":
            return _copy_with_truncated(BASE_DIR, t / "tok", "tokenizer.json")
        if opt == "--example":
            ex = t / "example"
            shutil.copytree(E, ex)
            _truncate(E / "run" / "adapter_model.safetensors", ex / "run" / "adapter_model.safetensors")
            return ex
        if opt == "OUT_DIR":
            return _copy_with_truncated(w["attr_out"], t / "attr-out", "report.json")
        src = _good_file(cmd, opt, w)
        return _truncate(src, t / f"truncated{src.suffix}", keep=0.6)
    if fault == "other":
        if opt in ("--run", "--adapter"):
            return w["narrow_adapter"]
        if opt == "--base":
            return w["narrow_base"]
        if opt == "--tokenizer":
            return w["big_tokenizer"]
        if opt == "--example":
            ex = t / "example"
            shutil.copytree(E, ex)
            shutil.rmtree(ex / "base")
            shutil.copytree(w["narrow_base"], ex / "base")
            return ex
    raise AssertionError((cmd, opt, fault))


def _good_file(cmd: str, opt: str, w: dict[str, Path]) -> Path:
    return {
        "--train": w["train"],
        "--eval": E / "data" / "eval.jsonl",
        "--config": RUN / "training_args.json" if cmd != "train" else E / "train.yaml",
        "--logs": RUN / "trainer_state.json",
        "--exclude-rows": E / "data" / "exclude_harmful.json",
    }[opt]


@pytest.mark.parametrize(("cmd", "opt", "fault"), list(_cases()))
def test_bad_path_is_one_line(world, tmp_path, capfd, cmd, opt, fault):
    from gradian.cli import main

    args = _good(cmd, world, tmp_path / "out")
    bad = _faulty(cmd, opt, fault, world, tmp_path)
    args[opt] = str(bad)
    argv = [cmd]
    for k, v in args.items():
        if k == "OUT_DIR":
            argv.insert(1, v)
        else:
            argv += [k] + ([v] if v else [])
    capfd.readouterr()
    rc = _call(main, argv)
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err, out + err
    lines = [x for x in err.splitlines() if x.startswith("error: ")]
    if cmd == "doctor" and rc == 1:  # a checklist: the problem is an error row of its table
        assert not lines and " error " in out, (out[-3000:], err[-3000:])
        return
    if cmd == "diagnose" and fault == "truncated" and opt in ("--train", "--eval"):
        assert rc in (0, 1) and not lines, (rc, err[-3000:])
        assert "D101" in out and "invalid JSON" in out, out[-3000:]
        return
    if (
        cmd == "diagnose"
        and fault in WEIGHTS_UNREAD
        and rc != 2
        and opt in ("--run", "--adapter", "--base", "--tokenizer")
    ):
        assert rc in (0, 1) and not lines, (rc, err[-3000:])  # ran; what it could read is in its findings
        return
    assert rc == 2, (rc, out[-3000:], err[-3000:])
    assert len(lines) == 1, err[-3000:]
    line = lines[0]
    assert "Fix:" in line, line
    named = {str(bad), bad.name, str(bad.parent)}
    assert any(n in line for n in named), line


def test_report_of_a_foreign_folder(world, capfd):
    """`gradian report` / `verify` on a folder that is not a `gradian attribute` output (a training run)."""
    from gradian.cli import main

    for argv in (["report", str(RUN)], ["verify", str(RUN), "--max-steps", "1", "--no-progress"]):
        capfd.readouterr()
        rc = _call(main, argv)
        out, err = capfd.readouterr()
        assert "Traceback" not in out + err
        assert rc == 2, (argv, out[-2000:], err[-2000:])
        (line,) = [x for x in err.splitlines() if x.startswith("error: ")]
        assert str(RUN) in line and "Fix:" in line
