"""A real TRL run on the bundled stories260K base: SFTTrainer (prompt/completion rows, completion-only loss, LoRA on
every linear layer, lr 3e-3 as the tiny model needs, eval and a checkpoint every 10 steps), as a user's run
directory. Used by the false-alarm tests: a clean real TRL run must get no error or warning from `gradian diagnose`
or `gradian doctor`."""

from __future__ import annotations

import json
from pathlib import Path

from realsets import stories, write_jsonl
from test_diagnose_helpers import STORIES


def make_trl_run(
    out: Path, n_train: int = 240, n_eval: int = 40, *, packing: bool = False, base_name: str | None = None
) -> Path:
    """Train and save the run into ``out``. ``packing``: SFTConfig(packing=True) (TRL's default bfd strategy).
    ``base_name``: the name the model carries, so the adapter records it as its base (a hub id, as when a user
    trains from the hub and diagnoses with a local copy); the weights are stories260K's either way."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    torch.manual_seed(0)
    rows = stories()
    train, ev = rows[:n_train], rows[n_train : n_train + n_eval]
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "train.jsonl", train)
    write_jsonl(out / "eval.jsonl", ev)
    tok = AutoTokenizer.from_pretrained(str(STORIES))
    model = AutoModelForCausalLM.from_pretrained(str(STORIES))
    if base_name is not None:
        model.name_or_path = model.config._name_or_path = base_name
    cfg = SFTConfig(
        output_dir=str(out), learning_rate=3e-3, num_train_epochs=1, per_device_train_batch_size=8,
        gradient_accumulation_steps=1, max_length=256, logging_steps=2, eval_strategy="steps", eval_steps=10,
        save_steps=10, save_strategy="steps", report_to=[], seed=0, use_cpu=True, bf16=False,
        lr_scheduler_type="cosine", warmup_steps=2, dataloader_num_workers=0, packing=packing,
    )  # fmt: skip
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = SFTTrainer(
        model=model, args=cfg, train_dataset=Dataset.from_list(train), eval_dataset=Dataset.from_list(ev),
        processing_class=tok, peft_config=lora,
    )  # fmt: skip
    trainer.train()
    trainer.save_model(str(out))
    (out / "training_args.json").write_text(json.dumps(cfg.to_dict(), default=str, indent=1))
    trainer.state.save_to_json(str(out / "trainer_state.json"))
    return out
