"""GradianCallback as whole processes, side by side, on the bundled stories260K example trained by the real TRL
``SFTTrainer`` (bench/callback_train.py: the example's config, 402 rows, 4 epochs, CPU, one thread):

* training: ``python bench/callback_train.py OUT`` against the same with ``--callback``, ``--reps`` times each,
  alternating which goes first;
* attribution: ``gradian attribute --run CALLBACK_RUN ...`` (from the recorded store) against the post-hoc command
  ``gradian attribute --run PLAIN_RUN ...`` (its own pass), each into a fresh ``--out``, alternating;
* agreement on the callback run's adapter: the recorded ranking against ``--gradients pass`` on the same adapter
  (Spearman of the harm, top-k overlap) and the planted rows' AUC of each (examples/stories260k/data/planted.json).

    OMP_NUM_THREADS=1 python bench/bench_callback.py [--reps 3] [--results callback.json]
    OMP_NUM_THREADS=1 python bench/bench_callback.py --repeat 10 --epochs 1 --reps 1 --attr-reps 2 \
        --results callback_rows4020.json      # a 10x larger file (timing only: no planted-row figures)
    OMP_NUM_THREADS=1 python bench/bench_callback.py --setup smollm2 --epochs 2 --reps 1 \
        --results callback_smollm2.json       # SmolLM2-135M-Instruct on the real-model suite's refusal rows

Each process is timed from start to exit (wall and CPU seconds; on the shared cores CPU time is the steadier one),
with ``uptime`` before and after. Results: bench/results/callback.json and .md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from statistics import median

import numpy as np
from bench_process import timed_process, uptime
from callback_train import SETUPS, planted_rows

HERE = Path(__file__).resolve().parent
ADAPTER = "adapter_model.safetensors"


def train_cmd(out: Path, callback: bool, epochs: float, repeat: int = 1, setup: str = "stories260k") -> list[str]:
    cmd = [sys.executable, str(HERE / "callback_train.py"), str(out), "--epochs", str(epochs), "--repeat", str(repeat),
           "--setup", setup]  # fmt: skip
    return cmd + (["--callback"] if callback else [])


def attribute_cmd(run: Path, out: Path, *extra: str, setup: str = "stories260k") -> list[str]:
    base = str(SETUPS[setup].base)
    return [sys.executable, "-m", "gradian", "attribute", "--run", str(run), "--base", base, "--train",
            str(run / "train.jsonl"), "--eval", str(run / "eval.jsonl"), "--out", str(out), *extra]  # fmt: skip


def timed(name: str, argv: list[str], env: dict[str, str], log: Path) -> dict:
    before = uptime()
    wall, cpu = timed_process(argv, env, log)
    print(f"{name}: wall {wall:.1f} s, CPU {cpu:.1f} s ({before.split('load average: ')[-1]})", flush=True)
    return {"name": name, "wall_s": wall, "cpu_s": cpu, "uptime_before": before, "uptime_after": uptime()}


def side_by_side(pairs: list[tuple[str, list[str], str, list[str]]], reps: int, env: dict[str, str], logs: Path
                 ) -> list[dict]:  # fmt: skip
    """Each pair ``reps`` times, alternating which runs first."""
    runs = []
    for r in range(reps):
        for a, argv_a, b, argv_b in pairs:
            order = [(a, argv_a), (b, argv_b)] if r % 2 == 0 else [(b, argv_b), (a, argv_a)]
            for name, argv in order:
                runs.append({**timed(name, [x.replace("{r}", str(r)) for x in argv], env, logs / f"{name}-{r}.log"),
                             "rep": r})  # fmt: skip
    return runs


def scores(out: Path) -> np.ndarray:
    rep = json.loads((out / "report.json").read_text("utf-8"))
    s = np.full(max(e["index"] for e in rep["examples"]) + 1, np.nan)
    for e in rep["examples"]:
        s[e["index"]] = e["score"]
    return s


def quality(cb: Path, ps: Path, planted_at: list[int]) -> dict:
    """Rank agreement of the recorded ranking with the post-hoc one on the same adapter, and each one's planted AUC."""
    a, b = scores(cb), scores(ps)
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    planted = np.isin(np.flatnonzero(ok), planted_at)
    k = int(planted.sum())
    top_a, top_b = set(np.argsort(-a)[:k]), set(np.argsort(-b)[:k])
    return {"rows": int(ok.sum()), "planted": k, "spearman": _spearman(a, b), "top_k_overlap": len(top_a & top_b) / k,
            "auc_callback": _auc(a, planted), "auc_post_hoc": _auc(b, planted)}  # fmt: skip


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])


def _auc(s: np.ndarray, pos: np.ndarray) -> float:
    r = np.argsort(np.argsort(s)) + 1.0
    n1, n0 = int(pos.sum()), int((~pos).sum())
    return float((r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def ratios(runs: list[dict], num: str, den: str) -> dict:
    """Median over the reps of ``num``'s time over ``den``'s (CPU and wall), and each rep's."""
    out = {}
    at = {(x["name"], x["rep"]): x for x in runs}
    reps = sorted(r for n, r in at if n == num and (den, r) in at)
    for key in ("cpu_s", "wall_s"):
        per = [at[num, r][key] / at[den, r][key] for r in reps]
        out[key] = {"median": median(per), "reps": per}
    return out


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def markdown(res: dict) -> str:
    t, a, q = res["training_ratio"], res["attribute_ratio"], res.get("quality")
    med = {n: median(x["cpu_s"] for x in res["runs"] if x["name"] == n) for n in {x["name"] for x in res["runs"]}}
    model = {"stories260k": "stories260K", "smollm2": "SmolLM2-135M-Instruct"}[res.get("setup", "stories260k")]
    return "\n".join([
        f"# GradianCallback on {model} (TRL {res['trl']}, {res['rows']} rows, {res['epochs']} epochs, CPU)", "",
        f"`{res['command']}`", "",
        "| processes | CPU s (median) | ratio CPU | ratio wall |", "|---|---|---|---|",
        f"| train + callback / train | {med['train_callback']:.1f} / {med['train']:.1f} | "
        f"{t['cpu_s']['median']:.3f} | {t['wall_s']['median']:.3f} |",
        f"| attribute from the record / post-hoc attribute | {med['attribute_recorded']:.1f} / "
        f"{med['attribute_post_hoc']:.1f} | {a['cpu_s']['median']:.3f} | {a['wall_s']['median']:.3f} |",
        *([f"| the same, both `--token-profiles 0` | {med['attribute_recorded_np']:.1f} / "
           f"{med['attribute_post_hoc_np']:.1f} | {n['cpu_s']['median']:.3f} | {n['wall_s']['median']:.3f} |"]
          if (n := res.get("attribute_ratio_no_profiles")) else []), "",
        f"Same adapter with and without the callback: {res['same_adapter']}. "
        + (f"Recorded vs post-hoc ranking on the callback run's adapter: Spearman {q['spearman']:.3f}, "
           f"top-{q['planted']} overlap {q['top_k_overlap']:.2f}; planted AUC {q['auc_callback']:.3f} (recorded) vs "
           f"{q['auc_post_hoc']:.3f} (post hoc). " if q else "")
        + f"The post-hoc pass took {res['train_pass_s']['post_hoc']:.1f} s of the attribute process, reading the "
        f"record {res['train_pass_s']['recorded']:.1f} s.", "",
    ])  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--epochs", type=float, default=4.0)
    ap.add_argument("--work", type=Path, default=HERE / "work" / "callback")
    ap.add_argument("--results", default="callback.json")
    ap.add_argument("--repeat", type=int, default=1, help="the training file this many times (timing only)")
    ap.add_argument("--attr-reps", type=int, default=None, help="attribute pairs (default: --reps)")
    ap.add_argument("--no-profiles-too", action="store_true", help="also both attribute commands, --token-profiles 0")
    ap.add_argument(
        "--setup",
        choices=sorted(SETUPS),
        default="stories260k",
        help="the model and rows (callback_train.SETUPS; smollm2 reads the real-model suite's refusals_s0)",
    )
    a = ap.parse_args()
    import trl

    shutil.rmtree(a.work, ignore_errors=True)
    (logs := a.work / "logs").mkdir(parents=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1"}  # fmt: skip
    w = a.work
    su = a.setup
    runs = side_by_side([("train", train_cmd(w / "plain-{r}", False, a.epochs, a.repeat, su), "train_callback",
                          train_cmd(w / "cb-{r}", True, a.epochs, a.repeat, su))], a.reps, env, logs)  # fmt: skip
    pair = ("attribute_post_hoc", attribute_cmd(w / "plain-0", w / "attr-ph-{r}", setup=su), "attribute_recorded",
            attribute_cmd(w / "cb-0", w / "attr-rec-{r}", setup=su))  # fmt: skip
    runs += side_by_side([pair], a.attr_reps or a.reps, env, logs)
    if a.no_profiles_too:
        flag = ("--token-profiles", "0")
        pair = ("attribute_post_hoc_np", attribute_cmd(w / "plain-0", w / "np-ph-{r}", *flag, setup=su),
                "attribute_recorded_np", attribute_cmd(w / "cb-0", w / "np-rec-{r}", *flag, setup=su))  # fmt: skip
        runs += side_by_side([pair], a.attr_reps or a.reps, env, logs)
    if a.repeat == 1:
        same = attribute_cmd(w / "cb-0", w / "attr-same", "--gradients", "pass", setup=su)
        runs.append({**timed("attribute_pass_same_adapter", same, env, logs / "same.log"), "rep": 0})
    rec = json.loads((w / "attr-rec-0" / "report.json").read_text())
    ph = json.loads((w / "attr-ph-0" / "report.json").read_text())
    res = {
        "command": "OMP_NUM_THREADS=1 python bench/bench_callback.py " + " ".join(sys.argv[1:]),
        "setup": su, "trl": trl.__version__, "rows": sum(1 for _ in (w / "cb-0" / "train.jsonl").open()),
        "epochs": a.epochs, "reps": a.reps, "runs": runs,
        "training_ratio": ratios(runs, "train_callback", "train"),
        "attribute_ratio": ratios(runs, "attribute_recorded", "attribute_post_hoc"),
        "attribute_ratio_no_profiles": ratios(runs, "attribute_recorded_np", "attribute_post_hoc_np")
        if a.no_profiles_too else None,
        "gradient_source": {"recorded": rec["settings"].get("gradient_source"),
                            "post_hoc": ph["settings"].get("gradient_source")},
        "train_pass_s": {"recorded": rec["timings"]["train_pass_s"], "post_hoc": ph["timings"]["train_pass_s"]},
        "same_adapter": sha(w / "plain-0" / ADAPTER) == sha(w / "cb-0" / ADAPTER),
        "weights_note": next(n for n in rec["notes"] if "GradianCallback" in n),
    }  # fmt: skip
    if a.repeat == 1:
        at = planted_rows(su)
        res["quality"] = quality(w / "attr-rec-0", w / "attr-same", at) | {
            "auc_plain_post_hoc": _auc_of(w / "attr-ph-0", at)
        }
    out = HERE / "results" / a.results
    out.write_text(json.dumps(res, indent=1))
    out.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))


def _auc_of(out: Path, planted_at: list[int]) -> float:
    s = scores(out)
    ok = np.isfinite(s)
    return _auc(s[ok], np.isin(np.flatnonzero(ok), planted_at))


if __name__ == "__main__":
    main()
