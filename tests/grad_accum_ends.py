"""One SGD step of the transformers Trainer on the bundled stories260K base under whatever transformers is first on
PYTHONPATH, run as a script in a subprocess (``python grad_accum_ends.py BASE OUT``): two rows of different lengths
as one batch of 2, then as 2 accumulated micro-batches of 1, from the same weights. Where the Trainer normalises the
loss over the accumulated tokens the two updates are the same; where it averages per micro-batch the short row
weighs as much as the long one and they differ. Prints ``FACTS {json}`` (``gap``: the largest weight difference
between the two updates over the largest update) and saves the accumulated run into OUT (training_args.json and the
Trainer's model card), a run directory for ``gradian diagnose``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _step(base: Path, out: Path, rows: list[dict[str, Any]], batch: int, accum: int) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    def collate(feats: list[dict[str, Any]]) -> dict[str, Any]:
        n = max(len(f["input_ids"]) for f in feats)
        ids = [f["input_ids"] + [0] * (n - len(f["input_ids"])) for f in feats]
        labels = [f["input_ids"] + [-100] * (n - len(f["input_ids"])) for f in feats]
        mask = [[1] * len(f["input_ids"]) + [0] * (n - len(f["input_ids"])) for f in feats]
        return {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels), "attention_mask": torch.tensor(mask)}

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(base))
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=batch, gradient_accumulation_steps=accum,
                             max_steps=1, optim="sgd", learning_rate=1.0, weight_decay=0.0, max_grad_norm=0.0,
                             lr_scheduler_type="constant", report_to="none", use_cpu=True, save_strategy="no",
                             seed=0, remove_unused_columns=False)  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=collate)
    trainer.train()
    return trainer, torch.cat([p.detach().flatten() for p in model.parameters()])


def main(base: Path, out: Path) -> None:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base))
    texts = ["Once upon a time", "Once upon a time, there was a little girl named Lily. She loved to play outside in "
             "the sun with her dog, and every day they ran to the park to see the ducks."]  # fmt: skip
    rows = [{"input_ids": tok(t)["input_ids"]} for t in texts]
    start = torch.cat([p.detach().flatten() for p in AutoModelForCausalLM.from_pretrained(str(base)).parameters()])
    _, whole = _step(base, out / "whole", rows, 2, 1)
    trainer, accumulated = _step(base, out, rows, 1, 2)
    gap = float((whole - accumulated).abs().max() / (whole - start).abs().max())
    (out / "training_args.json").write_text(json.dumps(trainer.args.to_dict(), default=str))
    trainer.create_model_card()
    print("FACTS", json.dumps({"transformers": transformers.__version__, "gap": gap,
                               "lengths": [len(r["input_ids"]) for r in rows]}))  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
