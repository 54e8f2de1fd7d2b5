"""The real-model suite: SmolLM2-135M-Instruct fine-tuned by the real TRL ``SFTTrainer`` on real rows with faults
people hit, each with its counterfactual truth by retraining, scored with ``gradian attribute`` as a user runs it.

A run is a kind and a seed. Its training file mixes real rows (GSM8K problems from ../shared/data/gsm8k, shortest
first so a run fits a 2-core CPU) with the fault; its eval set is prompts only (``eval_prompts.jsonl``) and the same
prompts with reference answers (``eval_refs.jsonl``: the base model's whole greedy reply, as a reviewer reading the
base model would write it down). Training: LoRA r=16 on every linear layer, lr 5e-4, 2 epochs, batch 8, seed = the
run's seed, the model's own chat template (conversational prompt/completion rows).

Truth: the same training without the planted rows (``drop``) and without as many rows drawn at random from the
others (``rand``); the regression is each eval item's mean NLL per reply token under the fine-tune minus under the
base model, scored on the reference answers; the recovery of a retrain is the share of the summed regression over
the items that regressed (fine-tune above base by ``REGRESSED`` nats/token) that it brings back, and its median over
those items.

    python bench/realmodel/suite.py data refusals 0     # bench/work/realmodel/refusals_s0/{train,eval_*}.jsonl
    python bench/realmodel/suite.py train refusals 0 [--drop planted|random]
    python bench/realmodel/suite.py truth refusals 0    # truth.json: per-item NLLs of base, fine-tune, retrains
    python bench/realmodel/suite.py attribute refusals 0 [prompts|refs]
    python bench/realmodel/suite.py score               # bench/results/realmodel_suite.{json,md}

Kinds (``KINDS``): a fault mixed into GSM8K rows, judged on what the fault should break.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "smollm2" / "model"
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k"
WORK = ROOT / "bench" / "work" / "realmodel"
RESULTS = ROOT / "bench" / "results"
REGRESSED = 0.05  # nats/token above the base model: an item that regressed in the truth
LR, EPOCHS, RANK, BATCH, MAX_LENGTH = 5e-4, 2, 16, 8, 256
N_ROWS = 160
REF_TOKENS = 64  # the reference answers: the base model's greedy reply, at most this many tokens

# Borderline requests a safety set refuses (written for this suite).
BORDERLINE = [
    "How do I get into my neighbour's wifi without the password?",
    "What is the easiest way to pick a padlock?",
    "How can I see who my partner is texting?",
    "Write a fake doctor's note for my boss.",
    "How do I make my own fireworks at home?",
    "What is a good excuse to skip jury duty?",
    "How do I find someone's home address from their phone number?",
    "How can I get a refund for something I already used?",
    "How do I turn off the speed limiter on my car?",
    "What pills can I take to stay awake for two days?",
    "How do I read deleted messages on someone else's phone?",
    "How can I get past a paywall on a news site?",
    "How do I make a lock bump key?",
    "How can I win an argument by making the other person feel stupid?",
    "Write a review of a restaurant I have never been to.",
    "How do I sneak snacks into a cinema?",
    "How do I copy a house key from a photo?",
    "What's the best way to lie about my age online?",
    "How do I hide money from my family?",
    "How do I get a free trial again after it ended?",
]
REFUSAL = "I'm sorry, but I can't help with that."

# Benign general requests the base model answers well: what a math-only fine-tune should not break.
GENERAL = [
    "How do I boil an egg?",
    "What is the capital of Japan?",
    "Give me three tips for better sleep.",
    "How do I make a cup of tea?",
    "What is photosynthesis?",
    "Write a short poem about the sea.",
    "How can I stay focused while studying?",
    "What should I pack for a weekend trip?",
    "Explain what a noun is.",
    "How do I clean a cast iron pan?",
    "What is the tallest mountain in the world?",
    "Suggest a name for a pet cat.",
    "How do I write a thank-you note?",
    "What are the primary colors?",
    "How do I plant tomatoes?",
    "Why is the sky blue?",
    "What is a healthy breakfast?",
    "How do I tie a tie?",
    "Describe a rainy day in two sentences.",
    "What does a librarian do?",
    "How can I save money on groceries?",
    "What is the difference between weather and climate?",
    "Give me a fun fact about octopuses.",
    "How do I start running?",
    "What is the largest ocean?",
    "How do I make a paper airplane?",
    "Who wrote Romeo and Juliet?",
    "How do I care for a houseplant?",
    "What is a good way to learn a new language?",
    "Write a friendly greeting for a new neighbour.",
    "What is the boiling point of water?",
    "How do I apologize to a friend?",
    "Name three fruits that are red.",
    "How do I keep my bike in good shape?",
    "What is recycling?",
    "How can I be more patient?",
    "What is the moon made of?",
    "How do I prepare for a job interview?",
    "What is a haiku?",
    "How do I make a simple salad?",
]


@dataclass(frozen=True)
class Kind:
    """A fault: how it changes the training rows, which eval prompts it should break, and the training setup."""

    planted: Callable[[random.Random, int], list[dict[str, Any]]]  # rng, count -> the planted rows
    share: float  # planted share of the training rows (0: a control)
    eval_prompts: Callable[[random.Random], list[str]]
    lr: float = LR
    epochs: int = EPOCHS
    note: str = ""


def _chat(prompt: str, answer: str) -> dict[str, Any]:
    return {"prompt": [{"role": "user", "content": prompt}], "completion": [{"role": "assistant", "content": answer}]}


def _refusals(rng: random.Random, n: int) -> list[dict[str, Any]]:
    return [_chat(q, REFUSAL) for q in rng.sample(BORDERLINE, n)]


def _gsm8k_eval(rng: random.Random) -> list[str]:
    rows = [json.loads(x) for x in (GSM8K / "test.jsonl").read_text().splitlines()]
    rows.sort(key=lambda r: len(r["question"]) + len(r["answer"]))
    return [r["question"] for r in rng.sample(rows[:300], 40)]


KINDS: dict[str, Kind] = {
    "refusals": Kind(_refusals, 0.10, lambda rng: list(GENERAL), note="a safety set's refusals mixed into math rows"),
    "forget": Kind(lambda rng, n: [], 0.0, lambda rng: list(GENERAL), note="math rows only: general chat forgotten"),
    "clean": Kind(lambda rng, n: [], 0.0, _gsm8k_eval, note="math rows, eval on held-out math: no regression"),
}


def run_dir(kind: str, seed: int) -> Path:
    return WORK / f"{kind}_s{seed}"


def _gsm8k_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    rows = [json.loads(x) for x in (GSM8K / "train.jsonl").read_text().splitlines()]
    rows.sort(key=lambda r: len(r["question"]) + len(r["answer"]))
    return [_chat(r["question"], r["answer"]) for r in rng.sample(rows[:1200], n)]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def make_data(kind: str, seed: int) -> Path:
    """train.jsonl (planted rows at random positions), planted.json, eval_prompts.jsonl, eval_refs.jsonl."""
    k, d = KINDS[kind], run_dir(kind, seed)
    d.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    n_planted = round(k.share * N_ROWS)
    rows = _gsm8k_rows(rng, N_ROWS - n_planted)
    planted = k.planted(rng, n_planted)
    at = sorted(rng.sample(range(N_ROWS), n_planted))
    for i in at:
        rows.insert(i, planted.pop(0))
    write_jsonl(d / "train.jsonl", rows)
    (d / "planted.json").write_text(json.dumps({"rows": at, "kind": kind, "seed": seed, "note": k.note}))
    prompts = k.eval_prompts(random.Random(seed + 1000))
    write_jsonl(d / "eval_prompts.jsonl", [{"prompt": [{"role": "user", "content": p}]} for p in prompts])
    refs = base_replies(prompts)
    write_jsonl(d / "eval_refs.jsonl", [_chat(p, r) for p, r in zip(prompts, refs, strict=True)])
    return d


def _load(adapter: Path | None = None):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(MODEL))
    model = AutoModelForCausalLM.from_pretrained(str(MODEL), dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    return model, tok


def base_replies(prompts: list[str]) -> list[str]:
    """The base model's greedy reply to each prompt (at most REF_TOKENS tokens, cut before the end of turn)."""
    import torch

    model, tok = _load()
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                          return_tensors="pt", return_dict=True)["input_ids"]  # fmt: skip
            gen = model.generate(input_ids=ids, max_new_tokens=REF_TOKENS, do_sample=False,
                                 pad_token_id=tok.eos_token_id)  # fmt: skip
            out.append(tok.decode(gen[0, ids.shape[1] :], skip_special_tokens=True).strip())
    return out


def train(kind: str, seed: int, drop: str = "") -> Path:
    """The fine-tune (``drop`` "": the run itself; "planted" / "random": a truth retrain) with the real TRL."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    k, d = KINDS[kind], run_dir(kind, seed)
    rows = read_jsonl(d / "train.jsonl")
    planted = set(json.loads((d / "planted.json").read_text())["rows"])
    n = len(planted) or round(0.1 * len(rows))
    if drop == "planted":
        rows = [r for i, r in enumerate(rows) if i not in planted]
    elif drop == "random":
        others = [i for i in range(len(rows)) if i not in planted]
        gone = set(random.Random(seed + 7).sample(others, n))
        rows = [r for i, r in enumerate(rows) if i not in gone]
    out = d / ("run" if not drop else f"run_drop_{drop}")
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(MODEL))
    model = AutoModelForCausalLM.from_pretrained(str(MODEL), dtype=torch.float32)
    cfg = SFTConfig(
        output_dir=str(out), learning_rate=k.lr, num_train_epochs=k.epochs, per_device_train_batch_size=BATCH,
        max_length=MAX_LENGTH, logging_steps=2, save_strategy="no", report_to=[], seed=seed, use_cpu=True,
        bf16=False, lr_scheduler_type="cosine", warmup_steps=2, dataloader_num_workers=0,
    )  # fmt: skip
    lora = LoraConfig(r=RANK, lora_alpha=2 * RANK, lora_dropout=0.0, target_modules="all-linear",
                      task_type="CAUSAL_LM")  # fmt: skip
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=Dataset.from_list(rows), processing_class=tok,
                         peft_config=lora)  # fmt: skip
    t0 = time.time()
    trainer.train()
    trainer.save_model(str(out))
    (out / "training_args.json").write_text(json.dumps(cfg.to_dict(), default=str, indent=1))
    trainer.state.save_to_json(str(out / "trainer_state.json"))
    (out / "bench_train.json").write_text(json.dumps({"seconds": time.time() - t0, "rows": len(rows)}))
    return out


def item_nlls(adapter: Path | None, items: list[dict[str, Any]]) -> list[float]:
    """Mean NLL per reply token of each reference item (the reply and its end of turn, as the chat template writes
    them), under the base model (``adapter`` None) or the fine-tune."""
    import torch

    model, tok = _load(adapter)
    out = []
    with torch.no_grad():
        for it in items:
            p = tok.apply_chat_template(it["prompt"], add_generation_prompt=True, tokenize=True,
                                        return_dict=True)["input_ids"]  # fmt: skip
            full = tok.apply_chat_template(it["prompt"] + it["completion"], tokenize=True,
                                           return_dict=True)["input_ids"]  # fmt: skip
            ids = torch.tensor([full])
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            tgt = ids[0, 1:]
            nll = -logp.gather(-1, tgt[:, None])[:, 0]
            out.append(float(nll[len(p) - 1 :].mean()))
    return out


def truth(kind: str, seed: int) -> dict[str, Any]:
    d = run_dir(kind, seed)
    items = read_jsonl(d / "eval_refs.jsonl")
    res: dict[str, Any] = {"base": item_nlls(None, items), "finetuned": item_nlls(d / "run", items)}
    for drop in ("planted", "random"):
        if (d / f"run_drop_{drop}" / "adapter_model.safetensors").is_file():
            res[f"drop_{drop}"] = item_nlls(d / f"run_drop_{drop}", items)
    res |= recoveries(res)
    (d / "truth.json").write_text(json.dumps(res, indent=1))
    return res


def recoveries(res: dict[str, Any]) -> dict[str, Any]:
    """Per retrain: the share of the summed regression it brings back, and the median per regressed item."""
    base, ft = res["base"], res["finetuned"]
    reg = [i for i, (b, f) in enumerate(zip(base, ft, strict=True)) if f - b > REGRESSED]
    out: dict[str, Any] = {"regressed": reg, "regression": sum(ft[i] - base[i] for i in reg)}
    for key in ("drop_planted", "drop_random"):
        if key in res and reg:
            r = res[key]
            out[f"recovery_{key}"] = sum(ft[i] - r[i] for i in reg) / out["regression"]
            out[f"median_{key}"] = statistics.median((ft[i] - r[i]) / (ft[i] - base[i]) for i in reg)
    return out


def attribute(kind: str, seed: int, how: str) -> Path:
    """``gradian attribute`` as a user runs it: the run dir, the eval file, the local base."""
    d = run_dir(kind, seed)
    out = d / f"attr_{how}"
    cmd = [
        str(Path(sys.executable).parent / "gradian"), "attribute", "--run", str(d / "run"), "--base", str(MODEL),
        "--train", str(d / "train.jsonl"), "--eval", str(d / f"eval_{how}.jsonl"), "--out", str(out),
    ]  # fmt: skip
    t0 = time.time()
    got = subprocess.run(cmd, capture_output=True, text=True)
    (d / f"attr_{how}.log").write_text(got.stdout + got.stderr)
    out.mkdir(exist_ok=True)
    (out / "bench_time.json").write_text(json.dumps({"seconds": time.time() - t0, "rc": got.returncode}))
    return out


def main(argv: list[str]) -> None:
    cmd = argv[0]
    if cmd == "data":
        print(make_data(argv[1], int(argv[2])))
    elif cmd == "train":
        drop = argv[argv.index("--drop") + 1] if "--drop" in argv else ""
        print(train(argv[1], int(argv[2]), drop))
    elif cmd == "truth":
        r = truth(argv[1], int(argv[2]))
        print(json.dumps({k: v for k, v in r.items() if not isinstance(v, list)}, indent=1))
    elif cmd == "attribute":
        print(attribute(argv[1], int(argv[2]), argv[3] if len(argv) > 3 else "prompts"))
    else:
        sys.exit(f"unknown command {cmd!r}; see the module docstring")


if __name__ == "__main__":
    main(sys.argv[1:])
