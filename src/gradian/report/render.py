"""Render a built report (the :class:`~gradian.report.schema.Report` ``build_report`` returns, or report.json's dict)
as report.html, report.md and report.json.

report.html is one self-contained file: inline CSS, inline SVG plots, no JavaScript, no network (a
Content-Security-Policy forbids scripts and remote loads). Every piece of dataset text is escaped with
``html.escape(quote=True)``; report.md escapes it for Markdown (``&``, ``<``, ``>``, pipes, backticks, emphasis and
link brackets).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gradian.numbers import as_float, pct
from gradian.report import svg
from gradian.report.schema import TOP_ROWS_SHOWN, EvalItem, Fix, RankedRow, Report
from gradian.report.svg import esc
from gradian.verdict.schema import Verdict, VerdictGroup, resample_size

SUMMARY_CHARS = 160
MD_TEXT_CHARS = 300
TOKEN_TEXT_OPEN = 2000  # a row split by token longer than this (characters) is shown collapsed


def _f(v: Any, digits: int = 3) -> str:
    x = as_float(v)
    if x is None:
        return "—"
    if not math.isfinite(x):
        return str(x)
    if x != 0 and (abs(x) >= 1e4 or abs(x) < 10 ** (-digits)):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}f}"


def as_report(report: Report | Mapping[str, Any]) -> Report:
    """A report as the typed :class:`Report` (report.json's dict read back)."""
    return report if isinstance(report, Report) else Report.from_dict(report)


def _or_nan(x: float | None) -> float:
    """A missing number as NaN (a plot leaves it out)."""
    return math.nan if x is None else x


def _shown_rows(report: Report) -> list[RankedRow]:
    return sorted(report.examples, key=lambda e: e.rank or math.inf)[:TOP_ROWS_SHOWN]


def _most_regressed_first(items: Sequence[EvalItem]) -> list[EvalItem]:
    return sorted(items, key=lambda r: -r.change)


def _evidence_summary(ev: Any) -> str:
    if not isinstance(ev, Mapping):
        return ""
    parts = []
    if ev.get("count") is not None:
        parts.append(
            f"{ev['count']} rows" + (f" ({float(ev['percent']):.1f}%)" if ev.get("percent") is not None else "")
        )
    elif ev.get("percent") is not None:
        parts.append(f"{float(ev['percent']):.1f}%")
    if ev.get("key") is not None:
        parts.append(f"{ev['key']} = {ev.get('value')!s}")
    if ev.get("source"):
        parts.append(f"source: {ev['source']}")
    if ev.get("steps"):
        steps = list(ev["steps"])
        parts.append("steps " + listed(steps, 8))
    rows = ev.get("rows") or []
    if rows:
        parts.append("rows " + listed(rows, 10))
    return "; ".join(parts)


# ------------------------------------------------------------------------------------------------------------ plots


CAPTIONS = {
    "plot-loss": "Trainer loss by step. Dashed orange lines mark diagnose's log findings at their steps (hover for "
    "the finding).",
    "plot-nll": "Negative log-likelihood of each regressed eval item before (base) and after (fine-tuned) training.",
    "plot-harm": "Harm score of every training row; orange bars (harm >= 0) moved the model toward the regression.",
    "plot-cluster-harm": "A culprit cluster's orange bar (share of harm) is at least twice its grey bar (share of "
    "rows).",
    "plot-map": "Each dot is a training row, placed by the first two principal components of its normalised "
    "gradient and coloured by cluster (hover for the row).",
}


def plots(report: Report | Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(anchor, heading, svg) for every plot the report can draw."""
    report = as_report(report)
    out = []
    points = report.logs.points if report.logs is not None else []
    if points:
        train = [(p.step, p.loss) for p in points if p.loss is not None]
        ev = [(p.step, p.eval_loss) for p in points if p.eval_loss is not None]
        series: list[tuple[str, list[float], list[float]]] = []
        if train:
            series.append(("train loss", [s for s, _ in train], [v for _, v in train]))
        if ev:
            series.append(("eval loss", [s for s, _ in ev], [v for _, v in ev]))
        markers = []
        for f in report.findings:
            for s in f.evidence.get("steps") or []:
                step = as_float(s)
                if step is not None:
                    markers.append((step, f"{f.code} {f.name}: {f.message}"))
        title = "Loss curve"
        out.append(
            ("plot-loss", "Loss curve", svg.line_chart(title, series, xlabel="step", ylabel="loss", markers=markers))
        )
    reg = report.regressed
    if reg:
        cats = [r.label for r in reg]
        out.append(
            (
                "plot-nll",
                "Base vs fine-tuned NLL per regressed eval item",
                svg.bar_chart(
                    "NLL per regressed eval item",
                    cats,
                    [
                        ("base", [_or_nan(r.base_nll) for r in reg]),
                        ("fine-tuned", [_or_nan(r.finetuned_nll) for r in reg]),
                    ],
                    ylabel="NLL",
                    xlabel="eval item",
                ),
            )
        )
    scores = [e.score for e in report.examples if e.score is not None]
    if scores:
        out.append(
            (
                "plot-harm",
                "Harm distribution",
                svg.histogram("Harm per training row", scores, xlabel="harm"),
            )
        )
    clusters = report.clusters
    if clusters:
        cats = [f"C{c.id}" for c in clusters]
        out.append(
            (
                "plot-cluster-harm",
                "Harm by cluster",
                svg.bar_chart(
                    "Share of harm vs share of rows, by cluster",
                    cats,
                    [
                        ("harm share", [c.harm_share for c in clusters]),
                        ("row share", [c.size_share for c in clusters]),
                    ],
                    ylabel="share",
                    colors=["#D55E00", "#9AA5B1"],
                ),
            )
        )
    m = report.clustering.map if report.clustering is not None else None
    if m is not None and m.x:
        rows = {e.index: e for e in report.examples}
        order = {c.id: i for i, c in enumerate(clusters)}
        pts = []
        for i, x, y, c in zip(m.index or [], m.x, m.y or [], m.cluster or [None] * len(m.x), strict=False):
            e = rows.get(int(i))
            tip = f"row {i}" + (f" ({e.id})" if e is not None and e.id is not None else "")
            tip += f", cluster {c}, harm {_f(e.score if e is not None else None)}"
            pts.append((x, y, order.get(c, len(clusters)) if c is not None else len(clusters), tip))
        names = [f"C{c.id}" for c in clusters]
        out.append(
            (
                "plot-map",
                "Training rows in gradient space",
                svg.scatter(
                    "Training rows in gradient space, by cluster",
                    pts,
                    group_names=names,
                    xlabel="PC 1",
                    ylabel="PC 2",
                ),
            )
        )
    return out


# ------------------------------------------------------------------------------------------------------------- HTML

CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; background: #f6f7f9; color: #1f2328;
  font: 16px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", "DejaVu Sans", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 64px; }
h1 { font-size: 28px; margin: 8px 0 4px; }
h2 { font-size: 22px; margin: 40px 0 12px; padding-bottom: 6px; border-bottom: 2px solid #d0d7de; }
h3 { font-size: 17px; margin: 20px 0 8px; }
p.sub { color: #57606a; margin: 0 0 16px; }
nav { font-size: 14px; margin: 0 0 8px; }
nav a { margin-right: 14px; color: #0969da; text-decoration: none; }
.verdict { background: #fff; border: 1px solid #d0d7de; border-left: 6px solid #0969da; border-radius: 8px;
  padding: 18px 22px; margin-top: 12px; }
.verdict.concentrated { border-left-color: #cf222e; }
.verdict.unreliable { border-left-color: #bf8700; }
.verdict .headline { font-size: 21px; font-weight: 650; margin: 0 0 8px; }
.verdict p { margin: 6px 0; max-width: 80ch; }
.verdict ol { margin: 8px 0 0 0; padding-left: 22px; }
.verdict li { margin: 4px 0; max-width: 80ch; }
.warn { background: #fff8c5; border: 1px solid #d4a72c; border-radius: 6px; padding: 8px 12px; margin: 0 0 10px; }
.meta { color: #57606a; font-size: 13px; margin-top: 10px; }
table { border-collapse: collapse; width: 100%; background: #fff; font-size: 14px; border: 1px solid #d0d7de; }
th, td { text-align: left; vertical-align: top; padding: 7px 10px; border-bottom: 1px solid #e3e6ea; }
th { background: #eef1f4; font-weight: 600; white-space: nowrap; }
tr:nth-child(even) td { background: #fafbfc; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.text { max-width: 520px; white-space: pre-wrap; overflow-wrap: anywhere; }
details summary { cursor: pointer; color: #24292f; }
details[open] summary { color: #57606a; margin-bottom: 4px; }
code, .code { font-family: ui-monospace, "SFMono-Regular", "DejaVu Sans Mono", Menlo, Consolas, monospace;
  font-size: 13px; }
.badge { display: inline-block; padding: 0 7px; border-radius: 10px; font-size: 12px; font-weight: 600;
  margin: 1px 2px 1px 0; background: #eaeef2; white-space: nowrap; }
.sev-error { background: #ffebe9; color: #a40e26; }
.sev-warning { background: #fff8c5; color: #7d4e00; }
.sev-info { background: #ddf4ff; color: #0a3069; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 6px;
  vertical-align: -1px; }
.bar { background: #eaeef2; border-radius: 3px; height: 8px; width: 120px; margin-top: 4px; }
.bar > span { display: block; height: 8px; border-radius: 3px; background: #D55E00; }
.culprit td { background: #fff5f3 !important; }
.plots { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 16px; }
figure { margin: 0; background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 10px; }
figure svg { width: 100%; height: auto; display: block; }
figcaption { font-size: 13px; color: #57606a; margin-top: 4px; }
ul.contrib { list-style: none; padding: 0; margin: 0; font-size: 13px; white-space: nowrap; }
.muted { color: #57606a; }
.badge.gen { background: #ddf4ff; color: #0a3069; }
mark.tok { color: inherit; border-radius: 2px; padding: 0; }
td.gen { max-width: 400px; white-space: pre-wrap; overflow-wrap: anywhere; }
td.gen.tuned { background: #fff5f3 !important; }
"""

HARM_RGB = (213, 94, 0)  # the harm colour of the plots (orange)
HELP_RGB = (0, 114, 178)  # negative harm (blue)


def _text_cell(text: Any, generated: Any = None) -> str:
    if text is None:
        return '<td class="text muted">(text not saved)</td>'
    s = str(text)
    gen = (
        f'<span class="badge gen" title="the completion was written by the base model ({esc(generated)})">'
        "generated completion</span> "
        if generated
        else ""
    )
    if len(s) <= SUMMARY_CHARS and "\n" not in s:
        return f'<td class="text">{gen}{esc(s)}</td>'
    head = " ".join(s[:SUMMARY_CHARS].split())
    return (
        f'<td class="text">{gen}<details><summary>{esc(head)}… <span class="muted">({len(s)} chars)</span></summary>'
        f"{esc(s)}</details></td>"
    )


def _token_cell(pieces: Sequence[Sequence[Any]]) -> str:
    """The row as the model saw it, each label token shaded by its share of the row's largest token harm (orange:
    harm, blue: the other way), its harm in the tooltip; text that is not a label token is muted."""
    from gradian.attribute.tokens import top_tokens

    big = max((abs(float(h)) for _, h in pieces if h is not None), default=0.0) or 1.0
    out = []
    for text, h in pieces:
        if h is None:
            out.append(f'<span class="muted">{esc(text)}</span>')
            continue
        a = min(1.0, abs(float(h)) / big)
        rgb = HARM_RGB if float(h) >= 0 else HELP_RGB
        out.append(
            f'<mark class="tok" style="background: rgba({rgb[0]},{rgb[1]},{rgb[2]},{0.85 * a:.2f})" '
            f'title="harm {esc(_f(h))}">{esc(text)}</mark>'
        )
    top = ", ".join(f"{esc(repr(t))} {esc(_f(h))}" for t, h in top_tokens(pieces))
    if sum(len(str(t)) for t, _ in pieces) <= TOKEN_TEXT_OPEN:
        return f'<td class="text tokens">{"".join(out)}<div class="meta">most harmful tokens: {top}</div></td>'
    return (  # a long row: collapsed, its most harmful tokens in the summary
        f'<td class="text tokens"><details><summary>most harmful tokens: {top}</summary>{"".join(out)}</details></td>'
    )


def _sev(sev: Any) -> str:
    s = str(sev or "info").lower()
    s = s if s in ("error", "warning", "info") else "info"
    return f'<span class="badge sev-{s}">{esc(s)}</span>'


def _verdict_html(report: Report) -> str:
    v = report.verdict or Verdict("", "unknown", "")
    classes = ["verdict", esc(v.kind)]
    if not v.reliable:
        classes.append("unreliable")
    parts = [f'<div class="{" ".join(classes)}" id="verdict-box">']
    if not v.reliable:
        parts.append('<p class="warn"><strong>Attribution may be unreliable:</strong> setup errors below.</p>')
    parts.append(f'<p class="headline">{esc(v.headline)}</p>')
    if v.evidence:
        parts.append('<ul id="verdict-evidence">' + "".join(f"<li>{esc(e)}</li>" for e in v.evidence) + "</ul>")
    if v.sentences:
        parts.append('<details id="verdict-details"><summary>Details</summary>'
                     + "".join(f"<p>{esc(s)}</p>" for s in v.sentences) + "</details>")  # fmt: skip
    conf = confidence_text(v)
    if conf:
        parts.append(f'<p class="meta" id="verdict-confidence">{esc(conf)}</p>')
    if v.groups:
        body = "".join(
            f"<tr><td>{i}</td><td>{esc(g.cause)}</td><td class=num>{esc(g.size)}</td>"
            f"<td class=num>{pct(g.harm_share)}</td><td>{esc(_group_trait(g))}</td></tr>"
            for i, g in enumerate(v.groups, start=1)
        )
        parts.append(
            '<table id="verdict-groups"><thead><tr><th>group</th><th>cause</th><th>rows</th><th>share of harm</th>'
            "<th>what the rows share</th></tr></thead><tbody>" + body + "</tbody></table>"
        )
    if v.next_steps:
        parts.append("<h3>Next steps</h3><ol>" + "".join(f"<li>{esc(s)}</li>" for s in v.next_steps) + "</ol>")
    drop = v.drop_rows
    if drop:
        shown = esc(listed(drop, 30))
        parts.append(
            f'<p class="meta">Rows to drop ({len(drop)}, also in <code>drop_rows.txt</code> and '
            f"<code>drop_rows.json</code>): {shown}</p>"
        )
    for label, rows in rows_to_read(v):
        parts.append(f'<p class="meta hint-rows">{esc(label)}: {esc(listed(rows, 30))}</p>')
    parts.append(f'<p class="meta">Criterion: {esc(v.criterion)}.</p>')
    parts.append("</div>")
    return "".join(parts)


def listed(items: Sequence[Any], limit: int) -> str:
    """The first ``limit`` items, comma-separated, with " …" when there are more."""
    items = list(items)
    return ", ".join(str(x) for x in items[:limit]) + (" …" if len(items) > limit else "")


_ASIDE = {"": "beside the named rows", "bulk": "as the top of forgetting"}  # VerdictGroup.aside, in the row lists


def rows_to_read(v: Verdict) -> list[tuple[str, list[int]]]:
    """(label, rows) for each term hint of the verdict (:mod:`gradian.verdict.term_hints`), rows past drop_rows to
    read for the same defect, each group set aside (too light, :func:`culprits.minor`, or forgetting's top), and
    each label and each warning's rows a spread harm leans on (:mod:`gradian.verdict.label_leads`,
    :mod:`gradian.verdict.finding_leads`)."""
    hints = v.how.hints if v.how is not None else []
    aside = v.how.set_aside if v.how is not None else []
    leads = v.how.leads if v.how is not None else []
    flagged = v.how.finding_leads if v.how is not None else []
    return [
        (f"Rows to read ({len(x.get('rows') or [])} flagged as {str(x.get('name') or '').replace('_', ' ')} "
         f"({x.get('code')}), most harmful first, not in drop_rows)", [int(r) for r in x.get("rows") or []])
        for x in flagged
        if x.get("rows")
    ] + [
        (f"Labels to check ({len(x.get('rows') or [])} rows whose completion is {x.get('label')!r}, most harmful "
         "first, not in drop_rows)", [int(r) for r in x.get("rows") or []])
        for x in leads
        if x.get("rows")
    ] + [
        (f'Rows to read ({len(h.get("rows") or [])} that hold "{h.get("term")}", not in drop_rows)',
         [int(r) for r in h.get("rows") or []])
        for h in hints
        if h.get("rows")
    ] + [
        (f"Rows to read ({len(g.rows)} set aside {_ASIDE.get(g.aside, _ASIDE[''])}, {pct(g.harm_share)} of the harm, "
         "not in drop_rows)", list(g.rows))
        for g in aside
        if g.rows
    ]  # fmt: skip


def confidence_text(v: Verdict | Mapping[str, Any]) -> str:
    """'Confidence: high (...)' from the verdict's stability measurement, or ''."""
    v = v if isinstance(v, Verdict) else Verdict.from_dict(v)
    if v.kind not in ("concentrated", "spread"):
        return ""
    n, size = v.policy.get("bootstrap"), resample_size(v.policy.get("resample_items"))
    if v.confidence.stability is None:
        return "How sure: unmeasured; fewer than three regressed items to resample."
    if v.confidence.basis == "finding":
        text = (
            f"How sure: {v.confidence.level}; the culprit rows rest on diagnose findings whose flagged rows' harm "
            f"still ranks above the other rows' in {float(v.confidence.stability):.0%} of {n} resamples of the "
            f"regressed items{size} (the least over the findings used)."
        )
    else:
        text = (
            f"How sure: {v.confidence.level}; in {n} resamples of the regressed items{size}, the rows that lead each "
            f"one (as many as stood out) agree {float(v.confidence.stability):.2f} on average with the rows that stood "
            "out (Jaccard overlap)."
        )
    return text + (f" Decision: {v.how.reason}." if v.how is not None and v.how.reason else "")


def _group_trait(g: VerdictGroup) -> str:
    """What a verdict group's rows share, in a few words."""
    bits = []
    if g.finding is not None:
        bits.append(f"flagged {g.finding.code} {g.finding.name}")
    bits += [f"{100 * float(sh.share):.0f}% {sh.code} {sh.name}" for sh in g.shared]
    if g.label:
        bits.append(f"{pct(g.label_share)} share the completion {g.label!r} (a label: check, then drop)")
    if g.terms:
        bits.append("terms: " + " / ".join(g.terms))
    if g.tokens:
        bits.append("harm on tokens: " + " / ".join(repr(t) for t in g.tokens))
    if g.by_direction:
        bits.append(f"{g.by_direction} rows joined by their gradient direction")
    if g.by_tokens:
        bits.append(f"{g.by_tokens} rows joined by their harm tokens")
    if g.off_tokens:
        bits.append(f"{len(g.off_tokens)} rows left out: no harm on its tokens")
    return "; ".join(bits) or "no shared finding or term"


def _id_text(r: EvalItem | RankedRow) -> Any:
    return r.id if r.id is not None else ""


DRIVEN_HEADER = "driven by the verdict's rows"


def _driven_by_verdict(report: Report) -> dict[int, str] | None:
    """Per regressed item, whether the verdict's rows drive it and their harm z (``verdict.how.driven``,
    :mod:`gradian.verdict.driven`); None when the verdict named no rows."""
    how = report.verdict.how if report.verdict is not None else None
    if how is None or not how.driven.get("z_by_item"):
        return None
    driven = {int(i) for i in how.driven.get("items") or []}
    return {
        int(i): f"{'yes' if int(i) in driven else 'no'} (z {float(z):.1f})" for i, z in how.driven["z_by_item"].items()
    }


def _regressed_intro(reg: list) -> str:
    """What "got worse" means for these items: the NLL of the base model's completion rose, or (scored by
    preference) the fine-tune now prefers its own reply."""
    n = f"{len(reg)} eval item{'s' if len(reg) != 1 else ''}"
    if any(r.score == "preference" for r in reg):
        return (f"{n} changed: the fine-tune prefers its own greedy reply over the base model's (change: nats/token "
                "more than the base model does; the NLLs are the base model's reply's; the two replies are side by "
                "side under Base vs fine-tune).")  # fmt: skip
    return f"{n} got worse (fine-tuned NLL above base NLL)."


def _regressed_html(report: Report) -> str:
    reg = report.regressed
    if not reg:
        return "<p>No eval item got worse after fine-tuning.</p>"
    driven = _driven_by_verdict(report)
    rows = []
    for r in _most_regressed_first(reg):
        rows.append(
            f"<tr><td class=num>{esc(r.index)}</td><td>{esc(_id_text(r))}</td>"
            f"<td class=num>{_f(r.base_nll)}</td><td class=num>{_f(r.finetuned_nll)}</td>"
            f"<td class=num>+{_f(r.change)}</td>"
            + (f"<td>{esc(driven.get(r.index, ''))}</td>" if driven is not None else "")
            + f"{_text_cell(r.text, r.generated)}</tr>"
        )
    return (
        f"<p>{esc(_regressed_intro(reg))}</p>"
        "<table><thead><tr><th>eval row</th><th>id</th><th>base NLL</th><th>fine-tuned NLL</th><th>change</th>"
        + (f"<th>{esc(DRIVEN_HEADER)}</th>" if driven is not None else "")
        + "<th>text</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _generated_note(report: Report) -> str:
    g = report.settings.get("eval_generation") or {}
    if not g:
        return ""
    cut = ", cut after the first token where the fine-tune's most likely next token differs" if g.get("cut") else ""
    return (
        f'<p class="sub">{esc(g.get("rows"))} eval rows had only a prompt: their completions were written by the base '
        f"model ({esc(g.get('how'))}, at most {esc(g.get('max_new_tokens'))} tokens{esc(cut)}).</p>"
    )


def _generations_html(report: Report) -> str:
    reg = [r for r in report.regressed if isinstance(r.generations, Mapping)]
    if not reg:
        return "<p>No continuations were generated (<code>--generations 0</code>, or no regressed item).</p>"
    rows = []
    for r in _most_regressed_first(reg):
        g = r.generations or {}
        rows.append(
            f"<tr><td class=num>{esc(r.index)}</td><td>{esc(_id_text(r))}</td>"
            f"{_text_cell(r.text, r.generated)}<td class=gen>{esc(g.get('base', ''))}</td>"
            f'<td class="gen tuned">{esc(g.get("finetuned", ""))}</td></tr>'
        )
    n = (report.settings.get("generations") or {}).get("max_new_tokens")
    return (
        f'<p class="sub">What each model writes after the prompt of a regressed item (greedy'
        f"{f', at most {esc(n)} tokens' if n else ''}; most regressed first).</p>"
        '<table id="generations-table"><thead><tr><th>eval row</th><th>id</th><th>eval item</th>'
        "<th>base model continues</th><th>fine-tune continues</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _clustering_how(report: Report) -> str:
    return report.clustering.how if report.clustering is not None else ""


def _clusters_html(report: Report) -> str:
    clusters = report.clusters
    how = _clustering_how(report)
    if not clusters:
        return f"<p>{esc(how or 'No clusters.')}</p>"
    culprits = set(report.verdict.culprit_clusters if report.verdict is not None else [])
    ids = {e.index: e.id for e in report.examples}
    rows = []
    for i, c in enumerate(clusters):
        f_html = "".join(f"<div>{esc(f.text)}</div>" for f in c.findings) or '<span class="muted">none</span>'
        top = ", ".join(
            esc(r) + (f" <span class=muted>({esc(ids[r])})</span>" if ids.get(r) is not None else "")
            for r in c.top_rows[:5]
        )
        share = max(0.0, min(1.0, c.harm_share))
        rows.append(
            f'<tr class="{"culprit" if c.id in culprits else ""}">'
            f'<td><span class="swatch" style="background:{svg.color(i)}"></span>C{esc(c.id)}</td>'
            f"<td>{esc(c.label)}</td>"
            f"<td class=num>{esc(c.size)} <span class=muted>({pct(c.size_share)})</span></td>"
            f'<td class=num>{pct(share)}<div class="bar"><span style="width:{100 * share:.0f}%"></span></div></td>'
            f"<td class=num>{_f(c.mean_harm)}</td><td>{f_html}</td><td>{top}</td></tr>"
        )
    return (
        f'<p class="sub">{esc(how)}.</p>'
        '<table id="cluster-table"><thead><tr><th>cluster</th><th>label (distinctive terms)</th><th>rows</th>'
        "<th>share of harm</th><th>mean harm</th><th>diagnose findings</th><th>top rows</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _top_rows_html(report: Report) -> str:
    shown = _shown_rows(report)
    if not shown:
        return "<p>No rows were scored.</p>"
    reg_ids = {r.index: r.id for r in report.regressed}
    rows = []
    for e in shown:
        contrib = e.contributions or []
        c_html = (
            '<ul class="contrib">'
            + "".join(f"<li>item {esc(reg_ids.get(int(c.item)) or c.item)}: {_f(c.score)}</li>" for c in contrib[:6])
            + ("<li>…</li>" if len(contrib) > 6 else "")
            + "</ul>"
            if contrib
            else '<span class="muted">—</span>'
        )
        codes = "".join(f'<span class="badge">{esc(c)}</span>' for c in e.findings or []) or ""
        cl = e.cluster
        rows.append(
            f"<tr><td class=num>{esc(e.rank)}</td><td class=num>{esc(e.index)}</td>"
            f"<td>{esc(_id_text(e))}</td><td class=num>{_f(e.score)}</td>"
            f"<td>{'C' + esc(cl) if cl is not None else '—'}</td><td>{codes}</td>"
            f"{_token_cell(e.token_harm) if e.token_harm else _text_cell(e.text)}"
            f"<td>{c_html}</td></tr>"
        )
    n = len(report.examples)
    tok = (
        " Rows split by token show the text as the model saw it; each label token is shaded by its part of the row's "
        "harm (orange: toward the regression, blue: away; hover for the number), the parts sum to the row's harm."
        if any(e.token_harm for e in shown)
        else ""
    )
    return (
        f'<p class="sub">The {len(shown)} most harmful of {n} rows (harm &gt; 0: the row moved the model toward the '
        f"regression).{tok}</p>"
        '<table id="top-rows"><thead><tr><th>rank</th><th>row</th><th>id</th><th>harm</th><th>cluster</th>'
        "<th>findings</th><th>text</th><th>per regressed item</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _fix_cell(fix: Fix | None) -> str:
    """A fix as the findings tables show it: its sentence, then the command to run when there is one."""
    if fix is None:
        return ""
    return fix.sentence() + (f". Run: {fix.command}" if fix.command else "")


def _findings_html(report: Report) -> str:
    findings = report.findings
    if not findings:
        return "<p>diagnose reported no findings (or was not run).</p>"
    rows = []
    for f in sorted(findings, key=lambda f: (-f.severity.rank, f.code)):  # errors first, by code within each
        rows.append(
            f"<tr><td>{_sev(f.severity.value)}</td><td><code>{esc(f.code)}</code></td>"
            f"<td>{esc(f.name)}</td><td class=text>{esc(f.message)}</td>"
            f"<td class=text>{esc(_evidence_summary(f.evidence))}</td>"
            f"<td class=text>{esc(_fix_cell(f.fix))}</td></tr>"
        )
    return (
        '<table id="findings"><thead><tr><th>severity</th><th>code</th><th>name</th><th>message</th><th>evidence</th>'
        "<th>fix</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def render_html(report: Report | Mapping[str, Any]) -> str:
    """The whole report.html as a string."""
    report = as_report(report)
    sections = [
        ("verdict", "Verdict", _verdict_html(report)),
        ("regressed", "Regressed items", _generated_note(report) + _regressed_html(report)),
        ("generations", "Base vs fine-tune", _generations_html(report)),
        ("clusters", "Clusters", _clusters_html(report)),
        ("top-rows-section", "Top rows", _top_rows_html(report)),
        ("setup-findings", "Setup findings", _findings_html(report)),
    ]
    figs = plots(report)
    plot_html = (
        '<div class="plots">'
        + "".join(
            f'<figure id="{a}">{s}<figcaption><strong>{esc(h)}.</strong> {esc(CAPTIONS.get(a, ""))}</figcaption>'
            "</figure>"
            for a, h, s in figs
        )
        + "</div>"
        if figs
        else "<p>Nothing to plot.</p>"
    )
    sections.append(("plots", "Plots", plot_html))
    settings = report.settings
    meta = _settings_summary(report.method, settings)
    if settings:
        full = json.dumps(settings, sort_keys=True, indent=1, default=str)
        sections.append(
            (
                "settings",
                "Settings",
                f"<details><summary>All settings (saved in report.json)</summary><pre>{esc(full)}</pre></details>",
            )
        )
    nav = "<nav>" + "".join(f'<a href="#{a}">{esc(h)}</a>' for a, h, _ in sections) + "</nav>"
    body = "".join(f'<section id="{a}"><h2>{esc(h)}</h2>{content}</section>' for a, h, content in sections)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "img-src data:; base-uri 'none'; form-action 'none'\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>Gradian report</title>"
        f"<style>{CSS}</style></head><body><main>"
        "<h1>Gradian report</h1>"
        f'<p class="sub">Why the fine-tune got worse: {len(report.regressed)} regressed eval items, '
        f"{report.row_count} training rows ranked by harm. {esc(meta)}</p>"
        f"{nav}{body}</main></body></html>\n"
    )


def _settings_summary(method: Any, settings: Mapping[str, Any]) -> str:
    """One line of the settings a reader needs to trust the ranking; the rest is in the Settings section."""
    parts = [f"method {method}"] if method else []
    proj = settings.get("proj_dim")
    if proj is not None:
        parts.append("exact gradients" if not proj else f"projection k={proj}")
    if settings.get("query"):
        q = f"query: {settings['query']} items"
        if settings.get("threshold") is not None:
            q += f" (NLL rise > {settings['threshold']} nats/token)"
        parts.append(q)
    if settings.get("device"):
        parts.append(f"{settings['device']} {settings.get('dtype') or ''}".strip())
    return " · ".join(parts)


# --------------------------------------------------------------------------------------------------------- Markdown


def md_escape(text: Any, limit: int | None = None) -> str:
    """Dataset text for a Markdown table cell: one line, HTML-escaped, pipes/backticks/emphasis/links neutralised."""
    s = " ".join(str(text).split())
    if limit is not None and len(s) > limit:
        s = s[:limit] + "…"
    s = s.replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "*_[]~#!":
        s = s.replace(ch, "\\" + ch)
    return s.replace("|", "&#124;").replace("`", "&#96;")  # after the escapes: an entity's "#" stays as it is


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def render_markdown(report: Report | Mapping[str, Any]) -> str:
    """report.md: the same content as text tables (no plots)."""
    report = as_report(report)
    lines = ["# Gradian report", ""]
    lines += _md_verdict(report.verdict or Verdict("", "unknown", ""))
    lines += _md_regressed(report)
    lines += _md_generations(report)
    lines += _md_clusters(report)
    shown = _shown_rows(report)
    lines += _md_top_rows(shown)
    lines += _md_token_harm(shown)
    lines += _md_findings(report)
    lines += ["", "## Plots", "", "The plots are in report.html.", ""]
    return "\n".join(lines)


def _md_verdict(v: Verdict) -> list[str]:
    """The verdict: headline, sentences, confidence, groups, next steps, rows to drop and the criterion."""
    lines = ["## Verdict", ""]
    if not v.reliable:
        lines += ["> **Attribution may be unreliable:** setup errors below.", ""]
    lines += [f"**{md_escape(v.headline)}**", ""]
    if v.evidence:
        lines += [f"- {md_escape(e)}" for e in v.evidence] + [""]
    if v.sentences:
        lines += ["Details: " + " ".join(md_escape(s) for s in v.sentences), ""]
    conf = confidence_text(v)
    if conf:
        lines += [md_escape(conf), ""]
    if v.groups:
        lines += [
            _md_table(
                ["group", "cause", "rows", "share of harm", "what the rows share"],
                [
                    [str(i), g.cause, str(g.size), pct(g.harm_share), md_escape(_group_trait(g))]
                    for i, g in enumerate(v.groups, start=1)
                ],
            ),
            "",
        ]
    if v.next_steps:
        lines += ["Next steps:", ""] + [f"{i}. {md_escape(s)}" for i, s in enumerate(v.next_steps, 1)] + [""]
    if v.drop_rows:
        lines += [
            f"Rows to drop ({len(v.drop_rows)}, in `drop_rows.txt` / `drop_rows.json`): " + listed(v.drop_rows, 50),
            "",
        ]
    for label, rows in rows_to_read(v):
        lines += [md_escape(label) + ": " + listed(rows, 50), ""]
    lines += [f"_Criterion: {md_escape(v.criterion)}._", ""]
    return lines


def _md_regressed(report: Report) -> list[str]:
    """The eval items that got worse after fine-tuning."""
    lines = ["## Regressed items", ""]
    reg = report.regressed
    if reg:
        driven = _driven_by_verdict(report)
        lines += [md_escape(_regressed_intro(reg)), ""]
        lines.append(
            _md_table(
                ["eval row", "id", "base NLL", "fine-tuned NLL", "change"]
                + ([DRIVEN_HEADER] if driven is not None else [])
                + ["text"],
                [
                    [str(r.index), md_escape(_id_text(r)), _f(r.base_nll), _f(r.finetuned_nll), "+" + _f(r.change)]
                    + ([driven.get(r.index, "")] if driven is not None else [])
                    + [md_escape(r.text or "", MD_TEXT_CHARS)]
                    for r in reg
                ],
            )
        )
    else:
        lines.append("No eval item got worse after fine-tuning.")
    return lines


def _md_clusters(report: Report) -> list[str]:
    """How the rows were clustered, and one table line per cluster."""
    lines = ["", "## Clusters", ""]
    clusters = report.clusters
    lines += [md_escape(_clustering_how(report)) + ".", ""]
    if clusters:
        lines.append(
            _md_table(
                ["cluster", "label", "rows", "share of harm", "mean harm", "findings", "top rows"],
                [
                    [
                        f"C{c.id}",
                        md_escape(c.label),
                        f"{c.size} ({pct(c.size_share)})",
                        pct(c.harm_share),
                        _f(c.mean_harm),
                        "; ".join(md_escape(f.text) for f in c.findings) or "none",
                        ", ".join(str(r) for r in c.top_rows[:5]),
                    ]
                    for c in clusters
                ],
            )
        )
    return lines


def _md_top_rows(shown: Sequence[RankedRow]) -> list[str]:
    """The most harmful training rows."""
    lines = ["", "## Top rows", ""]
    if shown:
        lines.append(
            _md_table(
                ["rank", "row", "id", "harm", "cluster", "findings", "text", "per regressed item"],
                [
                    [
                        str(e.rank),
                        str(e.index),
                        md_escape(_id_text(e)),
                        _f(e.score),
                        f"C{e.cluster}" if e.cluster is not None else "—",
                        md_escape(", ".join(e.findings or [])),
                        md_escape(e.text if e.text is not None else "(text not saved)", MD_TEXT_CHARS),
                        "; ".join(f"{c.item}: {_f(c.score)}" for c in (e.contributions or [])[:6]),
                    ]
                    for e in shown
                ],
            )
        )
    return lines


def _md_findings(report: Report) -> list[str]:
    """diagnose's setup findings."""
    lines = ["", "## Setup findings", ""]
    findings = report.findings
    if findings:
        lines.append(
            _md_table(
                ["severity", "code", "name", "message", "evidence", "fix"],
                [
                    [
                        f.severity.value,
                        md_escape(f.code),
                        md_escape(f.name),
                        md_escape(f.message),
                        md_escape(_evidence_summary(f.evidence)),
                        md_escape(_fix_cell(f.fix)),
                    ]
                    for f in findings
                ],
            )
        )
    else:
        lines.append("diagnose reported no findings (or was not run).")
    return lines


def _md_generations(report: Report) -> list[str]:
    """Generated completions (a note) and the base vs fine-tune continuations of the regressed items."""
    out = []
    g = report.settings.get("eval_generation") or {}
    if g:
        cut = ", cut where the fine-tune departs" if g.get("cut") else ""
        out += ["", f"_{g.get('rows')} eval rows had only a prompt: their completions (marked generated in "
                f"report.json) were written by the base model ({md_escape(g.get('how'))}, at most "
                f"{g.get('max_new_tokens')} tokens{cut})._"]  # fmt: skip
    reg = [r for r in report.regressed if isinstance(r.generations, Mapping)]
    if reg:
        reg = _most_regressed_first(reg)
        out += ["", "## Base vs fine-tune", "", "Greedy continuations of each regressed item's prompt.", ""]
        out.append(
            _md_table(
                ["eval row", "id", "eval item", "base model continues", "fine-tune continues"],
                [
                    [
                        str(r.index),
                        md_escape(_id_text(r)),
                        md_escape(r.text or "", MD_TEXT_CHARS),
                        md_escape((r.generations or {}).get("base", ""), MD_TEXT_CHARS),
                        md_escape((r.generations or {}).get("finetuned", ""), MD_TEXT_CHARS),
                    ]
                    for r in reg
                ],
            )
        )
    return out


def _md_token_harm(shown: Sequence[RankedRow]) -> list[str]:
    """The three highest-harm tokens of each shown row split by token."""
    from gradian.attribute.tokens import top_tokens

    rows = [e for e in shown if e.token_harm]
    if not rows:
        return []
    return [
        "",
        "### Most harmful tokens",
        "",
        "Each row's harm split over its label tokens (report.json `examples[].token_harm`); the three largest parts.",
        "",
        _md_table(
            ["rank", "row", "harm", "most harmful tokens"],
            [
                [
                    str(e.rank),
                    str(e.index),
                    _f(e.score),
                    ", ".join(f"{md_escape(repr(t))} {_f(h)}" for t, h in top_tokens(e.token_harm or [])),
                ]
                for e in rows
            ],
        ),
    ]


# ------------------------------------------------------------------------------------------------------------ files


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    return str(o)


def _clean(o: Any) -> Any:
    """NaN/inf -> None so report.json is strict JSON."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, Mapping):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def render_all(report: Report | Mapping[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write report.html, report.md, report.json (and drop_rows.txt / drop_rows.json when the verdict names rows to
    drop; stale drop files are removed otherwise) into ``out_dir``. Returns name -> path."""
    report = as_report(report)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"html": out / "report.html", "md": out / "report.md", "json": out / "report.json"}
    paths["html"].write_text(render_html(report), encoding="utf-8")
    paths["md"].write_text(render_markdown(report), encoding="utf-8")
    data = json.loads(json.dumps(report.to_dict(), default=_json_default))
    paths["json"].write_text(json.dumps(_clean(data), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    v = report.verdict or Verdict("", "unknown", "")
    drop = [int(r) for r in v.drop_rows]
    txt, js = out / "drop_rows.txt", out / "drop_rows.json"
    if drop:
        txt.write_text("".join(f"{r}\n" for r in drop), encoding="utf-8")
        js.write_text(
            json.dumps(
                {"rows": drop, "ids": list(v.drop_ids), "reason": v.headline, "clusters": v.culprit_clusters},
                indent=2,
                default=str,
            )
            + "\n",
            encoding="utf-8",
        )
        paths["drop_txt"], paths["drop_json"] = txt, js
    else:
        for p in (txt, js):
            p.unlink(missing_ok=True)
    return paths


__all__ = [
    "as_report",
    "confidence_text",
    "listed",
    "md_escape",
    "plots",
    "render_all",
    "render_html",
    "render_markdown",
    "rows_to_read",
]
