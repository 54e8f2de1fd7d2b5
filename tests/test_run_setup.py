"""The normalized TrainingSetup from each framework's files, its sources, defaults and FormatSettings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gradian.run import discover, format_settings, load_setup
from gradian.run.configs import read_config

RUNS = Path(__file__).parent / "fixtures" / "runs"


def test_trl_run_from_training_args_bin_and_adapter() -> None:
    setup = load_setup(discover(RUNS / "trl_run"))
    assert setup.framework == "trl"
    assert setup.learning_rate == 2e-4
    assert setup.num_epochs == 2.0
    assert setup.max_steps is None  # -1 = unset
    assert setup.per_device_batch_size == 4 and setup.gradient_accumulation_steps == 2
    assert setup.effective_batch_size == 8
    assert setup.max_length == 256 and setup.max_length_key == "max_length"
    assert setup.masking == "completion_only"
    assert setup.scheduler == "cosine" and setup.warmup_steps == 2
    assert setup.gradient_checkpointing is True and setup.use_reentrant is False
    assert setup.eval_strategy == "steps" and setup.seed == 42
    assert setup.attn_implementation == "sdpa"
    assert setup.lora_r == 4 and setup.lora_alpha == 8.0 and setup.target_modules == ["q_proj", "v_proj"]
    assert setup.sources["lora_r"] == "adapter_config.json: r"
    assert setup.sources["learning_rate"] == "training_args.bin: learning_rate"
    assert setup.versions == {"peft": "0.21.2"}
    fs = format_settings(setup)
    assert (fs.max_length, fs.mask, fs.assistant_only, fs.add_eos, fs.drop_long) == (
        256, "completion_only", False, True, False
    )  # fmt: skip
    assert fs.sources["max_length"] == "training_args.bin: max_length"


def test_axolotl_yaml() -> None:
    setup = load_setup(discover(config=RUNS / "axolotl" / "axolotl.yml"))
    assert setup.framework == "axolotl"
    assert setup.base_model == "examples/stories260k/base"
    assert setup.learning_rate == 2e-4  # YAML reads 2e-4 as a string; Axolotl accepts it, so do we
    assert setup.num_epochs == 3.0
    assert setup.per_device_batch_size == 2 and setup.gradient_accumulation_steps == 4
    assert setup.max_length == 256 and setup.max_length_key == "sequence_len"
    assert setup.packing is True
    assert setup.masking == "completion_only"
    assert setup.lora_r == 16 and setup.lora_alpha == 32.0 and setup.lora_dropout == 0.05
    assert setup.target_modules == "all-linear"
    assert setup.precision == "bf16"
    assert setup.scheduler == "cosine" and setup.warmup_steps == 10
    assert setup.gradient_checkpointing is True and setup.use_reentrant is True
    assert setup.eval_size == 0.05
    assert setup.attn_implementation == "flash_attention_2"
    assert setup.unknown_keys == ["lora_rank_typo"]
    assert setup.deprecated_keys == ["evaluation_strategy"]
    assert setup.sources["learning_rate"] == "axolotl.yml: learning_rate"
    assert setup.sources["max_length"] == "axolotl.yml: sequence_len"
    fs = format_settings(setup)
    assert (fs.max_length, fs.mask, fs.drop_long, fs.add_eos) == (256, "completion_only", True, True)


def test_axolotl_defaults_and_chat_template(tmp_path: Path) -> None:
    cfg = tmp_path / "qlora.yaml"
    cfg.write_text(
        "base_model: org/model\nadapter: qlora\nlora_r: 8\nlearning_rate: 0.0002\n"
        "datasets:\n  - path: org/chat\n    type: chat_template\n"
    )
    setup = load_setup(discover(config=cfg))
    assert setup.max_length == 512 and setup.max_length_key is None
    assert setup.sources["max_length"] == "axolotl default (sequence_len 512)"
    assert setup.masking == "assistant_only"
    assert setup.per_device_batch_size == 1 and setup.num_epochs == 1.0 and setup.packing is False
    assert setup.lora_dropout == 0.0
    fs = format_settings(setup)
    assert fs.assistant_only is True and fs.drop_long is True
    assert (fs.trainer, fs.template, fs.drop_unlabeled) == ("axolotl", None, False)


def test_axolotl_train_on_inputs_is_full_loss(tmp_path: Path) -> None:
    cfg = tmp_path / "a.yml"
    cfg.write_text("base_model: m\nsequence_len: 128\ntrain_on_inputs: true\nmicro_batch_size: 1\n")
    setup = load_setup(discover(config=cfg))
    assert setup.masking == "full"
    assert setup.sources["masking"] == "a.yml: train_on_inputs"
    assert format_settings(setup).mask == "full"


def test_llamafactory_run() -> None:
    setup = load_setup(discover(RUNS / "llamafactory_run"))
    assert setup.framework == "llamafactory"
    assert setup.max_length == 1024 and setup.max_length_key == "cutoff_len"
    assert setup.masking == "completion_only"
    assert setup.learning_rate == 5e-5 and setup.num_epochs == 3.0
    assert setup.per_device_batch_size == 2 and setup.gradient_accumulation_steps == 8
    assert setup.eval_size == 0.1 and setup.precision == "bf16"
    assert setup.lora_r == 8 and setup.lora_alpha == 16.0
    # the YAML says lora_target: all, the saved adapter has q/v only: the adapter wins and the conflict is noted
    assert setup.target_modules == ["q_proj", "v_proj"]
    assert any("target_modules" in n and "lora_target" in n for n in setup.notes)
    assert setup.gradient_checkpointing is True and setup.sources["gradient_checkpointing"] == "LLaMA-Factory default"
    fs = format_settings(setup)
    assert (fs.max_length, fs.mask, fs.assistant_only) == (1024, "completion_only", True)
    assert (fs.trainer, fs.template, fs.drop_unlabeled) == ("llamafactory", "default", False)


def test_llamafactory_defaults(tmp_path: Path) -> None:
    cfg = tmp_path / "lf.yaml"
    cfg.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\nfinetuning_type: lora\ntrain_on_prompt: true\n"
        "lora_target: q_proj,v_proj\nneat_packing: true\nadditional_target: embed_tokens\n"
    )
    setup = load_setup(discover(config=cfg))
    assert setup.max_length == 2048 and setup.masking == "full"
    assert setup.lora_r == 8 and setup.lora_alpha == 16.0 and setup.target_modules == ["q_proj", "v_proj"]
    assert setup.modules_to_save == ["embed_tokens"]
    assert setup.packing is True and setup.sources["packing"] == "lf.yaml: neat_packing"
    assert setup.base_model == "Qwen/Qwen2.5-0.5B"


def _dump(tmp_path: Path, name: str, data: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_old_trl_json_dump_deprecated_keys(tmp_path: Path) -> None:
    _dump(
        tmp_path,
        "sft_config.json",
        {"output_dir": "o", "learning_rate": 2e-5, "num_train_epochs": 3.0, "max_steps": -1,
         "per_device_train_batch_size": 8, "evaluation_strategy": "epoch", "eval_strategy": None,
         "max_seq_length": 2048, "dataset_text_field": "text", "packing": False, "bf16": True, "fp16": False,
         "warmup_ratio": 0.03, "gradient_checkpointing": True, "gradient_checkpointing_kwargs": None},
    )  # fmt: skip
    setup = load_setup(discover(tmp_path))
    assert setup.framework == "trl"
    assert setup.max_length == 2048 and setup.max_length_key == "max_seq_length"
    assert setup.eval_strategy == "epoch"
    assert sorted(setup.deprecated_keys) == ["evaluation_strategy", "max_seq_length"]
    assert setup.precision == "bf16" and setup.warmup_ratio == 0.03
    assert setup.use_reentrant is None
    assert setup.sources["max_length"] == "sft_config.json: max_seq_length"


def test_trl_defaults_when_unset(tmp_path: Path) -> None:
    _dump(tmp_path, "training_args.json", {"learning_rate": 1e-4, "num_train_epochs": 1, "packing": False})
    setup = load_setup(discover(tmp_path))
    assert setup.framework == "trl"
    assert setup.max_length == 1024 and setup.max_length_key is None
    assert setup.sources["max_length"].startswith("TRL default")
    assert setup.masking == "completion_only"


def test_trl_max_length_null_means_no_truncation_and_assistant_only(tmp_path: Path) -> None:
    _dump(
        tmp_path,
        "training_args.json",
        {"learning_rate": 1e-4, "num_train_epochs": 1, "max_length": None, "assistant_only_loss": True},
    )
    fs = format_settings(load_setup(discover(tmp_path)))
    assert fs.max_length is None
    assert fs.assistant_only is True


def test_completion_only_false_is_full(tmp_path: Path) -> None:
    _dump(tmp_path, "training_args.json", {"learning_rate": 1e-4, "max_steps": 50, "completion_only_loss": False})
    setup = load_setup(discover(tmp_path))
    assert setup.masking == "full" and setup.max_steps == 50


def test_plain_transformers_dump_assumes_nothing(tmp_path: Path) -> None:
    _dump(tmp_path, "training_args.json", {"learning_rate": 1e-4, "per_device_train_batch_size": 2, "fp16": True})
    setup = load_setup(discover(tmp_path))
    assert setup.framework == "transformers"
    assert setup.masking is None and setup.max_length is None
    assert setup.precision == "fp16"
    assert format_settings(setup).sources["max_length"] == "default (TRL: 1024)"


def test_yaml_overrides_json_and_adapter_wins_for_lora(tmp_path: Path) -> None:
    _dump(tmp_path, "training_args.json", {"learning_rate": 1e-4, "per_device_train_batch_size": 2})
    (tmp_path / "axolotl.yaml").write_text("base_model: m\nlearning_rate: 3e-4\nlora_r: 32\nmicro_batch_size: 2\n")
    _dump(tmp_path, "adapter_config.json",
          {"r": 16, "lora_alpha": 32, "target_modules": ".*\\.(q|v)_proj", "peft_type": "LORA",
           "use_rslora": True, "rank_pattern": {"q_proj": 8}, "peft_version": "0.17.1@abc123"})  # fmt: skip
    setup = load_setup(discover(tmp_path))
    assert setup.framework == "axolotl"
    assert setup.learning_rate == 3e-4 and setup.sources["learning_rate"] == "axolotl.yaml: learning_rate"
    assert setup.lora_r == 16 and setup.sources["lora_r"] == "adapter_config.json: r"
    assert setup.target_modules == ".*\\.(q|v)_proj"  # a regex string, as PEFT allows
    assert setup.use_rslora is True
    assert setup.raw["adapter_config"]["rank_pattern"] == {"q_proj": 8}
    assert setup.versions["peft"] == "0.17.1"
    assert any("lora_r: 16" in n for n in setup.notes)


def test_transformers5_float_warmup_steps_is_a_ratio(tmp_path: Path) -> None:
    _dump(tmp_path, "training_args.json", {"learning_rate": 1e-4, "num_train_epochs": 1, "warmup_steps": 0.1})
    setup = load_setup(discover(tmp_path))
    assert setup.warmup_ratio == 0.1 and setup.warmup_steps is None


@pytest.mark.parametrize("value,expected", [("true", True), ("False", False), (1, True)])
def test_bool_strings(tmp_path: Path, value, expected) -> None:
    cfg = tmp_path / "a.yml"
    cfg.write_text(f"base_model: m\nsequence_len: 64\nsample_packing: {json.dumps(value)}\n")
    assert load_setup(discover(config=cfg)).packing is expected


def _trl_config(tmp_path: Path, **keys) -> Path:
    cfg = tmp_path / "training_args.json"
    cfg.write_text(json.dumps({"learning_rate": 1e-4, "dataset_text_field": "text", **keys}))
    return cfg


@pytest.mark.parametrize(("keys", "mask", "assistant_only"), [
    ({"assistant_only_loss": True}, "completion_only", True),  # completion_only_loss None: both masks where they apply
    ({"assistant_only_loss": True, "completion_only_loss": False}, "full", True),  # TRL: the assistant mask alone
    ({"completion_only_loss": False}, "full", False),
])  # fmt: skip
def test_trl_loss_flags_to_masks(tmp_path: Path, keys: dict, mask: str, assistant_only: bool) -> None:
    fs = format_settings(load_setup(discover(config=_trl_config(tmp_path, **keys))))
    assert (fs.mask, fs.assistant_only) == (mask, assistant_only)


def test_trl_formatting_keys(tmp_path: Path) -> None:
    cfg = _trl_config(tmp_path, truncation_mode="keep_end", dataset_text_field="content", eos_token="<EOS_TOKEN>")
    fs = format_settings(load_setup(discover(config=cfg)))
    assert fs.truncation_mode == "keep_end" and fs.text_field == "content"
    assert fs.eos_token is None  # TrainingArguments.to_dict writes "<EOS_TOKEN>" whatever the value was


def test_eos_decision_is_shared(tmp_path: Path) -> None:
    """One EOS decision for every command: TRL < 0.16 and the plain transformers Trainer append none."""
    old = _trl_config(tmp_path, trl_version="0.15.2")
    assert format_settings(load_setup(discover(config=old))).add_eos is False
    new = tmp_path / "new"
    new.mkdir()
    assert format_settings(load_setup(discover(config=_trl_config(new, trl_version="0.19.0")))).add_eos is True


@pytest.mark.parametrize("strategy", ["wrapped", "bfd_split"])
def test_packing_that_cuts_rows_is_refused_by_attribute(tmp_path: Path, strategy: str) -> None:
    from gradian.attribute.api import attribute
    from gradian.errors import GradianError

    example = Path(__file__).resolve().parents[1] / "examples" / "stories260k"
    cfg = _trl_config(tmp_path, packing=True, packing_strategy=strategy, max_length=64)
    setup = load_setup(discover(config=cfg))
    assert any(f"packing ({strategy})" in n and "attribute refuses" in n for n in setup.notes)
    with pytest.raises(GradianError) as err:
        attribute(example / "run", base=str(example / "base"), config=cfg, train=example / "data" / "train.jsonl",
                  eval=example / "data" / "eval.jsonl")  # fmt: skip
    assert "cannot attribute a packed run" in err.value.one_line() and strategy in err.value.one_line()


def test_bfd_packing_keeps_rows_whole(tmp_path: Path) -> None:
    setup = load_setup(discover(config=_trl_config(tmp_path, packing=True, max_length=64)))
    assert format_settings(setup).packing == "bfd"
    assert any("packing (bfd)" in n for n in setup.notes)


def test_axolotl_run_dir_reads_the_config_its_model_card_holds(tmp_path: Path) -> None:
    """Axolotl writes the YAML it trained with into the README.md it saves beside the adapter (the fixture's card was
    written by the real ``axolotl train`` 0.19.0, its paths made relative): the run dir alone gives the setup, and an
    error names the card's line as an editor numbers it."""
    run = tmp_path / "run"
    shutil.copytree(RUNS / "axolotl_card", run)
    card = (run / "README.md").read_text("utf-8").splitlines()
    setup = load_setup(discover(run=run))
    assert setup.framework == "axolotl"
    assert setup.max_length == 256 and setup.sources["max_length"] == "README.md: sequence_len"
    line = next(i for i, text in enumerate(card, 1) if text.startswith("sequence_len:"))
    assert read_config(run / "README.md").where("sequence_len") == f"README.md line {line}: sequence_len"
    assert setup.learning_rate == 5e-4 and setup.num_epochs == 2.0 and setup.lora_r == 16
    assert setup.unknown_keys == []
    settings = format_settings(setup)
    assert settings.trainer == "axolotl" and settings.assistant_only and settings.drop_long  # chat_template rows


def test_a_model_card_without_an_axolotl_config_is_no_config(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUNS / "axolotl_card", run)
    (run / "README.md").write_text("---\nlibrary_name: peft\n---\n# my-lora\n\n- PEFT 0.20.0\n", "utf-8")
    setup = load_setup(discover(run=run))
    assert setup.framework is None and setup.max_length is None
