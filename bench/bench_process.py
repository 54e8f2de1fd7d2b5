"""Whole processes, as users run them: the `gradian attribute` CLI against a floor process, bergson's CLI and a
kronfluence script.

    python bench/bench_process.py --rows 1024 --queries 16              # prepare, then time each as a subprocess
    python bench/bench_process.py --rows 1024 --only bergson --results process_rows1024_bergson.json   # one of them
    python bench/bench_process.py --rows 1024 --merge bench/results/process_rows1024_{floor,gradian,bergson}.json \
        --results process_rows1024.json                                # side-by-side invocations as one result

The model is bench/common.py's "wide" Llama (hidden 192, 12 layers, about 5.4M parameters, vocab 512, the bundled
stories260K tokenizer) saved as a base folder, with a LoRA adapter (r=8 on all 7 projections, B random) saved by PEFT.
Training rows are the bundled example's rows repeated to ``--rows``; the queries are the first ``--queries`` eval
items (``--query all``). Each process is timed from its start to its exit (imports, model load, tokenization,
everything):

* ``gradian``: ``python -m gradian attribute --base B --adapter A --train T --eval E --out O --query all`` (also runs
  diagnose and writes the report, as the command does);
* ``floor``: the same imports (torch, transformers, peft, gradian's formatting), the same model load and
  tokenization, then one training-style forward+backward epoch over the rows (batch size 8, rows longest first so a
  batch pads little, as gradian's training pass and bergson's token batches run): what any gradient-based
  attribution must at least do; ``floor_file``: the same epoch in file order (each batch padded to its longest row;
  the floor before gradian batched by length);
* ``kronfluence``: the same load and rows, then kronfluence EK-FAC (factors + pairwise scores, empirical Fisher,
  its default dtypes) on the same LoRA modules (``bench/common.py: kronfluence_scores``), rows longest first with
  per-batch padding;
* ``bergson``: ``python -m bergson ekfac RUN --model ADAPTER ...`` (bergson 2.5.1's CLI: EK-FAC, empirical Fisher,
  one score column per query; its inputs and the one extra import it needs: ``process_peers.py``).

Each result records ``uptime`` before and after each process (the load on the shared cores) and the Spearman
correlation of per-row scores between the attribution processes it ran or merged (``spearman``: of the query-mean
score and the mean over queries of each query's; Gradian's harm negated into influence). Results go to
bench/results/process_rows<ROWS>.json; docs/benchmarks.md quotes them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import process_peers

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EX = ROOT / "examples" / "stories260k"


def prepare(work: Path, rows: int, queries: int) -> None:
    """Base folder, adapter, training and eval files under ``work`` (built once)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    if (work / "ready").is_file():
        return
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=512, hidden_size=192, intermediate_size=512, num_hidden_layers=12, num_attention_heads=6,
        num_key_value_heads=6, max_position_embeddings=256, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    base = LlamaForCausalLM(cfg)
    base.save_pretrained(work / "base")
    for f in (EX / "base").glob("tok*"):
        shutil.copy(f, work / "base" / f.name)
    shutil.copy(EX / "base" / "special_tokens_map.json", work / "base")
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=targets, task_type="CAUSAL_LM"))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    model.save_pretrained(work / "adapter")
    src = (EX / "data" / "train.jsonl").read_text().splitlines(keepends=True)
    (work / "train.jsonl").write_text("".join((src * (rows // len(src) + 1))[:rows]))
    ev = (EX / "data" / "eval.jsonl").read_text().splitlines(keepends=True)
    (work / "eval.jsonl").write_text("".join(ev[:queries]))
    (work / "ready").write_text("ok")


def load_rows(work: Path):
    """The floor's and kronfluence's start: the same imports, model load and formatted rows as gradian's."""
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from peft import PeftModel  # noqa: F401

    from gradian.attribute.loading import load
    from gradian.data import format_examples, load_examples
    from gradian.data.types import FormatSettings

    lm = load(str(work / "base"), work / "adapter", device="cpu", dtype="fp32")
    fs = FormatSettings()
    fx = format_examples(load_examples(work / "train.jsonl"), lm.tokenizer, fs)
    qfx = format_examples(load_examples(work / "eval.jsonl"), lm.tokenizer, FormatSettings(add_eos=False))
    return lm.model, [f for f in fx if not f.dropped], qfx


def floor(work: Path, by_length: bool = True) -> None:
    sys.path.insert(0, str(HERE))
    import common

    model, fx, _ = load_rows(work)
    common.floor_pass(model, fx, bs=8, by_length=by_length)


def kronfluence(work: Path) -> None:
    sys.path.insert(0, str(HERE))
    import common
    import numpy as np

    model, fx, qfx = load_rows(work)
    scores = common.kronfluence_scores(model, fx, qfx, bs=8, workdir=work / "kf", by_length=True)[0]  # queries x rows
    np.save(work / "kronfluence_scores.npy", scores.numpy().T)


def timed_process(argv: list[str], env: dict[str, str], log: Path | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds user + system) of one child process; its stdout and stderr go to ``log``. On a
    shared machine the CPU seconds of a one-thread process are the steadier measure of its work; wall time includes
    waiting for a core."""
    import resource

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def scores_agreement(work: Path, rows: int, names: list[str]) -> dict:
    """Spearman of per-row scores between the attribution processes of this run (process_peers.agreement)."""
    readers = {
        "gradian": lambda: process_peers.gradian_scores(work / "out", rows),
        "bergson": lambda: process_peers.bergson_scores(work),
        "kronfluence": lambda: np.load(work / "kronfluence_scores.npy"),
    }
    scores = {n: readers[n]() for n in names if n in readers}
    return process_peers.agreement(scores) if len(scores) > 1 else {}


def uptime() -> str:
    """The machine's `uptime` line (load averages: how contended the shared cores were)."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def commands(args: argparse.Namespace, work: Path) -> tuple[dict[str, list[str]], dict[str, dict[str, str]]]:
    """Each process's argv and environment."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    py = sys.executable
    cmds = {
        "gradian": [py, "-m", "gradian", "attribute", "--base", str(work / "base"), "--adapter", str(work / "adapter"),
                    "--train", str(work / "train.jsonl"), "--eval", str(work / "eval.jsonl"), "--query", "all",
                    "--out", str(work / "out"), "--no-progress"],
        "floor": [py, __file__, "--rows", str(args.rows), "--work", str(args.work), "--role", "floor"],
        "floor_file": [py, __file__, "--rows", str(args.rows), "--work", str(args.work), "--role", "floor_file"],
        "kronfluence": [py, __file__, "--rows", str(args.rows), "--work", str(args.work), "--role", "kronfluence"],
        "bergson": process_peers.bergson_argv(py, work),
    }  # fmt: skip
    extra = str(HERE / "work" / "bergson-extra")  # torchopt for bergson's CLI import (see process_peers.py)
    envs = {n: env for n in cmds}
    envs["bergson"] = env | {"PYTHONPATH": os.pathsep.join(p for p in (extra, env.get("PYTHONPATH")) if p)}
    return cmds, envs


OUTPUTS = {"gradian": "out", "bergson": "bergson_run", "kronfluence": "kf"}  # removed before each run: no reuse


def summarise(res: dict, work: Path) -> dict:
    """Add the ratios (per unit) and the ranking agreement of the processes in ``res``."""
    for unit in ("wall_s", "cpu_s"):
        w = res[unit]
        if "gradian" in w and "floor" in w:
            res[f"gradian_over_floor_{unit[:-2]}"] = w["gradian"] / w["floor"]
        if "gradian" in w and "floor_file" in w:
            res[f"gradian_over_floor_file_{unit[:-2]}"] = w["gradian"] / w["floor_file"]
        for peer in ("kronfluence", "bergson"):
            if "gradian" in w and peer in w:
                res[f"{peer}_over_gradian_{unit[:-2]}"] = w[peer] / w["gradian"]
    res["spearman"] = scores_agreement(work, res["rows"], list(res["cpu_s"]))
    return res


def merge(paths: list[Path], work: Path) -> dict:
    """One result from several (processes of the same rows run as separate invocations, e.g. side by side)."""
    parts = [json.loads(p.read_text()) for p in paths]
    res = {k: parts[0][k] for k in ("rows", "queries", "threads")}
    res["command"] = [p["command"] for p in parts]
    for key in ("wall_s", "cpu_s", "uptime"):
        res[key] = {k: v for p in parts for k, v in p.get(key, {}).items()}
    return summarise(res, work / f"rows{res['rows']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--queries", type=int, default=16)
    ap.add_argument("--work", type=Path, default=HERE / "work" / "process")
    ap.add_argument("--only", nargs="*", default=["gradian", "floor", "floor_file", "bergson", "kronfluence"])
    ap.add_argument("--results", default=None, help="results file name (default process_rows<ROWS>.json)")
    ap.add_argument("--merge", nargs="*", type=Path, help="merge these results files into --results")
    roles = ["floor", "floor_file", "kronfluence"]
    ap.add_argument("--role", choices=roles, help=argparse.SUPPRESS)  # a timed child process
    args = ap.parse_args()
    work = args.work / f"rows{args.rows}"
    if args.role in ("floor", "floor_file"):
        return floor(work, by_length=args.role == "floor")
    if args.role == "kronfluence":
        return kronfluence(work)
    if args.merge:
        res = merge(args.merge, args.work)
    else:
        prepare(work, args.rows, args.queries)
        cmds, envs = commands(args, work)
        res = {"rows": args.rows, "queries": args.queries, "threads": os.environ.get("OMP_NUM_THREADS")}
        res |= {"command": " ".join(["python", "bench/bench_process.py", *sys.argv[1:]]), "wall_s": {}, "cpu_s": {}}
        res["uptime"] = {}
        for name in args.only:
            if name in OUTPUTS:
                shutil.rmtree(work / OUTPUTS[name], ignore_errors=True)
            before = uptime()
            res["wall_s"][name], res["cpu_s"][name] = timed_process(cmds[name], envs[name], work / f"{name}.log")
            res["uptime"][name] = {"before": before, "after": uptime()}
            print(f"{name}: {res['wall_s'][name]:.1f} s wall, {res['cpu_s'][name]:.1f} s CPU", flush=True)
        summarise(res, work)
    print(json.dumps(res, indent=1))
    out = HERE / "results" / (args.results or f"process_rows{res['rows']}.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
