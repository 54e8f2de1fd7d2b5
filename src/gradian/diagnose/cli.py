"""`gradian diagnose` and `gradian rules`. No torch at import time: the loaders are imported when a command runs."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from gradian.errors import GradianError
from gradian.options import DiagnoseOptions, RunInputs
from gradian.options.cli import options_command
from gradian.options.diagnose import FAIL_ON, FORMATS, split_names


def _explain(code: str, fmt: str) -> None:
    from gradian.diagnose.catalog import find_rule
    from gradian.diagnose.output import rule_doc_markdown, rule_doc_text

    r = find_rule(code)
    if r is None:
        raise GradianError(f"unknown rule {code!r}", fix="see `gradian rules` for codes and names")
    if fmt == "json":
        typer.echo(json.dumps(r.to_dict(), indent=2))
    elif fmt == "markdown":
        typer.echo(rule_doc_markdown(r))
    else:
        typer.echo(rule_doc_text(r))


@options_command(inputs=RunInputs, opts=DiagnoseOptions)
def diagnose_command(
    inputs: RunInputs,
    opts: DiagnoseOptions = DiagnoseOptions(),
    explain: str | None = typer.Option(
        None, "--explain", help="Print one rule's documentation (code or name) and exit."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the report to this file instead of stdout."),
) -> None:
    """Check the data, config and trainer logs of a LoRA fine-tune for setup bugs (no GPU, seconds)."""
    if explain:
        _explain(explain, opts.format)
        return
    from gradian.diagnose.api import diagnose_full
    from gradian.diagnose.output import render_text
    from gradian.diagnose.settings import load_settings
    from gradian.diagnose.types import Severity

    settings = load_settings()
    fail = (opts.fail_on or settings.fail_on or "error").lower()
    if fail not in FAIL_ON:
        raise GradianError(f"unknown --fail-on {fail!r}", fix=f"use one of {', '.join(FAIL_ON)}")
    if not inputs.replace(base=None, tokenizer=None).any_given():
        raise GradianError("nothing to diagnose", fix="pass --run DIR, or --train / --config / --logs files")
    findings, notes, _ctx = diagnose_full(inputs, opts, settings=settings)
    for note in [*_ctx.artifacts.notes, *_ctx.setup.notes]:
        typer.echo(f"note: {note}", err=True)  # what discovery skipped or refused, and why
    text = _as_text(findings, notes, opts.format)
    if out is not None:
        _write(out, findings, notes, text)
    elif text is not None:
        typer.echo(text)
    else:
        render_text(findings, notes)
    if fail != "never":
        limit = Severity.parse(fail).rank
        if any(f.severity.rank >= limit for f in findings):
            raise typer.Exit(1)


def _as_text(findings, notes, fmt: str) -> str | None:
    """The json / markdown report, or None for the terminal text (rendered by rich)."""
    from gradian.diagnose.output import to_json, to_markdown

    if fmt == "json":
        return to_json(findings)
    if fmt == "markdown":
        return to_markdown(findings, notes)
    return None


def _write(out: Path, findings, notes, text: str | None) -> None:
    from gradian.diagnose.output import render_text

    if text is None:
        from gradian.console import make_console

        with open(out, "w", encoding="utf-8") as fh:
            render_text(findings, notes, console=make_console(file=fh, no_color=True, highlight=False))
    else:
        Path(out).write_text(text + "\n", encoding="utf-8")
    typer.echo(f"wrote {out} ({len(findings)} finding(s))", err=True)


def rules_command(
    fmt: str = typer.Option("text", "--format", "-f", help="Output: text, json or markdown (full docs)."),
    select: list[str] | None = typer.Option(
        None, "--select", help="Only these rules (codes, names, prefixes, groups)."
    ),
) -> None:
    """List every diagnose rule: code, name, severity and what it detects."""
    from gradian.diagnose.engine import select_rules
    from gradian.diagnose.output import rule_doc_markdown

    if fmt not in FORMATS:
        raise GradianError(f"unknown --format {fmt!r}", fix=f"use one of {', '.join(FORMATS)}")
    rules = select_rules(list(split_names(select)), [])
    if fmt == "json":
        typer.echo(json.dumps([r.to_dict() for r in rules], indent=2))
        return
    if fmt == "markdown":
        typer.echo("\n\n".join(rule_doc_markdown(r) for r in rules))
        return
    from rich.table import Table

    from gradian.console import make_console

    table = Table(title=f"{len(rules)} diagnose rules", show_lines=False)
    for col in ("code", "name", "severity", "cause", "summary"):
        table.add_column(col, overflow="fold")
    for r in rules:
        sev = r.severity.value + (f" ({r.tiers})" if r.tiers else "")
        table.add_row(r.code, r.name, sev, r.cause, r.summary)
    make_console().print(table)
    typer.echo("Details: gradian diagnose --explain CODE")
