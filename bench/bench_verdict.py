"""Verdict quality over the planted-fault scenario suite (bench/scenarios/).

    python bench/bench_verdict.py run                 # generate every recipe + `gradian attribute` on it (resumable),
                                                      # then score; progress in bench/work/scenarios/progress.log
    python bench/bench_verdict.py run --only entity_s0_f10
    python bench/bench_verdict.py score               # score the finished runs as they are on disk
    python bench/bench_verdict.py score --rerender    # first `gradian report <run>/attr` on each run (recomputes the
                                                      # verdict from the saved inputs, no gradients), then score
    python bench/bench_verdict.py verify              # `gradian verify <run>/attr` on each scored run (two retrains
                                                      # each; redone when report.json is newer), then score

Per run: ROC-AUC and precision@K (K = planted rows) of report.json's ``examples`` scores against the planted rows;
the verdict's ``drop_rows`` precision and recall against the planted rows; whether ``verdict.cause`` names the planted
cause ("content" / "mechanical" / both); on controls, whether a culprit was named; and the counterfactual truth
(recovery of the target regression by retraining without the planted rows vs as many random rows); and, once
``verify`` ran, `gradian verify`'s recovery for the verdict's rows vs as many random rows. Writes
bench/results/verdict_suite.json and verdict_suite.md (one row per run and a per-kind summary).

``score_run(run_dir)`` is the metric for one run: it reads only files on disk, so it can be re-run after the verdict
changes (``--rerender``) without regenerating or re-attributing anything.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "src"))

from scenarios import pool as P  # noqa: E402
from scenarios.generate import build_run  # noqa: E402
from scenarios.recipes import by_name, suite  # noqa: E402

RESULTS = ROOT / "bench" / "results"
CULPRIT_KINDS = ("concentrated", "few_rows")  # verdict kinds that name a culprit


def log_line(msg: str, path: Path = P.WORK / "progress.log") -> None:
    line = f"{time.strftime('%H:%M:%S')} {msg}"
    print(line, flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(line + "\n")


def attribute_run(run_dir: Path) -> float:
    """`gradian attribute --query all --token-profiles 0.3 --token-profiles-always` on a generated run (the real CLI,
    one thread; profiles on every run, whatever its verdict, so a policy calibrated here can read them); keeps
    everything it writes and a copy of its report.json as report.attribute.json. Returns seconds."""
    out = run_dir / "attr"
    if (out / "report.attribute.json").is_file():
        return 0.0
    if out.exists():
        shutil.rmtree(out)
    planted = json.loads((run_dir / "planted.json").read_text())
    cmd = [
        sys.executable, "-m", "gradian", "attribute", "--base", str(ROOT / planted["base"]),
        "--adapter", str(run_dir / "run"), "--train", str(run_dir / "train.jsonl"),
        "--eval", str(run_dir / "eval.jsonl"), "--config", str(run_dir / "run" / "training_args.json"),
        "--logs", str(run_dir / "run" / "trainer_state.json"), "--out", str(out), "--query", "all", "--no-progress",
        "--token-profiles", "0.3", "--token-profiles-always",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    seconds = time.time() - t0
    (run_dir / "attr.log").write_text(proc.stdout + proc.stderr, "utf-8")
    if proc.returncode != 0 or not (out / "report.json").is_file():
        raise RuntimeError(f"attribute failed on {run_dir.name} (rc {proc.returncode}); see {run_dir / 'attr.log'}")
    shutil.copyfile(out / "report.json", out / "report.attribute.json")
    t = json.loads((run_dir / "truth.json").read_text())
    t["timings"]["attribute_s"] = round(seconds, 1)
    (run_dir / "truth.json").write_text(json.dumps(t, indent=1) + "\n", "utf-8")
    return seconds


def verify_run(run_dir: Path) -> float:
    """`gradian verify <run>/attr` (the real CLI, one thread), unless verify.json is newer than report.json."""
    out = run_dir / "attr"
    done = out / "verify.json"
    if done.is_file() and done.stat().st_mtime >= (out / "report.json").stat().st_mtime:
        return 0.0
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    t0 = time.time()
    cmd = [sys.executable, "-m", "gradian", "verify", str(out), "--no-progress"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    (run_dir / "verify.log").write_text(proc.stdout + proc.stderr, "utf-8")
    if proc.returncode != 0 or not done.is_file():
        raise RuntimeError(f"verify failed on {run_dir.name} (rc {proc.returncode}); see {run_dir / 'verify.log'}")
    return time.time() - t0


def roc_auc(scores: np.ndarray, pos: np.ndarray) -> float | None:
    from scipy.stats import rankdata

    n1, n0 = int(pos.sum()), int((~pos).sum())
    if n1 == 0 or n0 == 0:
        return None
    r = rankdata(scores)
    return float((r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def _causes(text: str | None) -> set[str]:
    return {w for w in ("content", "mechanical") if w in (text or "")}


def score_run(run_dir: str | Path, *, rerender: bool = False) -> dict:
    """The metrics of one finished run (planted.json, truth.json, attr/report.json)."""
    run_dir = Path(run_dir)
    if rerender:
        from gradian.report.cli import rerender as _rerender

        _rerender(run_dir / "attr")
    planted = json.loads((run_dir / "planted.json").read_text())
    truth = json.loads((run_dir / "truth.json").read_text())
    report = json.loads((run_dir / "attr" / "report.json").read_text())
    n = planted["n_rows"]
    rows = set(planted["rows"])
    pos = np.zeros(n, bool)
    pos[list(rows)] = True
    scores = np.zeros(n)
    for e in report.get("examples") or []:
        scores[int(e["index"])] = float(e.get("score") or 0.0)
    v = report.get("verdict") or {}
    drop = {int(i) for i in v.get("drop_rows") or []}
    out: dict = {
        "run": run_dir.name,
        "kind": planted["kind"],
        "seed": planted["seed"],
        "fraction": planted["fraction"],
        "cause": planted["cause"],
        "n_rows": n,
        "n_planted": len(rows),
        "verdict_kind": v.get("kind"),
        "verdict_cause": v.get("cause"),
        "n_drop": len(drop),
        "truth_target_change": truth["by_role"]["target"].get("mean_change"),
        "truth_control_change": truth["by_role"]["control"].get("mean_change"),
        "truth_recovered_planted": (truth["recovery"].get("drop_planted") or {}).get("recovered_total"),
        "truth_recovered_random": truth["recovery"]["drop_random"]["recovered_total"],
        "n_regressed_items": len(report.get("regressed") or []),
        "timings": truth.get("timings", {}),
    }
    vpath = run_dir / "attr" / "verify.json"
    if vpath.is_file() and vpath.stat().st_mtime >= (run_dir / "attr" / "report.json").stat().st_mtime:
        vs = json.loads(vpath.read_text()).get("summary") or {}
        out["verify_recovered_flagged"] = vs.get("recovered_total_flagged")
        out["verify_recovered_random"] = vs.get("recovered_total_random")
    if rows:
        k = len(rows)
        top = np.argsort(-scores, kind="stable")[:k]
        out["auc"] = roc_auc(scores, pos)
        out["p_at_k"] = float(pos[top].mean())
        out["drop_precision"] = len(drop & rows) / len(drop) if drop else None
        out["drop_recall"] = len(drop & rows) / len(rows)
        out["cause_right"] = _causes(v.get("cause")) == _causes(planted["cause"])
    else:
        out["culprit_named"] = bool(drop) or v.get("kind") in CULPRIT_KINDS
    return out


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def _median(rs: list[dict], key: str) -> float | None:
    xs = [r[key] for r in rs if r.get(key) is not None]
    return float(np.median(xs)) if xs else None


def summarize(runs: list[dict]) -> list[dict]:
    kinds: dict[str, list[dict]] = {}
    for r in runs:
        kinds.setdefault(r["kind"], []).append(r)
    out = []
    for kind, rs in kinds.items():
        s = {"kind": kind, "cause": rs[0]["cause"], "runs": len(rs)}
        for key in ("auc", "p_at_k", "drop_precision", "drop_recall", "truth_recovered_planted",
                    "truth_recovered_random", "truth_target_change", "verify_recovered_flagged",
                    "verify_recovered_random"):  # fmt: skip
            # recoveries are ratios over the regression: medians, since a run that barely regressed gives e.g. 600%
            s[key] = _median(rs, key) if "recovered" in key else _mean([r.get(key) for r in rs])
        if "cause_right" in rs[0]:
            s["cause_right"] = sum(bool(r["cause_right"]) for r in rs) / len(rs)
        else:
            s["culprit_named"] = sum(bool(r["culprit_named"]) for r in rs) / len(rs)
        out.append(s)
    return out


def _f(x, pct: bool = False) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    return f"{100 * x:.0f}%" if pct else f"{x:.3f}"


def explained(r: dict) -> bool | None:
    """Whether the planted rows explain a real regression: the target NLL rose by > 0.05 nats/token on average, the
    planted-drop retrain removes >= half of it and the random-drop retrain <= 20%. None for controls."""
    if not r["n_planted"]:
        return None
    rp, rr = r["truth_recovered_planted"], r["truth_recovered_random"]
    return bool(r["truth_target_change"] > 0.05 and rp is not None and rp >= 0.5 and (rr is None or rr <= 0.2))


def truth_table(runs: list[dict]) -> str:
    """Per kind and fraction: the counterfactual truth (medians over seeds)."""
    groups: dict[tuple[str, float], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["kind"], r["fraction"]), []).append(r)
    lines = [
        "| kind | fraction | runs | target Δ NLL (mean) | control Δ NLL (mean) | planted-drop recovery (median) "
        "| random-drop recovery (median) | planted rows explain it |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (kind, frac), rs in sorted(groups.items()):
        ex = [explained(r) for r in rs]
        lines.append(
            f"| {kind} | {100 * frac:.0f}% | {len(rs)} | {_f(_mean([r['truth_target_change'] for r in rs]))} | "
            f"{_f(_mean([r['truth_control_change'] for r in rs]))} | "
            f"{_f(_median(rs, 'truth_recovered_planted'), True)} | "
            f"{_f(_median(rs, 'truth_recovered_random'), True)} | "
            + ("–" if ex[0] is None else f"{sum(ex)}/{len(ex)}")
            + " |"
        )
    return "\n".join(lines) + "\n"


def markdown(runs: list[dict], kinds: list[dict]) -> str:
    lines = [
        "| kind | cause | runs | AUC | P@K | drop_rows precision | recall | cause right | culprit named (controls) "
        "| truth: planted-drop recovery (median) | random-drop (median) | verify: verdict rows | verify: random rows |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in kinds:
        lines.append(
            f"| {s['kind']} | {s['cause']} | {s['runs']} | {_f(s['auc'])} | {_f(s['p_at_k'])} | "
            f"{_f(s['drop_precision'])} | {_f(s['drop_recall'])} | {_f(s.get('cause_right'), True)} | "
            f"{_f(s.get('culprit_named'), True)} | {_f(s['truth_recovered_planted'], True)} | "
            f"{_f(s['truth_recovered_random'], True)} | {_f(s['verify_recovered_flagged'], True)} | "
            f"{_f(s['verify_recovered_random'], True)} |"
        )
    lines += [
        "",
        "| run | planted | target Δ NLL | planted-drop rec. | random-drop rec. | AUC | P@K | verdict | cause "
        "| drop n | precision | recall |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in runs:
        lines.append(
            f"| {r['run']} | {r['n_planted']} | {_f(r['truth_target_change'])} | "
            f"{_f(r['truth_recovered_planted'], True)} | {_f(r['truth_recovered_random'], True)} | {_f(r.get('auc'))} "
            f"| {_f(r.get('p_at_k'))} | {r['verdict_kind']} | {r['verdict_cause']} | {r['n_drop']} | "
            f"{_f(r.get('drop_precision'))} | {_f(r.get('drop_recall'))} |"
        )
    return "\n".join(lines) + "\n\n" + truth_table(runs)


def score_all(root: Path = P.WORK, *, rerender: bool = False, write: bool = True) -> tuple[list[dict], list[dict]]:
    """Score every finished run; with ``write``, (re)write bench/results/verdict_suite.{json,md}."""
    runs = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if (d / "truth.json").is_file() and (d / "attr" / "report.json").is_file():
            runs.append(score_run(d, rerender=rerender))
    kinds = summarize(runs)
    if not write:
        return runs, kinds
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "verdict_suite.json").write_text(json.dumps({"kinds": kinds, "runs": runs}, indent=1) + "\n", "utf-8")
    (RESULTS / "verdict_suite.md").write_text(markdown(runs, kinds), "utf-8")
    return runs, kinds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="generate + attribute (resumable), then score")
    r.add_argument("--only", action="append", help="run name(s), e.g. entity_s0_f10 (default: the whole suite)")
    s = sub.add_parser("score", help="score the finished runs")
    s.add_argument("--rerender", action="store_true", help="recompute each verdict (gradian report) first")
    v = sub.add_parser("verify", help="gradian verify on each scored run, then score")
    v.add_argument("--only", action="append", help="run name(s) (default: every finished run)")
    args = ap.parse_args()
    if args.cmd == "run":
        for recipe in [by_name(n) for n in args.only] if args.only else suite():
            try:
                t0 = time.time()
                d = build_run(recipe, log=log_line)
                secs = attribute_run(d)
                if secs:
                    m = score_run(d)
                    log_line(
                        f"{recipe.name}: attribute {secs:.0f}s; AUC {_f(m.get('auc'))} P@K {_f(m.get('p_at_k'))}; "
                        f"verdict {m['verdict_kind']}/{m['verdict_cause']} drop {m['n_drop']}; "
                        f"run total {time.time() - t0:.0f}s"
                    )
            except (RuntimeError, SystemExit) as err:
                log_line(f"{recipe.name}: FAILED: {err}")
    if args.cmd == "verify":
        for d in sorted(P.WORK.iterdir()):
            if (d / "attr" / "report.json").is_file() and (not args.only or d.name in args.only):
                try:
                    secs = verify_run(d)
                    if secs:
                        log_line(f"{d.name}: verify {secs:.0f}s")
                except RuntimeError as err:
                    log_line(f"{d.name}: FAILED: {err}")
    # a partial run (--only) scores what is on disk but leaves the committed results alone
    _, kinds = score_all(rerender=getattr(args, "rerender", False), write=not getattr(args, "only", None))
    print(markdown([], kinds).split("\n\n")[0])


if __name__ == "__main__":
    main()
