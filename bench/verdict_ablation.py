"""The verdict's steps, each switched off in turn (``VerdictOptions.skip``), on every committed run: which steps
change a run's pass or fail, and which change its verdict at all.

    python bench/verdict_ablation.py --runs bench/work/scenarios                     # the stories260K suite
    python bench/verdict_ablation.py --runs bench/work/scenarios --realmodel bench/work/realmodel  # and the real model

**stories260K** (the 48 runs ``calibrate_verdict.py --compare`` scores): each run's verdict is re-decided as the
default ``--query regressed`` run would make it, by the same machinery (:func:`calibrate_verdict.evaluate`: the
regression rule, the summed per-item harm, :func:`gradian.verdict.make.make_verdict`), once with every step on and
once per step with that step off; a run passes as there (drop_rows at precision and recall >= 0.8 and the cause
right; a control names no culprit). That path saves no eval text or per-item eval index, so the ``driven`` and
``forgetting`` steps read nothing there.

**Real-model suite** (SmolLM2-135M-Instruct trained by TRL, ``bench/realmodel/suite.py``): each saved attribution
(``attr_prompts``, ``attr_refs``) is re-decided from its saved inputs as the pipeline decides it (the evidence of
:func:`gradian.report.build.verdict_evidence`, the token profiles, the regressed items' texts), every step on and
each off. Its runs carry no pass rule of their own here: the table counts the runs whose verdict (kind, cause,
drop_rows, forgetting) changes, with the named rows' precision and recall against the planted rows.

Writes bench/results/verdict_ablation.{md,json}. A step whose switching off changes no run's pass or fail is listed
as such; which steps stay is decided elsewhere.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))

import calibrate_verdict as cal  # noqa: E402
from scenarios.recipes import run_set  # noqa: E402

from gradian.attribute.regression import RegressionRule  # noqa: E402
from gradian.options.verdict import STEP_NAMES, VerdictOptions  # noqa: E402

RESULTS = REPO / "bench" / "results"


def stories(runs_dir: Path) -> dict[str, Any]:
    """Per configuration (``all`` and each step off): the passes, and each run's pass, verdict, cause and rows."""
    cal.RUNS_ROOT[:] = [runs_dir]
    dirs = [d for d in sorted(runs_dir.iterdir()) if d.is_dir() and run_set(d.name) == "suite"]
    runs = [r for d in dirs if (r := cal.load_run(d)) is not None]
    out: dict[str, Any] = {}
    for name in ("all", *STEP_NAMES):
        options = VerdictOptions(skip=() if name == "all" else (name,))
        rows = []
        for run in runs:
            captured: dict[str, Any] = {}
            real = cal.make_verdict

            def keep(*a: Any, _real: Any = real, _into: dict[str, Any] = captured, **k: Any) -> Any:
                v = _real(*a, **k)
                _into["drop"] = list(v.drop_rows)
                return v

            cal.make_verdict = keep
            try:
                r = cal.evaluate(run, RegressionRule(), options)
            finally:
                cal.make_verdict = real
            rows.append({"name": r["name"], "kind": r["kind"], "pass": bool(r["pass"]), "verdict": r["verdict"],
                         "cause": r["cause"], "drop": captured["drop"]})  # fmt: skip
        out[name] = {"passes": sum(r["pass"] for r in rows), "runs": rows}
        print(f"stories260K {name}: {out[name]['passes']} / {len(rows)} pass", flush=True)
    return out


def realmodel(root: Path) -> dict[str, Any]:
    """Per configuration: each saved attribution's verdict re-decided from its saved inputs."""
    attrs = sorted(p for p in root.glob("*_s*/attr_*") if (p / "report.json").is_file() and _attributed(p))
    out: dict[str, Any] = {}
    for name in ("all", *STEP_NAMES):
        options = VerdictOptions(skip=() if name == "all" else (name,))
        out[name] = {"runs": [redecide(p, options) for p in attrs]}
        print(f"real model {name}: {len(out[name]['runs'])} attributions", flush=True)
    return out


def _attributed(attr: Path) -> bool:
    """An attribution that ranked rows (a run with no regressed item saves nothing to re-decide)."""
    kind = (json.loads((attr / "report.json").read_text()).get("verdict") or {}).get("kind")
    return kind != "no_regression" and (attr / "rows.jsonl").is_file()


def redecide(attr: Path, options: VerdictOptions) -> dict[str, Any]:
    """One saved attribution's verdict as the pipeline decides it, under ``options``."""
    from gradian.report.build import regressed_texts, verdict_evidence
    from gradian.report.cli import _read_jsonl, load_embeddings, load_item_scores, load_token_profiles
    from gradian.verdict.steps import decide
    from gradian.verdict.words import write

    report = json.loads((attr / "report.json").read_text())
    findings = json.loads((attr / "findings.json").read_text())
    findings = findings.get("findings", []) if isinstance(findings, dict) else findings
    emb, idx = load_embeddings(attr)
    evals = _read_jsonl(attr / "eval_rows.jsonl") if (attr / "eval_rows.jsonl").is_file() else None
    ev = verdict_evidence(report, findings=findings, embeddings=emb, embedding_index=idx,
                          train_examples=_read_jsonl(attr / "rows.jsonl"), item_scores=load_item_scores(attr),
                          verdict_options=options)  # fmt: skip
    ev.token_profiles = load_token_profiles(attr)
    ev.item_texts = regressed_texts(report, evals)
    v = write(ev, decide(ev, options), options)
    planted = set(json.loads((attr.parent / "planted.json").read_text()).get("rows") or [])
    named = set(v.drop_rows)
    return {
        "name": f"{attr.parent.name}/{attr.name}", "verdict": v.kind, "cause": v.cause, "drop": v.drop_rows,
        "forgetting": bool((v.forgetting or {}).get("found")), "expected_recovery": v.expected_recovery,
        "precision": len(named & planted) / len(named) if named else None,
        "recall": len(named & planted) / len(planted) if planted and named else (0.0 if planted else None),
    }  # fmt: skip


def changed(a: dict[str, Any], b: dict[str, Any], keys: tuple[str, ...]) -> bool:
    return any(a.get(k) != b.get(k) for k in keys)


def table(result: dict[str, Any]) -> str:
    st, rm = result["stories260k"], result.get("realmodel")
    base = {r["name"]: r for r in st["all"]["runs"]}
    n = len(base)
    keys = ("verdict", "cause", "drop")
    lines = [
        "# The verdict's steps, each switched off",
        "",
        "Produced by `python bench/verdict_ablation.py` (its docstring says how). stories260K: the 48 planted-fault",
        f"runs `calibrate_verdict.py --compare` scores; with every step on, {st['all']['passes']} / {n} pass.",
        "*pass flips*: runs whose pass or fail changes with the step off; *verdicts changed*: runs whose kind, cause",
        "or drop_rows change. Real model: the saved attributions of the real-model suite, re-decided as the pipeline",
        "decides (kind, cause, drop_rows or forgetting changed).",
        "",
        "| step off | stories260K passes | pass flips | verdicts changed | runs that flip |"
        + (" real model: verdicts changed |" if rm else ""),
        "|---|---|---|---|---|" + ("---|" if rm else ""),
    ]
    for name in STEP_NAMES:
        runs = st[name]["runs"]
        flips = [
            r["name"] + (" (pass)" if r["pass"] else " (fail)") for r in runs if r["pass"] != base[r["name"]]["pass"]
        ]
        moved = sum(changed(r, base[r["name"]], keys) for r in runs)
        cells = [name, f"{st[name]['passes']} / {n}", str(len(flips)), str(moved), ", ".join(flips) or "none"]
        if rm:
            rbase = {r["name"]: r for r in rm["all"]["runs"]}
            rmoved = [r["name"] for r in rm[name]["runs"] if changed(r, rbase[r["name"]], (*keys, "forgetting"))]
            cells.append(f"{len(rmoved)} / {len(rbase)}" + (f" ({', '.join(rmoved)})" if rmoved else ""))
        lines.append("| " + " | ".join(cells) + " |")
    still = [s for s in STEP_NAMES if all(r["pass"] == base[r["name"]]["pass"] for r in st[s]["runs"])]
    lines += ["", "Steps whose switching off changes no stories260K run's pass or fail: " + ", ".join(still) + "."]
    if rm:
        rbase = rm["all"]["runs"]
        lines += ["", "Real model, every step on:", "", "| attribution | kind | cause | named | precision | recall | "
                  "forgetting | expected recovery |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in rbase:
            cells = [r["name"], r["verdict"], r["cause"], str(len(r["drop"])), _f(r["precision"]), _f(r["recall"]),
                     str(r["forgetting"]), _f(r["expected_recovery"])]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _f(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, default=REPO / "bench" / "work" / "scenarios")
    ap.add_argument("--realmodel", type=Path, help="the real-model suite's runs (bench/work/realmodel)")
    ap.add_argument("--out", type=Path, default=RESULTS / "verdict_ablation")
    args = ap.parse_args()
    result: dict[str, Any] = {"stories260k": stories(args.runs)}
    if args.realmodel is not None:
        result["realmodel"] = realmodel(args.realmodel)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(table(result))
    print(args.out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
