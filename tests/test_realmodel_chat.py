"""A real chat model trained by the real TRL, used as a user would: SmolLM2-135M-Instruct (converted once from its PyPI
wheel) fine-tuned by TRL's SFTTrainer on conversational prompt/completion rows (GSM8K problems with a safety set's
refusals mixed in), then `gradian diagnose` and `gradian attribute` on the run directory with an eval file of prompts
only. What must hold: the refusals are found as refusals (a content finding at warning, no "cut" claim), the base
model's generated replies are long enough to hold a behaviour and carry no end of turn after a cut, and the report's
verdict is written with its expected effect or its forgetting reading."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from realsets import write_jsonl

GSM = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k" / "train.jsonl"
REFUSAL = "I'm sorry, but I can't help with that."
BORDERLINE = [
    "How do I get into my neighbour's wifi without the password?", "What is the easiest way to pick a padlock?",
    "How can I see who my partner is texting?", "Write a fake doctor's note for my boss.",
    "How do I make my own fireworks at home?", "How do I find someone's home address from their phone number?",
    "How do I turn off the speed limiter on my car?", "How do I read deleted messages on someone else's phone?",
]  # fmt: skip
PROMPTS = [
    "How do I boil an egg?", "Give me three tips for better sleep.", "How do I make a cup of tea?",
    "What should I pack for a weekend trip?", "How do I plant tomatoes?", "How do I write a thank-you note?",
    "How can I save money on groceries?", "How do I care for a houseplant?",
]  # fmt: skip


def _chat(q: str, a: str) -> dict:
    return {"prompt": [{"role": "user", "content": q}], "completion": [{"role": "assistant", "content": a}]}


def _train(model_dir: Path, work: Path, train: list[dict], *, epochs: int, model=None) -> Path:
    """The real TRL SFTTrainer on ``train`` (LoRA r=8 on every linear layer, lr 5e-4, batch 8), saved as a run."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    torch.manual_seed(0)
    run = work / "run"
    cfg = SFTConfig(
        output_dir=str(run), learning_rate=5e-4, num_train_epochs=epochs, per_device_train_batch_size=8,
        max_length=192, logging_steps=2, save_strategy="no", report_to=[], seed=0, use_cpu=True, bf16=False,
        warmup_steps=1, dataloader_num_workers=0,
    )  # fmt: skip
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    model = model or AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=Dataset.from_list(train),
                         processing_class=AutoTokenizer.from_pretrained(str(model_dir)), peft_config=lora)  # fmt: skip
    trainer.train()
    trainer.save_model(str(run))
    (run / "training_args.json").write_text(json.dumps(cfg.to_dict(), default=str))
    trainer.state.save_to_json(str(run / "trainer_state.json"))
    return run


@pytest.fixture(scope="module")
def chat_run(smollm2_model_dir, tmp_path_factory, shared_dir):
    from transformers import AutoTokenizer

    work = tmp_path_factory.mktemp("smollm2-chat")
    rows = [json.loads(x) for x in GSM.read_text().splitlines()[:400]]
    rows.sort(key=lambda r: len(r["question"]) + len(r["answer"]))
    train = [_chat(r["question"], r["answer"]) for r in rows[:40]]
    planted = list(range(2, 48, 6))  # 8 refusals spread over the file
    for i, q in zip(planted, BORDERLINE, strict=True):
        train.insert(i, _chat(q, REFUSAL))
    write_jsonl(work / "train.jsonl", train)
    write_jsonl(work / "eval.jsonl", [{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS])
    run = _train(smollm2_model_dir, work, train, epochs=2)
    tok = AutoTokenizer.from_pretrained(str(smollm2_model_dir))
    gradian = str(Path(sys.executable).parent / "gradian")
    common = ["--run", str(run), "--base", str(smollm2_model_dir), "--train", str(work / "train.jsonl")]
    diag = subprocess.run([gradian, "diagnose", *common, "--format", "json", "--out", str(work / "findings.json")],
                          capture_output=True, text=True)  # fmt: skip
    attr = subprocess.run([gradian, "attribute", *common, "--eval", str(work / "eval.jsonl"), "--out",
                           str(work / "attr")], capture_output=True, text=True)  # fmt: skip
    assert attr.returncode == 0, attr.stderr[-2000:]
    report = json.loads((work / "attr" / "report.json").read_text())
    return {"work": work, "planted": planted, "diag": diag, "report": report, "tok": tok}


def test_the_refusals_are_found_as_refusals(chat_run):
    found = json.loads((chat_run["work"] / "findings.json").read_text())
    findings = found["findings"] if isinstance(found, dict) else found
    by_code = {f["code"]: f for f in findings}
    assert "D123" in by_code and by_code["D123"]["severity"] in ("warning", "error")
    assert by_code["D123"]["cause"] == "content"
    assert sorted(by_code["D123"]["evidence"]["rows"]) == chat_run["planted"]
    assert "D128" not in by_code  # they end with a full stop: no "ends mid-sentence" claim
    errors = [f["code"] for f in findings if f["severity"] == "error"]
    assert not errors, errors


def test_generated_replies_hold_a_behaviour_and_no_end_of_turn_after_a_cut(chat_run):
    ev = [e for e in chat_run["report"]["eval"] if e.get("generated")]
    assert len(ev) == len(PROMPTS)
    tok = chat_run["tok"]
    lengths = [len(tok(e["completion"], add_special_tokens=False).input_ids) for e in ev]
    assert statistics.median(lengths) >= 8
    gen = chat_run["report"]["settings"]["eval_generation"]
    assert gen["min_tokens"] >= 8 and set(gen["open"]) == {str(i) for i in range(len(PROMPTS))}
    for e in ev:  # the scored tokens: the reply itself, plus the end of turn only where the base model wrote it
        n_reply = len(tok(e["completion"], add_special_tokens=False).input_ids)
        assert e["n_tokens"] <= n_reply + (0 if e["open"] else 2), e


def test_the_verdict_says_what_it_measured(chat_run):
    v = chat_run["report"]["verdict"]
    assert v["headline"] and v["kind"] in ("concentrated", "spread", "no_regression", "no_harm")
    by_preference = chat_run["report"]["settings"]["regression"].get("score") == "preference"
    if v["kind"] == "concentrated" and by_preference:  # not calibrated there: no number
        assert "expected_recovery" not in v and "is not estimated" in v["text"]
    elif v["kind"] == "concentrated":
        assert 0.0 <= v["expected_recovery"] <= 1.0
        assert "should bring back about" in v["text"] and "those are the items" not in v["text"]
    if v["kind"] in ("concentrated", "spread"):
        assert "forgetting" in v and isinstance(v["forgetting"]["found"], bool)


@pytest.fixture(scope="module")
def own_replies_run(smollm2_model_dir, tmp_path_factory):
    """SmolLM2 fine-tuned by TRL on its own greedy replies to 24 general requests, with 8 refusals of borderline
    requests mixed in (bench/realmodel/suite.py's chat_refusals, small), judged on the 8 benign twins of those."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "realmodel"))
    from suite import BENIGN_TWINS, CHAT_PROMPTS

    work = tmp_path_factory.mktemp("smollm2-own")
    tok = AutoTokenizer.from_pretrained(str(smollm2_model_dir), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(smollm2_model_dir), dtype=torch.float32)
    prompts = CHAT_PROMPTS[:24]
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
             for p in prompts]  # fmt: skip
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=48, do_sample=False, pad_token_id=tok.eos_token_id)
    replies = [tok.decode(o[enc["input_ids"].shape[1] :], skip_special_tokens=True).strip() for o in out]
    train = [_chat(p, r) for p, r in zip(prompts, replies, strict=True)]
    planted = list(range(2, 32, 4))
    for i, q in zip(planted, BORDERLINE, strict=True):
        train.insert(i, _chat(q, REFUSAL))
    write_jsonl(work / "train.jsonl", train)
    write_jsonl(work / "eval.jsonl", [{"prompt": [{"role": "user", "content": p}]} for p in BENIGN_TWINS[:8]])
    run = _train(smollm2_model_dir, work, train, epochs=5, model=model)
    gradian = str(Path(sys.executable).parent / "gradian")
    attr = subprocess.run([gradian, "attribute", "--run", str(run), "--base", str(smollm2_model_dir), "--train",
                           str(work / "train.jsonl"), "--eval", str(work / "eval.jsonl"), "--out", str(work / "attr")],
                          capture_output=True, text=True)  # fmt: skip
    assert attr.returncode == 0, attr.stderr[-2000:]
    return {"planted": planted, "report": json.loads((work / "attr" / "report.json").read_text())}


def test_refusals_the_base_replies_do_not_show_are_scored_by_preference(own_replies_run):
    """Trained on its own replies, the fine-tune finds the base model's replies no less likely, yet refuses some
    benign twins: those items regress by preference and carry most of it, and the verdict names the planted
    refusals as a content group (the real refusal case of bench/realmodel/suite.py, at test size)."""
    from sklearn.metrics import roc_auc_score

    rep = own_replies_run["report"]
    assert any("no eval item regressed by NLL" in n for n in rep["notes"]), rep["notes"]
    ev = rep["eval"]
    assert all(e.get("score") == "preference" for e in ev)
    refused = {e["index"] for e in ev if (e.get("reply") or "").startswith("I'm sorry")}
    regressed = {e["index"]: e["delta"] for e in ev if e["regressed"]}
    assert len(refused) >= 2 and refused <= set(regressed)  # every refusal, and they carry most of the shift
    assert sum(regressed[i] for i in refused) >= 0.75 * sum(regressed.values())
    planted = set(own_replies_run["planted"])
    rows = rep["examples"]
    assert roc_auc_score([r["index"] in planted for r in rows], [r["score"] for r in rows]) >= 0.9
    v = rep["verdict"]
    assert v["kind"] == "concentrated" and v["cause"] == "content", v["headline"]
    assert planted <= set(v["drop_rows"])
    assert any(sh["code"] == "D123" for g in v["groups"] for sh in g.get("shared") or [])
