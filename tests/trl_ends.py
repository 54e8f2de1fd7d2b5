"""One real SFTTrainer on the bundled stories260K base under whatever TRL is first on PYTHONPATH, run as a script in
a subprocess (``python trl_ends.py CASE BASE OUT``) so that one test session can put a TRL at each end of a version
window beside the venv's. It prints one line ``FACTS {json}``: what that TRL really did with a few rows. With
``train`` in the facts it also trained one step and saved the run into OUT (model card, checkpoint,
training_args.json, train.jsonl), a run directory for ``gradian diagnose``.

Cases (the rows are the bundled stories' prompt/completion rows unless said):

- ``pack``: packing with completion-only loss; ``labelled`` / ``tokens`` of the first packed batch.
- ``max_length`` / ``max_seq_length``: text rows, SFTConfig given that key (16): ``accepted`` (False: SFTConfig
  rejected it, ``error`` says how), and the longest tokenized training row (``longest``).
- ``text``: text rows (pad == EOS, as in every case): whether the tokenized row ends with EOS (``ends_eos``) and
  whether the collated batch gives that EOS a label (``eos_labelled``).
- ``template``: conversational rows, assistant-only loss, the chat template in the file ``GRADIAN_TEMPLATE`` names:
  ``ok`` (False: SFTTrainer refused the rows, ``error`` says how) and the labelled share of the first batch.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def _rows(case: str, base: Path) -> list[dict[str, Any]]:
    data = base.parent / "data" / "train.jsonl"
    rows = [json.loads(x) for x in data.read_text("utf-8").splitlines()[:24] if x.strip()]
    if case in ("text", "max_length", "max_seq_length"):
        return [{"text": r["prompt"] + r["completion"]} for r in rows]
    if case == "template":
        return [{"messages": [{"role": "user", "content": r["prompt"]},
                              {"role": "assistant", "content": r["completion"]}]} for r in rows]  # fmt: skip
    return [{"prompt": r["prompt"], "completion": r["completion"]} for r in rows]


def _config(case: str, out: Path) -> tuple[Any, dict[str, Any]]:
    from trl import SFTConfig

    kw: dict[str, Any] = dict(output_dir=str(out), report_to="none", use_cpu=True, max_steps=1, save_steps=1,
                              save_strategy="steps", per_device_train_batch_size=4, logging_steps=1)  # fmt: skip
    if case == "pack":
        kw.update(packing=True, completion_only_loss=True, max_length=512)
    elif case == "template":
        kw.update(assistant_only_loss=True)
    elif case in ("max_length", "max_seq_length"):
        kw[case] = 16
    try:
        return SFTConfig(**kw), {"accepted": True}
    except (TypeError, ValueError) as e:
        if case not in ("max_length", "max_seq_length"):
            raise
        kw.pop(case)
        return SFTConfig(**kw), {"accepted": False, "error": f"{type(e).__name__}: {e}"[:300]}


def _batch_facts(case: str, trainer: Any, tok: Any) -> dict[str, Any]:
    batch = next(iter(trainer.get_train_dataloader()))
    labels = batch["labels"]
    facts: dict[str, Any] = {"labelled": int((labels != -100).sum()), "tokens": int(labels.numel())}
    if case == "text":
        rows = [{"input_ids": list(r["input_ids"])} for r in trainer.train_dataset.select(range(4))]
        first = min(rows, key=lambda r: len(r["input_ids"]))["input_ids"]  # padded in a batch of the four
        facts["ends_eos"] = first[-1] == tok.eos_token_id
        collated = trainer.data_collator([{"input_ids": first}, *rows])["labels"]
        facts["eos_labelled"] = bool(facts["ends_eos"]) and int(collated[0, len(first) - 1]) == tok.eos_token_id
        facts["pad_is_eos"] = tok.pad_token_id == tok.eos_token_id
    if case in ("max_length", "max_seq_length"):
        facts["longest"] = max(len(r["input_ids"]) for r in trainer.train_dataset)
    return facts


def main(case: str, base: Path, out: Path) -> None:
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    rows = _rows(case, base)
    tok = AutoTokenizer.from_pretrained(str(base))
    tok.pad_token = tok.eos_token  # as TRL sets it where the tokenizer has none (every TRL from 0.20)
    if case == "template":
        tok.chat_template = Path(os.environ["GRADIAN_TEMPLATE"]).read_text("utf-8")
    args, facts = _config(case, out)
    facts["trl"] = trl.__version__
    model = AutoModelForCausalLM.from_pretrained(str(base))
    try:
        trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok)
    except (RuntimeError, ValueError) as e:
        if case != "template":
            raise
        print("FACTS", json.dumps({**facts, "ok": False, "error": f"{type(e).__name__}: {e}"[:300]}))
        return
    facts.update(ok=True, **_batch_facts(case, trainer, tok))
    trainer.train()
    trainer.save_model(str(out))
    (out / "training_args.json").write_text(json.dumps(args.to_dict(), default=str))
    (out / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    print("FACTS", json.dumps({**facts, "train": True}))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
