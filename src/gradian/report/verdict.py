"""The verdict: a few sentences a user can act on, from the harm itself, the findings and the regression call.

Pure functions over plain data (the dicts ``build_report`` puts in report.json, plus the per-item harm matrix). The
criteria, in order:

- **Setup errors first.** An ERROR finding without rows (a config or log finding), or one whose rows cover at least
  half of the training rows, means the run itself is broken; attribution over a broken run is unreliable, so the
  verdict says that first and leads the next steps with the config fix.
- **No regression / within noise.** No eval item rose beyond the fine-tune's ordinary drift
  (:mod:`gradian.attribute.regression`): the verdict says so instead of ranking noise.
- **No harm.** Items regressed, but no training row has positive harm.
- **Concentrated.** The rows whose harm stands out from the bulk, carrying a sizeable share of the harm, and stable
  when the regressed items are resampled (:mod:`gradian.report.culprits`). They are grouped by what they share: a
  *mechanical* finding (a rule that declares it is about how rows became tokens) enriched in them makes a mechanical
  group whose fix comes first; the rest is a content group, named by its distinctive terms and the content findings
  most of its rows carry. ``drop_rows`` are those rows, most harmful first.
- **Spread.** Otherwise no group of rows explains the regression; the verdict says why (nothing stands out, too
  small a share, or unstable under resampling) and names no culprit.

The thresholds live in :class:`gradian.report.culprits.CulpritPolicy`, recorded in ``verdict.policy``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradian.attribute.regression import describe_change
from gradian.numbers import pct as _pct  # (lead: rename the calls to pct on merge)
from gradian.report.clusters import finding_title, finding_train_rows
from gradian.report.culprits import CulpritPolicy, find_culprits

SETUP_ROW_SHARE = 0.5
VERIFY_HINT = (
    "run gradian verify OUT_DIR (or re-run gradian attribute with --verify) to check that the regression shrinks"
)


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


@dataclass
class _Draft:
    """The verdict while it is being written: sentences and next steps accumulate here."""

    errors: list[Mapping[str, Any]]
    findings: Sequence[Mapping[str, Any]]
    base: dict[str, Any]
    sentences: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)

    def done(self, kind: str, cause: str, headline: str, explained: Set[str] = frozenset(), **extra: Any) -> dict:
        """Close the verdict: row-level errors not explained by a culprit group are still worth fixing."""
        explained = {str(f.get("code")) for f in self.errors} | set(explained)
        other = [
            f for f in self.findings
            if str(f.get("severity", "")).lower() == "error" and str(f.get("code")) not in explained
        ]  # fmt: skip
        if other:
            parts = [
                finding_title(f) + (f" ({len(set(finding_train_rows(f)))} rows)" if finding_train_rows(f) else "")
                for f in other
            ]
            self.sentences.append(
                f"Separately, diagnose found {_join(parts)}: "
                + ("it does" if len(other) == 1 else "they do")
                + " not explain this regression, but fix "
                + ("it" if len(other) == 1 else "them")
                + " before the next run."
            )
            for f in other:
                if f.get("fix"):
                    self.next_steps.append(f"Fix {finding_title(f)}: {_fix_text(f)}.")
        out = {**self.base, "kind": kind, "cause": cause, "headline": headline, **extra}
        out["sentences"] = self.sentences
        out["next_steps"] = self.next_steps
        out["text"] = " ".join(self.sentences)
        return out


def _confidence(stability: float | None) -> dict[str, Any]:
    if stability is None:
        return {"stability": None, "level": "unmeasured"}
    level = "high" if stability >= 0.8 else "medium" if stability >= 0.6 else "low"
    return {"stability": round(float(stability), 4), "level": level}


def make_verdict(
    clusters: Sequence[Mapping[str, Any]],
    findings: Sequence[Mapping[str, Any]],
    examples: Sequence[Mapping[str, Any]],
    regressed: Sequence[Mapping[str, Any]],
    *,
    n_rows: int | None = None,
    item_scores: np.ndarray | None = None,
    item_rows: Sequence[int] | None = None,
    texts: Mapping[int, str] | None = None,
    regression: Mapping[str, Any] | None = None,
    policy: CulpritPolicy | None = None,
    embeddings: np.ndarray | None = None,
    embedding_rows: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Decide what the report says. ``examples`` are report.json's ``{"index", "id", "score"}`` rows; ``clusters``
    are ``build_report``'s cluster dicts (only named, for the cluster table); ``item_scores`` is the per-item harm of
    the regressed items (items x rows, columns in ``item_rows`` order) for the stability check; ``regression`` is
    attribute's ``settings.regression`` (the drift and cut-off the regressed items passed); ``embeddings`` are the rows'
    gradient directions (row j is training row ``embedding_rows[j]``, default j), which culprit groups extend along.

    Returns ``{"kind", "cause", "reliable", "confidence", "headline", "sentences", "text", "next_steps", "groups",
    "culprit_clusters", "drop_rows", "drop_ids", "config_changes", "criterion", "policy", "how"}``; ``kind`` is one
    of ``no_regression``, ``no_harm``, ``concentrated``, ``spread``; ``cause`` one of ``mechanical``, ``content``,
    ``mechanical+content``, ``setup``, ``unknown``.
    """
    policy = policy or CulpritPolicy()
    n_rows = n_rows if n_rows is not None else len(examples)
    rows = [int(e["index"]) for e in examples]
    scores = {int(e["index"]): float(e.get("score") or 0.0) for e in examples}
    ids = {int(e["index"]): e.get("id") for e in examples}
    errors = setup_errors(findings, n_rows)
    draft = _Draft(
        errors,
        findings,
        {
            "reliable": not errors,
            "criterion": criterion_text(policy),
            "policy": policy.to_dict(),
            "confidence": _confidence(None),
            "groups": [],
            "culprit_clusters": [],
            "drop_rows": [],
            "drop_ids": [],
            "config_changes": [_config_change(f) for f in errors],
        },
    )
    if errors:
        names = _join([finding_title(f) for f in errors])
        draft.sentences.append(
            f"Fix the setup first: {len(errors)} setup error{'s' if len(errors) > 1 else ''} ({names}) "
            f"make{'s' if len(errors) == 1 else ''} this attribution unreliable, so read the ranking below with care."
        )
        draft.next_steps += ["Fix " + _fix_sentence(f) + "." for f in errors]
    setup_cause = "setup" if errors else "unknown"

    if not regressed:
        return _no_regression(draft, regression, setup_cause)

    total_pos = sum(s for s in scores.values() if s > 0)
    n_reg = f"{len(regressed)} regressed eval item{'s' if len(regressed) != 1 else ''}"
    if total_pos <= 0:
        draft.sentences.append(
            f"{n_reg[0].upper()}{n_reg[1:]} got worse, but no training row has positive harm: the data does not "
            "explain the regression."
        )
        if not errors:
            draft.next_steps.append(
                "Look at the setup findings and the loss curve; the cause is likely not in the rows."
            )
        return draft.done("no_harm", setup_cause, "No training row explains the regression.")

    S = _aligned_item_scores(item_scores, item_rows, rows)
    emb = _aligned_embeddings(embeddings, embedding_rows, rows)
    found = find_culprits(
        S, np.array([scores[r] for r in rows]), rows, findings=findings, texts=texts, embeddings=emb, policy=policy
    )
    draft.base["confidence"] = _confidence(found.stability)
    draft.base["how"] = found.to_dict() | {"head": found.head[:200]}
    if found.concentrated:
        return _concentrated(draft, found, clusters, scores, ids, n_rows, n_reg)
    return _spread(draft, found, n_reg, setup_cause)


def criterion_text(policy: CulpritPolicy) -> str:
    """The culprit criterion in words (report.json's ``verdict.criterion``)."""
    head_rule = (
        f"whose local false discovery rate against the bulk's empirical null is under {policy.head_fdr:g}"
        if policy.head_fdr > 0
        else f"whose harm exceeds the median by {policy.head_z:g} robust spreads"
    )
    extension = (
        f"; each group also takes the rows with harm above the median whose gradient direction is {policy.extend_z:g} "
        "robust spreads closer to the group's than the low-harm rows are"
        if policy.extend_z > 0
        else ""
    )
    return (
        f"culprit rows are the rows {head_rule} (at most {_pct(policy.max_head_fraction)} of the rows) and stable: "
        f"they agree >= {policy.min_stability:g} (mean Jaccard) with the rows found over {policy.bootstrap} resamples "
        f"of the regressed items; a group is mechanical when a mechanical finding flags >= "
        f"{_pct(policy.min_group_share)} of those rows at >= {policy.enrichment:g}x its share of the file{extension}; "
        f"the groups must carry >= {_pct(policy.min_head_share)} of the positive harm"
    )


def _no_regression(draft: _Draft, regression: Mapping[str, Any] | None, setup_cause: str) -> dict[str, Any]:
    """The verdict when no item regressed: nothing rose, or nothing rose beyond the fine-tune's drift."""
    reg = regression or {}
    if reg.get("rose"):
        scale = str(reg.get("scale", "absolute"))
        drift = (
            ""
            if reg.get("drift") is None
            else f" (the items that improved moved by {describe_change(reg['drift'], scale)})"
        )
        draft.sentences.append(
            f"{reg['rose']} eval item{'s' if reg['rose'] != 1 else ''} got worse, but by no more than the "
            f"fine-tune's ordinary drift{drift}: the change is within noise, so there is no regression to "
            "attribute."
        )
        return draft.done("no_regression", setup_cause, "The change is within ordinary drift; no regression.")
    draft.sentences.append("No eval item got worse after fine-tuning, so there is no regression to attribute.")
    return draft.done("no_regression", setup_cause, "No regression to explain.")


def _aligned_item_scores(
    item_scores: np.ndarray | None, item_rows: Sequence[int] | None, rows: Sequence[int]
) -> np.ndarray | None:
    """The per-item harm with its columns in ``rows`` order (zeros for a row it lacks), or None."""
    if item_scores is None or item_rows is None:
        return None
    S = np.asarray(item_scores, dtype=np.float64)
    if S.ndim != 2:
        return None
    col = {int(r): j for j, r in enumerate(item_rows)}
    keep = np.array([col.get(r, -1) for r in rows])
    return np.where(keep >= 0, S[:, np.maximum(keep, 0)], 0.0)


def _aligned_embeddings(
    embeddings: np.ndarray | None, embedding_rows: Sequence[int] | None, rows: Sequence[int]
) -> np.ndarray | None:
    """The embeddings in ``rows`` order (zeros for a row without one), or None when there are none."""
    if embeddings is None:
        return None
    emb = np.asarray(embeddings, dtype=np.float64)
    if emb.ndim != 2 or not len(emb):
        return None
    index = list(range(len(emb))) if embedding_rows is None else [int(r) for r in embedding_rows]
    at = {r: j for j, r in enumerate(index)}
    out = np.zeros((len(rows), emb.shape[1]))
    for i, r in enumerate(rows):
        if r in at:
            out[i] = emb[at[r]]
    return out


def _concentrated(draft, found, clusters, scores, ids, n_rows: int, n_reg: str) -> dict[str, Any]:
    """The verdict when culprit rows were found: the rows, their groups, the cause, how sure."""
    head, groups = found.head, found.groups
    conf = draft.base["confidence"]
    sure = {
        "high": "resampling the regressed items finds the same rows (confidence: high",
        "medium": "resampling the regressed items mostly finds the same rows (confidence: medium",
        "low": "resampling the regressed items often finds other rows (confidence: low",
        "unmeasured": "too few items regressed to resample them (confidence: unmeasured",
    }[conf["level"]]
    agree = f", agreement {conf['stability']:.2f})" if conf["stability"] is not None else ")"
    draft.sentences.append(
        f"{_rows_word(len(head)).capitalize()} ({_pct(len(head) / n_rows if n_rows else 0)} of the training data) "
        f"carry {_pct(found.head_share)} of the harm to the {n_reg}. Their harm stands out from the other rows"
        + (
            f" ({joined} of them joined because their gradient points the way the group's does)"
            if (joined := sum(g.by_direction for g in groups))
            else ""
        )
        + f", and {sure}{agree}."
    )
    explained: set[str] = set()
    fixes: list[str] = []
    for i, g in enumerate(groups, start=1):
        who = f"Group {i} ({_rows_word(len(g.rows))}, {_pct(g.harm_share)} of the harm)" if len(groups) > 1 else ""
        if g.cause == "mechanical" and g.finding is not None:
            also = [sh for sh in g.shared if sh.get("code") != g.finding.get("code")]
            explained |= {str(g.finding.get("code"))} | {str(sh.get("code")) for sh in also}
            names = _join([finding_title(g.finding)] + [finding_title(sh) for sh in also])
            draft.sentences.append(
                (f"{who} looks mechanical" if who else "The cause looks mechanical")
                + f": diagnose flags {'them' if who else 'these rows'} as {names}."
            )
            for f in [g.finding, *also]:
                step = f"Fix {finding_title(f)}: {_fix_text(f)}." if f.get("fix") else ""
                if step and step not in fixes:
                    fixes.append(step)
            continue
        about = f" (rows about {' / '.join(g.terms)})" if g.terms else ""
        draft.sentences.append(
            (f"{who} carries" if who else "They carry")
            + f" no mechanical setup finding, so the cause looks like content{about}."
        )
        for sh in g.shared:
            draft.sentences.append(
                f"What they have in common: {100 * sh['share']:.0f}% of them are flagged by diagnose as "
                f"{finding_title(sh)}."
            )
            explained.add(str(sh.get("code")))
    draft.next_steps += fixes  # a mechanical cause is fixed first
    draft.next_steps.append(
        f"Drop the {_rows_word(len(head))} (listed in drop_rows.txt / drop_rows.json), re-train, and {VERIFY_HINT}."
    )
    for g in groups:
        for sh in g.shared if g.cause == "content" else ():
            if sh.get("fix"):
                draft.next_steps.append(f"Fix {finding_title(sh)}: {_fix_text(sh)}.")
    causes = {g.cause for g in groups}
    cause = "mechanical+content" if len(causes) > 1 else (causes.pop() if causes else "content")
    head_set = set(head)
    culprit_clusters = [
        int(c["id"]) for c in clusters if c.get("rows") and len(head_set & set(c["rows"])) >= 0.5 * len(c["rows"])
    ]
    return draft.done(
        "concentrated",
        cause,
        f"{_rows_word(len(head)).capitalize()} explain {_pct(found.head_share)} of the regression ({cause}).",
        explained,
        groups=[g.to_dict() for g in groups],
        culprit_clusters=culprit_clusters,
        drop_rows=list(head),
        drop_ids=[ids.get(r) for r in head],
    )


def _spread(draft, found, n_reg: str, setup_cause: str) -> dict[str, Any]:
    """The verdict when no group of rows explains the regression: say why, and what to try instead."""
    draft.sentences.append(
        f"The harm to the {n_reg} is spread: {found.reason}. No group of rows explains the regression, so no rows "
        "are named to drop."
    )
    if not draft.errors:
        warn = [
            f for f in draft.findings
            if str(f.get("severity", "")).lower() == "warning" and not finding_train_rows(f)
        ]  # fmt: skip
        if warn:
            draft.next_steps.append(
                "Check the setup warnings (" + _join([finding_title(f) for f in warn]) + "): a regression spread "
                "over all the data often comes from how it was trained (learning rate, epochs) rather than from rows."
            )
        else:
            draft.next_steps.append(
                "Dropping rows is unlikely to help; try a lower learning rate or fewer epochs, or mix in data like the "
                "regressed eval items."
            )
    return draft.done("spread", setup_cause, "The harm is spread; no group of rows is to blame.")
