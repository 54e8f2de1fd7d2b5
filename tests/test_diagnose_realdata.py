"""False-positive suite on real clean data: no error-level findings.

GSM8K (first 1,000 train rows as prompt/completion, next 100 as eval) with a sane LoRA config (lr 2e-4, 2 epochs,
r=16 alpha=32 all linear, max_length 512, completion-only):
  * char-level (base model not local, as a user without the weights): no findings at all.
  * token-level with the bundled stories260K tokenizer: that toy tokenizer has a 512-token vocabulary and needs ~3x
    the tokens of a real one (GSM8K p99 is ~770 tokens with it, ~300 with Llama's), so at max_length 512 it
    *correctly* reports truncation/completion_cut; the token-level run therefore uses max_length 2048, and then its
    only warning is C224 max_length_over_model (2048 > the toy model's 512-position context: also correct, and an
    artefact of the stand-in model), which that test ignores.
Sentiment labelled sentences (3,000 rows, "Review: ...\\nSentiment:" -> " positive"/" negative", 90/10 split):
  * warning D105 train_eval_overlap: a handful of short generic reviews ("Great phone.", "Very disappointing.")
    occur in both splits. They are real exact duplicates, so a warning is right, but they are short and under 2% of
    the eval set, so not an error.
  * info D104 duplicates (near): the same short reviews differing by case/punctuation.
  * identical_targets stays silent: two labels are a classification set (label_imbalance covers it; balanced here).
  * info D135 label_noise (the naive Bayes review list): a bag-of-words model of the file disagrees with about one
    correct short review in five, listed for review as a note, never a warning.
"""

from __future__ import annotations

import json

import pytest

from gradian.diagnose.api import diagnose_full
from gradian.diagnose.settings import DiagnoseSettings
from test_diagnose_helpers import SHARED, STORIES

GSM = SHARED / "data" / "gsm8k" / "train.jsonl"
SENT = SHARED / "data" / "sentiment_labelled_sentences"

CONFIG = {"learning_rate": 2e-4, "num_train_epochs": 2, "per_device_train_batch_size": 8,
          "gradient_accumulation_steps": 2, "max_length": 512, "completion_only_loss": True, "packing": False,
          "bf16": True, "lr_scheduler_type": "cosine", "warmup_ratio": 0.03, "eval_strategy": "steps",
          "eval_steps": 50, "logging_steps": 10, "output_dir": "out", "gradient_checkpointing": True,
          "gradient_checkpointing_kwargs": {"use_reentrant": False}}  # fmt: skip
ADAPTER = {"peft_type": "LORA", "r": 16, "lora_alpha": 32, "lora_dropout": 0.05, "task_type": "CAUSAL_LM",
           "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}  # fmt: skip


def write_run(d, train, ev, base, **cfg):
    d.mkdir()
    (d / "train.jsonl").write_text("\n".join(json.dumps(r) for r in train) + "\n")
    (d / "eval.jsonl").write_text("\n".join(json.dumps(r) for r in ev) + "\n")
    (d / "training_args.json").write_text(json.dumps({**CONFIG, **cfg}))
    (d / "adapter_config.json").write_text(json.dumps({**ADAPTER, "base_model_name_or_path": base}))
    return d


def run(d, **kw):
    findings, notes, _ = diagnose_full(run=d, train=d / "train.jsonl", eval=d / "eval.jsonl",
                                       settings=DiagnoseSettings(), **kw)  # fmt: skip
    assert not [n for n in notes if "internal error" in n.reason], notes
    return findings


@pytest.fixture(scope="module")
def gsm_rows():
    if not GSM.is_file():
        pytest.skip("../shared/data/gsm8k absent")
    rows = [json.loads(x) for x in GSM.read_text().splitlines()[:1100]]
    return [{"prompt": f"Question: {r['question']}\nAnswer:", "completion": " " + r["answer"]} for r in rows]


def test_gsm8k_char_level_clean(tmp_path, gsm_rows):
    fs = run(write_run(tmp_path / "g", gsm_rows[:1000], gsm_rows[1000:], "meta-llama/Llama-3.2-1B"))
    assert [f for f in fs if f.severity.value == "error"] == []
    assert [(f.code, f.severity.value) for f in fs] == []


@pytest.mark.skipif(not STORIES.is_dir(), reason="bundled tokenizer missing")
def test_gsm8k_token_level_clean(tmp_path, gsm_rows):
    fs = run(write_run(tmp_path / "g", gsm_rows[:1000], gsm_rows[1000:], str(STORIES), max_length=2048))
    fs = [f for f in fs if f.code != "C224"]  # the toy model's 512-position context (see the module docstring)
    assert [(f.code, f.severity.value) for f in fs if f.severity.value != "info"] == []


@pytest.mark.skipif(not STORIES.is_dir(), reason="bundled tokenizer missing")
def test_sentiment_clean(tmp_path):
    if not SENT.is_dir():
        pytest.skip("../shared/data/sentiment_labelled_sentences absent")
    from realsets import sentiment

    rows = sentiment(seed=0)
    fs = run(write_run(tmp_path / "s", rows[:2700], rows[2700:], str(STORIES)))
    assert [f for f in fs if f.severity.value == "error"] == []
    listed = [f for f in fs if f.code == "D135"]  # the naive Bayes review list: a note on any real label set
    assert [(f.severity.value, f.evidence["kind"]) for f in listed] == [("info", "model")]
    assert {f.code for f in fs} - {"D135"} <= {"D105", "D104"}, [(f.code, f.message) for f in fs]
