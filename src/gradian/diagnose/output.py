"""Render findings: a rich terminal summary grouped by severity, JSON, or Markdown. Text and Markdown name rows as
the user's editor shows them (1-based lines, see gradian.diagnose.lines); JSON keeps the 0-based row indices."""

from __future__ import annotations

import json
from typing import Any

from gradian.diagnose.lines import describe_rows
from gradian.diagnose.registry import Rule
from gradian.diagnose.rules._util import SAMPLE
from gradian.diagnose.types import Finding, Note, Severity

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
_TITLE = {Severity.ERROR: "Errors", Severity.WARNING: "Warnings", Severity.INFO: "Info"}


def _ev_lines(ev: dict[str, Any]) -> list[str]:
    out = []
    rows = ev.get("rows")
    if rows:
        label, shown = describe_rows(list(rows[:SAMPLE]), ev.get("file"))
        sample = ", ".join(shown) + (f", ... (+{len(rows) - SAMPLE} more)" if len(rows) > SAMPLE else "")
        out.append(f"{label}: {sample}")
    if ev.get("count") is not None and ev.get("total"):
        out.append(f"count: {ev['count']} of {ev['total']} ({ev.get('percent', 0)}%)")
    if ev.get("key"):
        out.append(
            f"config: {ev['key']} = {ev.get('value')!r}" + (f"  (from {ev['source']})" if ev.get("source") else "")
        )
    steps = ev.get("steps")
    if steps:
        out.append("log steps: " + ", ".join(map(str, steps[:SAMPLE])) + (" ..." if len(steps) > SAMPLE else ""))
    skip = {"rows", "file", "count", "total", "percent", "key", "value", "source", "steps", "pairs"}
    extra = {k: v for k, v in ev.items() if k not in skip and v not in (None, [], {})}
    if extra:
        out.append("; ".join(f"{k}: {_short(v)}" for k, v in extra.items()))
    return out


def _short(v: Any) -> str:
    s = json.dumps(v, default=str) if not isinstance(v, str) else v
    return s if len(s) <= 100 else s[:97] + "..."


def summary_counts(findings: list[Finding]) -> dict[str, int]:
    return {s.value: sum(1 for f in findings if f.severity == s) for s in Severity}


def render_text(
    findings: list[Finding], notes: list[Note], *, console: Any = None, verbose_notes: bool = False
) -> None:
    from rich.markup import escape

    from gradian.console import make_console

    con = console or make_console(highlight=False)
    for sev in (Severity.ERROR, Severity.WARNING, Severity.INFO):
        group = [f for f in findings if f.severity == sev]
        if not group:
            continue
        con.print(f"[{_STYLE[sev]}]{_TITLE[sev]} ({len(group)})[/]")
        for f in group:
            con.print(f"  [{_STYLE[sev]}]{f.code}[/] [bold]{f.name}[/]: {escape(f.message)}")
            for line in _ev_lines(f.evidence):
                con.print(f"      {escape(line)}")
            if f.fix:
                fix = f.fix.text + (
                    f"  [set {f.fix.key} = {f.fix.value!r}]" if f.fix.key and f.fix.value is not None else ""
                )
                con.print(f"      [green]fix:[/] {escape(fix)}")
                if f.fix.command:
                    con.print(f"      [green]run:[/] {escape(f.fix.command)}")
        con.print()
    if notes:
        by_reason: dict[str, list[str]] = {}
        for n in notes:
            by_reason.setdefault(n.reason, []).append(n.code)
        con.print(f"[dim]Skipped {len(notes)} rule(s):[/]")
        for reason, codes in by_reason.items():
            con.print(f"[dim]  {escape(reason)}: {', '.join(codes)}[/]")
    c = summary_counts(findings)
    verdict = "[bold red]FAIL[/]" if c["error"] else "[green]ok[/]"
    con.print(f"{verdict}: {c['error']} error(s), {c['warning']} warning(s), {c['info']} info")


def to_json(findings: list[Finding], notes: list[Note] | None = None, *, with_notes: bool = False) -> str:
    items = [f.to_dict() for f in findings]
    if with_notes:
        return json.dumps({"findings": items, "skipped": [n.__dict__ for n in notes or []]}, indent=2)
    return json.dumps(items, indent=2)


def to_markdown(findings: list[Finding], notes: list[Note]) -> str:
    c = summary_counts(findings)
    lines = ["# gradian diagnose", "", f"**{c['error']} error(s), {c['warning']} warning(s), {c['info']} info**", ""]
    for sev in (Severity.ERROR, Severity.WARNING, Severity.INFO):
        group = [f for f in findings if f.severity == sev]
        if not group:
            continue
        lines += [f"## {_TITLE[sev]}", ""]
        for f in group:
            lines += [f"### {f.code} `{f.name}`", "", f.message, ""]
            lines += [f"- {line}" for line in _ev_lines(f.evidence)]
            if f.fix:
                lines.append(
                    f"- **fix:** {f.fix.text}" + (f" (`{f.fix.key}` = `{f.fix.value!r}`)" if f.fix.key else "")
                )
                if f.fix.command:
                    lines.append(f"- **run:** `{f.fix.command}`")
            lines.append("")
    if notes:
        lines += ["## Skipped rules", ""] + [f"- {n.code} `{n.name}`: {n.reason}" for n in notes] + [""]
    return "\n".join(lines)


def rule_doc_text(r: Rule) -> str:
    lines = [
        f"{r.code} {r.name}  [{r.severity.value}{' (' + r.tiers + ')' if r.tiers else ''}, {r.group}, "
        f"cause: {r.cause}]",
        "",
        r.summary,
        "",
        "Why it matters:",
        f"  {r.why}",
        "",
        "Example:",
        f"  {r.example}",
        "",
        "Fix:",
        f"  {r.fix}",
    ]
    if r.thresholds:
        lines += [
            "",
            "Thresholds (set with --set " + r.name + ".NAME=VALUE or [tool.gradian.diagnose." + r.name + "]):",
        ]
        lines += [f"  {k} = {t.default!r}: {t.help}" for k, t in r.thresholds.items()]
    if r.needs:
        lines += ["", "Needs: " + ", ".join(r.needs)]
    if r.seen_in:
        lines += ["", "Seen in: " + r.seen_in]
    return "\n".join(lines)


def rule_doc_markdown(r: Rule) -> str:
    lines = [f"# {r.code} `{r.name}`", "", f"**Severity:** {r.severity.value}" + (f" ({r.tiers})" if r.tiers else "")
             + f" · **Group:** {r.group} · **Cause:** {r.cause}", "", "## What it detects", "", r.summary, "",
             "## Why it matters", "", r.why, "", "## Example", "", r.example, "", "## Fix", "", r.fix, ""]  # fmt: skip
    if r.thresholds:
        lines += ["## Thresholds", "", "| name | default | meaning |", "|---|---|---|"]
        lines += [f"| `{k}` | `{t.default!r}` | {t.help} |" for k, t in r.thresholds.items()] + [""]
    if r.seen_in:
        lines += [f"Seen in: {r.seen_in}", ""]
    return "\n".join(lines)
