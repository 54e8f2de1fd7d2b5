"""Fit ``gradian.options.VerdictOptions.recovery_per_harm_share``: the retrains' recovery of the summed regression
against the named rows' share of the positive harm, over the runs of both suites whose verdict names rows.

    python bench/expected_recovery_fit.py     # reads the two results files, writes bench/results/expected_recovery.md

Stories260K (``bench/results/expected_recovery_stories.json``, ``bench/expected_recovery_data.py``): the truth is
`gradian verify`'s retrain without ``drop_rows``. Real-model suite (``bench/results/realmodel_suite.json``,
``bench/realmodel/suite.py``): the truth is the retrain without the planted rows, against the planted rows' share
of the positive harm (the same relation for another row set: its share, and the retrain without it), and, where it
ran, the retrain without the verdict's drop_rows against their share.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def points() -> list[tuple[str, str, float, float]]:
    """(suite, run, named rows' share of the positive harm, measured recovery)."""
    out = []
    for r in json.loads((RESULTS / "expected_recovery_stories.json").read_text()):
        if r.get("n_named") and r.get("verify_total_flagged") is not None:
            out.append(("stories260K", r["name"], r["named_pos_share"], r["verify_total_flagged"]))
    real = RESULTS / "realmodel_suite.json"
    for r in json.loads(real.read_text()) if real.is_file() else []:
        if r.get("planted_pos_share") is not None and r.get("truth_recovery_planted") is not None:
            run = f"{r['run']} ({r['eval']}), the planted rows"
            out.append(("SmolLM2 + TRL", run, r["planted_pos_share"], r["truth_recovery_planted"]))
        if r.get("named") and r.get("truth_recovery_named") is not None:
            run = f"{r['run']} ({r['eval']}), the verdict's drop_rows"
            out.append(("SmolLM2 + TRL", run, r["named_pos_share"], r["truth_recovery_named"]))
    lf = RESULTS / "realmodel_llamafactory.json"
    if lf.is_file():  # bench/realmodel/llamafactory.py: the planted rows, and the first verdict's retrained drop_rows
        d = json.loads(lf.read_text())
        first, truth = d["attributions"]["first"], d["truth"]
        out.append(("SmolLM2 + LLaMA-Factory", f"{d['run']}, the planted rows", first["planted_pos_share"],
                    truth["recovery_drop_planted"]))  # fmt: skip
        if truth.get("recovery_drop_named") is not None and first.get("groups"):
            share = sum(g["harm_share"] for g in first["groups"])  # its groups hold exactly its drop_rows
            out.append(("SmolLM2 + LLaMA-Factory", f"{d['run']}, the verdict's drop_rows", share,
                        truth["recovery_drop_named"]))  # fmt: skip
    return out


def preference_points() -> list[tuple[str, float, float]]:
    """The real-model runs scored by preference (no item regressed by NLL): (run, named rows' share, the retrain's
    recovery of the preference shift). Not in the fit: a second measure of the regression, shown beside it, where
    the verdict gives no expected_recovery (``gradian.verdict.recovery.calibrated``)."""
    real = RESULTS / "realmodel_suite.json"
    return [(r["run"], r["named_pos_share"], r["truth_recovery_planted_pref"])
            for r in (json.loads(real.read_text()) if real.is_file() else [])
            if r.get("truth_recovery_planted_pref") is not None and r.get("named_pos_share") is not None]  # fmt: skip


def fit(pts: list[tuple[str, str, float, float]]) -> tuple[float, float]:
    """The least-squares slope through the origin and the residual SD of min(1, slope x share)."""
    slope = sum(x * y for *_, x, y in pts) / sum(x * x for *_, x, _ in pts)
    res = [y - min(1.0, slope * x) for *_, x, y in pts]
    return slope, math.sqrt(sum(e * e for e in res) / len(res))


def main() -> None:
    pts = points()
    slope, sd = fit(pts)
    lines = [
        "# expected_recovery: the fit",
        "",
        "Produced by `python bench/expected_recovery_fit.py` (its docstring says which retrain is the truth in each "
        "suite).",
        "",
        f"slope: {slope:.2f}",
        f"runs: {len(pts)}",
        f"residual SD: {sd:.3f}",
        f"within 0.25: {sum(abs(y - min(1.0, slope * x)) <= 0.25 for *_, x, y in pts)} of {len(pts)}",
        "",
        "| suite | run | named rows' share of the positive harm | expected | measured recovery |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [f"| {s} | {n} | {x:.3f} | {min(1.0, slope * x):.0%} | {y:.0%} |" for s, n, x, y in pts]
    pref = preference_points()
    if pref:
        lines += [
            "",
            "Not in the fit: the real-model runs scored by preference (no item regressed by NLL; the truth is the "
            "share of the summed preference shift the retrain without the planted rows brings back, which can pass "
            "100% when the retrain prefers the base model's replies more than the base model does). There the slope "
            f"times the share would be within 0.25 on {sum(abs(y - min(1.0, slope * x)) <= 0.25 for _, x, y in pref)} "
            f"of {len(pref)}, so the verdict gives no expected_recovery on such a run.",
            "",
            "| run | named rows' share of the positive harm | slope x share (not given) | measured recovery "
            "(preference) |",
            "|---|---:|---:|---:|",
        ]
        lines += [f"| {n} | {x:.3f} | {min(1.0, slope * x):.0%} | {y:.0%} |" for n, x, y in pref]
    (RESULTS / "expected_recovery.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
