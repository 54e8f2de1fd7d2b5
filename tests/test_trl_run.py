"""One real ``SFTTrainer.train()`` on stories260K (LoRA, a few CPU steps), read back the way a user points Gradian at
it: ``--run DIR --train FILE``. The discovered setup must be what was trained, ``gradian tokens`` must equal TRL's own
``train_dataset`` (ids, labels, dropped rows), and diagnose and attribute must see the same formatted rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

trl = pytest.importorskip("trl")
pytest.importorskip("datasets")

BASE = Path(__file__).resolve().parents[1] / "examples" / "stories260k" / "base"
TRAIN = Path(__file__).resolve().parents[1] / "examples" / "stories260k" / "data" / "train.jsonl"
LR, EPOCHS, BATCH, ACCUM, MAX_LEN, R, ALPHA = 2e-3, 1.0, 2, 2, 48, 4, 8
TARGETS = ["q_proj", "v_proj"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Any]:
    """Train as a user's script would: SFTConfig + LoraConfig, train(), save_model()."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    work = tmp_path_factory.mktemp("trl-run")
    rows = [json.loads(line) for line in TRAIN.read_text("utf-8").splitlines()[:14]]
    # a prompt longer than max_length: TRL drops the row (no label left after truncation)
    rows.append({"prompt": " ".join(r["prompt"] for r in rows[:8]), "completion": " The end."})
    rows = [{"id": i, **r} for i, r in enumerate(rows)]
    train = work / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    torch.manual_seed(0)
    out = work / "out"
    args = SFTConfig(
        output_dir=str(out), report_to="none", use_cpu=True, learning_rate=LR, num_train_epochs=EPOCHS,
        per_device_train_batch_size=BATCH, gradient_accumulation_steps=ACCUM, max_steps=3, max_length=MAX_LEN,
        completion_only_loss=True, logging_steps=1, save_strategy="steps", save_steps=3, seed=0,
    )  # fmt: skip
    peft_config = LoraConfig(r=R, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0, task_type="CAUSAL_LM")
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(str(BASE)),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(str(BASE)),
        peft_config=peft_config,
    )
    trl_rows = [(ex["id"], ex["input_ids"], ex["labels"]) for ex in trainer.train_dataset]
    trainer.train()
    trainer.save_model(str(out))
    return {"out": out, "train": train, "rows": rows, "trl_rows": trl_rows}


def test_discovered_setup_is_what_was_trained(trained) -> None:
    from gradian.diagnose.context import build_context

    ctx = build_context(run=trained["out"], train=trained["train"])
    s = ctx.setup
    assert s.framework == "trl"
    assert s.learning_rate == pytest.approx(LR)
    assert s.num_epochs == pytest.approx(EPOCHS)
    assert s.max_steps == 3
    assert (s.per_device_batch_size, s.gradient_accumulation_steps) == (BATCH, ACCUM)
    assert s.max_length == MAX_LEN
    assert s.packing is False
    assert s.masking == "completion_only" and s.completion_only_loss is True
    assert (s.lora_r, s.lora_alpha) == (R, ALPHA)
    assert sorted(s.target_modules) == TARGETS
    assert ctx.artifacts.adapter_weights is not None and ctx.logs.train


def test_tokens_command_equals_trls_dataset(trained, capsys) -> None:
    from gradian.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["tokens", "--run", str(trained["out"]), "--train", str(trained["train"]), "--format", "json"])
    assert exit_info.value.code in (0, None)
    got = json.loads(capsys.readouterr().out)["rows"]
    assert len(got) == len(trained["rows"])
    kept = [(r["index"], r["input_ids"], r["labels"]) for r in got if not r["dropped"]]
    assert kept == [(i, ids, labels) for i, ids, labels in trained["trl_rows"]]
    dropped = [r["index"] for r in got if r["dropped"]]
    assert dropped == [len(trained["rows"]) - 1]  # the over-long prompt, as TRL dropped it


def test_diagnose_and_attribute_see_the_same_rows(trained) -> None:
    from gradian.attribute.api import _training_rows
    from gradian.diagnose.context import build_context
    from gradian.dist import from_env
    from gradian.run.loaded import load_run

    ctx = build_context(run=trained["out"], train=trained["train"])
    loaded = load_run(trained["out"], train=trained["train"], read_rows=False)  # what `attribute` reads
    assert loaded.format_settings == ctx.format_settings
    rows, ids, n_dropped = _training_rows(trained["train"], ctx.tokenizer, loaded.format_settings, None, from_env())
    kept = [f for f in ctx.formatted if not f.dropped]
    assert n_dropped == len(ctx.formatted) - len(kept) == 1
    assert [(f.index, f.input_ids, f.loss_mask) for f in rows] == [(f.index, f.input_ids, f.loss_mask) for f in kept]
