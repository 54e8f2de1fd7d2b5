"""The verdict read in 30 seconds: one headline sentence (what happened and what to do, at most ``MAX_WORDS`` words)
and at most three evidence bullets, written from a decided :class:`Verdict`. It decides nothing: the verdict's
sentences stay as the details, shown folded (HTML) or after a blank line (terminal, markdown)."""

from __future__ import annotations

from gradian.numbers import pct
from gradian.verdict.schema import Verdict, VerdictGroup

MAX_WORDS = 25


def _what(g: VerdictGroup) -> str:
    """A few words on what a group's rows share: its finding, its label, a content finding that flags most of them,
    or its first two terms (a finding says what the rows are; terms only what they are about, and on rows in
    another language they are its function words)."""
    if g.finding is not None and g.finding.name:
        return f"with {g.finding.name.replace('_', ' ')}"
    if g.label:
        return f"labelled {g.label.strip()!r}"
    shared = sorted((s for s in g.shared if s.name and s.share >= 0.5), key=lambda s: -s.share)
    if shared:
        return f"with {str(shared[0].name).replace('_', ' ')}"
    if g.terms:
        return "about " + " / ".join(g.terms[:2])
    return ""


def _fits(*options: str) -> str:
    """The first option of at most MAX_WORDS words (the last one regardless)."""
    for o in options:
        if len(o.split()) <= MAX_WORDS:
            return o
    return options[-1]


def headline(v: Verdict) -> str:
    n = len(v.drop_rows)
    forgot = bool((v.forgetting or {}).get("found"))
    if v.kind == "concentrated" and n:
        share = pct(v.how.head_share if v.how else None, "?")
        back = f"about {pct(v.expected_recovery, '?')}"
        act = "fix or drop them" if v.cause == "mechanical" else "drop them"
        leads_below = float(v.policy.get("forgetting_leads_below", 0.5))
        little = (
            bool((v.forgetting or {}).get("recovers_little"))
            if v.expected_recovery is None
            else v.expected_recovery < leads_below
        )
        if forgot and little:  # most of the regression is the data's as a whole
            if v.expected_recovery is None:
                return f"The model forgot: mix general data back in; {n} rows carry {share} of the harm, drop_rows.txt."
            return (
                f"The model forgot: mix general data back in; dropping {n} rows ({share} of the harm, drop_rows.txt) "
                f"should bring back {back} of the regression."
            )
        what = _what(v.groups[0]) if len(v.groups) == 1 else ""
        rows = f"{n} training rows {what}" if what else f"{n} training rows"
        if v.expected_recovery is None:  # no calibrated estimate of what dropping them brings back
            end = "; the rest is forgetting: mix general data in." if forgot else "."
            return _fits(f"{rows} carry {share} of the harm: {act} (drop_rows.txt){end}",
                         f"{n} training rows carry {share} of the harm: {act} (drop_rows.txt){end}")  # fmt: skip
        end = f"{back}; the rest is forgetting: mix general data in." if forgot else f"{back} of the regression."
        return _fits(
            f"{rows} carry {share} of the harm: {act} (drop_rows.txt) to bring back {end}",
            f"{n} training rows carry {share} of the harm: {act} (drop_rows.txt) to bring back {end}",
            f"{n} training rows carry {share} of the harm: {act} (drop_rows.txt).",
        )
    if v.kind == "spread" and forgot and v.config_changes:
        c = v.config_changes[0]
        more = f" (+{len(v.config_changes) - 1} more)" if len(v.config_changes) > 1 else ""
        where = f": {c.key} = {c.value}" if c.key else ""
        return _fits(
            f"Fix the setup error first ({(c.name or c.code or '').replace('_', ' ')}{where}{more}); "
            "the model also forgot from the data as a whole: mix general data in.",
            "Fix the setup errors first; the model also forgot from the data as a whole: mix general data in.",
        )
    if v.kind == "spread" and forgot:
        return "The model forgot: the training data as a whole pulls it away from these items; mix general data in."
    if v.kind == "spread":
        return "No group of rows stands out: the harm is spread over the data; check the setup and the learning rate."
    if v.kind == "setup":
        k = len(v.config_changes) or 1
        return f"Fix the {k} setup error{'s' if k > 1 else ''} first; no rows are named over a broken run."
    return v.headline


def evidence(v: Verdict) -> list[str]:
    """At most three short bullets, each a measured number behind the headline."""
    out: list[str] = []
    how = v.how
    if v.kind == "concentrated" and how is not None:
        stab = f", agreement {v.confidence.stability:.2f}" if v.confidence.stability is not None else ""
        out.append(
            f"{len(v.drop_rows)} rows carry {pct(how.head_share, '?')} of the harm; resampling the regressed items "
            f"finds the same rows (confidence {v.confidence.level}{stab})."
        )
        d = how.driven
        if d:
            out.append(
                f"Their harm singles out {d.get('n_driven', 0)} of the {d.get('n_items', 0)} regressed items "
                f"(random rows: {float(d.get('expected_by_chance') or 0):.1f})."
            )
    if v.kind == "spread" and how is not None and how.reason:
        out.append(f"No group stands out: {how.reason}.")
    for x in (how.finding_leads if v.kind == "spread" and how is not None else [])[:1]:
        out.append(
            f"{len(x.get('rows') or [])} rows flagged as {str(x.get('name') or '').replace('_', ' ')} carry "
            f"{pct(x.get('harm_share'), '?')} of the harm ({pct(x.get('row_share'), '?')} of the rows); dropping them "
            f"should bring back about {pct(x.get('expected_recovery'), '?')}."
        )
    f = v.forgetting or {}
    if f.get("found"):
        out.append(
            f"The rows not named carry {pct(f.get('bulk_share'), '?')} of the harm, and {f.get('far_items')} of the "
            f"{f.get('n_items')} regressed items are unlike every training row."
        )
    if v.kind == "concentrated" and v.groups and len(out) < 3:
        causes = " and ".join(sorted({g.cause for g in v.groups}))
        what = "; ".join(w for g in v.groups if (w := _what(g)))
        out.append(f"Cause: {causes}{f' (rows {what})' if what else ''}.")
    if v.kind == "setup":
        out += [f"Setup error: {c.name or c.code} ({c.key} = {c.value})." for c in v.config_changes[:3]]
    return out[:3]


def summarize(v: Verdict) -> None:
    """Set ``v.headline`` and ``v.evidence``."""
    v.headline = headline(v)
    v.evidence = evidence(v)
