"""C217 (reentrant checkpointing without input grads) against the trainers that make the inputs require grad
themselves: a real TRL SFTTrainer step with reentrant checkpointing trains the adapter and gets no finding; an
LLaMA-Factory config at its defaults (use_reentrant_gc true) and an Axolotl config that asks for reentrant
checkpointing get none either; a plain Trainer run that records no transformers version gets a note that says so.
tests/test_version_ends.py checks the transformers window on the real library (4.57.6 fails its first backward and
gets the error, 5.0.0 trains)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradian.diagnose.api import diagnose_full
from gradian.diagnose.settings import DiagnoseSettings
from test_diagnose_helpers import STORIES

TRAIN_ROW = '{"prompt": "Once upon a time", "completion": " there was a cat."}\n'


def c217(**kw: object) -> list[str]:
    fs, notes, _ = diagnose_full(base=str(STORIES), select=["C217"], settings=DiagnoseSettings(), **kw)
    assert not [n for n in notes if "internal error" in n.reason], notes
    return [f.severity.value for f in fs]


@pytest.mark.slow
def test_trl_trains_the_adapter_with_reentrant_checkpointing(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    torch.manual_seed(0)
    out = tmp_path / "out"
    args = SFTConfig(output_dir=str(out), report_to="none", use_cpu=True, max_steps=1, learning_rate=1.0,
                     optim="sgd", lr_scheduler_type="constant", per_device_train_batch_size=2, save_strategy="no",
                     gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": True})  # fmt: skip
    rows = [json.loads(TRAIN_ROW), {"prompt": "The dog ran", "completion": " to the park."}]
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"])
    trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(str(STORIES)), args=args, peft_config=lora,
                         train_dataset=Dataset.from_list(rows), processing_class=AutoTokenizer.from_pretrained(
                             str(STORIES)))  # fmt: skip
    trainer.train()
    moved = max(float(p.abs().max()) for n, p in trainer.model.named_parameters() if "lora_B" in n)
    assert moved > 0  # lora_B starts at zero: the gradient reached the adapter
    trainer.save_model(str(out))
    (out / "training_args.json").write_text(json.dumps(args.to_dict(), default=str))
    (out / "train.jsonl").write_text(TRAIN_ROW)
    assert c217(run=out, train=out / "train.jsonl") == []


def test_llamafactory_and_axolotl_configs_get_no_finding(tmp_path: Path) -> None:
    train = tmp_path / "train.jsonl"
    train.write_text(TRAIN_ROW)
    lf = tmp_path / "lf.yaml"  # LLaMA-Factory's defaults: gradient checkpointing on, use_reentrant_gc true
    lf.write_text(f"stage: sft\nmodel_name_or_path: {STORIES}\nfinetuning_type: lora\ntemplate: default\n")
    ax = tmp_path / "axolotl.yaml"
    ax.write_text(f"base_model: {STORIES}\nadapter: lora\ngradient_checkpointing: true\n"
                  "gradient_checkpointing_kwargs:\n  use_reentrant: true\n")  # fmt: skip
    hf = tmp_path / "training_args.json"  # a plain Trainer run that recorded no version: a note
    hf.write_text(json.dumps({"gradient_checkpointing": True, "gradient_checkpointing_kwargs": {"use_reentrant": True},
                              "learning_rate": 1e-4}))  # fmt: skip
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8,
                                                              "target_modules": ["q_proj"]}))  # fmt: skip
    assert c217(config=lf, train=train) == []
    assert c217(config=ax, train=train) == []
    assert c217(config=hf, train=train, adapter=tmp_path) == ["info"]
