"""What the token profiles cost a user: `gradian attribute` as a whole process with its defaults (the token pass over
the top 30% of the rows runs when the draft verdict names a content group) against the same command with
`--token-profiles 0`, on the bundled example and on planted-fault runs of the suite (bench/work/scenarios, made by
`python bench/bench_verdict.py run`).

    OMP_NUM_THREADS=1 python bench/bench_token_profiles.py                  # the bundled example + the default runs
    OMP_NUM_THREADS=1 python bench/bench_token_profiles.py --runs pronoun_s1_f20 entity_s0_f10

Each (run, mode) pair is timed twice, interleaved, as a subprocess from start to exit (one thread; a fresh --out
each time, so no stored gradients are reused); the result keeps the median wall time, the command's own
``train_pass_s`` and ``token_harm_s`` (the whole token pass: the report's 25 rows, and the profiled rows when it
ran), whether profiles were written, and the verdict's rows. Writes bench/results/token_profiles_cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples" / "stories260k"
SCENARIOS = ROOT / "bench" / "work" / "scenarios"
RUNS = ("pronoun_s1_f20", "entity_s0_f10", "two_groups_s6_f12_n420", "mislabel_s0_f10", "no_eos_s0_f10")
MODES = {"default": [], "off": ["--token-profiles", "0"]}


def command(run: str, out: Path) -> list[str]:
    """`gradian attribute` on the bundled example or on a suite run (its base, adapter, files, config and logs)."""
    head = [sys.executable, "-m", "gradian", "attribute", "--out", str(out), "--no-progress"]
    if run == "bundled":
        return head + ["--run", str(EX / "run"), "--base", str(EX / "base"), "--train", str(EX / "data/train.jsonl"),
                       "--eval", str(EX / "data/eval.jsonl")]  # fmt: skip
    d = SCENARIOS / run
    base = json.loads((d / "planted.json").read_text())["base"]
    return head + ["--base", str(ROOT / base), "--adapter", str(d / "run"), "--train", str(d / "train.jsonl"),
                   "--eval", str(d / "eval.jsonl"), "--config", str(d / "run" / "training_args.json"),
                   "--logs", str(d / "run" / "trainer_state.json")]  # fmt: skip


def once(run: str, mode: str) -> dict:
    """One timed process; its timings, whether it wrote token profiles, and its verdict."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        t = time.perf_counter()
        proc = subprocess.run(command(run, out) + MODES[mode], env=env, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"{run} {mode}: rc {proc.returncode}\n{proc.stderr[-2000:]}")
        rep = json.loads((out / "report.json").read_text())
        v = rep["verdict"]
        return {
            "wall_s": wall,
            "train_pass_s": rep["timings"].get("train_pass_s"),
            "token_harm_s": rep["timings"].get("token_harm_s"),
            "profiles": (out / "token_profiles.json").is_file(),
            "profile_rows": rep["settings"].get("token_profile_rows", 0),
            "n_rows": len(rep["examples"]),
            "verdict": f"{v['kind']} {v['cause']}",
            "drop_rows": len(v["drop_rows"]),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", default=["bundled", *RUNS], help="'bundled' and/or suite run names")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    out: dict[str, dict] = {}
    for run in args.runs:
        if run != "bundled" and not (SCENARIOS / run).is_dir():
            raise SystemExit(f"{SCENARIOS / run} is missing: python bench/bench_verdict.py run --only {run}")
        got: dict[str, list[dict]] = {m: [] for m in MODES}
        for _ in range(args.repeats):
            for m in MODES:
                got[m].append(once(run, m))
        row = {}
        for m, rs in got.items():
            row[m] = rs[0] | {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "train_pass_s")}
            row[m]["token_harm_s"] = statistics.median(r["token_harm_s"] or 0.0 for r in rs)
        d, o = row["default"], row["off"]
        row["extra_wall_over_train_pass"] = (d["wall_s"] - o["wall_s"]) / o["train_pass_s"]
        row["extra_token_s_over_train_pass"] = (d["token_harm_s"] - o["token_harm_s"]) / o["train_pass_s"]
        out[run] = row
        print(f"{run:26s} profiles {d['profiles']!s:5s} rows {d['profile_rows']:4d}/{d['n_rows']:4d} "
              f"wall {o['wall_s']:6.1f} -> {d['wall_s']:6.1f} s, train pass {o['train_pass_s']:5.2f} s, "
              f"token pass {o['token_harm_s']:5.2f} -> {d['token_harm_s']:5.2f} s "
              f"({row['extra_token_s_over_train_pass']:.2f}x the train pass); {d['verdict']}, {d['drop_rows']} rows "
              f"(off: {o['drop_rows']})", flush=True)  # fmt: skip
    path = ROOT / "bench" / "results" / "token_profiles_cost.json"
    cmd = "OMP_NUM_THREADS=1 python bench/bench_token_profiles.py" + (
        "" if args.runs == ["bundled", *RUNS] else " --runs " + " ".join(args.runs))  # fmt: skip
    uptime = shutil.which("uptime") and subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    path.write_text(json.dumps({"command": cmd, "uptime_after": uptime, "runs": out}, indent=1) + "\n", "utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
