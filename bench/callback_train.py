"""One real TRL ``SFTTrainer`` run on the bundled stories260K example, as a user's script, with or without
``GradianCallback``: the example's config (LoRA r=8, alpha 16 on every linear layer, lr 3e-3, 4 epochs, batch size 8,
max_length 128, completion-only loss, seed 0, CPU).

    python bench/callback_train.py OUT [--callback] [--epochs 4] [--rows N] [--lr 3e-3] [--batch 8] [--accum 1]
    python bench/callback_train.py OUT --setup smollm2 [--callback]   # SmolLM2-135M-Instruct, the refusal run's rows
    torchrun --nproc_per_node 2 bench/callback_train.py OUT --callback       # one store per rank
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples" / "stories260k"
REFUSALS = ROOT / "bench" / "work" / "realmodel" / "refusals_s0"  # bench/realmodel/suite.py data refusals 0


@dataclass(frozen=True)
class Setup:
    """A model, its training and eval files, and its LoRA and trainer settings."""

    base: Path
    train: Path
    eval: Path
    planted: Path  # JSON with the planted rows ("harmful_cluster"/"indices" or "rows")
    rank: int
    lr: float
    max_length: int


SETUPS = {
    # the bundled example's config: LoRA r=8, lr 3e-3, max_length 128, prompt/completion text rows
    "stories260k": Setup(EX / "base", EX / "data" / "train.jsonl", EX / "data" / "eval.jsonl",
                         EX / "data" / "planted.json", 8, 3e-3, 128),
    # the real-model suite's refusal run: SmolLM2-135M-Instruct, conversational rows, LoRA r=16, lr 5e-4
    "smollm2": Setup(ROOT / "examples" / "smollm2" / "model", REFUSALS / "train.jsonl", REFUSALS / "eval_prompts.jsonl",
                     REFUSALS / "planted.json", 16, 5e-4, 256),
}  # fmt: skip


def planted_rows(setup: str) -> list[int]:
    data = json.loads(SETUPS[setup].planted.read_text("utf-8"))
    return list(data["harmful_cluster"]["indices"] if "harmful_cluster" in data else data["rows"])


def train(out: Path, callback: bool, epochs: float = 4.0, rows: int | None = None, seed: int = 0, *,
          lr: float | None = None, batch: int = 8, accum: int = 1, random_init: bool = False, repeat: int = 1,
          save_steps: int | None = None, crash_at: int | None = None, resume: bool = False,
          options: dict | None = None, setup: str = "stories260k", sft: dict | None = None,
          lora_dropout: float = 0.0, trainer_kw: dict | None = None) -> Path:  # fmt: skip
    """Train into ``out`` (the adapter, trainer_state.json, train.jsonl and eval.jsonl beside it). ``random_init``:
    lora_B drawn at random too (with ``lr=0`` the adapter then never moves but changes the model). ``repeat``: the
    rows that many times, copy k's prompts prefixed with ``k.`` so no two rows are the same (for timing only).
    ``save_steps``: a checkpoint every that many steps; ``crash_at``: raise at that step (an interrupted run);
    ``resume``: go on from the last checkpoint; ``options``: the callback's (``gradian.options.CallbackOptions``);
    ``setup``: a :data:`SETUPS` key (its model, files, rank, learning rate unless ``lr`` is given, max_length).
    ``sft``: more ``SFTConfig`` fields (a loss, NEFTune noise); ``trainer_kw``: more ``SFTTrainer`` arguments."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    su = SETUPS[setup]
    lr = su.lr if lr is None else lr
    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    lines = su.train.read_text("utf-8").splitlines()[:rows]
    if repeat > 1:
        copies = [_numbered(json.loads(x), k) for k in range(repeat) for x in lines]
        lines = [json.dumps(r) for r in copies]
    (out / "train.jsonl").write_text("".join(line + "\n" for line in lines), "utf-8")
    shutil.copy(su.eval, out / "eval.jsonl")
    data = [json.loads(line) for line in lines]
    cfg = SFTConfig(
        output_dir=str(out), learning_rate=lr, num_train_epochs=epochs, per_device_train_batch_size=batch,
        gradient_accumulation_steps=accum, max_length=su.max_length, completion_only_loss=True, logging_steps=5,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500, report_to=[], seed=seed,
        **{"use_cpu": True, "bf16": False, "dataloader_num_workers": 0, **(sft or {})},
    )  # fmt: skip
    lora = LoraConfig(r=su.rank, lora_alpha=2 * su.rank, lora_dropout=lora_dropout, target_modules="all-linear",
                      task_type="CAUSAL_LM", init_lora_weights=not random_init)  # fmt: skip
    callbacks = []
    if callback:
        from gradian.integrations import GradianCallback

        callbacks.append(GradianCallback(**(options or {})))
    if crash_at is not None:
        callbacks.append(_Crash(crash_at))
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(str(su.base)), args=cfg, train_dataset=Dataset.from_list(data),
        processing_class=AutoTokenizer.from_pretrained(str(su.base)), peft_config=lora, callbacks=callbacks,
        **(trainer_kw or {}),
    )  # fmt: skip
    trainer.train(resume_from_checkpoint=resume or None)
    trainer.save_model(str(out))
    trainer.state.save_to_json(str(out / "trainer_state.json"))
    return out


def train_plain(out: Path, rows: int = 24, batch: int = 4, epochs: float = 1.0, row_weights: bool = False,
                packing: str | None = None) -> Path:  # fmt: skip
    """The bundled example through the plain transformers ``Trainer`` with the callback, learning rate 0 and a random
    adapter: rows tokenized as attribute formats them (``input_ids`` and ``labels``), the model's own loss (full
    logits). ``row_weights``: a ``compute_loss`` that weighs each row's token loss by its position in the batch (a
    loss the recorded gradients must not be taken from). ``packing``: each batch's rows in one sequence, by
    transformers' ``DataCollatorWithFlattening`` (``"flatten"``: position ids restarting at each row) or with a
    block-diagonal 4D attention mask as LLaMA-Factory's neat packing makes it (``"4d"``: 0 where a token may attend,
    the dtype's lowest value elsewhere)."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, DataCollatorWithFlattening, Trainer, TrainingArguments

    from gradian.attribute.engine import collate
    from gradian.data import FormatSettings, format_examples, load_examples
    from gradian.data.tokenizer import load_tokenizer
    from gradian.integrations import GradianCallback

    su = SETUPS["stories260k"]
    torch.manual_seed(0)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train.jsonl").write_text("".join(su.train.read_text("utf-8").splitlines(True)[:rows]), "utf-8")
    shutil.copy(su.eval, out / "eval.jsonl")
    tok = load_tokenizer(str(su.base))
    fs = FormatSettings()
    fs.add_eos = False  # as a tokenizer call does (attribute assumes it of a plain Trainer run)
    fxs = format_examples(load_examples(out / "train.jsonl"), tok, fs)
    data = Dataset.from_list([{"i": i} for i in range(len(fxs))])

    def collate_rows(items: list[dict]) -> dict:
        ids, am, lm = collate([fxs[x["i"]] for x in items], tok.pad_token_id or 0)
        return {"input_ids": ids, "attention_mask": am, "labels": ids.masked_fill(~lm, -100)}

    def flatten_rows(items: list[dict]) -> dict:
        rows = [fxs[x["i"]] for x in items]
        flat = DataCollatorWithFlattening()([
            {"input_ids": list(f.input_ids),
             "labels": [t if m else -100 for t, m in zip(f.input_ids, f.loss_mask, strict=True)]}
            for f in rows
        ])  # fmt: skip
        if packing == "4d":
            segment = torch.cumsum(flat.pop("position_ids") == 0, dim=1)  # 1, 1, 2, 2, 2, ...
            keep = (segment[:, None, :, None] == segment[:, None, None, :]) & torch.ones(
                segment.shape[1], segment.shape[1], dtype=torch.bool).tril()  # fmt: skip
            flat["attention_mask"] = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
        return flat

    class RowWeighted(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            logits = model(**inputs).logits.float()
            labels = inputs["labels"][:, 1:]
            tok_loss = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), labels, reduction="none")
            w = torch.linspace(0.5, 1.5, len(labels))[:, None]
            return (tok_loss * w).sum() / (labels != -100).sum()

    model = AutoModelForCausalLM.from_pretrained(str(su.base))
    model = get_peft_model(model, LoraConfig(r=su.rank, lora_alpha=2 * su.rank, target_modules="all-linear",
                                             init_lora_weights=False))  # fmt: skip
    args = TrainingArguments(output_dir=str(out), learning_rate=0.0, num_train_epochs=epochs,
                             per_device_train_batch_size=batch, remove_unused_columns=False, report_to=[],
                             save_strategy="no", use_cpu=True, seed=0)  # fmt: skip
    trainer = (RowWeighted if row_weights else Trainer)(
        model=model, args=args, train_dataset=data, data_collator=flatten_rows if packing else collate_rows,
        callbacks=[GradianCallback()],
    )  # fmt: skip
    trainer.train()
    trainer.save_model(str(out))
    return out


def _numbered(row: dict, k: int) -> dict:
    """A copy of ``row`` whose prompt starts with ``k.`` (text or conversational prompt)."""
    p = row["prompt"]
    if isinstance(p, list):
        return {**row, "prompt": [{**p[0], "content": f"{k}. " + p[0]["content"]}, *p[1:]]}
    return {**row, "prompt": f"{k}. " + p}


def _Crash(step: int):
    """A callback that raises at ``step`` (a run killed mid-epoch)."""
    from transformers import TrainerCallback

    class Crash(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == step:
                raise RuntimeError(f"stopped at step {step}")

    return Crash()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--callback", action="store_true")
    ap.add_argument("--epochs", type=float, default=4.0)
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=None, help="default: the setup's")
    ap.add_argument("--setup", choices=sorted(SETUPS), default="stories260k")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--random-init", action="store_true", help="lora_B drawn at random too")
    ap.add_argument("--repeat", type=int, default=1, help="the rows this many times, each copy's prompts numbered")
    ap.add_argument("--covariance-rows", type=int, default=None, help="the callback's (default: its own default)")
    a = ap.parse_args()
    opts = {"covariance_rows": a.covariance_rows} if a.covariance_rows else None
    train(a.out, a.callback, a.epochs, a.rows, a.seed, lr=a.lr, batch=a.batch, accum=a.accum,
          random_init=a.random_init, repeat=a.repeat, options=opts, setup=a.setup)  # fmt: skip
    import torch.distributed as td

    if td.is_available() and td.is_initialized():  # under torchrun: leave no gloo thread for the exit to kill
        td.barrier()
        td.destroy_process_group()


if __name__ == "__main__":
    main()
