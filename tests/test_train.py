"""`gradian train`: a real LoRA fine-tune of the bundled base on a tiny slice, through the CLI and the Python API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BASE_DIR, REPO
from gradian.errors import GradianError

TRAIN = REPO / "examples" / "stories260k" / "data" / "train.jsonl"
TINY = {"max_steps": 2, "batch_size": 4, "logging_steps": 1, "max_length": 64, "cpu_threads": 1, "seed": 7}


@pytest.fixture(scope="module")
def tiny_train(tmp_path_factory) -> Path:
    lines = TRAIN.read_text("utf-8").splitlines()[:16]
    p = tmp_path_factory.mktemp("data") / "train.jsonl"
    p.write_text("\n".join(lines) + "\n", "utf-8")
    return p


@pytest.fixture(scope="module")
def cli_run(tiny_train, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "exclude.txt").write_text("# rows to drop\n0\n5\n15\n", "utf-8")
    (tmp / "cfg.yaml").write_text("learning_rate: 1e-3\nlora_r: 4\nmax_length: 64\ncpu_threads: 1\n", "utf-8")
    out = tmp / "run"
    res = subprocess.run(
        [sys.executable, "-m", "gradian", "train", "--base", str(BASE_DIR), "--train", str(tiny_train),
         "--eval", str(tiny_train), "--out", str(out), "--config", str(tmp / "cfg.yaml"), "--max-steps", "2",
         "--batch-size", "4", "--logging-steps", "1", "--exclude-rows", str(tmp / "exclude.txt"), "--no-progress"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def test_cli_writes_a_standard_output_dir(cli_run):
    for name in ("adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "trainer_state.json",
                 "training_args.json"):  # fmt: skip
        assert (cli_run / name).is_file(), name
    state = json.loads((cli_run / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    train_logs = [h for h in state["log_history"] if "loss" in h]
    assert [h["step"] for h in train_logs] == [1, 2]
    assert all("grad_norm" in h and "learning_rate" in h for h in train_logs)
    assert any("eval_loss" in h for h in state["log_history"])

    args = json.loads((cli_run / "training_args.json").read_text())
    assert args["learning_rate"] == 1e-3  # from the YAML (alias learning_rate)
    assert args["per_device_train_batch_size"] == 4  # from the flag
    assert args["max_length"] == 64 and args["packing"] is False and args["completion_only_loss"] is True
    assert args["lora_r"] == 4 and args["lora_alpha"] == 16

    cfg = json.loads((cli_run / "adapter_config.json").read_text())
    assert cfg["r"] == 4
    assert sorted(cfg["target_modules"]) == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


def test_cli_adapter_loads_with_peft(cli_run):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(BASE_DIR))
    peft_model = PeftModel.from_pretrained(model, str(cli_run))
    names = [n for n, _ in peft_model.named_parameters() if "lora_" in n]
    assert len(names) == 5 * 7 * 2  # 5 layers x 7 projections x (A, B)
    b = [p for n, p in peft_model.named_parameters() if "lora_B" in n]
    assert any(torch.count_nonzero(p) > 0 for p in b)  # training moved B off its zero init


def test_exclude_rows_drops_rows(cli_run):
    args = json.loads((cli_run / "training_args.json").read_text())
    assert args["gradian_n_rows_loaded"] == 16
    assert args["gradian_excluded_rows"] == [0, 5, 15]
    assert args["gradian_n_train_rows"] == 13


def test_same_seed_same_adapter(tiny_train, tmp_path):
    from safetensors.torch import load_file

    from gradian.train import train_lora

    outs = []
    for k in range(2):
        r = train_lora(BASE_DIR, tiny_train, tmp_path / f"r{k}", config=TINY, exclude_rows=[1, 2], progress=False)
        assert r.n_rows_trained == 14 and r.excluded_rows == [1, 2] and r.global_step == 2
        outs.append(load_file(str(tmp_path / f"r{k}" / "adapter_model.safetensors")))
    assert outs[0].keys() == outs[1].keys()
    for key in outs[0]:
        assert (outs[0][key] == outs[1][key]).all(), key


def test_collator_pads_right_and_masks_padding():
    from gradian.train import _Collator

    batch = _Collator(pad_id=0)(
        [{"input_ids": [1, 5, 6], "labels": [-100, 5, 6]}, {"input_ids": [1, 7], "labels": [-100, 7]}]
    )
    assert batch["input_ids"].tolist() == [[1, 5, 6], [1, 7, 0]]
    assert batch["labels"].tolist() == [[-100, 5, 6], [-100, 7, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]


def test_read_exclude_rows_formats(tmp_path):
    from gradian.train import read_exclude_rows

    (tmp_path / "a.json").write_text("[3, 1, 3]")
    (tmp_path / "b.txt").write_text("7\n\n2  # why\n")
    (tmp_path / "c.json").write_text('{"indices": [4]}')
    (tmp_path / "bad.txt").write_text("1\nx\n")
    assert read_exclude_rows(tmp_path / "a.json") == [1, 3]
    assert read_exclude_rows(tmp_path / "b.txt") == [2, 7]
    assert read_exclude_rows(tmp_path / "c.json") == [4]
    with pytest.raises(GradianError, match="line 2"):
        read_exclude_rows(tmp_path / "bad.txt")


def test_exclude_rows_out_of_range_is_an_error(tiny_train, tmp_path):
    from gradian.train import train_lora

    with pytest.raises(GradianError, match="not in the file"):
        train_lora(BASE_DIR, tiny_train, tmp_path / "o", config=TINY, exclude_rows=[99], progress=False)


def test_config_unknown_key_and_bad_value(tmp_path):
    from gradian.train import build_config, normalize_config, read_config_file

    (tmp_path / "c.yaml").write_text("lr: 2e-4\nnum_train_epochs: 2\nlora_target_modules: q_proj,v_proj\n")
    cfg = build_config(read_config_file(tmp_path / "c.yaml"))
    assert cfg.lr == 2e-4 and cfg.epochs == 2.0 and cfg.target_modules == ["q_proj", "v_proj"]
    with pytest.raises(GradianError, match="unknown config key 'lerning_rate'"):
        normalize_config({"lerning_rate": 1})
    with pytest.raises(GradianError, match="bad value"):
        build_config({"batch_size": "eight"})


def test_cli_missing_train_is_one_line(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "gradian", "train", "--base", str(BASE_DIR), "--out", str(tmp_path / "o")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.strip().startswith("error: --train: --train is required")
