"""A worked example on a real instruct model: SmolLM2-135M-Instruct, a sentiment LoRA broken by one source's labels.

Story: a team fine-tunes SmolLM2-135M-Instruct to answer " positive" / " negative" for short reviews, pooling three
sources (IMDb, Yelp, Amazon). The Amazon export went through a pipeline bug that inverted its 0/1 labels. The
fine-tune looks fine on average, but on held-out Amazon product reviews it is now *worse* than the base model.
Can `gradian attribute` find the flipped rows, and does `gradian verify` confirm that dropping them helps? (What
actually regressed, and what verify showed, is recorded in CHANGELOG.md (worked examples): the positive items of
every source, and the top rows were the flipped positive-to-"negative" Amazon rows.)

Data: Sentiment Labelled Sentences (Kotzias et al., KDD 2015; CC BY 4.0 per the UCI listing). Only the sentences
used are copied into ``data/`` (see ``data/LICENSE.md``).

Steps (each re-runs and overwrites its outputs):

    python examples/smollm2/get_model.py          # once: model/ (fp32 safetensors, not committed)
    python examples/smollm2/build.py data         # data/train.jsonl, data/eval.jsonl, data/planted.json
    python examples/smollm2/build.py train        # work/run  (gradian train, config train.yaml)
    python examples/smollm2/build.py attribute    # work/attr/report.json
    python examples/smollm2/build.py verify       # work/attr/verify.json
    python examples/smollm2/build.py all

``work/`` is not committed (git-ignored); CHANGELOG.md (worked examples) records what these steps printed.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SOURCE = REPO.parent / "shared" / "data" / "sentiment_labelled_sentences"
DATA = HERE / "data"
WORK = HERE / "work"
MODEL = HERE / "model"
FILES = {"imdb": "imdb_labelled.txt", "yelp": "yelp_labelled.txt", "amazon": "amazon_cells_labelled.txt"}

N_CLEAN_PER_SOURCE = 40  # imdb + yelp, balanced labels, correct
N_FLIPPED = 40  # amazon, labels inverted (the planted cluster)
N_EVAL_PER_SOURCE = {"amazon": 16, "imdb": 7, "yelp": 7}
# A fixed 2-shot template: with it the base model already labels these reviews well (mean NLL of the right label
# 0.61 nats on the 30 eval items), so the capability exists before the fine-tune. Without the shots the base model
# puts little mass on " positive"/" negative" at all (~3.9 nats) and any fine-tune "improves" every item.
PROMPT = (
    "Review: Great food, friendly staff.\nSentiment: positive\n"
    "Review: It broke in two days.\nSentiment: negative\n"
    "Review: {text}\nSentiment:"
)
LABEL = {1: " positive", 0: " negative"}


def _read(name: str) -> list[tuple[str, int]]:
    rows = []
    for line in (SOURCE / FILES[name]).read_text("utf-8").splitlines():
        if "\t" in line:
            text, lab = line.rsplit("\t", 1)
            text = " ".join(text.split())
            if 20 <= len(text) <= 110:
                rows.append((text, int(lab)))
    return rows


def _balanced(rows: list[tuple[str, int]], n: int, rng: random.Random) -> list[tuple[str, int]]:
    pos = [r for r in rows if r[1] == 1]
    neg = [r for r in rows if r[1] == 0]
    rng.shuffle(pos)
    rng.shuffle(neg)
    return pos[: n // 2] + neg[: n - n // 2]


def build_data() -> None:
    if not SOURCE.is_dir():
        sys.exit(f"{SOURCE} not found; data/ is committed, so only `train` onwards is needed")
    rng = random.Random(0)
    train: list[dict] = []
    evals: list[dict] = []
    flipped: list[int] = []
    for src in ("imdb", "yelp", "amazon"):
        rows = _read(src)
        n_train = N_FLIPPED if src == "amazon" else N_CLEAN_PER_SOURCE
        picked = _balanced(rows, n_train + N_EVAL_PER_SOURCE[src], rng)
        rng.shuffle(picked)
        ev = _balanced(picked, N_EVAL_PER_SOURCE[src], rng)
        tr = [r for r in picked if r not in ev][:n_train]
        for text, lab in tr:
            shown = 1 - lab if src == "amazon" else lab
            train.append({"prompt": PROMPT.format(text=text), "completion": LABEL[shown], "source": src, "true": lab})
        for text, lab in ev:
            evals.append({"prompt": PROMPT.format(text=text), "completion": LABEL[lab], "source": src})
    rng.shuffle(train)
    flipped = [i for i, r in enumerate(train) if r["source"] == "amazon"]
    DATA.mkdir(parents=True, exist_ok=True)
    (DATA / "train.jsonl").write_text(
        "".join(json.dumps({"prompt": r["prompt"], "completion": r["completion"]}) + "\n" for r in train), "utf-8"
    )
    (DATA / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals), "utf-8")
    planted = {
        "seed": 0,
        "n_train_rows": len(train),
        "flipped_cluster": {
            "what": "Amazon product reviews whose labels were inverted (positive <-> negative)",
            "indices": flipped,
        },
        "sources": {i: r["source"] for i, r in enumerate(train)},
    }
    (DATA / "planted.json").write_text(json.dumps(planted, indent=1) + "\n", "utf-8")
    (DATA / "exclude_flipped.json").write_text(json.dumps(flipped) + "\n", "utf-8")
    print(f"data: {len(train)} train rows ({len(flipped)} flipped), {len(evals)} eval items → {DATA}")


def _gradian(*args: str) -> None:
    cmd = [sys.executable, "-m", "gradian", *args]
    print("$ gradian " + " ".join(args), flush=True)
    t = time.time()
    subprocess.run(cmd, check=True, cwd=REPO)
    print(f"({time.time() - t:.0f} s)", flush=True)


def train() -> None:
    _gradian(
        "train",
        "--config", str(HERE / "train.yaml"),
        "--base", str(MODEL),
        "--train", str(DATA / "train.jsonl"),
        "--eval", str(DATA / "eval.jsonl"),
        "--out", str(WORK / "run"),
        "--no-progress",
    )  # fmt: skip


def attribute() -> None:
    _gradian(
        "attribute",
        "--run", str(WORK / "run"),
        "--base", str(MODEL),
        "--train", str(DATA / "train.jsonl"),
        "--eval", str(DATA / "eval.jsonl"),
        "--out", str(WORK / "attr"),
        "--no-progress",
    )  # fmt: skip
    report = json.loads((WORK / "attr" / "report.json").read_text())
    flipped = set(json.loads((DATA / "exclude_flipped.json").read_text()))
    ranked = [e["index"] for e in report["examples"]]
    for k in (10, 20, 40):
        print(f"flipped rows in the top {k}: {len(flipped & set(ranked[:k]))}")


def verify() -> None:
    _gradian("verify", str(WORK / "attr"), "--k", str(N_FLIPPED), "--no-progress")


def main() -> None:
    steps = sys.argv[1:] or ["all"]
    order = {"data": build_data, "train": train, "attribute": attribute, "verify": verify}
    for step in order if steps == ["all"] else steps:
        if step not in order:
            sys.exit(f"unknown step {step!r}; use {', '.join(order)} or all")
        order[step]()


if __name__ == "__main__":
    main()
