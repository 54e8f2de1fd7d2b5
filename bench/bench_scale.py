"""Scale: peak RSS and store size of `gradian attribute` as the training file grows (10k, 30k, 100k rows).

Each size runs in a fresh process on the bundled stories260K fine-tune with a synthetic training file: the bundled
training rows repeated, each with its row number in the prompt (so every row is distinct). Two measurements per size:

* ``attribute``: the Python API ``gradian.attribute(..., out=...)``: the attribution itself (tokenize to disk, the
  training pass into the store, streamed scoring, clustering embedding) — the part that must stay bounded;
* ``cli``: then the whole `gradian attribute` command on the same ``--out`` (it reuses the stored gradients and the
  tokenized rows, so it measures what the command adds: `gradian diagnose`, which holds every row in memory, see
  docs/limitations.md, and the report).

    python bench/bench_scale.py --rows 10000 30000 100000 [--proj-dim 8] [--what attribute cli]

Peak RSS is the process's ``ru_maxrss``; the store bytes are what ``<out>/grads`` holds afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples" / "stories260k"
RESULTS = ROOT / "bench" / "results"


def synth_train(path: Path, n: int) -> None:
    rows = [json.loads(line) for line in (EX / "data" / "train.jsonl").read_text().splitlines()]
    with open(path, "w") as f:
        for i in range(n):
            r = dict(rows[i % len(rows)])
            r["prompt"] = f"Story {i}. " + r["prompt"]
            r.pop("id", None)
            f.write(json.dumps(r) + "\n")


def _child(kind: str, train: Path, out: Path, proj_dim: int, batch: int, threads: int) -> dict:
    """Run one measurement in a fresh interpreter and return its peak RSS and wall time."""
    code = f"""
import json, resource, sys, time
t = time.perf_counter()
if {kind!r} == "attribute":
    import gradian
    gradian.attribute(run={str(EX / "run")!r}, base={str(EX / "base")!r}, train={str(train)!r},
                      eval={str(EX / "data" / "eval.jsonl")!r}, out={str(out)!r}, proj_dim={proj_dim},
                      batch_size={batch}, query="all")
else:
    from gradian.cli import main
    sys.argv = ["gradian", "attribute", "--run", {str(EX / "run")!r}, "--base", {str(EX / "base")!r},
                "--train", {str(train)!r}, "--eval", {str(EX / "data" / "eval.jsonl")!r}, "--out", {str(out)!r},
                "--proj-dim", "{proj_dim}", "--batch-size", "{batch}", "--query", "all", "--no-progress"]
    try:
        main()
    except SystemExit as e:
        assert not e.code, e.code
print(json.dumps({{"wall_s": time.perf_counter() - t,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS=str(threads))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(proc.stdout[-2000:] + proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    ap.add_argument("--proj-dim", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--what", nargs="+", default=["attribute", "cli"], choices=["attribute", "cli"])
    ap.add_argument("--threads", type=int, default=1, help="torch threads in each measured process")
    ap.add_argument("--results", default="scale.json", help="file name under bench/results")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="gradian-scale-") as tmp:
        for n in args.rows:
            train = Path(tmp) / f"train_{n}.jsonl"
            synth_train(train, n)
            out = Path(tmp) / f"out_{n}"
            for kind in args.what:
                m = _child(kind, train, out, args.proj_dim, args.batch_size, args.threads)
                store = sum(f.stat().st_size for f in (out / "grads").rglob("*") if f.is_file())
                tokens = sum(f.stat().st_size for f in (out / "tokens").rglob("*") if f.is_file())
                rep = json.loads((out / "report.json").read_text())
                r = {"rows": n, "kind": kind, **m, "store_bytes": store, "store_bytes_per_row": store / n,
                     "tokens_bytes": tokens, "scored": len(rep["examples"]),
                     "floats_per_row": rep["settings"]["stored_floats_per_row"]}  # fmt: skip
                r["train_rows_computed"] = rep["settings"].get("train_rows_computed")
                r["timings"] = rep.get("timings")
                results.append(r)
                print(json.dumps(r), flush=True)
            shutil.rmtree(out)
            train.unlink()
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {"proj_dim": args.proj_dim, "batch_size": args.batch_size, "cpu": os.cpu_count(), "threads": args.threads,
            "ru_maxrss_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "when": time.strftime("%Y-%m-%d %H:%M")}  # fmt: skip
    meta["cache_bytes"] = os.environ.get("GRADIAN_CACHE_BYTES", "default (1 GiB)")
    (RESULTS / args.results).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print("\n| rows | measured | wall (s) | peak RSS (MB) | store (MB) | store bytes/row |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['rows']:,} | {r['kind']} | {r['wall_s']:.0f} | {r['peak_rss_mb']:.0f} | "
              f"{r['store_bytes'] / 2**20:.1f} | {r['store_bytes_per_row']:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
