"""Calibrate the verdict's thresholds on the planted-fault suite, from what attribution saved: no retraining.

    python bench/calibrate_verdict.py --runs bench/work/scenarios            # score the default policy
    python bench/calibrate_verdict.py --runs bench/work/scenarios --search   # grid over the thresholds
    python bench/calibrate_verdict.py --runs bench/work/scenarios --heldout  # the held-out runs alone
    python bench/calibrate_verdict.py --runs bench/work/scenarios --set heldout17  # or another set (recipes.SETS)
    python bench/calibrate_verdict.py --set heldout19 --policy min_stability=0.55  # another policy, scored

Each run dir (``bench/scenarios/generate.py``) holds ``planted.json`` (the planted rows and the expected cause,
"none" for controls) and ``attr/`` (``gradian attribute --query all``: per-item harm for every eval item). The
verdict is recomputed as the default ``--query regressed`` run would make it: the regression rule picks the items,
their per-item harm is summed (scores are linear in the query, so this equals a fresh run) and
:func:`gradian.verdict.make.make_verdict` decides. A run passes when the verdict's ``drop_rows`` reach precision
and recall >= 0.8 against the planted rows and the cause is right, or, on a control, when no culprit is named.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import itertools
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))

from scenarios.recipes import SETS, run_set  # noqa: E402

from gradian.attribute.regression import RegressionRule, call_regressions  # noqa: E402
from gradian.attribute.token_profiles import TokenProfiles  # noqa: E402
from gradian.options.verdict import VerdictOptions  # noqa: E402
from gradian.report.cli import load_token_profiles  # noqa: E402
from gradian.verdict.make import make_verdict  # noqa: E402


@dataclasses.dataclass
class Run:
    name: str
    kind: str
    cause: str  # expected: content | mechanical | content+mechanical | none
    planted: set[int]
    base: np.ndarray
    ft: np.ndarray
    items: list[int]  # eval index of each item_scores row
    S: np.ndarray  # (items, rows)
    cols: list[int]
    findings: list[dict]
    texts: dict[int, str]
    roles: list[str]
    emb: np.ndarray | None = None  # (rows, k) gradient embeddings, ``cols`` order
    profiles: TokenProfiles | None = None  # attr/token_profiles.json (older runs: none)
    decoys: set[int] = dataclasses.field(default_factory=set)  # planted rows not to blame: not counted either way
    labels: dict[int, str] = dataclasses.field(default_factory=dict)  # row -> its completion when short (a label)


@functools.cache
def rules_key() -> list[str]:
    """What cached findings are keyed by: the rule set (codes, causes, threshold defaults) and the diagnose package's
    source. Read once per process."""
    from gradian.diagnose.catalog import all_rules

    source = hashlib.sha256()
    for f in sorted((REPO / "src" / "gradian" / "diagnose").rglob("*.py")):
        source.update(f.read_bytes())
    return sorted(
        f"{r.code}:{r.cause}" + "".join(f":{k}={t.default}" for k, t in sorted(r.thresholds.items()))
        for r in all_rules()
    ) + [source.hexdigest()]


def fresh_findings(d: Path, planted: dict) -> list[dict]:
    """Diagnose findings from this checkout's rules (the run's saved findings may predate them), cached beside the
    run as findings.current.json and keyed by :func:`rules_key`."""
    from gradian.diagnose.api import diagnose_full

    key = rules_key()
    cache = d / "findings.current.json"
    if cache.is_file():
        saved = json.loads(cache.read_text())
        if saved.get("rules") == key:
            return saved["findings"]
    base = Path(str(planted.get("base") or "examples/stories260k/base"))
    for root in (REPO, *d.parents):
        if (root / base).is_dir():
            base = root / base
            break
    findings, _notes, _ctx = diagnose_full(
        run=d / "run", train=d / "train.jsonl", eval=d / "eval.jsonl", base=str(base)
    )
    out = [f.to_dict() for f in findings]
    cache.write_text(json.dumps({"rules": key, "findings": out}, default=str))
    return out


def load_run(d: Path) -> Run | None:
    attr = d / "attr"
    if not (attr / "item_scores.npy").is_file() or not (d / "planted.json").is_file():
        return None
    planted = json.loads((d / "planted.json").read_text())
    rep = json.loads((attr / "report.json").read_text())
    ev = rep.get("eval") or []
    findings = fresh_findings(d, planted)
    texts = {}
    if (attr / "rows.jsonl").is_file():
        for line in (attr / "rows.jsonl").read_text().splitlines():
            r = json.loads(line)
            texts[int(r["index"])] = r.get("text") or ""
    return Run(
        d.name,
        str(planted.get("kind")),
        str(planted.get("cause")),
        {int(i) for i in planted.get("rows") or []},
        np.array([e["base_nll"] if e["base_nll"] is not None else np.nan for e in ev], dtype=float),
        np.array([e["finetuned_nll"] if e["finetuned_nll"] is not None else np.nan for e in ev], dtype=float),
        [int(i) for i in rep["settings"]["query_items"]],
        np.load(attr / "item_scores.npy").astype(np.float64),
        np.load(attr / "embeddings_index.npy").astype(int).tolist(),
        findings,
        texts,
        list(planted.get("eval_roles") or []),
        np.load(attr / "embeddings.npy").astype(np.float64) if (attr / "embeddings.npy").is_file() else None,
        load_token_profiles(attr),
        {int(i) for i in planted.get("decoys") or []},
        {int(e["index"]): str(e["label"]) for e in rep.get("examples") or [] if e.get("label")},
    )


def auc(scores: np.ndarray, pos: np.ndarray) -> float:
    from scipy.stats import mannwhitneyu

    if pos.all() or not pos.any():
        return float("nan")
    return float(mannwhitneyu(scores[pos], scores[~pos]).statistic / (pos.sum() * (~pos).sum()))


def best_cut(scores: np.ndarray, pos: np.ndarray, bar: float = 0.8) -> tuple[bool, float]:
    """The ranking's ceiling for any verdict that names its top rows: (whether some cut of ``scores``, most harmful
    first, names the ``pos`` rows at precision and recall >= ``bar``, the best min(precision, recall) over all cuts).
    The cut is chosen knowing the answer, so no verdict drawn from this ranking does better."""
    n = int(pos.sum())
    if not n:
        return False, 0.0
    tp = np.cumsum(pos[np.argsort(-scores, kind="stable")])
    m = np.arange(1, len(tp) + 1)
    worst = np.minimum(tp / m, tp / n)
    return bool((worst >= bar).any()), float(worst.max())


def verify_default(run_dir: Path, verdict: dict, reg_items: list[int], seeds: int = 1) -> dict:
    """`gradian verify --seeds N` on the default verdict: a copy of the run's report.json whose regressed items and
    drop_rows are the ones the default `gradian attribute` gives, beside the attribution's per-item harm (two real
    retrains, three for each extra seed). Cached in <run>/verify_default/ (one seed) or <run>/verify_default_s<N>/; a
    cached verify.json from before ``summary.driven`` gets it from its stored per-item recoveries, no retraining."""
    from gradian.options import VerifyOptions
    from gradian.verify import driven_by, driven_recovery, item_median, read_report, verify

    out = run_dir / ("verify_default" if seeds == 1 else f"verify_default_s{seeds}")
    key = {"drop_rows": verdict["drop_rows"], "regressed": reg_items}
    done = out / "verify.json"
    out.mkdir(exist_ok=True)
    for name in ("item_scores.npy", "embeddings_index.npy"):  # what verify reads the driven items from
        if not (out / name).is_file() and (run_dir / "attr" / name).is_file():
            shutil.copyfile(run_dir / "attr" / name, out / name)
    if done.is_file() and json.loads((out / "key.json").read_text()) == key:
        result = json.loads(done.read_text())
    else:
        rep = json.loads((run_dir / "attr" / "report.json").read_text())
        ev = {int(e["index"]): e for e in rep.get("eval") or []}
        rep["regressed"] = [{**ev[i], "regressed": True} for i in reg_items]
        rep["verdict"] = {**(rep.get("verdict") or {}), "drop_rows": verdict["drop_rows"], "kind": verdict["kind"]}
        (out / "report.json").write_text(json.dumps(rep))
        result = verify(out, progress=False, seeds=seeds)
        (out / "key.json").write_text(json.dumps(key))
    # the statistics from the stored per-item recoveries, as this checkout's verify computes them, so that a cached
    # verify.json written by an older rule (e.g. the mean over items) is scored like a fresh one
    summary = result["summary"]
    regressed = [it["index"] for it in result["items"]]
    found = driven_by(out, read_report(out), result["runs"]["drop_flagged"]["removed"], regressed, VerifyOptions())
    drv = driven_recovery(result["seeds"], found) if found else {}
    on_driven = bool(drv.get("significant"))
    fl = [item_median(sd["runs"]["drop_flagged"]) for sd in result["seeds"]]
    rd = [item_median(sd["runs"]["drop_random"]) for sd in result["seeds"]]
    return {
        "verify_flagged": _mean(fl),
        "verify_random": _mean(rd),
        "verify_total_flagged": summary.get("recovered_total_flagged"),
        "verify_total_random": summary.get("recovered_total_random"),
        "verify_flagged_per_seed": fl,
        "verify_random_per_seed": rd,
        "verify_n_driven": drv.get("n_driven"),
        "verify_driven_significant": on_driven,
        "verify_driven_flagged": drv.get("recovered_flagged") if on_driven else None,
        "verify_driven_random": drv.get("recovered_random") if on_driven else None,
    }


def verify_bar(row: dict, prefix: str = "verify") -> bool | None:
    """The issue's bar for `gradian verify`: the verdict's rows recover >= 80% of the regression, random rows <= 20%
    (None when verify did not run). ``prefix="truth_reg"``: the same bar for the planted rows themselves;
    ``"verify_driven"`` / ``"truth_drv"``: on the driven items only."""
    a, b = row.get(f"{prefix}_flagged"), row.get(f"{prefix}_random")
    return None if a is None or b is None else bool(a >= 0.8 and b <= 0.2)


def judged_bar(row: dict, prefix: str) -> bool | None:
    """The bar on the items verify judges by (``summary.confirmed_on``): the driven items when there are
    significantly many, else every regressed item. ``prefix``: "verify" or "truth"."""
    drv = {"verify": "verify_driven", "truth": "truth_drv"}[prefix]
    if row.get(f"{drv}_flagged") is not None:
        return verify_bar(row, drv)
    return verify_bar(row, "verify" if prefix == "verify" else "truth_reg")


def truth_on_items(run_dir: Path, items: list[int], prefix: str) -> dict:
    """What verify's statistic (the median over ``items`` of the share of each item's regression a retrain removes)
    gives for the counterfactual retrains of truth.json, without the planted rows and without as many random rows:
    the most the verify bar can show when the verdict names exactly the planted rows (the same training seed as
    verify's first)."""
    t = json.loads((run_dir / "truth.json").read_text())
    by_index = {int(it["index"]): it for it in t.get("items") or []}

    def rec(key: str) -> float | None:
        got = [
            (it["finetuned_nll"] - it[key]) / (it["finetuned_nll"] - it["base_nll"])
            for i in items
            if (it := by_index.get(i)) and it.get(key) is not None and it["finetuned_nll"] > it["base_nll"]
        ]
        return float(np.median(got)) if got else None

    return {f"{prefix}_flagged": rec("drop_planted_nll"), f"{prefix}_random": rec("drop_random_nll")}


def truth_recoveries(run_dir: Path, run: Run, S: np.ndarray, reg_items: list[int]) -> dict:
    """The truth's recoveries on every regressed item (``truth_reg_*``) and on the items the planted rows drive
    (``truth_drv_*``, when significantly many; :mod:`gradian.verdict.driven` at verify's defaults)."""
    from gradian.options import VerifyOptions
    from gradian.verdict.driven import driven_items

    out = truth_on_items(run_dir, reg_items, "truth_reg")
    out["truth_bar"] = verify_bar(out, "truth_reg")
    if len(reg_items) and run.planted:
        o = VerifyOptions()
        found = driven_items(S, reg_items, run.cols, sorted(run.planted), z=o.driven_z, alpha=o.driven_alpha)
        out["truth_n_driven"] = len(found.items)
        if found.significant:
            out.update(truth_on_items(run_dir, found.items, "truth_drv"))
            out["truth_drv_bar"] = verify_bar(out, "truth_drv")
        # the falsification: truth's random rows, as if blamed, should drive no more items than chance
        rand = json.loads((run_dir / "truth.json").read_text())["dropped"].get("drop_random") or []
        null = driven_items(S, reg_items, run.cols, rand, z=o.driven_z, alpha=o.driven_alpha)
        out["random_rows_n_driven"], out["random_rows_significant"] = len(null.items), null.significant
    out["truth_judged_bar"] = judged_bar(out, "truth")
    return out


def evaluate(run: Run, rule: RegressionRule, policy: VerdictOptions, *, run_verify: int = 0) -> dict:
    call = call_regressions(run.base, run.ft, rule)
    ev_index = list(range(len(run.base)))
    reg_items = [i for i in ev_index if call.regressed[i]]
    pick = [k for k, i in enumerate(run.items) if i in set(reg_items)]
    S = run.S[pick]
    s = S.sum(0) if pick else np.zeros(len(run.cols))
    examples = [{"index": r, "id": None, "score": float(v), "label": run.labels.get(r)}
                for r, v in zip(run.cols, s, strict=True)]  # fmt: skip
    regressed = [{"index": i} for i in reg_items]
    v = make_verdict(
        [], run.findings, examples, regressed, n_rows=len(run.cols), item_scores=S if pick else None,
        item_rows=run.cols, texts=run.texts, regression=call.to_dict(), policy=policy, embeddings=run.emb,
        token_profiles=run.profiles,
    ).to_dict()  # fmt: skip
    drop = set(v["drop_rows"])
    out = {"name": run.name, "kind": run.kind, "expected": run.cause, "verdict": v["kind"], "cause": v["cause"]}
    out["n_regressed"] = len(reg_items)
    roles = run.roles
    if roles and len(roles) == len(run.base):
        out["targets_regressed"] = sum(1 for i in reg_items if roles[i] == "target")
        out["controls_regressed"] = sum(1 for i in reg_items if roles[i] == "control")
        out["n_targets"] = roles.count("target")
    out["stability"] = v["confidence"]["stability"]
    leads = (v.get("how") or {}).get("leads") or []
    out["lead_rows"] = sum(len(x["rows"]) for x in leads)
    out["lead_planted"] = sum(len(set(x["rows"]) & run.planted) for x in leads)
    if run.cause == "none" or not run.planted:
        out["pass"] = v["kind"] != "concentrated"
        out["n_drop"] = len(drop)
        out["hint_rows"] = sum(len(h["rows"]) for h in (v.get("how") or {}).get("hints") or [])
        if run_verify and v["drop_rows"] and RUNS_ROOT:  # a control that names rows: does verify refute them?
            out.update(verify_default(RUNS_ROOT[0] / run.name, v, reg_items, seeds=run_verify))
        return out
    out["explained"] = explained(RUNS_ROOT[0] / run.name) if RUNS_ROOT else True
    out["lookalike_per_row"] = lookalike_per_row(RUNS_ROOT[0] / run.name) if RUNS_ROOT else None
    if RUNS_ROOT:
        out.update(truth_recoveries(RUNS_ROOT[0] / run.name, run, S, [run.items[k] for k in pick]))
    pos = np.array([c in run.planted for c in run.cols])
    k = len(run.planted)
    order = np.argsort(-s, kind="stable")
    out["auc"] = auc(s, pos) if pick else float("nan")
    out["p_at_k"] = float(pos[order[:k]].mean()) if pick else 0.0
    judged = np.array([c not in run.decoys for c in run.cols])  # decoy rows are neither hit nor miss
    out["cut_can_pass"], out["best_cut"] = best_cut(s[judged], pos[judged]) if pick else (False, 0.0)
    got = set(v["cause"].split("+")) if v["kind"] == "concentrated" else set()
    out["precision"], out["recall"], out["cause_right"] = judge(run, drop, got)
    if run.decoys:
        out["decoys_named"] = len(drop & run.decoys)
    hinted = {int(r) for h in (v.get("how") or {}).get("hints") or [] for r in h["rows"]}
    out["hint_rows"], out["hint_planted"] = len(hinted), len(hinted & run.planted)
    out["missed"], out["missed_hinted"] = len(run.planted - drop), len(hinted & (run.planted - drop))
    out["pass"] = out["precision"] >= 0.8 and out["recall"] >= 0.8 and out["cause_right"]
    if not out["explained"]:  # the planted rows explain no real regression: naming nobody is right too
        out["pass"] = out["pass"] or not drop or out["precision"] >= 0.8
    if run_verify and v["drop_rows"]:
        out.update(verify_default(RUNS_ROOT[0] / run.name, v, reg_items, seeds=run_verify))
        out["verify_bar"] = verify_bar(out)
        out["verify_bar_driven"] = verify_bar(out, "verify_driven")
        out["verify_judged_bar"] = judged_bar(out, "verify")
    return out


RUNS_ROOT: list[Path] = []


def score(runs: list[Run], rule: RegressionRule, policy: VerdictOptions, run_verify: int = 0) -> tuple[int, list]:
    rows = [evaluate(r, rule, policy, run_verify=run_verify) for r in runs]
    return sum(r["pass"] for r in rows), rows


def judge(run: Run, named: set[int], causes: set[str]) -> tuple[float, float, bool]:
    """(precision and recall of the ``named`` rows against the planted ones, whether ``causes`` are the run's). A
    decoy row (a real defect the targets do not probe) is neither a hit nor a miss, and a decoy group may add its own
    cause."""
    hit, judged = len(named & run.planted), named - run.decoys
    want = set(run.cause.split("+"))
    right = want <= causes if run.decoys else causes == want
    return (hit / len(judged) if judged else 0.0), hit / len(run.planted), right


def fast_objective(run: Run, S: np.ndarray | None, policy: VerdictOptions) -> tuple[float, bool]:
    """(F1 of the culprit rows with the cause right, or 1/0 on a control; pass) straight from
    :func:`find_culprits` (no texts, no sentences): what --search optimises."""
    from gradian.verdict.steps import find_culprits

    if S is None:
        ok = run.cause == "none" or not run.planted
        return float(ok), ok
    found = find_culprits(
        S, S.sum(0), run.cols, findings=run.findings, embeddings=run.emb, policy=policy, token_profiles=run.profiles
    )
    if run.cause == "none" or not run.planted:
        return float(not found.concentrated), not found.concentrated
    if not found.concentrated:
        return 0.0, False
    p, r, right = judge(run, set(found.head), {g.cause for g in found.groups})
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return (f1 if right else 0.0), (p >= 0.8 and r >= 0.8 and right)


def regressed_scores(run: Run, rule: RegressionRule) -> np.ndarray | None:
    call = call_regressions(run.base, run.ft, rule)
    reg = set(np.flatnonzero(call.regressed).tolist())
    pick = [k for k, i in enumerate(run.items) if i in reg]
    return run.S[pick] if pick else None


def explained(d: Path) -> bool:
    """Whether the planted rows explain a real regression (truth.json): the targets' NLL rose by more than 0.05, the
    planted-drop retrain removes at least half of it and the random-drop retrain at most a fifth."""
    if not (d / "truth.json").is_file():
        return True
    t = json.loads((d / "truth.json").read_text())
    rec = t.get("recovery") or {}
    rise = (t.get("by_role") or {}).get("target", {}).get("mean_change") or 0.0
    planted = (rec.get("drop_planted") or {}).get("recovered_total")
    random = (rec.get("drop_random") or {}).get("recovered_total")
    return rise > 0.05 and planted is not None and planted >= 0.5 and (random is None or random <= 0.2)


def truth_recovery(d: Path) -> dict:
    """The counterfactual: share of the target regression removed by retraining without the planted rows / without
    as many random rows (truth.json)."""
    if not (d / "truth.json").is_file():
        return {}
    rec = json.loads((d / "truth.json").read_text()).get("recovery") or {}
    return {f"truth_{k}": v.get("recovered_total") for k, v in rec.items()}


def per_row(rec_a: float | None, n_a: int, rec_b: float | None, n_b: int) -> float | None:
    """(recovery per dropped row of a) / (per dropped row of b)."""
    if rec_a is None or rec_b is None or not n_a or not n_b or rec_b == 0:
        return None
    return (rec_a / n_a) / (rec_b / n_b)


def other_rows_recovery(t: dict) -> tuple[float | None, float | None]:
    """What dropping as many rows as the look-alike retrain did, rows that are neither planted nor look-alikes:
    (mean, spread) over the draws of truth_lookalike.json ``t`` where it has them, else the truth's random drop scaled
    to that many rows (spread None)."""
    rec = {k: v["recovered_total"] for k, v in t["recovery"].items()}
    draws = [v for k, v in rec.items() if k.startswith("drop_random_like_") and v is not None]
    if draws:
        return float(np.mean(draws)), float(np.std(draws, ddof=1)) if len(draws) > 1 else None
    if rec.get("drop_random") is None:
        return None, None
    return rec["drop_random"] * len(t["dropped"]["drop_lookalike"]) / t["n_planted"], None


def net_per_row(t: dict) -> float | None:
    """How much of a planted row's harm one of its look-alikes carries, per row, in the retrains of truth_lookalike.json
    ``t`` (``bench/bench_lookalikes.py``). Each drop is read net of dropping as many other rows
    (:func:`other_rows_recovery`; the truth's random drop for the planted rows), since dropping any rows moves the
    regression too."""
    rec = {k: v["recovered_total"] for k, v in t["recovery"].items()}
    other, _ = other_rows_recovery(t)
    if None in (rec["drop_lookalike"], rec["drop_planted"], rec["drop_random"], other):
        return None
    n = len(t["dropped"]["drop_lookalike"])
    return per_row(rec["drop_lookalike"] - other, n, rec["drop_planted"] - rec["drop_random"], t["n_planted"])


def lookalike_per_row(d: Path) -> float | None:
    """:func:`net_per_row` of run ``d`` (None where the look-alike retrains did not run)."""
    f = d / "truth_lookalike.json"
    return net_per_row(json.loads(f.read_text())) if f.is_file() else None


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None and x == x]
    return sum(xs) / len(xs) if xs else None


def markdown_table(rows: list[dict]) -> str:
    """Two per-kind tables. The verdict: runs and how many of them the planted rows really explain (truth.json); on
    the explained runs the ranking's AUC and P@K, the verdict's drop_rows precision and recall, and whether the cause
    is right; runs that pass, and among the explained runs those that pass and those where some cut of the ranking
    would (:func:`best_cut`: the ceiling of any verdict that names the top rows); the truth's recoveries. Then,
    where `gradian verify` ran, on the explained runs: its recoveries for the verdict's rows and random rows on every
    regressed item and on the items the verdict's rows drive (:mod:`gradian.verdict.driven`), on how many runs each
    met the bar (:func:`verify_bar`), and on how many of those same runs the planted rows themselves meet it
    (:func:`truth_recoveries`)."""

    def f(x: float | None, pct: bool = False) -> str:
        return "–" if x is None else (f"{100 * x:.0f}%" if pct else f"{x:.2f}")

    def count(group: list[dict], key: str) -> str:
        done = [r[key] for r in group if r.get(key) is not None]
        return f"{sum(done)} of {len(done)}" if done else "–"

    def mean(group: list[dict], key: str, pct: bool = False) -> str:
        return f(_mean([r.get(key) for r in group]), pct)

    verdict = [
        "| kind | runs | explained | AUC | P@K | precision | recall | cause right | pass | explained: pass "
        "| explained: a cut of the ranking passes | truth: planted-drop | random-drop |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    check = [
        "| kind | verified | all regressed items: verdict rows | random rows | bar | bar, planted rows "
        "| driven items | on them: verdict rows | random rows | bar | bar, planted rows | bar as verify judges |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in sorted({r["kind"] for r in rows}):
        rs = [r for r in rows if r["kind"] == kind]
        ctl = rs[0]["expected"] == "none"
        ex = [r for r in rs if r.get("explained")]
        if ctl:
            verdict.append(f"| {kind} | {len(rs)} | – | – | – | – | – | – | {sum(r['pass'] for r in rs)} of {len(rs)} "
                           f"| – | – | – | {mean(rs, 'truth_drop_random', True)} |")  # fmt: skip
            continue
        verdict.append(
            f"| {kind} | {len(rs)} | {len(ex)} | {mean(ex, 'auc')} | {mean(ex, 'p_at_k')} | {mean(ex, 'precision')} "
            f"| {mean(ex, 'recall')} | {sum(bool(r.get('cause_right')) for r in ex)} "
            f"| {sum(r['pass'] for r in rs)} of {len(rs)} | {count(ex, 'pass')} | {count(ex, 'cut_can_pass')} "
            f"| {mean(rs, 'truth_drop_planted', True)} | {mean(rs, 'truth_drop_random', True)} |"
        )
        vx = [r for r in ex if r.get("verify_bar") is not None]
        if not vx:
            continue
        drv = [r for r in vx if r.get("verify_driven_flagged") is not None]
        n_drv = sum(r["verify_n_driven"] or 0 for r in vx)
        n_reg = sum(r["n_regressed"] for r in vx)
        check.append(
            f"| {kind} | {len(vx)} | {mean(vx, 'verify_flagged', True)} | {mean(vx, 'verify_random', True)} "
            f"| {count(vx, 'verify_bar')} | {count(vx, 'truth_bar')} | {n_drv} of {n_reg} "
            f"| {mean(drv, 'verify_driven_flagged', True)} | {mean(drv, 'verify_driven_random', True)} "
            f"| {count(drv, 'verify_bar_driven')} | {count(drv, 'truth_drv_bar')} | {count(vx, 'verify_judged_bar')} |"
        )
    return "\n".join(verdict) + "\n\n" + "\n".join(check) + "\n\n" + hints_table(rows)


def ceiling_table(rows: list[dict]) -> str:
    """Per kind, on the runs whose planted rows explain the regression: how many the verdict passes, and how many some
    cut of its ranking passes (:func:`best_cut`, chosen knowing the answer). A verdict past the ceiling used what
    the ranking does not hold (a diagnose finding's rows); a run under it, where the cut passes and the verdict does
    not, is the verdict's own miss (named per kind, counted over all faults). Where the look-alike retrains ran on
    these runs (:func:`lookalike_per_row`; the column is left out where none did), how much harm the rows the planted
    ones imitate carry: near 1, no ranking that follows the harm can cut the planted rows out. The controls: runs,
    and how many name no rows."""
    looked = any(r.get("lookalike_per_row") is not None for r in rows)

    def line(name: str, runs: list[dict], own: Callable[[list[dict]], str]) -> str:
        ex = [r for r in runs if r.get("explained")]
        cut = [r for r in ex if r.get("cut_can_pass")]
        past = sum(r["pass"] and not r.get("cut_can_pass") for r in ex)
        under = [r for r in cut if not r["pass"]]
        look = [x for r in ex if (x := r.get("lookalike_per_row")) is not None]
        la = f" {np.median(look):.2f} ({len(look)}) |" if look else " – |"
        return (
            f"| {name} | {len(runs)} | {len(ex)} | {sum(r['pass'] for r in ex)} | {len(cut)} | {past} | {own(under)} |"
            + (la if looked else "")
        )

    faults = [r for r in rows if r["expected"] != "none"]
    ctl = [r for r in rows if r["expected"] == "none"]
    head = ("| kind | runs | explained | verdict passes | a cut of the ranking passes | verdict passes, no cut does "
            "| a cut passes, the verdict does not |")  # fmt: skip
    rule = "|---|---:|---:|---:|---:|---:|---|"
    if looked:
        head += (" a look-alike's harm per row, over a planted row's, in retrains net of dropping other rows (median, "
                 "runs) |")  # fmt: skip
        rule += "---:|"
    out = [head, rule]
    for kind in sorted({r["kind"] for r in faults}):
        out.append(
            line(kind, [r for r in faults if r["kind"] == kind], lambda u: ", ".join(r["name"] for r in u) or "–")
        )
    out.append(line("all faults", faults, lambda u: str(len(u))))
    out.append(f"| controls (no rows named) | {len(ctl)} | – | {sum(r['pass'] for r in ctl)} | – | – | – |"
               + (" – |" if looked else ""))  # fmt: skip
    return "\n".join(out) + "\n"


def hints_table(rows: list[dict]) -> str:
    """Rows to read (:mod:`gradian.verdict.term_hints`) per kind: on how many runs the verdict lists some, how many
    rows, how many of them planted, and how many of the planted rows drop_rows missed they point at."""

    def total(group: list[dict], key: str) -> int:
        return sum(r.get(key) or 0 for r in group)

    out = [
        "| kind | runs with rows to read | rows to read | planted | planted rows drop_rows missed | of them listed |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind in sorted({r["kind"] for r in rows}):
        rs = [r for r in rows if r["kind"] == kind]
        fired = sum(1 for r in rs if r.get("hint_rows"))
        if rs[0]["expected"] == "none":
            out.append(f"| {kind} | {fired} of {len(rs)} | {total(rs, 'hint_rows')} | – | – | – |")
            continue
        out.append(
            f"| {kind} | {fired} of {len(rs)} | {total(rs, 'hint_rows')} | {total(rs, 'hint_planted')} "
            f"| {total(rs, 'missed')} | {total(rs, 'missed_hinted')} |"
        )
    return "\n".join(out) + "\n"


GRID = {
    "finding_alpha": [0.0, 0.01, 0.05, 0.1],
    "head_fdr": [0.0, 0.1, 0.2, 0.3],
    "extend_z": [0.0, 2.5, 3.0, 3.5, 4.0],
    "min_head_share": [0.1, 0.2],
    "min_stability": [0.5, 0.6, 0.7, 0.8],
    "driven_z": [0.0, 1.5, 2.0, 2.5, 3.0],
}
RULE_GRID = {
    "noise_multiple": [0.0, 1.0, 2.0, 3.0],
    "min_relative": [0.0],
    "scale": ["relative", "absolute"],
    "gate": ["set", "item"],
}


def policy_from(pairs: list[str]) -> VerdictOptions:
    """The default policy with ``key=value`` overrides, each value read as its field's type."""
    default, changed = VerdictOptions(), {}
    for key, value in (kv.split("=", 1) for kv in pairs):
        kind = type(getattr(default, key))
        changed[key] = value.lower() in ("1", "true") if kind is bool else kind(value)
    return dataclasses.replace(default, **changed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, default=REPO / "bench" / "work" / "scenarios")
    ap.add_argument("--search", action="store_true", help="grid-search the thresholds (leave-one-kind-out reported)")
    ap.add_argument("--json", type=Path, help="write per-run rows here")
    ap.add_argument("--table", type=Path, help="write the per-kind markdown table here")
    ap.add_argument("--verify", action="store_true", help="gradian verify each named culprit (two retrains per run)")
    ap.add_argument("--verify-seeds", type=int, default=1, help="with --verify: gradian verify --seeds")
    ap.add_argument("--bootstrap", type=int, default=50, help="resamples per verdict during --search")
    ap.add_argument("--narrow", action="store_true", help="search the regression rule only, policy at its defaults")
    ap.add_argument("--policy-only", action="store_true", help="search the policy only, regression rule at defaults")
    ap.add_argument("--vary", nargs="+", choices=sorted(GRID), help="search only these policy keys")
    ap.add_argument("--only", nargs="+", help="score only these runs (names under --runs)")
    ap.add_argument(
        "--policy",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="score this policy instead of the default, e.g. --policy min_stability=0.55 (a number)",
    )
    ap.add_argument("--heldout", action="store_true", help="the same as --set heldout")
    ap.add_argument("--set", choices=sorted(SETS), nargs="+", default=["suite"],
                    help="which runs to score (one set or more): " + "; ".join(f"{k}: {v}" for k, v in SETS.items())
                    + ". Only the suite chooses thresholds; the others measure them")  # fmt: skip
    ap.add_argument("--ceiling", type=Path, help="write the per-kind table of the verdict against its ranking's "
                    "ceiling (ceiling_table) here")  # fmt: skip
    ap.add_argument("--compare", type=Path, metavar="JSON", help="check each scored run against a committed --json "
                    "file (e.g. bench/results/verdict_ceiling.json): the runs that differ and the passes before and "
                    "now, so a rebuild from a clean checkout shows whether the tables reproduce")  # fmt: skip
    args = ap.parse_args()
    for k in GRID:
        if args.vary and k not in args.vary:
            GRID[k] = [getattr(VerdictOptions(), k)]
    if args.narrow:
        for k in GRID:
            GRID[k] = [getattr(VerdictOptions(), k)]
    if args.policy_only:
        for k in RULE_GRID:
            RULE_GRID[k] = [getattr(RegressionRule(), k)]
    want = {"heldout"} if args.heldout else set(args.set)  # the held-out sets measure the rule, never choose it
    if args.search and want != {"suite"}:
        ap.error("--search chooses thresholds on the suite only")
    dirs = [d for d in sorted(args.runs.iterdir()) if d.is_dir() and run_set(d.name) in want]
    dirs = [d for d in dirs if not args.only or d.name in args.only]
    runs = [r for d in dirs if (r := load_run(d)) is not None]
    print(f"{len(runs)} runs: " + ", ".join(sorted({r.kind for r in runs})))
    if args.search:
        results = []
        for rv in itertools.product(*RULE_GRID.values()):
            rule = RegressionRule(**dict(zip(RULE_GRID, rv, strict=True)))
            mats = [regressed_scores(r, rule) for r in runs]
            for pv in itertools.product(*GRID.values()):
                policy = VerdictOptions(**dict(zip(GRID, pv, strict=True)), bootstrap=args.bootstrap)
                per = [fast_objective(r, S, policy) for r, S in zip(runs, mats, strict=True)]
                results.append((float(np.mean([o for o, _ in per])), sum(p for _, p in per), rule, policy, per))
        results.sort(key=lambda t: (-t[0], -t[1]))
        for obj, n, rule, policy, _ in results[:15]:
            print(f"{obj:.3f} {n}/{len(runs)}", rule, {k: getattr(policy, k) for k in GRID})
        # leave-one-kind-out: choose on the other kinds, test on the held-out one
        kinds = sorted({r.kind for r in runs})
        held = []
        for kind in kinds:
            idx = [i for i, r in enumerate(runs) if r.kind != kind]
            best = max(results, key=lambda t: np.mean([t[4][i][0] for i in idx]))
            held += [best[4][i][1] for i, r in enumerate(runs) if r.kind == kind]
        print(f"leave-one-kind-out: {sum(held)} / {len(runs)} pass on the held-out kind")
        return
    RUNS_ROOT.append(args.runs)
    policy = policy_from(args.policy)
    n, rows = score(runs, RegressionRule(), policy, run_verify=args.verify_seeds if args.verify else 0)
    for r in rows:
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()})
    print(f"{n} / {len(runs)} pass")
    for r in rows:
        r.update(truth_recovery(args.runs / r["name"]))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.table:
        args.table.write_text(markdown_table(rows))
        print(args.table.read_text())
    if args.ceiling:
        args.ceiling.write_text(ceiling_table(rows))
        print(args.ceiling.read_text())
    if args.compare:
        print(compare_rows(rows, json.loads(args.compare.read_text())))


COMPARED = ("verdict", "cause", "pass", "n_drop", "n_regressed", "precision", "recall", "stability")


def compare_rows(rows: list[dict], before: list[dict], tol: float = 2e-3) -> str:
    """How the scored ``rows`` differ from ``before`` (an earlier --json), run by run on :data:`COMPARED`: numbers
    within ``tol`` count as the same (retrains on another machine move the NLLs in the 4th decimal)."""
    old = {r["name"]: r for r in before}

    def same(a: object, b: object) -> bool:
        if isinstance(a, float) and isinstance(b, float):
            return abs(a - b) <= tol or (a != a and b != b)
        return a == b

    both = [r for r in rows if r["name"] in old]
    lines = []
    for r in both:
        diff = [f"{k} {old[r['name']].get(k)!r} -> {r.get(k)!r}" for k in COMPARED
                if not same(old[r["name"]].get(k), r.get(k))]  # fmt: skip
        if diff:
            lines.append(f"  {r['name']}: " + "; ".join(diff))
    head = (f"compared with {len(both)} of the {len(rows)} runs scored: {len(both) - len(lines)} the same, "
            f"{len(lines)} differ; passes {sum(bool(old[r['name']]['pass']) for r in both)} before, "
            f"{sum(bool(r['pass']) for r in both)} now")  # fmt: skip
    return "\n".join([head, *lines])


if __name__ == "__main__":
    main()
