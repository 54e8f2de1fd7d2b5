"""One SGD step of the transformers Trainer on a PEFT LoRA model of the bundled stories260K base, with reentrant
gradient checkpointing, under whatever transformers is first on PYTHONPATH (``python checkpointing_ends.py BASE
OUT``): the model is wrapped by ``get_peft_model`` first and the Trainer turns checkpointing on, as a plain
Trainer script does. Where enabling checkpointing makes the inputs require grad the adapter trains; where it does
not, no gradient reaches it (the step fails, or leaves lora_B at its zeros). Prints ``FACTS {json}`` and saves the
run into OUT (training_args.json, adapter_config.json, the Trainer's model card) for ``gradian diagnose``."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(base: Path, out: Path) -> None:
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(base)),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))  # fmt: skip
    ids = torch.arange(5, 37).reshape(2, 16)
    rows = [{"input_ids": r, "labels": r, "attention_mask": torch.ones_like(r)} for r in ids]
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=2, max_steps=1, optim="sgd",
                             learning_rate=1.0, lr_scheduler_type="constant", report_to="none", use_cpu=True,
                             save_strategy="no", seed=0, remove_unused_columns=False, gradient_checkpointing=True,
                             gradient_checkpointing_kwargs={"use_reentrant": True})  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=rows)
    error = None
    try:
        trainer.train()
    except Exception as e:  # no input requires grad: nothing to backpropagate
        error = f"{type(e).__name__}: {e}"[:300]
    moved = max(float(p.detach().abs().max()) for n, p in model.named_parameters() if "lora_B" in n)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    (out / "training_args.json").write_text(json.dumps(args.to_dict(), default=str))
    trainer.create_model_card()
    print("FACTS " + json.dumps({"transformers": transformers.__version__, "error": error, "lora_b_max": moved}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
