"""Run datatrove's web-text quality filters over JSONL training files, one Document per row's trained text.

Run in datatrove's own virtualenv (bench/bench_validators.py --datatrove PYTHON calls it); standard library and
datatrove only. The trained text is the completion, else the assistant turns (joined by a blank line), else the
text field; a row without one is an empty Document. Each filter runs with its default parameters on a fresh
Document (C4QualityFilter edits the text it keeps); a row is flagged when any rejects it; each rejecting filter is
recorded with its reason. LanguageFilter is left out: its fastText model is downloaded at first use (lid.176.bin from
dl.fbaipublicfiles.com, or GlotLID from the Hugging Face Hub), and this benchmark downloads no model.

    python bench/datatrove_rows.py FILE.jsonl ...   # prints {"version": ..., "filters": [...], "files": {FILE:
                                                    #   {"rows": n, "flagged": {row: ["Filter:reason"]}}}}
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)

FILTERS = [GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(), FineWebQualityFilter()]


def trained_text(row: object) -> str:
    """The text a fine-tune learns from: completion, assistant turns, or text."""
    if not isinstance(row, dict):
        return ""
    if isinstance(row.get("completion"), str):
        return row["completion"]
    msgs = row.get("messages")
    if isinstance(msgs, list):
        turns = [m.get("content") for m in msgs if isinstance(m, dict) and m.get("role") == "assistant"]
        return "\n\n".join(t for t in turns if isinstance(t, str))
    return row["text"] if isinstance(row.get("text"), str) else ""


def verdict(text: str, i: int) -> list[str]:
    """Every filter that rejects the text, as 'Filter:reason' (empty when all keep it)."""
    bad = []
    for f in FILTERS:
        out = f.filter(Document(text=text, id=str(i)))
        ok, reason = (out, "") if isinstance(out, bool) else (bool(out[0]), out[1])
        if not ok:
            bad.append(f"{type(f).__name__}:{reason}")
    return bad


def scan(path: str) -> dict:
    lines = [x for x in open(path, encoding="utf-8").read().splitlines() if x.strip()]
    flagged = {}
    for i, line in enumerate(lines):
        v = verdict(trained_text(json.loads(line)), i)
        if v:
            flagged[i] = v
    return {"rows": len(lines), "flagged": flagged}


if __name__ == "__main__":
    out = {"version": version("datatrove"), "filters": [type(f).__name__ for f in FILTERS]}
    out["files"] = {p: scan(p) for p in sys.argv[1:]}
    print(json.dumps(out))
