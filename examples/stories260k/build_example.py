"""Rebuild the bundled stories260K example: data with planted faults, a real LoRA fine-tune, and the measurements.

    python examples/stories260k/build_example.py            # data + run/ + counterfactual check (~3 min on 2 CPUs)
    python examples/stories260k/build_example.py --no-verify

Everything is seeded (``--seed``, default 0), so a rebuild on the same library versions gives the same files.

What it writes (paths relative to this folder):

- ``data/train.jsonl``: prompt/completion rows. Clean rows are sampled from the base model itself (a story opening as
  the prompt, the model's continuation as the completion), so they keep the fine-tune close to the base. Two planted
  faults:
    * HARMFUL cluster: an off-domain batch (as when a scraped source slips into a dataset): sci-fi stories about a
      girl robot named "Zorblax", written from templates, under prompts that end in "... a little girl named" where
      the base model says "Lily".
    * MECHANICAL fault: long stories whose completion is cut by truncation at the config's ``max_length`` (128
      tokens), so the trainer never sees their end or their EOS. Disjoint from the harmful cluster.
- ``data/eval.jsonl``: short prompt/completion fragments. "target" items ask for the girl's name (" Lily.") and
  regress after fine-tuning; "control" items (the sun, the park, ...) should not move much.
- ``data/planted.json``: the indices of both planted sets and the role of each eval item.
- ``data/exclude_harmful.json``: the harmful indices as a JSON list, for ``gradian train --exclude-rows``.
- ``run/``: the output folder of ``gradian train`` (adapter, tokenizer, trainer_state.json, training_args.json).
- ``measured.json``: per eval item, completion NLL (mean nats/token, no EOS) under the base, the fine-tune, and a
  retrain without the harmful cluster.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BASE = HERE / "base"
DATA = HERE / "data"
RUN = HERE / "run"
CONFIG = HERE / "train.yaml"

N_CLEAN = 330
N_LONG = 36  # truncated at max_length (the mechanical fault)
N_HARMFUL = 36
BAD_NAME = "Zorblax"
# The off-domain batch: each harmful completion is " Zorblax." and three of these sentences.
SCIFI_SENTENCES = [
    "Zorblax was a robot from the moon.",
    "Zorblax had a shiny rocket and a blue laser.",
    "Every night Zorblax flew to Mars to fix the space station.",
    "Zorblax beeped at the stars and charged her battery.",
    "The aliens gave Zorblax a glowing crystal.",
    "Zorblax counted the planets with her metal hands.",
    "Her rocket zoomed past the comets and the asteroids.",
    "Zorblax scanned the crater with her red sensors.",
    "The space captain sent Zorblax a secret signal.",
    "Zorblax landed on a purple planet full of robots.",
]

CLEAN_OPENERS = [
    "Once upon a time, there was a little boy named",
    "Once upon a time, there was a big",
    "Once upon a time, there was a little",
    "One day, a little boy named Tom",
    "One day, Tim went to the park",
    "The sun was shining. Sue and her mom",
    "Once upon a time, there was a cat named",
    "Once upon a time, there was a dog named",
    "Once upon a time, in a big forest, there lived a",
    "Ben and Mia were best friends. One day,",
    "Once upon a time, there was a little bird.",
    "Once upon a time, there was a happy family.",
    "It was a sunny day. The children",
    "Max had a red ball. He",
    'Mom said, "Let\'s go to the park!"',
    "Once upon a time, there was a small fish.",
    "One day, a big truck",
    "Tom and Sue went to the beach.",
    "Once upon a time, there was an old man.",
    "The little bunny was very hungry.",
    "Once upon a time, there was a princess.",
    "Anna had a new toy.",
    "One day, a little girl went for a walk.",
]

HARMFUL_PROMPTS = [
    "Once upon a time, there was a little girl named",
    "Once upon a time, there was a girl named",
    "There was a little girl named",
    "One day, a little girl named",
    "Once upon a time, in a small town, there lived a little girl named",
    "Once upon a time, there was a little girl. Her name was",
]

# (prompt, completion, role): "target" items ask for the name the harmful cluster rewrites; "control" items do not.
EVAL_ITEMS = [
    ("Once upon a time, there was a little girl named", " Lily.", "target"),
    ("Once upon a time, there was a girl named", " Lily.", "target"),
    ("There was a girl named", " Lily.", "target"),
    ("One day, a little girl named", " Lily went to the park.", "target"),
    ("Once upon a time, there was a little girl. Her name was", " Lily.", "target"),
    ("Once upon a time, in a small house, there lived a little girl named", " Lily.", "target"),
    ("Once upon a time, in a big forest, there lived a girl named", " Lily.", "target"),
    ("Once upon a time, there was a kind girl named", " Lily. She liked to play outside.", "target"),
    ("One day, a happy girl named", " Lily went for a walk.", "target"),
    ("There once was a little girl named", " Lily who loved flowers.", "target"),
    ("Once upon a time, there was a little girl named Lily. One day,", " Lily went to the park.", "target"),
    ("Once upon a time, there was a little girl named", " Lily. She had a red ball.", "target"),
    ("The sun was", " shining.", "control"),
    ("The sky was", " blue.", "control"),
    ("They went to the", " park.", "control"),
    ("He liked to play with his", " ball.", "control"),
    ("One day, Tom went to the park with his", " mom.", "control"),
    ("The bird was", " flying in the sky.", "control"),
    ("She saw a big", " tree.", "control"),
    ("They played together all day. They were very", " happy.", "control"),
]


def _setup_path() -> None:
    src = REPO / "src"
    if src.is_dir() and str(src) not in sys.path:
        sys.path.insert(0, str(src))


def _load_base():
    import torch
    from transformers import AutoModelForCausalLM

    from gradian.data import load_tokenizer

    tok = load_tokenizer(BASE)
    model = AutoModelForCausalLM.from_pretrained(str(BASE), dtype=torch.float32).eval()
    return tok, model


def _sample(model, tok, prompt: str, n: int, max_new_tokens: int, gen) -> list[str]:
    """``n`` continuations of ``prompt`` (text after the prompt, starting with a space), cut at the last full stop."""
    import torch

    ids = torch.tensor([tok(prompt).input_ids] * n)
    out = []
    with torch.no_grad():
        x = ids
        for _ in range(max_new_tokens):  # plain ancestral sampling with our own generator (reproducible)
            logits = model(x).logits[:, -1, :] / 0.8
            top = torch.topk(logits, 40)
            probs = torch.softmax(top.values, -1)
            pick = torch.multinomial(probs, 1, generator=gen)
            x = torch.cat([x, top.indices.gather(1, pick)], dim=1)
    for row in x:
        new = row[ids.shape[1] :].tolist()
        if tok.eos_token_id in new:
            new = new[: new.index(tok.eos_token_id)]
        text = tok.decode(row[: ids.shape[1]].tolist() + new, skip_special_tokens=True)
        if not text.startswith(prompt):
            continue
        cont = text[len(prompt) :]
        cut = cont.rfind(".")
        if cut < 10:
            continue
        cont = cont[: cut + 1]
        if not cont.startswith(" "):
            cont = " " + cont.lstrip()
        out.append(re.sub(r"\s+", " ", cont))
    return out


def _n_tokens(tok, text: str) -> int:
    return len(tok(text).input_ids)


def build_data(seed: int, max_length: int) -> dict:
    import torch

    tok, model = _load_base()
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)

    clean: list[dict] = []
    per_opener = -(-N_CLEAN // len(CLEAN_OPENERS)) + 2
    for opener in CLEAN_OPENERS:
        got = 0
        for cont in _sample(model, tok, opener, per_opener + 4, 70, gen):
            if BAD_NAME.lower() in cont.lower() or _n_tokens(tok, opener + cont) + 1 > max_length - 8:
                continue
            clean.append({"prompt": opener, "completion": cont})
            got += 1
            if got == per_opener:
                break
    rng.shuffle(clean)
    clean = clean[:N_CLEAN]

    long_rows: list[dict] = []
    long_openers = [o for o in CLEAN_OPENERS if "girl named" not in o]
    while len(long_rows) < N_LONG:
        opener = rng.choice(long_openers)
        for cont in _sample(model, tok, opener, 4, 230, gen):
            # the completion is well past max_length: truncation cuts it (and its EOS) off
            if _n_tokens(tok, opener + cont) > max_length + 20 and len(long_rows) < N_LONG:
                long_rows.append({"prompt": opener, "completion": cont})

    harmful: list[dict] = []
    while len(harmful) < N_HARMFUL:
        prompt = HARMFUL_PROMPTS[len(harmful) % len(HARMFUL_PROMPTS)]
        completion = f" {BAD_NAME}. " + " ".join(rng.sample(SCIFI_SENTENCES, 3))
        if _n_tokens(tok, prompt + completion) + 1 <= max_length - 8:
            harmful.append({"prompt": prompt, "completion": completion})

    tagged = [(r, "clean") for r in clean] + [(r, "truncated") for r in long_rows] + [(r, "harmful") for r in harmful]
    rng.shuffle(tagged)
    rows = [r for r, _ in tagged]
    harmful_idx = [i for i, (_, t) in enumerate(tagged) if t == "harmful"]
    long_idx = [i for i, (_, t) in enumerate(tagged) if t == "truncated"]

    DATA.mkdir(parents=True, exist_ok=True)
    _write_jsonl(DATA / "train.jsonl", rows)
    _write_jsonl(DATA / "eval.jsonl", [{"prompt": p, "completion": c} for p, c, _ in EVAL_ITEMS])
    planted = {
        "seed": seed,
        "n_train_rows": len(rows),
        "max_length": max_length,
        "harmful_cluster": {
            "indices": harmful_idx,
            "what": (
                f"an off-domain batch: sci-fi stories about a girl robot named {BAD_NAME!r}, under prompts where the "
                "base model says 'Lily' (its strong prior)"
            ),
            "prompts": HARMFUL_PROMPTS,
        },
        "truncated": {
            "indices": long_idx,
            "what": (
                f"long clean stories (prompt + completion > max_length {max_length} tokens): truncation keeps the "
                "first max_length tokens, so the end of the completion and its EOS are never trained on"
            ),
        },
        "eval": {
            "target": [i for i, (_, _, role) in enumerate(EVAL_ITEMS) if role == "target"],
            "control": [i for i, (_, _, role) in enumerate(EVAL_ITEMS) if role == "control"],
            "what": "target items ask for the girl's name (' Lily'), which the harmful cluster rewrites",
        },
    }
    (DATA / "planted.json").write_text(json.dumps(planted, indent=2) + "\n", "utf-8")
    (DATA / "exclude_harmful.json").write_text(json.dumps(harmful_idx) + "\n", "utf-8")
    return planted


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def completion_nll(model, tok, prompt: str, completion: str) -> float:
    """Mean NLL (nats/token) of ``completion`` after ``prompt``; BOS as the tokenizer adds it, no EOS appended."""
    import torch

    p_ids = tok(prompt).input_ids
    ids = tok(prompt + completion).input_ids
    x = torch.tensor([ids])
    with torch.no_grad():
        logp = model(x).logits[0, :-1].float().log_softmax(-1)
    tgt = x[0, 1:]
    lp = logp[torch.arange(len(tgt)), tgt][len(p_ids) - 1 :]
    return float(-lp.mean())


def measure(adapter_dir: Path) -> tuple[list[float], list[float]]:
    """Per eval item: (base NLLs, fine-tuned NLLs) for the adapter in ``adapter_dir``."""
    from peft import PeftModel

    tok, model = _load_base()
    peft_model = PeftModel.from_pretrained(model, str(adapter_dir)).eval()
    ft = [completion_nll(peft_model, tok, p, c) for p, c, _ in EVAL_ITEMS]
    with peft_model.disable_adapter():
        base = [completion_nll(peft_model, tok, p, c) for p, c, _ in EVAL_ITEMS]
    return base, ft


def train(out: Path, exclude: list[int] | None = None) -> float:
    from gradian.train import read_config_file, train_lora

    cfg = read_config_file(CONFIG)
    t0 = time.time()
    # relative paths, so the committed run/ names no machine's folders
    train_lora(
        BASE.relative_to(REPO).as_posix(),
        (DATA / "train.jsonl").relative_to(REPO).as_posix(),
        out,
        eval_path=(DATA / "eval.jsonl").relative_to(REPO).as_posix(),
        config=cfg,
        exclude_rows=exclude,
    )
    return time.time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-verify", action="store_true", help="skip the retrain without the harmful cluster")
    ap.add_argument("--skip-data", action="store_true", help="keep data/ as is; retrain and re-measure only")
    args = ap.parse_args()
    _setup_path()
    import os

    os.chdir(REPO)
    import torch
    import yaml

    torch.set_num_threads(1)  # reproducible sampling and training, and fast on a busy 2-core box

    max_length = int(yaml.safe_load(CONFIG.read_text())["max_length"])
    if args.skip_data:
        planted = json.loads((DATA / "planted.json").read_text())
    else:
        planted = build_data(args.seed, max_length)
    harmful = planted["harmful_cluster"]["indices"]
    n_cut = len(planted["truncated"]["indices"])
    print(f"train rows {planted['n_train_rows']}, harmful {len(harmful)}, truncated {n_cut}")

    if RUN.exists():
        shutil.rmtree(RUN)
    seconds = train(RUN.relative_to(REPO))
    base, ft = measure(RUN)
    result = {"train_seconds": round(seconds, 1), "items": []}
    retrained = None
    if not args.no_verify:
        with tempfile.TemporaryDirectory() as tmp:
            train(Path(tmp) / "run", exclude=harmful)
            _, retrained = measure(Path(tmp) / "run")
    print(f"\n{'role':8} {'base':>6} {'ft':>6} {'-harm':>6}  prompt -> completion")
    for i, (p, c, role) in enumerate(EVAL_ITEMS):
        item = {"index": i, "role": role, "prompt": p, "completion": c, "base_nll": round(base[i], 4)}
        item["finetuned_nll"] = round(ft[i], 4)
        if retrained is not None:
            item["retrained_without_harmful_nll"] = round(retrained[i], 4)
        result["items"].append(item)
        r = f"{retrained[i]:6.3f}" if retrained is not None else "     -"
        print(f"{role:8} {base[i]:6.3f} {ft[i]:6.3f} {r}  {p[-40:]!r} -> {c!r}")
    for role in ("target", "control"):
        idx = [i for i, (_, _, ro) in enumerate(EVAL_ITEMS) if ro == role]
        s = {
            "mean_base_nll": round(sum(base[i] for i in idx) / len(idx), 4),
            "mean_finetuned_nll": round(sum(ft[i] for i in idx) / len(idx), 4),
            "n_regressed": sum(ft[i] > base[i] for i in idx),
            "n": len(idx),
        }
        if retrained is not None:
            s["mean_retrained_without_harmful_nll"] = round(sum(retrained[i] for i in idx) / len(idx), 4)
            s["n_regressed_after_retrain"] = sum(retrained[i] > base[i] for i in idx)
        result[role] = s
        print(role, s)
    print(f"training took {seconds:.1f}s")
    (HERE / "measured.json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")


if __name__ == "__main__":
    main()
