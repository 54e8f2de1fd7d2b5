"""Golden fixtures from the parts of other trainers' code that run here (their full preprocessing does not; see
docs/install.md). Axolotl 0.19.0's AlpacaPrompter output was recorded into tests/fixtures/golden by running it."""

from __future__ import annotations

import json
from pathlib import Path

from gradian.data import normalize_row

GOLDEN = Path(__file__).parent / "fixtures" / "golden"


def test_alpaca_prompt_matches_axolotl() -> None:
    doc = json.loads((GOLDEN / "axolotl_0.19.0_alpaca.json").read_text("utf-8"))
    for case in doc["cases"]:
        raw = {"instruction": case["instruction"], "output": "x"}
        if case["input"] is not None:
            raw["input"] = case["input"]
        ex, layout = normalize_row(raw, index=0, source="t.jsonl")
        assert layout == "alpaca"
        assert ex.prompt == case["prompt"], case["instruction"]
