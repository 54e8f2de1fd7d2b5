"""The verdict: a few sentences a user can act on, from the clusters, the findings and the ranking.

Pure functions over plain data (the dicts ``build_report`` puts in report.json). The criteria:

- **Setup errors first.** An ERROR finding without rows (a config or log finding), or one whose rows cover at least
  half of the training rows, means the run itself is broken; attribution over a broken run is unreliable, so the
  verdict says that first and leads the next steps with the config fix.
- **Concentrated.** A cluster is a culprit when it carries at least ``CONCENTRATION``× (2×) its share of the rows in
  share of the total positive harm, and at least ``MIN_CULPRIT_SHARE`` (25%) of that harm. Culprits are reported
  most harmful first.
- **Mechanical or content.** A culprit whose rows are flagged by one *mechanical* diagnose finding (how rows became
  tokens: truncation, EOS, masks, templates, encoding) at ``FLAG_SHARE`` (50%) or more looks mechanical (the
  finding's fix is the next step); otherwise it looks like content (its distinctive terms say what the rows are
  about). A *content* finding flagging that share (``CONTENT_RULES``: duplicates, train/eval overlap, identical
  targets, ...) is named as what those rows have in common, and its fix joins the next steps; the cause stays content.
- **Few rows.** No culprit cluster, but the top 1% of rows (at least 1, at most 50) carry at least half of the
  positive harm: those rows are named instead.
- **Spread thin.** Otherwise: no cluster carries 2× its size share, no handful of rows dominates; the verdict says
  so and names no culprit.
- **No regression / no harm.** No eval item got worse, or no training row has positive harm.

The rows to drop are the rows with positive harm in the culprit clusters (or the few dominant rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gradian.report.clusters import FLAG_SHARE, finding_title, finding_train_rows

CONCENTRATION = 2.0
MIN_CULPRIT_SHARE = 0.25
SETUP_ROW_SHARE = 0.5
FEW_ROWS_SHARE = 0.5
VERIFY_HINT = (
    "run gradian verify OUT_DIR (or re-run gradian attribute with --verify) to check that the regression shrinks"
)


def _pct(x: float) -> str:
    return f"{100.0 * x:.0f}%"


def _rows_word(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def _join(items: Sequence[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def setup_errors(findings: Sequence[Mapping[str, Any]], n_rows: int) -> list[Mapping[str, Any]]:
    """ERROR findings that make attribution unreliable: config/log errors (no rows), or row errors covering at least
    ``SETUP_ROW_SHARE`` of the training rows."""
    out = []
    for f in findings:
        if str(f.get("severity", "")).lower() != "error":
            continue
        rows = finding_train_rows(f)
        ev = f.get("evidence") or {}
        has_rows = bool(rows) or bool(isinstance(ev, Mapping) and ev.get("rows"))
        if not has_rows or (n_rows and len(set(rows)) >= SETUP_ROW_SHARE * n_rows):
            out.append(f)
    return out


def is_concentrated(cluster: Mapping[str, Any]) -> bool:
    """The concentration criterion: harm_share >= 2 x size share and >= 25% of the positive harm."""
    harm = float(cluster.get("harm_share", 0.0))
    size_share = float(cluster.get("size_share", 0.0))
    eps = 1e-9  # shares are ratios of sums: 1.0 vs 2 x 0.5 must count as 2x
    return harm >= MIN_CULPRIT_SHARE - eps and harm >= CONCENTRATION * size_share - eps


# Findings about what the rows *say*, not how they were turned into tokens: they describe content, not a mechanism.
CONTENT_RULES = frozenset({"D104", "D105", "D116", "D117", "D118", "D121", "D122", "D123"})


def mechanical_finding(cluster: Mapping[str, Any], *, content: bool = False) -> Mapping[str, Any] | None:
    """The mechanical finding (``content=True``: the content finding, ``CONTENT_RULES``) that flags the largest share
    of a cluster's rows, when that share is at least FLAG_SHARE."""
    best = None
    for f in cluster.get("findings") or []:
        if (f.get("code") in CONTENT_RULES) != content:
            continue
        if float(f.get("percent", 0.0)) >= 100.0 * FLAG_SHARE and (
            best is None or float(f["percent"]) > float(best["percent"])
        ):
            best = f
    return best


def _config_change(f: Mapping[str, Any]) -> dict[str, Any]:
    ev = f.get("evidence") or {}
    ev = ev if isinstance(ev, Mapping) else {}
    return {
        "code": f.get("code"),
        "name": f.get("name"),
        "key": ev.get("key"),
        "value": ev.get("value"),
        "fix": f.get("fix"),
    }


def _fix_text(f: Mapping[str, Any]) -> str:
    """A finding's fix as one sentence (diagnose writes ``{"text", "key", "value", "command"}``; a str works too)."""
    fix = f.get("fix")
    if isinstance(fix, Mapping):
        text = str(fix.get("text") or "").rstrip(".")
        if fix.get("key") and fix.get("value") is not None:
            text += f" (set {fix['key']} to {fix['value']})"
        return text
    return str(fix or "").rstrip(".")


def _fix_sentence(f: Mapping[str, Any]) -> str:
    ch = _config_change(f)
    where = f" (config key `{ch['key']}`" + (f", now {ch['value']!s}" if ch["value"] is not None else "") + ")"
    where = where if ch["key"] else ""
    fix = _fix_text(f)
    return f"{finding_title(f)}{where}" + (f": {fix}" if fix else "")


def make_verdict(
    clusters: Sequence[Mapping[str, Any]],
    findings: Sequence[Mapping[str, Any]],
    examples: Sequence[Mapping[str, Any]],
    regressed: Sequence[Mapping[str, Any]],
    *,
    n_rows: int | None = None,
) -> dict[str, Any]:
    """Decide what the report says. ``examples`` are report.json's ``{"index", "id", "score"}`` rows; ``clusters``
    are ``build_report``'s cluster dicts (``size_share``, ``harm_share``, ``rows``, ``label``, ``findings``).

    Returns ``{"kind", "cause", "reliable", "headline", "sentences", "text", "next_steps", "culprit_clusters",
    "drop_rows", "drop_ids", "config_changes", "criterion"}``; ``kind`` is one of ``no_regression``, ``no_harm``,
    ``concentrated``, ``few_rows``, ``spread``; ``cause`` one of ``mechanical``, ``content``,
    ``mechanical+content`` (several culprits of both kinds), ``setup``, ``unknown``.
    """
    n_rows = n_rows if n_rows is not None else len(examples)
    scores = {int(e["index"]): float(e.get("score") or 0.0) for e in examples}
    ids = {int(e["index"]): e.get("id") for e in examples}
    errors = setup_errors(findings, n_rows)
    reliable = not errors
    sentences: list[str] = []
    next_steps: list[str] = []
    config_changes = [_config_change(f) for f in errors]
    if errors:
        names = _join([finding_title(f) for f in errors])
        sentences.append(
            f"Fix the setup first: {len(errors)} setup error{'s' if len(errors) > 1 else ''} ({names}) "
            f"make{'s' if len(errors) == 1 else ''} this attribution unreliable, so read the ranking below with care."
        )
        for f in errors:
            next_steps.append("Fix " + _fix_sentence(f) + ".")

    criterion = (
        f"a cluster is a culprit when its share of the positive harm is >= {CONCENTRATION:g}x its share of the rows "
        f"and >= {_pct(MIN_CULPRIT_SHARE)}; it looks mechanical when one finding flags >= {_pct(FLAG_SHARE)} of its "
        f"rows; harm is 'spread thin' when no cluster is a culprit and the top 1% of rows carry < "
        f"{_pct(FEW_ROWS_SHARE)} of the harm"
    )
    base = {
        "reliable": reliable,
        "criterion": criterion,
        "culprit_clusters": [],
        "drop_rows": [],
        "drop_ids": [],
        "config_changes": config_changes,
    }

    def done(kind: str, cause: str, headline: str, **extra: Any) -> dict[str, Any]:
        # row-level errors that are not setup-wide and not a culprit's mechanical cause: still worth fixing
        # every finding that flags >= FLAG_SHARE of a culprit's rows is part of its explanation, not just the top one
        explained = {str(f.get("code")) for f in errors} | {
            str(f.get("code")) for c in clusters if c.get("id") in extra.get("culprit_clusters", ())
            for f in c.get("findings") or [] if float(f.get("percent", 0.0)) >= 100.0 * FLAG_SHARE
        }  # fmt: skip
        other = [
            f for f in findings
            if str(f.get("severity", "")).lower() == "error" and str(f.get("code")) not in explained
        ]  # fmt: skip
        if other:
            parts = [
                finding_title(f) + (f" ({len(set(finding_train_rows(f)))} rows)" if finding_train_rows(f) else "")
                for f in other
            ]
            sentences.append(
                f"Separately, diagnose found {_join(parts)}: "
                + ("it does" if len(other) == 1 else "they do")
                + " not explain this regression, but fix "
                + ("it" if len(other) == 1 else "them")
                + " before the next run."
            )
            for f in other:
                if f.get("fix"):
                    next_steps.append(f"Fix {finding_title(f)}: {_fix_text(f)}.")
        out = {**base, "kind": kind, "cause": cause, "headline": headline, **extra}
        out["sentences"] = sentences
        out["next_steps"] = next_steps
        out["text"] = " ".join(sentences)
        return out

    if not regressed:
        sentences.append("No eval item got worse after fine-tuning, so there is no regression to attribute.")
        return done("no_regression", "setup" if errors else "unknown", "No regression to explain.")

    total_pos = sum(s for s in scores.values() if s > 0)
    if total_pos <= 0:
        sentences.append(
            f"{len(regressed)} eval item{'s' if len(regressed) != 1 else ''} got worse, but no training row has "
            "positive harm: the data does not explain the regression."
        )
        if not errors:
            next_steps.append("Look at the setup findings and the loss curve; the cause is likely not in the rows.")
        return done("no_harm", "setup" if errors else "unknown", "No training row explains the regression.")

    culprits = [c for c in clusters if is_concentrated(c)]
    culprits.sort(key=lambda c: -float(c.get("harm_share", 0.0)))
    n_reg = f"{len(regressed)} regressed eval item{'s' if len(regressed) != 1 else ''}"

    if culprits:
        harm = sum(float(c["harm_share"]) for c in culprits)
        size = sum(int(c["size"]) for c in culprits)
        names = _join([f"cluster {c['id']}" + (f" ({c['label']})" if c.get("label") else "") for c in culprits])
        verb = "carry" if len(culprits) > 1 else "carries"
        sentences.append(
            f"{names[0].upper()}{names[1:]} {verb} {_pct(harm)} of the harm to the {n_reg} from "
            f"{_rows_word(size)} ({_pct(size / n_rows if n_rows else 0)} of the training data)."
        )
        mech = [(c, mechanical_finding(c)) for c in culprits]
        mech_found = [(c, f) for c, f in mech if f is not None]
        for c, f in mech_found:
            sentences.append(
                f"The cause looks mechanical: {float(f['percent']):.0f}% of cluster {c['id']}'s rows are flagged by "
                f"diagnose as {finding_title(f)}."
            )
        content = [c for c, f in mech if f is None]
        linked = [(c, mechanical_finding(c, content=True)) for c in content]
        linked = [(c, f) for c, f in linked if f is not None]
        if content:
            about = _join([f"'{c['label']}'" for c in content if c.get("label")])
            sentences.append(
                ("Its" if len(content) == 1 else "Their")
                + " rows carry no setup finding that explains them mechanically, so the cause looks like content"
                + (f" (rows about {about})." if about else ".")
            )
        for c, f in linked:
            sentences.append(
                f"What they have in common: {float(f['percent']):.0f}% of cluster {c['id']}'s rows are flagged by "
                f"diagnose as {finding_title(f)}."
            )
        drop = sorted(
            (r for c in culprits for r in c.get("rows", []) if scores.get(int(r), 0.0) > 0),
            key=lambda r: (-scores.get(int(r), 0.0), r),
        )
        seen_fix: set[Any] = set()

        def fix_steps(found: list[tuple[Any, Mapping[str, Any]]]) -> None:
            for _, f in found:
                if f.get("code") not in seen_fix and f.get("fix"):
                    seen_fix.add(f.get("code"))
                    next_steps.append(f"Fix {finding_title(f)}: {_fix_text(f)}.")

        fix_steps(mech_found)  # a mechanical cause is fixed first
        next_steps.append(
            f"Drop the {_rows_word(len(drop))} with positive harm in {names} (listed in drop_rows.txt / "
            f"drop_rows.json), re-train, and {VERIFY_HINT}."
        )
        fix_steps(linked)  # what the content rows share: worth fixing, after the rows themselves
        cause = "mechanical" if mech_found and not content else "content" if not mech_found else "mechanical+content"
        headline = (
            f"{names[0].upper()}{names[1:]} explain{'s' if len(culprits) == 1 else ''} {_pct(harm)} of the regression."
        )
        return done(
            "concentrated",
            cause,
            headline,
            culprit_clusters=[int(c["id"]) for c in culprits],
            drop_rows=[int(r) for r in drop],
            drop_ids=[ids.get(int(r)) for r in drop],
        )

    ranked = sorted(scores, key=lambda r: (-scores[r], r))
    top_n = min(50, max(1, round(0.01 * n_rows)))
    top = [r for r in ranked[:top_n] if scores[r] > 0]
    top_share = sum(scores[r] for r in top) / total_pos
    if top and top_share >= FEW_ROWS_SHARE:
        sentences.append(
            f"No cluster stands out, but the top {_rows_word(len(top))} carry {_pct(top_share)} of the harm to the "
            f"{n_reg}."
        )
        flagged = _row_findings_summary(top, findings)
        if flagged:
            sentences.append(f"Of these, {flagged}.")
        next_steps.append(
            f"Drop these {_rows_word(len(top))} (listed in drop_rows.txt / drop_rows.json), re-train, and "
            f"{VERIFY_HINT}."
        )
        return done(
            "few_rows",
            "mechanical" if flagged else "content",
            f"{_rows_word(len(top))} carry {_pct(top_share)} of the regression.",
            drop_rows=top,
            drop_ids=[ids.get(r) for r in top],
        )

    lead = max(clusters, key=lambda c: float(c.get("harm_share", 0.0)), default=None)
    detail = ""
    if lead is not None and len(clusters) > 1:
        detail = (
            f" (the most harmful, cluster {lead['id']}, carries {_pct(float(lead['harm_share']))} of the harm from "
            f"{_pct(float(lead['size_share']))} of the rows)"
        )
    sentences.append(
        f"The harm to the {n_reg} is spread thin: no cluster carries twice its share of the rows{detail}, and the "
        f"top {_rows_word(top_n)} carry only {_pct(top_share)} of it. No single group of rows explains the regression."
    )
    if not errors:
        warn = [f for f in findings if str(f.get("severity", "")).lower() == "warning" and not finding_train_rows(f)]
        if warn:
            next_steps.append(
                "Check the setup warnings (" + _join([finding_title(f) for f in warn]) + "): a regression spread "
                "over all the data often comes from how it was trained (learning rate, epochs) rather than from rows."
            )
        else:
            next_steps.append(
                "Dropping rows is unlikely to help; try a lower learning rate or fewer epochs, or mix in data like the "
                "regressed eval items."
            )
    return done("spread", "setup" if errors else "unknown", "The harm is spread thin; no culprit.")


def _row_findings_summary(rows: Sequence[int], findings: Sequence[Mapping[str, Any]]) -> str:
    """'7 of the 10 are flagged by D101 completion_cut' for the most common finding, or ''."""
    rows_set = set(rows)
    best, best_hit = None, 0
    for f in findings:
        hit = len(rows_set & set(finding_train_rows(f)))
        if hit > best_hit:
            best, best_hit = f, hit
    if best is None or best_hit < FLAG_SHARE * len(rows):
        return ""
    return f"{best_hit} of the {len(rows)} are flagged: {finding_title(best)}"
