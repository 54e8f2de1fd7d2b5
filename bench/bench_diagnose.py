"""Throughput of `gradian diagnose` on synthetic rows, WITH tokenization (the bundled stories260K tokenizer) and
every dataset rule (near-duplicate MinHash included). Prints one markdown table row per size.

    python bench/bench_diagnose.py            # 10,000 and 100,000 rows
    python bench/bench_diagnose.py 5000
    python bench/bench_diagnose.py --rules-only 50000   # character-level rules only (A/B of two trees)
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from gradian.data import format_examples, load_tokenizer
from gradian.data.types import Example, FormatSettings
from gradian.diagnose.context import DiagnoseContext
from gradian.diagnose.engine import run_rules, select_rules

TOK = Path(__file__).resolve().parents[1] / "examples" / "stories260k" / "base"
WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "ne", "su", "ta", "ri", "po") for b in ("n", "r", "t", "s", "l", "")]


def synth(n: int, seed: int = 0) -> list[Example]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = "Question: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(15, 40))) + "\nAnswer:"
        c = " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30)))
        out.append(Example(index=i, source="synthetic.jsonl", format="prompt_completion", prompt=p, completion=c,
                           raw={"prompt": p, "completion": c}))  # fmt: skip
    return out


def bench(n: int) -> tuple[float, float, int]:
    tok = load_tokenizer(TOK)
    rows = synth(n)
    t0 = time.perf_counter()
    settings = FormatSettings(max_length=512)
    formatted = format_examples(rows, tok, settings)
    t1 = time.perf_counter()
    ctx = DiagnoseContext(train=rows, formatted=formatted, tokenizer=tok, format_settings=settings,
                          train_file="synthetic.jsonl")  # fmt: skip
    findings, _ = run_rules(ctx, select_rules(["D"], []))
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, len(findings)


def rules_only(n: int) -> float:
    """Seconds for the character-level dataset rules alone (no tokenizer): for A/B runs of two source trees on the
    same machine state (PYTHONPATH=OTHER_TREE/src python bench/bench_diagnose.py --rules-only 50000)."""
    ctx = DiagnoseContext(train=synth(n), train_file="synthetic.jsonl")
    rules = [r for r in select_rules(["D"], []) if all(need == "train" for need in r.needs)]
    t0 = time.perf_counter()
    run_rules(ctx, rules)
    return time.perf_counter() - t0


def main(argv: list[str]) -> None:
    if "--rules-only" in argv:
        for n in [int(a) for a in argv if a != "--rules-only"] or [50_000]:
            print(f"{n:,} rows: character-level dataset rules {rules_only(n):.2f} s")
        return
    sizes = [int(a) for a in argv] or [10_000, 100_000]
    print("| rows | tokenize s | rules s | total s | rows/s | findings |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        tok_s, rules_s, nf = bench(n)
        total = tok_s + rules_s
        print(f"| {n:,} | {tok_s:.2f} | {rules_s:.2f} | {total:.2f} | {n / total:,.0f} | {nf} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
