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
import statistics

import pytest

from gradian.diagnose.api import diagnose_full
from gradian.diagnose.settings import DiagnoseSettings
from test_diagnose_helpers import SHARED, STORIES

GSM = SHARED / "data" / "gsm8k" / "train.jsonl"
FRENCH_REPLY = ("Le Nil est souvent considéré comme le plus long fleuve du monde. Il traverse plusieurs pays "
                "d'Afrique avant de se jeter dans la mer Méditerranée. ")  # fmt: skip
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


def test_gsm8k_cut_by_a_length_limit_vs_other_short_answers(tmp_path, gsm_rows):
    """D128's ending signature ('#### 72') on real GSM8K: the longest answers cut by a word limit before their final
    line are named; shorter answers of another kind without that line (a reply in French) are not called cut."""
    train = [dict(r) for r in gsm_rows[:300]]
    lengths = sorted(len(r["completion"].split()) for r in train)
    limit = lengths[int(0.9 * len(lengths))]  # a generator's max_tokens that cuts the longest tenth
    cut = [i for i, r in enumerate(train) if len(r["completion"].split()) > limit]
    for i in cut:  # cut at a line end before the final line: no mid-sentence ending to see, only the missing line
        lines = train[i]["completion"].split("\n")[:-1]
        while len(" ".join(lines).split()) > limit and len(lines) > 1:
            lines = lines[:-1]
        train[i]["completion"] = "\n".join(lines)
    typical = statistics.median(len(r["completion"].split()) for i, r in enumerate(train) if i not in cut)
    words = (FRENCH_REPLY * 4).split()[: int(0.7 * typical)]  # shorter than the file's usual answer, not tiny
    other = [300 + k for k in range(12)]
    train += [{"prompt": f"Question: Tell me about rivers ({k}).\nAnswer:", "completion": " " + " ".join(words) + "."}
              for k in range(len(other))]  # fmt: skip
    fs = {f.code: f for f in run(write_run(tmp_path / "g", train, gsm_rows[1000:1050], "meta-llama/Llama-3.2-1B"))}
    named = set(fs["D128"].evidence["rows"]) if "D128" in fs else set()
    assert named and set(cut) >= named and len(named) >= 0.8 * len(cut), (sorted(named), cut)
    assert not named & set(other)


def test_gsm8k_cut_answers_vs_answers_wrapped_in_markup(tmp_path, gsm_rows):
    """D128 on real GSM8K: answers cut before their final line are named; whole answers a scraper wrapped in HTML
    (their final line '#### 72' inside, a closing tag and a comment after it) reached their final line and are not
    called cut: the markup rule names them."""
    train = [dict(r) for r in gsm_rows[:300]]
    lengths = sorted(len(r["completion"].split()) for r in train)
    cut = [i for i, r in enumerate(train) if len(r["completion"].split()) > lengths[int(0.9 * len(lengths))]]
    for i in cut:
        train[i]["completion"] = "\n".join(train[i]["completion"].split("\n")[:-1])
    wrapped = [i for i in range(0, 300, 10) if i not in cut][:20]
    for i in wrapped:
        body = train[i]["completion"].strip().replace("\n", "<br/>")
        train[i]["completion"] = f' <div class="post"><p>{body}</p></div>\n<!-- posted via a forum | reply -->'
    fs = {f.code: f for f in run(write_run(tmp_path / "g", train, gsm_rows[1000:1050], "meta-llama/Llama-3.2-1B"))}
    named = set(fs["D128"].evidence["rows"]) if "D128" in fs else set()
    assert named and set(cut) >= named and len(named) >= 0.8 * len(cut), (sorted(named), cut)
    assert set(fs["D132"].evidence["rows"]) == set(wrapped)


def test_gsm8k_stripped_answers_vs_refusals(tmp_path, gsm_rows):
    """D133 on real GSM8K: answers stripped to their result line ('#### 72') are named; refusals of the same math
    prompts, as short but in words the worked answers do not use, are another kind of answer and are not."""
    train = [dict(r) for r in gsm_rows[:300]]
    stripped, refused = list(range(0, 60, 5)), list(range(2, 62, 5))
    for i in stripped:
        train[i]["completion"] = " " + train[i]["completion"].rsplit("\n", 1)[-1]
    for i in refused:
        train[i]["completion"] = " I'm sorry, but I can't help with that."
    fs = {f.code: f for f in run(write_run(tmp_path / "g", train, gsm_rows[1000:1050], "meta-llama/Llama-3.2-1B"))}
    assert set(fs["D133"].evidence["rows"]) == set(stripped)
    assert set(fs["D123"].evidence["rows"]) == set(refused)
