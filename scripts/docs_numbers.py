"""One number, one source: every figure in README.md and docs/ that a benchmark measured is rendered here from its
bench/results file, never typed by hand.

A page holds a figure between markers, and this script fills them in:

    inline:  <!-- n:suite_pass -->77 of 91<!-- /n -->
    block:   <!-- table:peers -->
             | ... the generated table ... |
             <!-- /table -->

    python scripts/docs_numbers.py            # rewrite every marked figure from bench/results
    python scripts/docs_numbers.py --check    # exit 1 and name each figure that differs from its source
    python scripts/docs_numbers.py --list     # every key, its source file and its value

tests/test_docs_numbers.py runs the check, so a page and its source cannot disagree.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
CONTROLS = ("clean", "control_epochs", "control_lr")
INLINE = re.compile(r"<!-- n:([a-z0-9_]+) -->(.*?)<!-- /n -->", re.S)
BLOCK = re.compile(r"(<!-- table:([a-z0-9_]+) -->\n)(.*?)(<!-- /table -->)", re.S)


def _json(name: str):
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _md_table(name: str, index: int = 0) -> str:
    """The index-th Markdown table of a results .md file (blank-line separated blocks of `|` lines)."""
    blocks, cur = [], []
    for line in (RESULTS / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    return "\n".join(blocks[index]) + "\n"


def _one_run(name: str) -> str:
    """A real-model run scored alone (``suite.py score-run``): its findings, verdict and truth, as a clause."""
    r = _json(name)
    warned = ", ".join(f.split(":")[0] for f in r["findings"] if f.startswith("D"))
    return (f"diagnose warns {warned}; the verdict is {r['verdict']}, cause {r['cause']}, names {r['named']} rows "
            f"(precision {r['precision']:.2f}, recall {r['recall']:.2f}, planted AUC {r['auc']:.2f}) and expects "
            f"{r['expected_recovery']:.2f} of the regression back, where the retrain without the planted rows brings "
            f"back {r['truth_recovery_planted']:.2f}")  # fmt: skip


def _passes(name: str, controls: bool = False) -> str:
    runs = _json(name)
    if controls:
        runs = [r for r in runs if r["kind"] in CONTROLS]
    return f"{sum(bool(r['pass']) for r in runs)} of {len(runs)}"


def _is_control(run: dict) -> bool:
    """A run with no row to blame: a control kind, or any run whose expected cause is none (labelled-file controls)."""
    return run["kind"] in CONTROLS or run.get("expected") == "none"


def _all_runs(controls: bool = False) -> str:
    """Passes over the suite and every held-out set (each set's file of the current build)."""
    runs = [r for name in ("verdict_suite_91.json", *(now for _, now, _ in HELDOUT if now)) for r in _json(name)]
    if controls:
        runs = [r for r in runs if _is_control(r)]
    return f"{sum(bool(r['pass']) for r in runs)} of {len(runs)}"


def _verify_suite(which: str) -> str:
    runs = [r for r in _json("verdict_suite_verify.json") if r.get("verify_judged_bar") is not None]
    if which == "verify":
        return f"{sum(bool(r['verify_judged_bar']) for r in runs)} of {len(runs)}"
    if which == "truth":
        return f"{sum(bool(r.get('truth_judged_bar')) for r in runs)} of {len(runs)}"
    agree = sum(bool(r["verify_judged_bar"]) == bool(r.get("truth_judged_bar")) for r in runs)
    return f"{agree} of {len(runs)}"


def _ratio(name: str, key: str, nd: int = 2) -> str:
    return f"{_json(name)[key]:.{nd}f}"


# The held-out sets: made after the thresholds were chosen; a blind file is the score before any change was made
# with that set in view.
HELDOUT = (
    ("first", "verdict_heldout.json", None),
    ("second", "verdict_heldout17.json", "verdict_heldout17_before.json"),
    ("third", "verdict_heldout19.json", "verdict_heldout19_blind.json"),
    ("fourth", "verdict_heldout21.json", "verdict_heldout21_blind.json"),
    ("fifth", "verdict_heldout24.json", "verdict_heldout24_blind.json"),
    ("sixth", "verdict_heldout26.json", "verdict_heldout26_blind.json"),
    ("eval sets of 160 and 240 items", "verdict_wide_eval.json", None),
    ("faults, 160-item eval sets", "verdict_wide_faults.json", None),
    ("controls, 240-item eval sets", "verdict_wide_controls.json", "verdict_wide_controls_blind.json"),
    ("pronoun flip beside copy-paste loops", "verdict_pronoun_loops.json", "verdict_pronoun_loops_blind.json"),
    (
        "pronoun flip beside copy-paste loops, second set",
        "verdict_pronoun_loops2.json",
        "verdict_pronoun_loops2_blind.json",
    ),
    ("three other LoRA set-ups", "verdict_setups.json", "verdict_setups_blind.json"),
    ("1,200-row training sets", "verdict_large.json", "verdict_large_blind.json"),
    ("2,500-row training sets", "verdict_larger.json", None),
    ("controls on a labelled file", "verdict_label_controls.json", "verdict_label_controls_blind.json"),
)


def _ratio_median(name: str, key: str) -> str:
    """A bench_callback result's median CPU ratio."""
    return f"{_json(name)[key]['cpu_s']['median']:.2f}"


def _ratio_range(name: str, key: str) -> str:
    """The lowest and highest of a bench_callback result's per-pair CPU ratios."""
    reps = _json(name)[key]["cpu_s"]["reps"]
    return f"{min(reps):.2f} to {max(reps):.2f}"


def _capture_share(name: str) -> str:
    """The callback's work on a step (take, with the covariance sums) over a bare forward+backward."""
    med = _json(name)["median_ms"]
    return f"{med['take, covariance'] / med['forward+backward']:.3f}"


def _heldout_table() -> str:
    lines = ["| set | runs | pass, scored blind | pass | controls silent |", "|---|---:|---:|---:|---:|"]
    for label, now, blind in HELDOUT:
        runs = _json(now or blind)
        ctl = [r for r in runs if _is_control(r)]
        b = _passes(blind) if blind else "–"
        c = f"{sum(bool(r['pass']) for r in ctl)} of {len(ctl)}" if ctl else "–"
        lines.append(f"| {label} | {len(runs)} | {b} | {_passes(now) if now else '–'} | {c} |")
    return "\n".join(lines) + "\n"


PEERS = (("gradian", "gradian (EK-FAC)"), ("kronfluence", "kronfluence EK-FAC, emp. Fisher"),
         ("kronfluence_true", "kronfluence EK-FAC, true Fisher"), ("bergson", "bergson, dot"),
         ("bergson_cos", "bergson, cosine"))  # fmt: skip


def _peers_table() -> str:
    d = _json("peers_suite.json")
    head = "| runs | " + " | ".join(label for _, label in PEERS) + " |"
    lines = [head.replace("| runs |", "| planted share | runs | explained |"), "|---|---:|---:|" + "---:|" * len(PEERS)]
    for frac, agg in list(d["by_fraction"].items()) + [("all", d["all"])]:
        cells = [f"{agg[p + '_auc']:.3f} · {agg[p + '_p_at_k']:.2f}" for p, _ in PEERS]
        lines.append(f"| {frac} | {agg['runs']} | {agg.get('explained', '–')} | " + " | ".join(cells) + " |")
    cpu = [f"{d['all'][p + '_cpu_seconds']:.1f}" for p, _ in PEERS]
    lines.append("| CPU seconds per run (mean) | | | " + " | ".join(cpu) + " |")
    return "\n".join(lines) + "\n"


def _process_table() -> str:
    a, b = _json("process_rows1024_s8.json"), _json("process_rows10240_s8.json")
    lines = ["| rows | floor (batched by length) | floor (file order) | gradian attribute | kronfluence EK-FAC | "
             "bergson ekfac | gradian / floor |", "|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for d in (a, b):
        cpu = d["cpu_s"]

        def s(k: str, cpu: dict = cpu) -> str:
            return f"{cpu[k]:.1f}" if k in cpu else "–"

        ratio = d["gradian_over_floor_cpu"]
        lines.append(f"| {d['rows']:,} | {s('floor')} | {s('floor_file')} | {s('gradian')} | {s('kronfluence')} | "
                     f"{s('bergson')} | {ratio:.2f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _cost_1b(col: str) -> str:
    table = _md_table("cost_model_1b.md", 0).splitlines()
    head = [c.strip() for c in table[0].strip("|").split("|")]
    row = [c.strip() for c in table[2].strip("|").split("|")]
    return row[head.index(col)].strip("*")


def _store_1b() -> str:
    for line in _md_table("cost_model_1b.md", 1).splitlines():
        if "(default)" in line:
            return line.split("|")[4].strip()
    raise KeyError("the default --proj-dim row")


def _cov_spearman_min(setup: str) -> str:
    """The lowest rank agreement, with the record whose covariance sums took every row, of the shares tried
    (bench/callback_covariance.py)."""
    return f"{min(r['vs_every_row']['spearman'] for r in _json(f'callback_covariance_{setup}.json')['settings']):.3f}"


def _noise(setup: str, what: str) -> str:
    """Over the noisy trainings (LoRA dropout, NEFTune) of bench/callback_noise.py: the lowest rank agreement of the
    recorded ranking with the post-hoc one (``spearman``) or the largest planted-AUC gap between them (``auc_gap``)."""
    rows = [r for r in _json(f"callback_noise_{setup}.json")["settings"] if r["setting"] != "none"]
    if what == "spearman":
        return f"{min(r['spearman'] for r in rows):.2f}"
    return f"{max(abs(r['auc_callback'] - r['auc_post_hoc']) for r in rows):.3f}"


def _quality(name: str, field: str, digits: int) -> str:
    """A figure of the ``quality`` block of a callback results file (bench/bench_callback.py)."""
    return f"{_json(f'callback{name}.json')['quality'][field]:.{digits}f}"


def _recovery_fit(key: str) -> str:
    """A ``key: value`` line of expected_recovery.md (the slope, the runs, how many land within 0.25)."""
    for line in (RESULTS / "expected_recovery.md").read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{key}: "):
            return line.split(": ", 1)[1]
    raise KeyError(key)


SOURCES: dict[str, tuple[str, Callable[[], str]]] = {
    "recovery_slope": ("expected_recovery.md", lambda: _recovery_fit("slope")),
    "recovery_runs": ("expected_recovery.md", lambda: _recovery_fit("runs")),
    "recovery_within": ("expected_recovery.md", lambda: _recovery_fit("within 0.25")),
    "t_realmodel_summary": ("realmodel_suite_summary.md", lambda: _md_table("realmodel_suite_summary.md", 0)),
    "t_realmodel_projdim": ("realmodel_projdim.md", lambda: _md_table("realmodel_projdim.md", 0)),
    "t_realmodel_kronfluence": ("realmodel_kronfluence.md", lambda: _md_table("realmodel_kronfluence.md", 0)),
    "t_framework_runs": ("realmodel_llamafactory.json, realmodel_axolotl.json", lambda: _framework_runs_table()),
    "suite_pass": ("verdict_suite_91.json", lambda: _passes("verdict_suite_91.json")),
    "all_pass": ("verdict_suite_91.json, verdict_heldout*.json", lambda: _all_runs()),
    "all_controls": ("verdict_suite_91.json, verdict_heldout*.json", lambda: _all_runs(controls=True)),
    "suite_controls": ("verdict_suite_91.json", lambda: _passes("verdict_suite_91.json", controls=True)),
    "heldout6_blind": ("verdict_heldout26_blind.json", lambda: _passes("verdict_heldout26_blind.json")),
    "verify_suite": ("verdict_suite_verify.json", lambda: _verify_suite("verify")),
    "verify_suite_truth": ("verdict_suite_verify.json", lambda: _verify_suite("truth")),
    "verify_suite_agree": ("verdict_suite_verify.json", lambda: _verify_suite("agree")),
    "overhead_10240": (
        "process_rows10240_s8.json",
        lambda: _ratio("process_rows10240_s8.json", "gradian_over_floor_cpu"),
    ),
    "overhead_1024": ("process_rows1024_s8.json", lambda: _ratio("process_rows1024_s8.json", "gradian_over_floor_cpu")),
    "kronfluence_1024": (
        "process_rows1024_s8.json",
        lambda: _ratio("process_rows1024_s8.json", "kronfluence_over_gradian_cpu", 1),
    ),
    "bergson_1024": (
        "process_rows1024_s8.json",
        lambda: _ratio("process_rows1024_s8.json", "bergson_over_gradian_cpu", 1),
    ),
    "peers_auc": ("peers_suite.json", lambda: f"{_json('peers_suite.json')['all']['gradian_auc']:.3f}"),
    "peers_runs": ("peers_suite.json", lambda: str(_json("peers_suite.json")["all"]["runs"])),
    "h100_hours_1b": ("cost_model_1b.md", lambda: _cost_1b("**H100 total**")),
    "a100_hours_1b": ("cost_model_1b.md", lambda: _cost_1b("**A100 total**")),
    "store_row_1b": ("cost_model_1b.md", _store_1b),
    "t_suite": ("verdict_suite_91.md", lambda: _md_table("verdict_suite_91.md", 0)),
    "t_heldout": ("verdict_heldout*.json", _heldout_table),
    "t_ceiling": ("verdict_ceiling.md", lambda: _md_table("verdict_ceiling.md", 0)),
    "t_lookalikes": ("lookalikes.md", lambda: _md_table("lookalikes.md", 0)),
    "t_peers": ("peers_suite.json", _peers_table),
    "t_process": ("process_rows1024_s8.json, process_rows10240_s8.json", _process_table),
    "t_agreement": ("agreement.txt", lambda: _md_table("agreement.txt", 0)),
    "t_mislabeled": ("quality_mislabeled.txt", lambda: _md_table("quality_mislabeled.txt", 0)),
    "t_speed_stories": ("speed_stories.txt", lambda: _md_table("speed_stories.txt", 0)),
    "t_speed_wide": ("speed_wide256.txt", lambda: _md_table("speed_wide256.txt", 0)),
    "t_cost_1b": ("cost_model_1b.md", lambda: _md_table("cost_model_1b.md", 0)),
    "t_callback": ("callback.md", lambda: _md_table("callback.md", 0)),
    "t_callback_4020": ("callback_rows4020.md", lambda: _md_table("callback_rows4020.md", 0)),
    "t_callback_smollm2": ("callback_smollm2.md", lambda: _md_table("callback_smollm2.md", 0)),
    **{
        f"callback{tag}_{key}": (f"callback{name}.json", lambda n=name, f=field, d=digits: _quality(n, f, d))
        for tag, name in (("", ""), ("_smollm2", "_smollm2"))
        for key, field, digits in (
            ("spearman", "spearman", 2),
            ("auc", "auc_callback", 3),
            ("auc_post_hoc", "auc_post_hoc", 3),
        )
    },  # fmt: skip
    **{
        f"callback_cov_spearman_min{tag}": (f"callback_covariance_{setup}.json", lambda su=setup: _cov_spearman_min(su))
        for tag, setup in (("", "stories260k"), ("_smollm2", "smollm2"))
    },
    **{
        f"callback_noise_{what}{tag}": (f"callback_noise_{setup}.json", lambda su=setup, w=what: _noise(su, w))
        for tag, setup in (("", "stories260k"), ("_smollm2", "smollm2"))
        for what in ("spearman", "auc_gap")
    },
    "refusals_zh": ("realmodel_refusals_zh_s0.json", lambda: _one_run("realmodel_refusals_zh_s0.json")),
    "callback_train_ratio": ("callback.json", lambda: _ratio_median("callback.json", "training_ratio")),
    "callback_attribute_ratio": ("callback.json", lambda: _ratio_median("callback.json", "attribute_ratio")),
    "callback_train_ratio_4020": (
        "callback_rows4020.json",
        lambda: _ratio_median("callback_rows4020.json", "training_ratio"),
    ),
    "callback_attribute_ratio_4020": (
        "callback_rows4020.json",
        lambda: _ratio_median("callback_rows4020.json", "attribute_ratio"),
    ),
    "callback_train_ratio_range": ("callback.json", lambda: _ratio_range("callback.json", "training_ratio")),
    "callback_train_ratio_4020_range": (
        "callback_rows4020.json",
        lambda: _ratio_range("callback_rows4020.json", "training_ratio"),
    ),
    "callback_train_ratio_smollm2_range": (
        "callback_smollm2.json",
        lambda: _ratio_range("callback_smollm2.json", "training_ratio"),
    ),
    "callback_train_ratio_smollm2": (
        "callback_smollm2.json",
        lambda: _ratio_median("callback_smollm2.json", "training_ratio"),
    ),
    "callback_attribute_ratio_smollm2": (
        "callback_smollm2.json",
        lambda: _ratio_median("callback_smollm2.json", "attribute_ratio"),
    ),
    "t_capture": ("capture_cost.md", lambda: _md_table("capture_cost.md", 0)),
    "capture_take_smollm2": ("capture_cost_smollm2.json", lambda: _capture_share("capture_cost_smollm2.json")),
    "t_store_1b": ("cost_model_1b.md", lambda: _md_table("cost_model_1b.md", 1)),
    "t_diagnose_corpus": ("diagnose_corpus.md", lambda: _md_table("diagnose_corpus.md", 0)),
    "t_diagnose_clean": ("diagnose_corpus.md", lambda: _md_table("diagnose_corpus.md", 1)),
    "t_diagnose_warning": ("diagnose_corpus.md", lambda: _md_table("diagnose_corpus.md", 2)),
    "diagnose_caught": ("diagnose_corpus.json", lambda: _diagnose_caught()),
}


def _framework_runs_table() -> str:
    """The refusal case trained by LLaMA-Factory and by Axolotl: the attribution (LLaMA-Factory's at the newest
    commit it was measured at) against the retrain without the planted rows."""
    lines = ["| trainer | planted rows' harm share | AUC | verdict | retrain without them | without random rows |",
             "|---|---:|---:|---|---:|---:|"]  # fmt: skip
    for name, res, attr in (
        ("LLaMA-Factory 0.9.5", "realmodel_llamafactory.json", lambda d: d["attributions"]["_head"]),
        ("Axolotl 0.19.0", "realmodel_axolotl.json", lambda d: d["attribution"]),
    ):
        d = _json(res)
        a, t = attr(d), d["truth"]
        lines.append(f"| {name} | {a['planted_pos_share']:.0%} | {a['auc']:.3f} | {a['verdict']}, {a['cause']} | "
                     f"{t['recovery_drop_planted']:.2f} | {t['recovery_drop_random16']:.2f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _diagnose_caught() -> str:
    """Planted kinds of the data-check corpus caught at recall >= 0.8, as 'N of M'."""
    kinds = _json("diagnose_corpus.json")["kinds"].values()
    return f"{sum(k['recall'] >= 0.8 for k in kinds)} of {len(kinds)}"


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def render(text: str, values: dict[str, str]) -> str:
    def inline(m: re.Match) -> str:
        return f"<!-- n:{m[1]} -->{values[m[1]]}<!-- /n -->"

    def block(m: re.Match) -> str:
        return f"{m[1]}{values[m[2]]}{m[4]}"

    return BLOCK.sub(block, INLINE.sub(inline, text))


def differences(values: dict[str, str]) -> list[str]:
    """One line per marked figure whose page text is not what its source gives (and per unknown key)."""
    out = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(REPO)
        for m in INLINE.finditer(text):
            if m[1] not in values:
                out.append(f"{rel}: unknown figure {m[1]!r}")
            elif m[2] != values[m[1]]:
                out.append(f"{rel}: {m[1]} reads {m[2]!r}, {SOURCES[m[1]][0]} gives {values[m[1]]!r}")
        for m in BLOCK.finditer(text):
            if m[2] not in values:
                out.append(f"{rel}: unknown table {m[2]!r}")
            elif m[3] != values[m[2]]:
                out.append(f"{rel}: table {m[2]} differs from {SOURCES[m[2]][0]}")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="compare; exit 1 on any difference")
    p.add_argument("--list", action="store_true", help="print every key, its source and its value")
    a = p.parse_args()
    values = {k: fn() for k, (_, fn) in SOURCES.items()}
    if a.list:
        for k, (src, _) in SOURCES.items():
            print(f"{k}  ({src}): {values[k] if not k.startswith('t_') else '<table>'}")
        return 0
    if a.check:
        diffs = differences(values)
        for d in diffs:
            print(d, file=sys.stderr)
        return 1 if diffs else 0
    for page in pages():
        text = page.read_text(encoding="utf-8")
        new = render(text, values)
        if new != text:
            page.write_text(new, encoding="utf-8")
            print(f"updated {page.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
