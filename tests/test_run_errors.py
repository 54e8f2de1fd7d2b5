"""Every bad input gives one line naming the file, the key or line, and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradian.errors import GradianError
from gradian.run import discover, load_logs, load_setup

RUNS = Path(__file__).parent / "fixtures" / "runs"


def _message(fn, *args, **kwargs) -> str:
    with pytest.raises(GradianError) as info:
        fn(*args, **kwargs)
    text = str(info.value)
    assert "\n" not in text
    return text


def test_bad_json_in_trainer_state(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_text('{\n  "global_step": 10,\n  "log_history": [\n    {"loss": 1.0, "step": 1},,\n  ]\n}\n')
    art = discover(tmp_path)
    assert _message(load_logs, art) == (
        f"{path}: invalid JSON at line 4 column 30: Expecting value. "
        "Fix: repair the file, or copy it again from the training machine."
    )


def test_yaml_syntax_error(tmp_path: Path) -> None:
    path = tmp_path / "axolotl.yml"
    path.write_text("base_model: m\nsequence_len: 512\ndatasets:\n  - path: a.jsonl\n   type: alpaca\n")
    assert _message(load_setup, discover(config=path)) == (
        f"{path}: YAML syntax error at line 5 column 4: expected <block end>, but found '<block mapping start>'. "
        "Fix: check the indentation and quoting on that line."
    )


def test_config_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("- base_model: m\n- sequence_len: 512\n")
    assert _message(load_setup, discover(config=path)) == (
        f"{path}: expected a mapping of keys to values at the top level, got a list. "
        "Fix: pass the training config (key: value pairs)."
    )


def test_wrong_type_for_known_key(tmp_path: Path) -> None:
    path = tmp_path / "axolotl.yml"
    path.write_text("base_model: m\nsequence_len: 512\nlearning_rate: fast\n")
    assert _message(load_setup, discover(config=path)) == (
        "axolotl.yml line 3: learning_rate: expected a number, got 'fast'. "
        "Fix: set learning_rate to a number, e.g. learning_rate: 2.0e-4."
    )


def test_wrong_type_in_json_dump(tmp_path: Path) -> None:
    (tmp_path / "training_args.json").write_text(
        json.dumps({"learning_rate": 1e-4, "per_device_train_batch_size": "eight"})
    )
    assert _message(load_setup, discover(tmp_path)) == (
        "training_args.json: per_device_train_batch_size: expected an integer, got 'eight'. "
        "Fix: set per_device_train_batch_size to an integer, e.g. per_device_train_batch_size: 8."
    )


def test_wrong_type_bool(tmp_path: Path) -> None:
    path = tmp_path / "lf.yaml"
    path.write_text("model_name_or_path: m\nfinetuning_type: lora\ncutoff_len: 1024\ntrain_on_prompt: maybe\n")
    assert _message(load_setup, discover(config=path)) == (
        "lf.yaml line 4: train_on_prompt: expected true or false, got 'maybe'. "
        "Fix: set train_on_prompt to true or false, e.g. train_on_prompt: true."
    )


@pytest.mark.parametrize(
    "config,missing",
    [({"lora_alpha": 16, "target_modules": ["q_proj"]}, "r"), ({"r": 8, "peft_type": "LORA"}, "target_modules")],
)
def test_adapter_config_missing_keys(tmp_path: Path, config: dict, missing: str) -> None:
    (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    assert _message(discover, tmp_path) == (
        f"{tmp_path / 'adapter_config.json'}: missing {missing}, so this is not a complete LoRA adapter config. "
        "Fix: pass the adapter folder PEFT saved with save_pretrained (it writes r and target_modules)."
    )


def test_adapter_flag_without_adapter_config(tmp_path: Path) -> None:
    assert _message(discover, adapter=tmp_path) == (
        f"--adapter: no adapter_config.json in {tmp_path}. Fix: pass the folder PEFT's save_pretrained wrote "
        "(adapter_config.json + adapter_model.safetensors)."
    )


def test_explicit_path_missing(tmp_path: Path) -> None:
    assert _message(discover, RUNS / "trl_run", config=tmp_path / "axolotl.yml") == (
        f"--config: {tmp_path / 'axolotl.yml'} does not exist. Fix: check the path given to --config."
    )


def test_bad_jsonl_line(tmp_path: Path) -> None:
    path = tmp_path / "trainer_log.jsonl"
    path.write_text('{"current_steps": 1, "total_steps": 3, "loss": 1.0}\n{"current_steps": 2, "loss": \n')
    assert _message(load_logs, discover(tmp_path)) == (
        f"{path}: invalid JSON at line 2 column 30: Expecting value. Fix: repair or delete that line."
    )


def test_unknown_yaml(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("foo: 1\nbar: 2\n")
    assert _message(load_setup, discover(config=path)).startswith(
        f"{path}: neither an Axolotl nor a LLaMA-Factory config (none of their keys found). Fix: "
    )


def test_discovered_bad_training_args_bin_is_a_note(tmp_path: Path) -> None:
    (tmp_path / "training_args.bin").write_bytes(b"garbage")
    (tmp_path / "training_args.json").write_text(json.dumps({"learning_rate": 1e-4, "num_train_epochs": 1}))
    setup = load_setup(discover(tmp_path))
    assert setup.learning_rate == 1e-4
    assert any(n.startswith(f"skipped {tmp_path / 'training_args.bin'}: not a readable pickle") for n in setup.notes)
