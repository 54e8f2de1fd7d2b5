"""`gradian diagnose` and `gradian rules`. No torch at import time: the loaders are imported when a command runs."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from gradian.errors import GradianError

FORMATS = ("text", "json", "markdown")
FAIL_ON = ("error", "warning", "info", "never")


def _split(values: list[str] | None) -> list[str]:
    return [s.strip() for v in values or [] for s in v.split(",") if s.strip()]


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


def diagnose_command(
    run: Path | None = typer.Option(None, "--run", help="Training output dir (adapter, configs, trainer_state.json)."),
    train: Path | None = typer.Option(None, "--train", help="Train data file (JSONL/JSON/CSV/Parquet)."),
    eval_: Path | None = typer.Option(None, "--eval", help="Eval data file."),
    config: Path | None = typer.Option(
        None, "--config", help="Training config (TRL/HF JSON, Axolotl/LLaMA-Factory YAML)."
    ),
    logs: Path | None = typer.Option(
        None, "--logs", help="trainer_state.json, trainer_log.jsonl or TensorBoard events."
    ),
    adapter: Path | None = typer.Option(None, "--adapter", help="PEFT adapter dir."),
    base: str | None = typer.Option(None, "--base", help="Base model dir (for the tokenizer and config.json)."),
    tokenizer: Path | None = typer.Option(None, "--tokenizer", help="Tokenizer dir (default: from the run or --base)."),
    fmt: str = typer.Option("text", "--format", "-f", help="Output: text, json or markdown."),
    fail_on: str | None = typer.Option(
        None, "--fail-on", help="Exit 1 at or above: error (default), warning, info, never."
    ),
    select: list[str] | None = typer.Option(
        None, "--select", help="Only these rules (codes, names, prefixes like D1, groups)."
    ),
    ignore: list[str] | None = typer.Option(
        None, "--ignore", help="Skip these rules (codes, names, prefixes, groups)."
    ),
    set_: list[str] | None = typer.Option(
        None, "--set", help="Override a threshold: rule.threshold=value (repeatable)."
    ),
    explain: str | None = typer.Option(
        None, "--explain", help="Print one rule's documentation (code or name) and exit."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the report to this file instead of stdout."),
) -> None:
    """Check the data, config and trainer logs of a LoRA fine-tune for setup bugs (no GPU, seconds)."""
    if fmt not in FORMATS:
        raise GradianError(f"unknown --format {fmt!r}", fix=f"use one of {', '.join(FORMATS)}")
    if explain:
        _explain(explain, fmt)
        return
    from gradian.diagnose.api import diagnose_full
    from gradian.diagnose.output import render_text, to_json, to_markdown
    from gradian.diagnose.settings import load_settings
    from gradian.diagnose.types import Severity

    settings = load_settings()
    fail = (fail_on or settings.fail_on or "error").lower()
    if fail not in FAIL_ON:
        raise GradianError(f"unknown --fail-on {fail!r}", fix=f"use one of {', '.join(FAIL_ON)}")
    if not any([run, train, eval_, config, logs, adapter]):
        raise GradianError("nothing to diagnose", fix="pass --run DIR, or --train / --config / --logs files")
    sel = _split(select)
    findings, notes, _ctx = diagnose_full(
        run=run, train=train, eval=eval_, config=config, logs=logs, adapter=adapter, base=base, tokenizer=tokenizer,
        select=sel or None, ignore=_split(ignore), settings=settings, overrides=list(set_ or []),
    )  # fmt: skip
    for note in [*_ctx.artifacts.notes, *_ctx.setup.notes]:
        typer.echo(f"note: {note}", err=True)  # what discovery skipped or refused, and why
    if fmt == "json":
        text = to_json(findings)
    elif fmt == "markdown":
        text = to_markdown(findings, notes)
    else:
        text = None
    if out is not None:
        if text is None:
            from rich.console import Console

            with open(out, "w", encoding="utf-8") as fh:
                render_text(findings, notes, console=Console(file=fh, width=120, no_color=True, highlight=False))
        else:
            Path(out).write_text(text + "\n", encoding="utf-8")
        typer.echo(f"wrote {out} ({len(findings)} finding(s))", err=True)
    elif text is not None:
        typer.echo(text)
    else:
        render_text(findings, notes)
    if fail != "never":
        limit = Severity.parse(fail).rank
        if any(f.severity.rank >= limit for f in findings):
            raise typer.Exit(1)


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
    rules = select_rules(_split(select), [])
    if fmt == "json":
        typer.echo(json.dumps([r.to_dict() for r in rules], indent=2))
        return
    if fmt == "markdown":
        typer.echo("\n\n".join(rule_doc_markdown(r) for r in rules))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(rules)} diagnose rules", show_lines=False)
    for col in ("code", "name", "severity", "cause", "summary"):
        table.add_column(col, overflow="fold")
    for r in rules:
        sev = r.severity.value + (f" ({r.tiers})" if r.tiers else "")
        table.add_row(r.code, r.name, sev, r.cause, r.summary)
    Console().print(table)
    typer.echo("Details: gradian diagnose --explain CODE")
