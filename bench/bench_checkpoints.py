"""Multi-checkpoint attribution: planted-fault recovery with the final adapter only versus every saved checkpoint.

    python bench/bench_checkpoints.py                    # train (if needed), then attribute with last and all
    python bench/bench_checkpoints.py --each             # also each checkpoint alone
    python bench/bench_checkpoints.py --train-only       # just the training run with checkpoints
    python bench/bench_checkpoints.py --retrain --save-steps 51

Retrains the bundled stories260K example exactly as build_example.py does (examples/stories260k/train.yaml, 402 rows
of data/train.jsonl, eval file data/eval.jsonl: 204 steps) but with ``save_steps`` (default 41: checkpoint-41, -82,
-123, -164 and -204, as the trainer also saves at the last step; five states) into bench/work/checkpoints/run. Then runs
``gradian.attribute(run, checkpoints="last")`` and ``checkpoints="all"`` (combined score = sum over checkpoints of
weight_c x harm_c, weights from ``gradian.run.checkpoints.select_checkpoints``) and reports, for the 36 planted
harmful rows (data/planted.json: harmful_cluster), ROC-AUC and precision@36 of each ranking. Writes
bench/results/checkpoints.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import common  # noqa: E402
from bench_quality import roc_auc  # noqa: E402

EX = common.EX
WORK = HERE / "work" / "checkpoints"
RESULTS = HERE / "results" / "checkpoints.json"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train_run(save_steps: int, retrain: bool = False) -> dict:
    """The bundled example's fine-tune with checkpoint-* dirs every ``save_steps`` steps, in WORK/run (reused when
    it was trained with the same save_steps)."""
    from gradian.train import read_config_file, train_lora

    run = WORK / "run"
    marker = run / "training_args.json"
    if not retrain and marker.is_file() and json.loads(marker.read_text()).get("save_steps") == save_steps:
        print(f"reusing {run} (--retrain to train again)", flush=True)
        seconds = None
    else:
        if run.exists():
            shutil.rmtree(run)
        cfg = read_config_file(EX / "train.yaml") | {"save_steps": save_steps}
        t0 = time.perf_counter()
        train_lora(EX / "base", EX / "data" / "train.jsonl", run, eval_path=EX / "data" / "eval.jsonl", config=cfg,
                   progress=False, quiet=True)  # fmt: skip
        seconds = time.perf_counter() - t0
    state = json.loads((run / "trainer_state.json").read_text())
    shipped = EX / "run" / "adapter_model.safetensors"
    info = {
        "run": str(run.relative_to(common.ROOT)),
        "save_steps": save_steps,
        "global_step": state["global_step"],
        "checkpoints": sorted((p.name for p in run.glob("checkpoint-*")), key=lambda n: int(n.split("-")[1])),
        "train_seconds": None if seconds is None else round(seconds, 1),
        # true when this machine's library versions reproduce the shipped examples/stories260k/run byte for byte
        "final_equals_shipped_adapter": shipped.is_file() and _sha(run / "adapter_model.safetensors") == _sha(shipped),
    }
    print(f"trained: {info['global_step']} steps, {', '.join(info['checkpoints'])} + final adapter", flush=True)
    return info


def weights(spec: str) -> list[dict]:
    """What ``select_checkpoints`` picks for ``spec`` on the bench run (path, step, steps, lr, weight, how)."""
    from gradian.run import discover
    from gradian.run.checkpoints import select_checkpoints

    choices, notes = select_checkpoints(discover(WORK / "run"), spec)
    for n in notes:
        print(f"  note: {n}", flush=True)
    return [{"path": str(c.path.relative_to(WORK)), "step": c.step, "steps": c.steps, "lr": c.lr,
             "weight": c.weight, "how": c.how} for c in choices]  # fmt: skip


def attribute(spec: str, planted: np.ndarray) -> dict:
    import gradian

    out = WORK / f"attr_{spec.replace(',', '_')}"
    t0 = time.perf_counter()
    try:
        res = gradian.attribute(run=WORK / "run", out=out, train=EX / "data" / "train.jsonl",
                                eval=EX / "data" / "eval.jsonl", checkpoints=spec)  # fmt: skip
    except TypeError as e:
        if "checkpoints" in str(e):
            raise SystemExit("gradian.attribute has no checkpoints= keyword yet (multi-checkpoint attribution)") from e
        raise
    seconds = time.perf_counter() - t0
    if res.scores is None:
        raise SystemExit(f"--checkpoints {spec}: no query items ({res.notes})")
    s = np.nan_to_num(np.asarray(res.scores, dtype=float), nan=-np.inf)  # rows the trainer dropped rank last
    k = int(planted.sum())
    top = np.argsort(-s, kind="stable")[:k]
    return {
        "checkpoints": spec,
        "states": weights(spec),
        "auc": roc_auc(s, planted),
        "p_at_k": float(planted[top].mean()),
        "k": k,
        "n_queries": len(res.settings.get("query_items", res.regressed)),
        "seconds": round(seconds, 1),
    }


def print_table(rows: list[dict]) -> None:
    print("\n| --checkpoints | states (weight) | ROC-AUC | precision@K (K) | queries | seconds |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        states = ", ".join(f"{Path(s['path']).name}@{s['step']} ({s['weight']:.2f})" for s in r["states"])
        print(f"| {r['checkpoints']} | {states} | {r['auc']:.3f} | {r['p_at_k']:.3f} ({r['k']}) | {r['n_queries']} "
              f"| {r['seconds']:.1f} |", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save-steps", type=int, default=41, help="checkpoint every N of the 204 steps (default 41)")
    ap.add_argument("--retrain", action="store_true", help="train again even if bench/work has the run")
    ap.add_argument("--train-only", action="store_true", help="stop after training (and print the weights)")
    ap.add_argument("--each", action="store_true", help="also attribute through each checkpoint alone")
    ap.add_argument("--threads", type=int, default=0, help="torch threads for attribution (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    info = train_run(args.save_steps, args.retrain)
    if args.train_only:
        for spec in ("last", "all"):
            print(f"--checkpoints {spec}:")
            for s in weights(spec):
                print(f"  {s['path']}: step {s['step']}, {s['steps']} steps, weight {s['weight']:.4f} ({s['how']})")
        return
    planted = np.zeros(json.loads((EX / "data" / "planted.json").read_text())["n_train_rows"], bool)
    planted[json.loads((EX / "data" / "planted.json").read_text())["harmful_cluster"]["indices"]] = True
    specs = ["last", "all"]
    if args.each:
        specs += [Path(s["path"]).name for s in weights("all") if s["path"] != "run"]  # checkpoint-N
    rows = []
    for spec in specs:
        print(f"attributing with --checkpoints {spec} ...", flush=True)
        rows.append(attribute(spec, planted))
    common.write_json(RESULTS, {"train": info, "rows": rows})
    print_table(rows)


if __name__ == "__main__":
    main()
