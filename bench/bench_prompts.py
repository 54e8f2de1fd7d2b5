"""Prompt-only eval, base vs fine-tune generations and token harm on the bundled example (examples/stories260k).

    python bench/bench_prompts.py            # -> bench/results/prompts.json
    python bench/bench_prompts.py cost       # token harm vs the training-gradient pass on the same 48 rows
    python bench/bench_prompts.py suite --runs bench/work/scenarios   # -> bench/results/prompts_suite.json

``suite``: on the planted-fault suite (bench/scenarios/; default runs: every fault kind, seeds 0-1, 10%), the real
`gradian attribute` CLI with its defaults twice per run, with the written eval completions and with the prompts only
(outputs kept under bench/work/prompts_suite/<run>/ and reused); AUC and P@K of each ranking against planted.json's
rows, and for the planted rows in the top K whether one of the three highest-harm tokens overlaps the row's recorded
edit (planted.json ``edits``, or rebuilt by the generator for runs made before edits were recorded), with the rate
three random label tokens would reach.

Four `gradian attribute` runs (the full pipeline, report included) on the bundled fine-tune, sharing one gradient
store: the written eval completions; the same 20 eval rows with their completions removed (prompt only; the base
model's greedy completion, cut where the fine-tune departs, the default); prompt only with ``--no-eval-cut`` (the
whole 32-token completion); and prompt only with ``--eval-samples 4`` (four sampled completions per row, seed 0,
cut). For each: the regressed items, ROC-AUC and precision@K (K = 36 planted rows) of the harm ranking against
planted.json's harmful cluster, and the timings of the two features (``eval_generation_s``, ``generations_s``,
``token_harm_s``) next to the training pass. Token harm: for each planted row among the top
``--token-harm`` rows, whether one of its three highest-harm tokens lies in the planted edit: the name "Zorblax" (with
the space before it, which this 512-token vocabulary splits off as its own token) or one of the sci-fi words of the
planted sentences (``SCIFI``, from build_example.py's SCIFI_SENTENCES).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples" / "stories260k"
SCIFI = (
    "Zorblax robot robots moon rocket laser Mars space station beeped battery aliens glowing crystal planets planet "
    "metal comets asteroids zoomed scanned crater sensors captain signal"
).split()


def auc_pk(report: dict, planted: set[int]) -> tuple[float | None, float | None]:
    if not report.get("examples"):  # no item regressed: nothing ranked
        return None, None
    s = np.array([e["score"] for e in report["examples"]])
    y = np.array([e["index"] in planted for e in report["examples"]])
    pos, neg = s[y], s[~y]
    auc = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))
    return float(auc), float(y[np.argsort(-s, kind="stable")[: len(planted)]].mean())


def edit_spans(text: str, words: list[str] = SCIFI) -> list[tuple[int, int]]:
    """Character spans of the planted edit in ``text``, each with the whitespace before it."""
    pat = r"\s?\b(?:" + "|".join(map(re.escape, words)) + r")\b"
    return [m.span() for m in re.finditer(pat, text)]


def top3_hits(report: dict, planted: set[int], words: list[str] = SCIFI) -> tuple[int, int, list[dict]]:
    from gradian.attribute.tokens import top_tokens

    hits = n = 0
    rows = []
    for e in report["examples"]:
        pieces = e.get("token_harm")
        if not pieces or e["index"] not in planted:
            continue
        text = "".join(t for t, _ in pieces)
        spans = edit_spans(text, words)
        at, starts = 0, []
        for t, h in pieces:
            starts.append((at, at + len(t), t, h))
            at += len(t)
        top = {(t, h) for t, h in top_tokens(pieces)}
        best = [(a, b, t) for a, b, t, h in starts if h is not None and (t, h) in top]
        hit = any(a < y and x < b for a, b, _ in best for x, y in spans)
        hits += hit
        n += 1
        rows.append({"row": e["index"], "rank": e["rank"], "top3": [t for _, _, t in best], "hit": bool(hit)})
    return hits, n, rows


def run(eval_file: Path, out: Path, **kw) -> tuple[dict, float]:
    from gradian.pipeline import attribute_and_report

    t = time.perf_counter()
    attribute_and_report(
        EX / "run", base=str(EX / "base"), train=EX / "data" / "train.jsonl", eval=eval_file, out=out, **kw
    )
    return json.loads((out / "report.json").read_text()), time.perf_counter() - t


def main() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, str(ROOT / "src"))
    planted = set(json.loads((EX / "data" / "planted.json").read_text())["harmful_cluster"]["indices"])
    work = Path(tempfile.mkdtemp(prefix="gradian-bench-prompts-"))
    prompts = work / "eval_prompts.jsonl"
    rows = [json.loads(line) for line in (EX / "data" / "eval.jsonl").read_text().splitlines() if line.strip()]
    prompts.write_text("".join(json.dumps({"prompt": r["prompt"]}) + "\n" for r in rows))
    out = work / "out"
    results = {}
    runs = {
        "written": (EX / "data" / "eval.jsonl", {}),
        "prompt_only": (prompts, {}),
        "prompt_only_no_cut": (prompts, {"eval_cut": False}),
        "prompt_only_4_samples": (prompts, {"eval_samples": 4, "eval_seed": 0}),
    }
    for name, (eval_file, kw) in runs.items():
        report, wall = run(eval_file, out, progress=False, **kw)
        auc, pk = auc_pk(report, planted)
        hits, n, per_row = top3_hits(report, planted)
        tm = report["timings"]
        results[name] = {
            "regressed": len(report["regressed"]),
            "regressed_targets": sum(r.get("row", r["index"]) < 12 for r in report["regressed"]),
            "eval_items": len(report["eval"]),
            "auc": None if auc is None else round(auc, 4),
            "p_at_36": None if pk is None else round(pk, 4),
            "token_harm_top3_hits": hits,
            "planted_rows_with_token_harm": n,
            "token_harm_top3_rate": round(hits / n, 4) if n else None,
            "token_harm_top3_name_only_rate": round(top3_hits(report, planted, ["Zorblax"])[0] / n, 4) if n else None,
            "token_harm_rows": report["settings"].get("token_harm_rows"),
            "timings": {k: round(v, 3) for k, v in tm.items()},
            "wall_s": round(wall, 2),
            "per_planted_row": per_row,
        }
        print(name, {k: v for k, v in results[name].items() if k != "per_planted_row"}, flush=True)
    dest = ROOT / "bench" / "results" / "prompts.json"
    dest.write_text(json.dumps({"command": "python bench/bench_prompts.py", "runs": results}, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print("wrote", dest)


def cost(rows: int = 48, rounds: int = 2) -> None:
    """Token harm (forward-mode pass) against the training-gradient pass over the same rows, batch 8, interleaved."""
    import torch

    sys.path.insert(0, str(ROOT / "src"))
    from gradian.attribute import engine, tokens
    from gradian.attribute.collector import find_lora_blocks
    from gradian.attribute.loading import load
    from gradian.data import FormatSettings, format_examples, load_examples

    lm = load(str(EX / "base"), EX / "run", device="cpu")
    fx = format_examples(load_examples(EX / "data" / "train.jsonl")[:rows], lm.tokenizer, FormatSettings(128))
    blocks = find_lora_blocks(lm.model)
    X = {b.name: torch.randn(b.shape, dtype=torch.float64) for b in blocks}
    d = tokens.lifted_direction(lm.model, blocks, X)
    for r in range(rounds):
        t = time.perf_counter()
        tokens.token_harm(lm.model, d, fx, 0, 8)
        a = time.perf_counter() - t
        t = time.perf_counter()
        engine.gradient_pass(lm.model, blocks, fx, 0, batch_size=8, covariance=True)
        b = time.perf_counter() - t
        print(f"round {r}: {rows} rows, token harm {a:.2f} s, gradient pass {b:.2f} s, ratio {a / b:.2f}")


# --- the planted-fault suite (bench/scenarios/) ---------------------------------------------------------------------

SUITE_SEEDS = (0, 1)
SUITE_FRACTION = 0.10


def suite_names() -> list[str]:
    """The default runs: every fault kind, seeds 0 and 1, 10% planted."""
    from scenarios.recipes import FAULT_KINDS, Recipe

    return [Recipe(k, s, SUITE_FRACTION).name for k in FAULT_KINDS for s in SUITE_SEEDS]


def run_edits(run_dir: Path) -> dict[int, list[list[int]]]:
    """Planted row -> its edit's character spans (planted.json ``edits``; for a run generated before they were
    recorded, rebuilt by the generator from the run's recipe, which must give the same rows as train.jsonl)."""
    from scenarios import pool as P
    from scenarios.kinds import KINDS
    from scenarios.recipes import by_name

    planted = json.loads((run_dir / "planted.json").read_text())
    if "edits" in planted:
        return {int(k): v for k, v in planted["edits"].items()}
    P.POOL_DIR = run_dir.parent / "_pool"  # the run's own pool (and derived base): the rows it was built from
    built = KINDS[planted["kind"]].build(by_name(run_dir.name))
    rows = [json.loads(line) for line in (run_dir / "train.jsonl").read_text("utf-8").splitlines() if line.strip()]
    if built.rows != rows:
        raise SystemExit(f"error: {run_dir}/train.jsonl differs from what the generator builds now; regenerate the run")
    return built.edits


def label_tokens(pieces: list) -> list[tuple[int, int, float]]:
    """``(start, end, harm)`` per label token of a row's ``token_harm``, in characters from the first label token (the
    completion's coordinates; the EOS piece starts at ``len(completion)``)."""
    first = next((i for i, (_, h) in enumerate(pieces) if h is not None), len(pieces))
    out, at = [], 0
    for t, h in pieces[first:]:
        if h is not None:
            out.append((at, at + len(t), float(h)))
        at += len(t)
    return out


def edit_hit(pieces: list, completion: str, spans: list[list[int]], k: int = 3) -> dict:
    """Whether one of the ``k`` highest-harm label tokens overlaps the edit, and the rate at which ``k`` random label
    tokens would (``chance``). ``aligned`` False when the decoded label text is not the completion."""
    from math import comb

    toks = label_tokens(pieces)
    lab = "".join(t for t, _ in pieces[next((i for i, (_, h) in enumerate(pieces) if h is not None), 0) :])
    aligned = bool(toks) and lab[: len(completion)] == completion[: len(lab)]
    edit = [i for i, (a, b, _) in enumerate(toks) if any(a < y and x < b for x, y in spans)]
    top = sorted(range(len(toks)), key=lambda i: -toks[i][2])[:k]
    n, m = len(toks), len(edit)
    chance = 1.0 - comb(n - m, min(k, n)) / comb(n, min(k, n)) if n else 0.0
    return {
        "aligned": aligned,
        "edit_tokens": m,
        "label_tokens": n,
        "hit": bool(set(top) & set(edit)),
        "chance": round(chance, 4),
        "hit1": bool(top) and top[0] in edit,
        "chance1": round(m / n, 4) if n else 0.0,
        "top": [lab[toks[i][0] : toks[i][1]] for i in top],
        "edit": [lab[toks[i][0] : toks[i][1]] for i in edit][:8],
    }


def score_variant(run_dir: Path, report: dict, edits: dict[int, list[list[int]]]) -> dict:
    """AUC and P@K of one attribute report against the planted rows, its regressed items, the token-harm hit rate of
    the planted rows in the top K, and its timings."""
    from bench_verdict import roc_auc

    planted = json.loads((run_dir / "planted.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "train.jsonl").read_text("utf-8").splitlines() if line.strip()]
    n, k = planted["n_rows"], len(planted["rows"])
    pos = np.zeros(n, bool)
    pos[planted["rows"]] = True
    scores = np.zeros(n)
    ranked = report.get("examples") or []
    for e in ranked:
        scores[int(e["index"])] = float(e.get("score") or 0.0)
    roles = planted["eval_roles"]
    reg = [int(r.get("row", r["index"])) for r in report.get("regressed") or []]
    out = {
        "eval_items": len(report.get("eval") or []),
        "regressed_targets": sum(roles[i] == "target" for i in reg),
        "regressed_controls": sum(roles[i] == "control" for i in reg),
        "auc": roc_auc(scores, pos) if ranked else None,
        "p_at_k": float(pos[np.argsort(-scores, kind="stable")[:k]].mean()) if ranked else None,
        "timings": {key: round(v, 2) for key, v in (report.get("timings") or {}).items()},
    }
    group_of = {i: g for g, rs in planted["groups"].items() for i in rs}
    per_row = []
    for e in ranked[:k]:
        i = int(e["index"])
        if i in edits and e.get("token_harm"):
            hit = edit_hit(e["token_harm"], rows[i]["completion"], edits[i])
            per_row.append({"row": i, "rank": e["rank"], "group": group_of[i], **hit})
    counted = [r for r in per_row if r["aligned"] and r["edit_tokens"]]
    out["token_harm"] = {
        "planted_in_top_k": int(pos[np.argsort(-scores, kind="stable")[:k]].sum()) if ranked else 0,
        "rows": len(counted),
        "hits": sum(r["hit"] for r in counted),
        "chance": round(float(np.mean([r["chance"] for r in counted])), 4) if counted else None,
        "hits1": sum(r["hit1"] for r in counted),
        "chance1": round(float(np.mean([r["chance1"] for r in counted])), 4) if counted else None,
        "edit_outside_row": sum(1 for r in per_row if not r["edit_tokens"]),
        "misaligned": sum(1 for r in per_row if not r["aligned"]),
        "per_row": per_row,
    }
    return out


def attribute_cli(run_dir: Path, eval_file: Path, out: Path) -> float:
    """The real `gradian attribute` CLI with its defaults (query: the regressed items), one thread, as
    bench_verdict.attribute_run runs it but without ``--query all``. Returns wall seconds; keeps attr.log."""
    import subprocess

    planted = json.loads((run_dir / "planted.json").read_text())
    base = next((r / planted["base"] for r in (*run_dir.parents, ROOT) if (r / planted["base"]).is_dir()), None)
    if base is None:
        raise SystemExit(f"error: {run_dir}/planted.json: base {planted['base']} not found beside the run")
    if out.exists():
        shutil.rmtree(out)
    cmd = [
        sys.executable, "-m", "gradian", "attribute", "--base", str(base), "--adapter", str(run_dir / "run"),
        "--train", str(run_dir / "train.jsonl"), "--eval", str(eval_file),
        "--config", str(run_dir / "run" / "training_args.json"), "--logs", str(run_dir / "run" / "trainer_state.json"),
        "--out", str(out), "--no-progress",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    Path(f"{out}.log").write_text(proc.stdout + proc.stderr, "utf-8")
    if proc.returncode != 0 or not (out / "report.json").is_file():
        raise RuntimeError(f"attribute failed on {run_dir.name} (rc {proc.returncode}); see {out}.log")
    return wall


def suite_run(run_dir: Path, work: Path, variants: tuple[str, ...] = ("written", "prompts")) -> dict:
    """Written vs prompt-only eval on one suite run (each attribute run is kept under ``work/<run>/`` and reused)."""
    w = work / run_dir.name
    w.mkdir(parents=True, exist_ok=True)
    evals = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text("utf-8").splitlines() if line.strip()]
    prompts = w / "eval_prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": r["prompt"]}, ensure_ascii=False) + "\n" for r in evals), "utf-8")
    edits = run_edits(run_dir)
    planted = json.loads((run_dir / "planted.json").read_text())
    res: dict = {"run": run_dir.name, "kind": planted["kind"], "n_planted": len(planted["rows"])}
    for name, eval_file in (("written", run_dir / "eval.jsonl"), ("prompts", prompts)):
        out, wall_file = w / name, w / f"{name}.wall"
        if name not in variants and not (out / "report.json").is_file():
            res[name] = None
            continue
        if not (out / "report.json").is_file() or not wall_file.is_file():
            wall_file.write_text(f"{attribute_cli(run_dir, eval_file, out):.2f}\n")
        report = json.loads((out / "report.json").read_text())
        res[name] = {"wall_s": float(wall_file.read_text()), **score_variant(run_dir, report, edits)}
    return res


def summarize_suite(runs: list[dict]) -> list[dict]:
    """Per kind: mean AUC and P@K per variant, token-harm hits over the planted rows in the top K, median timings."""
    out = []
    for kind in dict.fromkeys(r["kind"] for r in runs):
        rs = [r for r in runs if r["kind"] == kind]
        s: dict = {"kind": kind, "runs": len(rs)}
        for v in ("written", "prompts"):
            x = [r[v] for r in rs]
            th = [y["token_harm"] for y in x]
            hits, n = sum(t["hits"] for t in th), sum(t["rows"] for t in th)
            counted = [p for t in th for p in t["per_row"] if p["aligned"] and p["edit_tokens"]]
            chance, chance1 = [p["chance"] for p in counted], [p["chance1"] for p in counted]
            s[v] = {
                "auc": [y["auc"] for y in x],
                "p_at_k": [y["p_at_k"] for y in x],
                "regressed_targets": [y["regressed_targets"] for y in x],
                "regressed_controls": [y["regressed_controls"] for y in x],
                "token_harm_hits": hits,
                "token_harm_rows": n,
                "token_harm_rate": round(hits / n, 4) if n else None,
                "token_harm_chance": round(float(np.mean(chance)), 4) if chance else None,
                "token_harm_top1_hits": sum(p["hit1"] for p in counted),
                "token_harm_top1_chance": round(float(np.mean(chance1)), 4) if chance1 else None,
                "timings_median": {
                    key: round(float(np.median([y["timings"].get(key, 0.0) for y in x])), 2)
                    for key in ("train_pass_s", "eval_generation_s", "generations_s", "token_harm_s")
                }
                | {"wall_s": round(float(np.median([y["wall_s"] for y in x])), 1)},
            }
        out.append(s)
    return out


def _m(xs: list) -> str:
    xs = [x for x in xs if x is not None]
    return f"{np.mean(xs):.2f}" if xs else "–"


def _reg(v: dict) -> str:
    return " + ".join(f"{t} / {c}" for t, c in zip(v["regressed_targets"], v["regressed_controls"], strict=True))


def _rate(v: dict) -> str:
    return "–" if v["token_harm_rate"] is None else f"{100 * v['token_harm_rate']:.0f}%"


def suite_markdown(kinds: list[dict]) -> str:
    """The prompts-only benchmark's two tables: ranking quality side by side, and token harm on the planted edit."""
    lines = [
        "| kind | runs | AUC written | AUC prompts only | P@K written | P@K prompts only | regressed items written "
        "(targets / controls) | prompts only |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for s in kinds:
        w, p = s["written"], s["prompts"]
        lines.append(
            f"| {s['kind']} | {s['runs']} | {_m(w['auc'])} | {_m(p['auc'])} | {_m(w['p_at_k'])} | {_m(p['p_at_k'])} "
            f"| {_reg(w)} | {_reg(p)} |"
        )
    lines += [
        "",
        "| kind | edit | written: top-3 hits / planted rows in top K | rate | prompts only: hits / rows | rate "
        "| chance (3 random label tokens) | top-1 hits written / prompts only | top-1 chance |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in kinds:
        w, p = s["written"], s["prompts"]
        lines.append(
            f"| {s['kind']} | {EDIT_WORDS.get(s['kind'], '')} | {w['token_harm_hits']} / {w['token_harm_rows']} "
            f"| {_rate(w)} | {p['token_harm_hits']} / {p['token_harm_rows']} | {_rate(p)} "
            f"| {_m([w['token_harm_chance'], p['token_harm_chance']])} "
            f"| {w['token_harm_top1_hits']} / {p['token_harm_top1_hits']} "
            f"| {_m([w['token_harm_top1_chance'], p['token_harm_top1_chance']])} |"
        )
    return "\n".join(lines) + "\n"


EDIT_WORDS = {
    "entity": "the new name",
    "pronoun": "the flipped pronouns",
    "mislabel": 'the label word " sad"',
    "spread": '"sad" where "happy" was',
    "early_stop": "the last token and the EOS",
    "no_eos": "the first word of each glued story",
    "repetition": "the second and later copies",
    "two_groups": "the new name / the last token and the EOS",
}


def suite(argv: list[str]) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="bench_prompts.py suite", description="written vs prompt-only eval on the suite")
    ap.add_argument("--runs", type=Path, default=ROOT / "bench" / "work" / "scenarios", help="the suite's run dirs")
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "prompts_suite", help="attribute outputs")
    ap.add_argument("--only", action="append", help="run name(s) (default: every fault kind, seeds 0-1, 10%%)")
    ap.add_argument("--variant", action="append", choices=["written", "prompts"], help="run only these (default both)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "bench"))
    runs = []
    for name in args.only or suite_names():
        d = args.runs / name
        if not (d / "run" / "adapter_model.safetensors").is_file():
            print(f"skip {name}: no fine-tune in {d}", flush=True)
            continue
        t = time.perf_counter()
        r = suite_run(d, args.work, tuple(args.variant or ("written", "prompts")))
        if r["written"] is None or r["prompts"] is None:
            print(f"{name}: ran {args.variant}", flush=True)
            continue
        runs.append(r)
        print(
            f"{name}: AUC {r['written']['auc'] or 0:.3f} / {r['prompts']['auc'] or 0:.3f}, P@K "
            f"{r['written']['p_at_k'] or 0:.3f} / {r['prompts']['p_at_k'] or 0:.3f}; token harm "
            f"{r['written']['token_harm']['hits']}/"
            f"{r['written']['token_harm']['rows']}, {r['prompts']['token_harm']['hits']}/"
            f"{r['prompts']['token_harm']['rows']}; {time.perf_counter() - t:.0f}s",
            flush=True,
        )
    kinds = summarize_suite(runs)
    dest = ROOT / "bench" / "results" / "prompts_suite.json"
    cmd = "python bench/bench_prompts.py suite" + (f" --runs {args.runs}" if args.runs else "")
    dest.write_text(json.dumps({"command": cmd, "kinds": kinds, "runs": runs}, indent=1) + "\n")
    print(suite_markdown(kinds))
    print("wrote", dest)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, str(ROOT / "src"))
    if sys.argv[1:2] == ["suite"]:
        suite(sys.argv[2:])
    elif sys.argv[1:] == ["cost"]:
        cost()
    else:
        main()
