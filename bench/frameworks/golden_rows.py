"""The rows every golden-fixture generator feeds to a trainer's real preprocessing (bench/frameworks/make_golden_*.py).

Edge cases on purpose: an empty Alpaca ``input``, a row without ``input``, an empty output, a token merged across the
prompt/response boundary, multi-turn chats, a system turn, and one row longer than every case's cutoff.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
STORIES = REPO / "examples" / "stories260k" / "base"
OUT = REPO / "tests" / "fixtures" / "golden"

STORY = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. "
    "One day, she saw a big red ball under a tree and ran to get it."
)
LONG = " ".join([STORY] * 4)


def alpaca_rows() -> list[dict[str, Any]]:
    return [
        {"instruction": "Say hello.", "input": "", "output": "Hello there."},
        {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
        {"instruction": "Tell a story.", "output": STORY},
        {"instruction": "Retell this story.", "input": LONG, "output": "Lily found a red ball."},
        {"instruction": "Finish the words: Once u", "input": "", "output": "pon a time"},
        {"instruction": "Say nothing.", "input": "", "output": ""},
    ]


def chat_rows() -> list[dict[str, Any]]:
    u, a, s = "user", "assistant", "system"
    return [
        {"messages": [{"role": u, "content": "Hi there"}, {"role": a, "content": "Hello! How can I help?"}]},
        {
            "messages": [
                {"role": s, "content": "You tell short stories."},
                {"role": u, "content": "Tell me a story."},
                {"role": a, "content": STORY},
            ]
        },
        {
            "messages": [
                {"role": u, "content": "Who is Lily?"},
                {"role": a, "content": "A girl."},
                {"role": u, "content": "What did she find?"},
                {"role": a, "content": "A big red ball."},
            ]
        },
        {"messages": [{"role": u, "content": LONG + " Who is Lily?"}, {"role": a, "content": "A girl."}]},
    ]


def sharegpt_rows() -> list[dict[str, Any]]:
    out = []
    for row in chat_rows():
        conv = [
            {"from": {"user": "human", "assistant": "gpt"}.get(m["role"], m["role"]), "value": m["content"]}
            for m in row["messages"]
        ]
        out.append({"conversations": conv})
    return out


def text_rows() -> list[dict[str, Any]]:
    return [{"text": "The cat sat on the mat."}, {"text": STORY}, {"text": LONG}]


def golden_args() -> argparse.Namespace:
    """The generators' command line: the SmolLM2 tokenizer folder, and ``--only`` one case."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", type=Path, required=True, help="folder with SmolLM2-135M-Instruct's tokenizer")
    ap.add_argument("--only", help="run one case and merge it into the existing fixture")
    return ap.parse_args()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fixture_doc(framework: str, packages: tuple[str, ...], how: str, tok_dirs: dict[str, Path]) -> dict[str, Any]:
    """A fixture's header (the framework, the installed versions of ``packages``, how it was recorded, each
    tokenizer's sha256) with no cases yet."""
    return {
        "framework": framework,
        "versions": {p: version(p) for p in packages},
        "how": how,
        "tokenizers": {k: sha256(d / "tokenizer.json") for k, d in tok_dirs.items()},
        "cases": [],
    }


def write_fixture(path: Path, doc: dict[str, Any]) -> None:
    """JSON with one line per token list (diffs stay readable)."""
    text = json.dumps(doc, indent=1, ensure_ascii=False)
    text = re.sub(r"\[([-\d,\s]+)\]", lambda m: "[" + re.sub(r"\s+", "", m.group(1)) + "]", text)
    path.write_text(text + "\n", encoding="utf-8")


def merge_cases(path: Path, doc: dict[str, Any], only: str | None) -> dict[str, Any]:
    """With ``--only``: the fixture already at ``path`` with that one case replaced (or added)."""
    if not only or not path.is_file():
        return doc
    old = json.loads(path.read_text("utf-8"))
    if old["versions"] != doc["versions"] or old["tokenizers"] != doc["tokenizers"]:
        raise SystemExit(f"{path} was recorded with other versions or tokenizers; regenerate it whole")
    new = {c["name"]: c for c in doc["cases"]}
    cases = [new.pop(c["name"], c) for c in old["cases"]]
    return {**old, "cases": cases + list(new.values())}
