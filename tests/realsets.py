"""Clean real data sets as JSONL rows, shared by the diagnose tests and bench/diagnose_corpus.py: GSM8K
(prompt/completion), the sentiment sentences (classification prompt/completion), text rows cut from tinyshakespeare
at speech boundaries, and the bundled base-model stories without their planted rows."""

from __future__ import annotations

import json
import random
from pathlib import Path

from test_diagnose_helpers import SHARED

REPO = Path(__file__).resolve().parents[1]
GSM = SHARED / "data" / "gsm8k" / "train.jsonl"
SENT = SHARED / "data" / "sentiment_labelled_sentences"
SHAKES = SHARED / "data" / "tinyshakespeare" / "input.txt"
STORIES_DATA = REPO / "examples" / "stories260k" / "data"


def gsm8k(n: int = 1000, start: int = 0) -> list[dict]:
    rows = [json.loads(x) for x in GSM.read_text(encoding="utf-8").splitlines()[start : start + n]]
    return [{"prompt": f"Question: {r['question']}\nAnswer:", "completion": " " + r["answer"]} for r in rows]


def sentiment(seed: int = 0, sources: tuple[str, ...] = ("amazon", "imdb", "yelp")) -> list[dict]:
    """The sentiment sentences of the named sources (amazon, imdb, yelp) as review/label rows, shuffled."""
    rows = []
    for name in (f"{s}_cells_labelled.txt" if s == "amazon" else f"{s}_labelled.txt" for s in sources):
        for line in (SENT / name).read_text(encoding="utf-8", errors="replace").splitlines():
            if "\t" in line:
                s, lab = line.rsplit("\t", 1)
                rows.append({"prompt": f"Review: {s.strip()}\nSentiment:",
                             "completion": " positive" if lab.strip() == "1" else " negative"})  # fmt: skip
    random.Random(seed).shuffle(rows)
    return rows


def shakespeare(n: int = 1500, chars: int = 600) -> list[dict]:
    """Text rows of consecutive speeches, about ``chars`` characters each, cut at speech boundaries."""
    speeches = [s.strip() for s in SHAKES.read_text(encoding="utf-8").split("\n\n") if s.strip()]
    rows, cur = [], []
    for s in speeches:
        cur.append(s)
        if sum(map(len, cur)) >= chars:
            rows.append({"text": "\n\n".join(cur)})
            cur = []
        if len(rows) >= n:
            break
    return rows


def stories() -> list[dict]:
    """The bundled example's training rows minus its planted harmful and truncated rows."""
    planted = json.loads((STORIES_DATA / "planted.json").read_text())
    drop = set(planted["harmful_cluster"]["indices"]) | set(planted["truncated"]["indices"])
    rows = [json.loads(x) for x in (STORIES_DATA / "train.jsonl").read_text().splitlines() if x.strip()]
    return [r for i, r in enumerate(rows) if i not in drop]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path
