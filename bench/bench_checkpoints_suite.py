"""`--checkpoints all` against the final adapter on planted-fault suite runs (bench/scenarios): does combining
checkpoints rank the planted rows better where the final adapter ranks them worst?

    python bench/bench_checkpoints_suite.py spread_s0_f10 spread_s1_f10 mislabel_s0_f10 repetition_s0_f05 \
        pronoun_s1_f05

For each run (built first by ``bench/bench_verdict.py run --only NAME``), retrains it with the same config and seed
plus ``save_steps`` = a third of its steps (checkpoint-N at each third; the final adapter must come out byte-identical
to the run's, or the run is reported as not reproduced), then runs the real CLI twice on it,
``gradian attribute --adapter <out> --checkpoints last|all --query all --token-profiles 0``, and scores each ranking
over the eval items the default regression rule calls regressed (as ``calibrate_verdict.py`` does): ROC-AUC and
precision@K of the planted rows. Work in bench/work/checkpoints_suite/, results in
bench/results/checkpoints_suite.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))
import common  # noqa: E402
from bench_quality import roc_auc  # noqa: E402

RUNS = HERE / "work" / "scenarios"
WORK = HERE / "work" / "checkpoints_suite"
RESULTS = HERE / "results" / "checkpoints_suite.json"
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))


def retrain(name: str) -> tuple[Path, dict]:
    """The suite run ``name`` trained again into WORK/name/run with checkpoints at each third of its steps."""
    from gradian.train import read_config_file, train_lora

    src, d = RUNS / name, WORK / name
    if not (src / "attr" / "report.json").is_file():
        raise SystemExit(f"{src} is not built: python bench/bench_verdict.py run --only {name}")
    d.mkdir(parents=True, exist_ok=True)
    cfg = read_config_file(src / "config.yaml")
    rows = sum(1 for line in (src / "train.jsonl").read_text("utf-8").splitlines() if line.strip())
    steps = -(-rows // (cfg["batch_size"] * cfg.get("grad_accum", 1))) * cfg["epochs"]
    cfg["save_steps"] = max(1, steps // 3)
    run = d / "run"
    if not (run / "adapter_model.safetensors").is_file():
        import torch

        torch.set_num_threads(1)
        planted = json.loads((src / "planted.json").read_text())
        train_lora(str(ROOT / planted["base"]), src / "train.jsonl", run, config=cfg, progress=False, quiet=True)
    same = _sha(run / "adapter_model.safetensors") == _sha(src / "run" / "adapter_model.safetensors")
    return run, {"steps": steps, "save_steps": cfg["save_steps"], "reproduced": same,
                 "checkpoints": sorted(p.name for p in run.glob("checkpoint-*"))}  # fmt: skip


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def attribute(name: str, run: Path, spec: str) -> dict:
    """`gradian attribute --checkpoints spec` (real CLI, one thread), scored over the regressed items."""
    from gradian.attribute.regression import RegressionRule, call_regressions

    src, out = RUNS / name, WORK / name / f"attr_{spec}"
    planted = json.loads((src / "planted.json").read_text())
    seconds = None
    if not (out / "report.json").is_file():
        cmd = [sys.executable, "-m", "gradian", "attribute", "--base", str(ROOT / planted["base"]), "--adapter",
               str(run), "--train", str(src / "train.jsonl"), "--eval", str(src / "eval.jsonl"), "--out", str(out),
               "--query", "all", "--token-profiles", "0", "--checkpoints", spec, "--no-progress"]  # fmt: skip
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, cwd=ROOT)
        seconds = round(time.perf_counter() - t0, 1)
        if proc.returncode:
            raise SystemExit(f"{name} --checkpoints {spec} failed:\n{proc.stderr[-2000:]}")
    rep = json.loads((out / "report.json").read_text())
    ev = rep["eval"]
    call = call_regressions(np.array([e["base_nll"] for e in ev], float),
                            np.array([e["finetuned_nll"] for e in ev], float), RegressionRule())  # fmt: skip
    queried = [int(i) for i in rep["settings"]["query_items"]]
    pick = [k for k, i in enumerate(queried) if call.regressed[i]]
    S = np.load(out / "item_scores.npy").astype(float)
    cols = np.load(out / "embeddings_index.npy").astype(int)
    s = S[pick].sum(0)
    y = np.isin(cols, planted["rows"])
    top = np.argsort(-s, kind="stable")[: int(y.sum())]
    states = [n for n in rep["notes"] if n.startswith("combined over checkpoints")]
    return {"auc": roc_auc(s, y), "p_at_k": float(y[top].mean()), "regressed": len(pick), "seconds": seconds,
            "states": states[0] if states else None}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="suite run names (bench/work/scenarios/NAME)")
    args = ap.parse_args()
    rows = []
    for name in args.runs:
        run, info = retrain(name)
        row = {"run": name, **info, **{spec: attribute(name, run, spec) for spec in ("last", "all")}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    common.write_json(RESULTS, {"rows": rows})
    print("\n| run | checkpoints | reproduced | last: AUC / P@K | all: AUC / P@K |\n|---|---|---|---:|---:|")
    for r in rows:
        last, every = r["last"], r["all"]
        print(
            f"| {r['run']} | {', '.join(r['checkpoints'])} | {'yes' if r['reproduced'] else 'no'} | "
            f"{last['auc']:.3f} / {last['p_at_k']:.2f} | {every['auc']:.3f} / {every['p_at_k']:.2f} |"
        )


if __name__ == "__main__":
    main()
