"""Shared builders for the diagnose tests: a clean context on which every rule stays silent."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from gradian.data.types import Example, FormatSettings, FormattedExample
from gradian.diagnose.context import DiagnoseContext
from gradian.run.types import LogPoint, RunArtifacts, TrainerLogs, TrainingSetup

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
if not SHARED.is_dir():  # a checkout beside shared/ (tests/ is two levels below the clone's parent)
    SHARED = Path(__file__).resolve().parents[1].parent / "shared"
STORIES = Path(__file__).resolve().parents[1] / "examples" / "stories260k" / "base"

_WORDS = [f"w{i}" for i in range(3000)]
BOS, EOS, PAD = 1, 2, 0


class FakeTokenizer:
    """Just the attributes the rules read."""

    def __init__(self) -> None:
        self.bos_token_id, self.eos_token_id, self.pad_token_id = BOS, EOS, PAD
        self.bos_token, self.eos_token, self.pad_token, self.unk_token = "<s>", "</s>", "<pad>", "<unk>"
        self.all_special_tokens = ["<s>", "</s>", "<pad>", "<unk>"]
        self.chat_template: str | None = None
        self.vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<|im_end|>": 3}

    def __len__(self) -> int:
        return 1000

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        ids = [10 + (sum(map(ord, w)) % 900) for w in text.split()]
        return {"input_ids": ([BOS] if add_special_tokens else []) + ids}

    def convert_tokens_to_ids(self, tok: str) -> int:
        return self.vocab.get(tok, 5)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def pc_example(i: int, prompt: str, completion: str, source: str = "train.jsonl") -> Example:
    return Example(index=i, source=source, format="prompt_completion", prompt=prompt, completion=completion,
                   raw={"prompt": prompt, "completion": completion})  # fmt: skip


def formatted_for(ex: Example, *, max_length: int = 512) -> FormattedExample:
    tok = FakeTokenizer()
    p = tok(ex.prompt or "")["input_ids"]
    c = tok(ex.completion or "", add_special_tokens=False)["input_ids"] + [EOS]
    ids = p + c
    n = len(ids)
    ids = ids[:max_length]
    mask = [False] * len(p) + [True] * (len(ids) - len(p))
    return FormattedExample(index=ex.index, input_ids=ids, loss_mask=mask[: len(ids)], n_tokens_before_truncation=n,
                            n_prompt_tokens=min(len(p), len(ids)), n_label_tokens=max(0, len(ids) - len(p)),
                            truncated=n > max_length, cut_in_completion=n > max_length, eos_appended=True,
                            ends_with_eos=ids[-1] == EOS)  # fmt: skip


def clean_logs(n_steps: int = 50, steps_per_epoch: int = 25) -> TrainerLogs:
    pts = []
    for s in range(2, n_steps + 1, 2):
        frac = s / n_steps
        lr = 2e-4 * (s / 4 if s < 4 else 0.5 * (1 + math.cos(math.pi * frac)) + 0.05)
        pts.append(LogPoint(step=s, epoch=s / steps_per_epoch, loss=2.0 - 0.8 * frac, grad_norm=0.5 + 0.05 * (s % 3),
                            learning_rate=min(lr, 2e-4)))  # fmt: skip
    for s in (25, 50):
        pts.append(LogPoint(step=s, epoch=s / steps_per_epoch, eval_loss=2.0 - 0.7 * s / n_steps))
    return TrainerLogs(points=pts, source="trainer_state.json", total_steps=n_steps, summary={})


def clean_setup() -> TrainingSetup:
    s = TrainingSetup(
        framework="trl", base_model="base", learning_rate=2e-4, num_epochs=2, per_device_batch_size=4,
        gradient_accumulation_steps=2, world_size=1, max_length=512, max_length_key="max_length", packing=False,
        masking="completion_only", add_eos=True, lora_r=16, lora_alpha=32, lora_dropout=0.05,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        use_rslora=False, precision="bf16", scheduler="cosine", warmup_ratio=0.03, gradient_checkpointing=True,
        use_reentrant=False, eval_strategy="steps", versions={"trl": "0.21.0", "transformers": "4.56.0"},
        config_files=["sft_config.json"],
    )  # fmt: skip
    for k in (
        "learning_rate",
        "num_epochs",
        "max_length",
        "packing",
        "masking",
        "lora_r",
        "lora_alpha",
        "target_modules",
        "precision",
        "gradient_accumulation_steps",
        "eval_strategy",
        "lora_dropout",
    ):
        s.sources[k] = f"sft_config.json: {k}"
    return s


def clean_context(n: int = 200, seed: int = 0) -> DiagnoseContext:
    rng = random.Random(seed)
    train = [pc_example(i, words(rng, 12) + "\nAnswer:", " " + words(rng, 8)) for i in range(n)]
    ev = [pc_example(i, words(rng, 12) + "\nAnswer:", " " + words(rng, 8), "eval.jsonl") for i in range(30)]
    ctx = DiagnoseContext(
        train=train, eval=ev, formatted=[formatted_for(e) for e in train], tokenizer=FakeTokenizer(),
        format_settings=FormatSettings(max_length=512, mask="completion_only", add_eos=True,
                                       sources={"max_length": "sft_config.json: max_length"}),
        setup=clean_setup(), setup_known=True, logs=clean_logs(),
        artifacts=RunArtifacts(adapter_config={"r": 16, "lora_alpha": 32, "base_model_name_or_path": "base",
                                               "target_modules": ["q_proj", "v_proj", "k_proj", "o_proj", "gate_proj",
                                                                  "up_proj", "down_proj"]}, base="base"),
        base_config={"vocab_size": 1000, "max_position_embeddings": 2048, "torch_dtype": "bfloat16", "hidden_size": 64},
        generation_config={"eos_token_id": 2}, train_file="train.jsonl", eval_file="eval.jsonl",
    )  # fmt: skip
    return ctx


def refmt(ctx: DiagnoseContext, **kw: Any) -> None:
    ctx.formatted = [formatted_for(e, **kw) for e in ctx.train]
