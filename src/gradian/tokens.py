"""`gradian tokens`: how each training row was tokenized and which tokens carry loss (like ``axolotl preprocess
--debug``). The rows come from :func:`gradian.run.loaded.load_run`, the loader ``diagnose`` and ``attribute`` use.

Terminal output colours every token: green where it is a label, dim where it is masked (-100); ``--format json``
writes ``{"rows": [{"index", "id", "input_ids", "labels", "dropped", "decisions"}], "settings": {...}}``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer

from gradian.errors import GradianError

DEFAULT_TEXT_ROWS = 5


def parse_rows(spec: str | None, available: list[int]) -> list[int]:
    """Row indices from ``--rows`` (``"0,5"``, ``"3-7"``; 0-based, as in the source file); all rows when None."""
    if spec is None:
        return list(available)
    want: list[int] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo, hi = (int(x) for x in part.split("-", 1))
                want += list(range(lo, hi + 1))
            else:
                want.append(int(part))
        except ValueError:
            raise GradianError(
                f"bad row {part!r}", where="--rows", fix="give 0-based row numbers, e.g. --rows 0,5,10-12"
            ) from None
    have = set(available)
    missing = [i for i in want if i not in have]
    if missing:
        raise GradianError(
            f"row {missing[0]} is not in the training file (it has rows 0-{max(available, default=-1)})",
            where="--rows",
            fix="pick rows that exist (0-based, as in the file); rows that could not be read are left out",
        )
    return want


def token_rows(loaded: Any, rows: list[int] | None = None) -> list[dict[str, Any]]:
    """The JSON rows: each selected training row as the trainer saw it."""
    fxs = loaded.require_formatted()
    by_index = {fx.index: fx for fx in fxs}
    ids = {ex.index: ex.id for ex in loaded.train}
    pick = rows if rows is not None else [fx.index for fx in fxs]
    return [
        {
            "index": i,
            "id": ids.get(i),
            "input_ids": list(by_index[i].input_ids),
            "labels": by_index[i].labels(),
            "dropped": by_index[i].dropped,
            "decisions": list(by_index[i].decisions),
        }
        for i in pick
    ]


def settings_json(loaded: Any) -> dict[str, Any]:
    fs = loaded.format_settings
    return {
        "framework": loaded.setup.framework,
        "tokenizer": str(loaded.tokenizer_dir) if loaded.tokenizer_dir else None,
        "train": str(loaded.artifacts.train_file) if loaded.artifacts.train_file else None,
        "format": {k: v for k, v in asdict(fs).items() if k != "sources"},
        "sources": dict(fs.sources),
    }


def render(loaded: Any, rows: list[dict[str, Any]], console: Any) -> None:
    """Print rows with every token coloured by whether it carries loss."""
    from rich.text import Text

    tok = loaded.tokenizer
    special = set(getattr(tok, "all_special_ids", []) or [])
    s = settings_json(loaded)
    console.print(
        f"[bold]{s['train']}[/bold] tokenized with {s['tokenizer']} ({s['framework'] or 'TRL defaults'}); "
        "[green]green[/green]: label tokens, [dim]dim[/dim]: no loss (-100)"
    )
    for r in rows:
        n_label = sum(lab != -100 for lab in r["labels"])
        head = f"row {r['index']}" + (f" (id {r['id']})" if r["id"] is not None else "")
        status = " [red]DROPPED by the trainer[/red]" if r["dropped"] else ""
        console.print(f"\n[bold]{head}[/bold]: {len(r['input_ids'])} tokens, {n_label} carry loss{status}")
        for d in r["decisions"]:
            console.print(f"  - {d}", markup=False, highlight=False)
        line = Text()
        for tid, lab in zip(r["input_ids"], r["labels"], strict=True):
            piece = tok.convert_ids_to_tokens(tid)
            style = ("bold " if tid in special else "") + ("green" if lab != -100 else "dim")
            line.append(f"{piece}({tid})", style=style)
            line.append(" ")
        console.print(line)


def tokens_command(
    run: Path | None = typer.Option(None, "--run", help="Training output dir (configs, tokenizer)."),
    train: Path | None = typer.Option(None, "--train", help="Train data file (JSONL/JSON/CSV/Parquet)."),
    config: Path | None = typer.Option(
        None, "--config", help="Training config (TRL/HF JSON, Axolotl/LLaMA-Factory YAML)."
    ),
    base: str | None = typer.Option(None, "--base", help="Base model dir (for the tokenizer)."),
    adapter: Path | None = typer.Option(None, "--adapter", help="PEFT adapter dir."),
    tokenizer: Path | None = typer.Option(None, "--tokenizer", help="Tokenizer dir (default: from the run or --base)."),
    rows: str | None = typer.Option(
        None,
        "--rows",
        help="Rows to show, 0-based: 0,5,10-12 (default: all for json, "
        f"the first {DEFAULT_TEXT_ROWS} in the terminal).",
    ),  # fmt: skip
    fmt: str = typer.Option("text", "--format", "-f", help="Output: text or json."),
) -> None:
    """Show how training rows were tokenized and which tokens carry loss, as the trainer saw them."""
    if fmt not in ("text", "json"):
        raise GradianError(f"unknown --format {fmt!r}", fix="use text or json")
    if not any([run, train, config]):
        raise GradianError("nothing to show", fix="pass --run DIR, or --train FILE with --base or --tokenizer")
    from gradian.run.loaded import load_run

    loaded = load_run(run, train=train, config=config, base=base, adapter=adapter, tokenizer=tokenizer)
    if loaded.artifacts.train_file is None:
        raise GradianError("no training file found", fix="pass --train FILE")
    available = [fx.index for fx in loaded.require_formatted()]
    pick = parse_rows(rows, available)
    if rows is None and fmt == "text":
        pick = pick[:DEFAULT_TEXT_ROWS]
    out = token_rows(loaded, pick)
    if fmt == "json":
        typer.echo(json.dumps({"rows": out, "settings": settings_json(loaded)}, ensure_ascii=False))
        return
    from gradian.console import make_console

    render(loaded, out, make_console())
