"""Generate planted-fault runs: data, a real `gradian train` fine-tune, and the counterfactual truth.

    python bench/scenarios/generate.py                       # every recipe of recipes.suite(), skipping finished runs
    python bench/scenarios/generate.py --only entity_s0_f10  # one run (names: <kind>_s<seed>_f<percent>)
    python bench/scenarios/generate.py --list

Each run lands in ``bench/work/scenarios/<name>/``:

- ``train.jsonl``, ``eval.jsonl``, ``config.yaml`` (the `gradian train` config), ``planted.json`` (kind, cause, rows,
  groups, decoys (rows of planted groups the targets do not probe: neither to blame nor wrong to name), seed,
  fraction, n_rows, eval_roles, base, and ``edits``: per planted row the character spans of its edit in the completion,
  ``len(completion)`` standing for the EOS after it),
- ``run/``: the fine-tune (``gradian.train.train_lora``, 1 CPU thread, seeded; rebuilt on another machine, 8 of 188
  runs' verdicts moved a little: docs/benchmarks.md §8, session 22),
- ``truth/drop_planted/`` and ``truth/drop_random/``: retrains with the same config and seed without the planted rows
  and without as many random other rows (controls: random only, 10% of the rows),
- ``truth.json``: per eval item the completion NLL (``gradian.verify.measure``, the code ``gradian attribute`` uses)
  under the base, the fine-tune and both retrains; per role the mean change; and the recovery (share of the target
  regression the retrain removes) for both retrains, plus timings.

A run is done when truth.json exists; a half-built run folder is rebuilt from scratch.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for p in (ROOT / "src", HERE.parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from scenarios import pool as P  # noqa: E402
from scenarios.kinds import KINDS, MAX_LENGTH, Built  # noqa: E402
from scenarios.recipes import Recipe, by_name, suite  # noqa: E402

CONTROL_DROP_SHARE = 0.10
REGRESSED = 0.05  # nats/token, gradian attribute's default threshold; only used for the per-item counts


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")


def write_data(recipe: Recipe, built: Built, out: Path) -> dict:
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "train.jsonl", built.rows)
    write_jsonl(out / "eval.jsonl", built.eval_items)
    (out / "config.yaml").write_text(yaml.safe_dump(built.config, sort_keys=False), "utf-8")
    rows = sorted(i for g, idx in built.groups.items() if g not in built.decoys for i in idx)
    planted = {
        "kind": recipe.kind,
        "cause": KINDS[recipe.kind].cause,
        "what": KINDS[recipe.kind].what,
        "rows": rows,
        "groups": built.groups,
        "decoys": sorted(i for g in built.decoys for i in built.groups[g]),
        "seed": recipe.seed,
        "fraction": recipe.fraction,
        "n_rows": len(built.rows),
        "eval_roles": built.eval_roles,
        "base": os.path.relpath(built.base, ROOT),
        "notes": built.notes,
        "edits": {str(i): spans for i, spans in sorted(built.edits.items())},
    }
    (out / "planted.json").write_text(json.dumps(planted, indent=1) + "\n", "utf-8")
    return planted


def train(base: Path, out: Path, run_dir: Path, config: dict, exclude: list[int] | None, with_eval: bool) -> float:
    from gradian.train import train_lora

    t0 = time.time()
    train_lora(
        str(base), run_dir / "train.jsonl", out, eval_path=(run_dir / "eval.jsonl") if with_eval else None,
        config=config, exclude_rows=exclude, progress=False, quiet=True,
    )  # fmt: skip
    return time.time() - t0


def nll_settings(run_dir: Path) -> dict:
    """A report.json stub that `gradian.verify.measure` reads: how the eval items are formatted and where they are."""
    fmt = {"max_length": MAX_LENGTH, "mask": "completion_only", "add_eos": False}
    return {"settings": {"format": fmt, "eval_eos": False, "eval": str(run_dir / "eval.jsonl")}}


def recovery(items: list[dict], key: str) -> dict:
    """Share of the target regression that the retrain ``key`` removes: on the summed NLLs of the target items and
    averaged over the targets that regressed by more than REGRESSED."""
    t = [x for x in items if x["role"] == "target"]
    gap = sum(x["finetuned_nll"] - x["base_nll"] for x in t)
    reg = [x for x in t if x["finetuned_nll"] - x["base_nll"] > REGRESSED]
    per = [(x["finetuned_nll"] - x[key]) / (x["finetuned_nll"] - x["base_nll"]) for x in reg]
    return {
        "recovered_total": (sum(x["finetuned_nll"] - x[key] for x in t) / gap) if gap > 0 else None,
        "recovered_mean": sum(per) / len(per) if per else None,
        "still_regressed": sum(1 for x in t if x[key] - x["base_nll"] > REGRESSED),
    }


def truth(run_dir: Path, planted: dict, base: Path, config: dict, timings: dict) -> dict:
    from gradian.verify import measure

    rows, n = planted["rows"], planted["n_rows"]
    skip = set(rows) | set(planted.get("decoys") or [])
    others = [i for i in range(n) if i not in skip]
    n_drop = len(rows) or max(1, round(CONTROL_DROP_SHARE * n))
    rand = sorted(random.Random(planted["seed"]).sample(others, n_drop))
    retrains = {"drop_random": rand}
    if rows:
        retrains = {"drop_planted": rows, **retrains}
    settings = nll_settings(run_dir)
    t0 = time.time()
    ft, base_nll = measure(str(base), run_dir / "run", settings, with_base=True)
    spent = time.time() - t0
    measured = {}
    for name, drop in retrains.items():
        timings[f"train_{name}_s"] = round(train(base, run_dir / "truth" / name, run_dir, config, drop, False), 1)
        t0 = time.time()
        measured[name], _ = measure(str(base), run_dir / "truth" / name, settings)
        spent += time.time() - t0
    timings["measure_s"] = round(spent, 1)
    items = []
    for i, role in enumerate(planted["eval_roles"]):
        x = {"index": i, "role": role, "base_nll": base_nll[i], "finetuned_nll": ft[i]}
        for name in retrains:
            x[f"{name}_nll"] = measured[name][i]
        items.append(x)
    by_role = {}
    for role in ("target", "control"):
        sel = [x for x in items if x["role"] == role]
        s = {"n": len(sel), "n_regressed": sum(x["finetuned_nll"] - x["base_nll"] > REGRESSED for x in sel)}
        for key in ["base_nll", "finetuned_nll"] + [f"{k}_nll" for k in retrains]:
            s[f"mean_{key}"] = sum(x[key] for x in sel) / len(sel) if sel else None
        if sel:
            s["mean_change"] = s["mean_finetuned_nll"] - s["mean_base_nll"]
        by_role[role] = s
    out = {
        "schema": "gradian.bench.scenario_truth/1",
        "dropped": {k: v for k, v in retrains.items()},
        "random_seed": planted["seed"],
        "items": items,
        "by_role": by_role,
        "recovery": {name: recovery(items, f"{name}_nll") for name in retrains},
        "timings": timings,
    }
    return out


def build_run(recipe: Recipe, root: Path = P.WORK, *, log=print, with_truth: bool = True) -> Path:
    """Generate one run (data, fine-tune, truth) under ``root/<name>``; a finished run is left as it is.
    ``with_truth=False``: data and fine-tune only, no counterfactual retrains (the CI verdict tests)."""
    import torch

    out = root / recipe.name
    if (out / "truth.json").is_file():
        return out
    if out.exists():
        shutil.rmtree(out)
    torch.set_num_threads(1)
    t0 = time.time()
    built = KINDS[recipe.kind].build(recipe)
    planted = write_data(recipe, built, out)
    timings = {"build_data_s": round(time.time() - t0, 1)}
    timings["train_s"] = round(train(built.base, out / "run", out, built.config, None, True), 1)
    if not with_truth:
        return out
    result = truth(out, planted, built.base, built.config, timings)
    timings["total_s"] = round(time.time() - t0, 1)
    (out / "truth.json").write_text(json.dumps(result, indent=1) + "\n", "utf-8")
    rec = result["recovery"]
    t = result["by_role"]["target"]
    log(
        f"{recipe.name}: target {t['mean_base_nll']:.3f} -> {t['mean_finetuned_nll']:.3f} "
        f"({t['n_regressed']}/{t['n']} regressed); recovered by "
        + ", ".join(f"{k} {_pct(v['recovered_total'])}" for k, v in rec.items())
        + f"; {timings['total_s']:.0f}s"
    )
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="run name(s) to build (default: the whole suite)")
    ap.add_argument("--root", type=Path, default=P.WORK)
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    recipes = [by_name(n) for n in args.only] if args.only else suite()
    if args.list:
        for r in recipes:
            print(r.name, "done" if (args.root / r.name / "truth.json").is_file() else "")
        return
    for r in recipes:
        build_run(r, args.root, log=lambda s: print(s, flush=True))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
