"""Throughput of `gradian diagnose` on synthetic rows, WITH tokenization (the bundled stories260K tokenizer) and
every dataset rule (near-duplicate MinHash included). Prints one markdown table row per size.

    python bench/bench_diagnose.py            # 10,000 and 100,000 rows
    python bench/bench_diagnose.py 5000
    python bench/bench_diagnose.py --rules-only 50000   # character-level rules only (A/B of two trees)
    python bench/bench_diagnose.py --ab OLD/src NEW/src --repeats 3 100000   # the two trees alternated

`--ab` runs this script once per tree and repeat, alternating the trees so both see the same machine state, prints
each run with the 1-minute load average before and after it, and the median per tree.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
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


def bench(n: int) -> tuple[float, float, int, float]:
    """Wall seconds of tokenizing and of the rules, the findings, and the CPU seconds of both (all threads: on a
    shared machine the CPU time moves less with other jobs than the wall time)."""
    tok = load_tokenizer(TOK)
    rows = synth(n)
    c0 = time.process_time()
    t0 = time.perf_counter()
    settings = FormatSettings(max_length=512)
    formatted = format_examples(rows, tok, settings)
    t1 = time.perf_counter()
    ctx = DiagnoseContext(train=rows, formatted=formatted, tokenizer=tok, format_settings=settings,
                          train_file="synthetic.jsonl")  # fmt: skip
    findings, _ = run_rules(ctx, select_rules(["D"], []))
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, len(findings), time.process_time() - c0


def rules_only(n: int) -> float:
    """Seconds for the character-level dataset rules alone (no tokenizer): for A/B runs of two source trees on the
    same machine state (PYTHONPATH=OTHER_TREE/src python bench/bench_diagnose.py --rules-only 50000)."""
    ctx = DiagnoseContext(train=synth(n), train_file="synthetic.jsonl")
    rules = [r for r in select_rules(["D"], []) if all(need == "train" for need in r.needs)]
    t0 = time.perf_counter()
    run_rules(ctx, rules)
    return time.perf_counter() - t0


def ab(trees: list[str], repeats: int, n: int) -> None:
    """Alternate the source trees (PYTHONPATH) run by run; print every run and the median total per tree."""
    runs: dict[str, list[tuple[float, ...]]] = {t: [] for t in trees}
    for r in range(repeats):
        for tree in trees:
            before = os.getloadavg()[0]
            env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"}
            out = subprocess.run([sys.executable, __file__, str(n)], env=env, capture_output=True, text=True)
            out.check_returncode()
            cells = [c.strip() for c in out.stdout.strip().splitlines()[-1].strip("|").split("|")]
            tok_s, rules_s, total, cpu = (float(c) for c in [*cells[1:4], cells[6]])
            runs[tree].append((tok_s, rules_s, total, cpu))
            print(f"run {r + 1} {tree}: tokenize {tok_s:.2f} s, rules {rules_s:.2f} s, total {total:.2f} s, "
                  f"{n / total:,.0f} rows/s, CPU {cpu:.2f} s (load {before:.2f} -> {os.getloadavg()[0]:.2f})",
                  flush=True)  # fmt: skip
    for tree, v in runs.items():
        tok_s, rules_s, total, cpu = (statistics.median(x[i] for x in v) for i in range(4))
        print(f"median {tree}: tokenize {tok_s:.2f} s, rules {rules_s:.2f} s, total {total:.2f} s, "
              f"{n / total:,.0f} rows/s, CPU {cpu:.2f} s ({len(v)} runs)")  # fmt: skip


def main(argv: list[str]) -> None:
    if "--ab" in argv:
        i = argv.index("--ab")
        trees, rest = argv[i + 1 : i + 3], argv[:i] + argv[i + 3 :]
        repeats = int(rest[rest.index("--repeats") + 1]) if "--repeats" in rest else 3
        sizes = [int(a) for k, a in enumerate(rest) if a.isdigit() and (k == 0 or rest[k - 1] != "--repeats")]
        ab(trees, repeats, sizes[0] if sizes else 100_000)
        return
    if "--rules-only" in argv:
        for n in [int(a) for a in argv if a != "--rules-only"] or [50_000]:
            print(f"{n:,} rows: character-level dataset rules {rules_only(n):.2f} s")
        return
    sizes = [int(a) for a in argv] or [10_000, 100_000]
    print("| rows | tokenize s | rules s | total s | rows/s | findings | CPU s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        tok_s, rules_s, nf, cpu = bench(n)
        total = tok_s + rules_s
        row = f"| {n:,} | {tok_s:.2f} | {rules_s:.2f} | {total:.2f} | {n / total:,.0f} | {nf} | {cpu:.2f} |"
        print(row, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
