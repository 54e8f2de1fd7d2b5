"""`gradian attribute`: the command (its options come from :class:`gradian.options.AttributeOptions` and
:class:`gradian.options.RunInputs`) and the terminal output. No torch import at module import time."""

from __future__ import annotations

from pathlib import Path

import typer

from gradian.attribute.regression import regression_words
from gradian.options import AttributeOptions, RunInputs, VerdictOptions
from gradian.options.cli import options_command


@options_command(inputs=RunInputs, opts=AttributeOptions, verdict=VerdictOptions)
def attribute_command(
    inputs: RunInputs,
    out: Path = typer.Option(
        Path("gradian-attribute"), "--out", help="Output dir: report.json and the gradient store."
    ),
    opts: AttributeOptions = AttributeOptions(),
    verdict: VerdictOptions = VerdictOptions(),
    diagnose_rows: int | None = typer.Option(
        None,
        "--diagnose-rows",
        min=0,
        help="Setup checks read at most this many training rows (default: what fits in 40% of RAM; 0 = all).",
    ),
    verify: bool = typer.Option(False, "--verify", help="Re-train without the culprit rows and measure recovery."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars."),
) -> None:
    """Find the training rows that made the fine-tune worse on eval items the base model did well on."""
    from gradian.pipeline import attribute_and_report

    output = attribute_and_report(
        inputs=inputs, options=opts, verdict=verdict, out=out, diagnose_rows=diagnose_rows, progress=not no_progress
    )
    if not output.paths:  # torchrun rank > 0: rank 0 prints and writes everything
        return
    if not print_attribution(output, opts.top):
        raise typer.Exit(0)
    if verify:
        from gradian.verify import print_table
        from gradian.verify import verify as run_verify

        print_table(run_verify(out))


def print_attribution(output, top: int = 20) -> bool:
    """The terminal summary of a pipeline run (notes, the most harmful rows, the verdict, the files written); False
    when there was nothing to attribute. Prints nothing on a torchrun rank other than 0."""
    from rich.table import Table
    from rich.text import Text

    from gradian.console import make_console, rule
    from gradian.report.render import confidence_text, listed, rows_to_read

    res = output.attribution
    if not output.paths:  # torchrun rank > 0: rank 0 prints and writes everything
        return True
    con = make_console()
    for note in res.notes:
        con.print(f"[dim]note:[/] {note}", highlight=False)
    written = ", ".join(str(p) for p in output.paths.values())
    if res.no_regression:
        con.print(
            "No eval item regressed beyond the fine-tune's ordinary drift; nothing to attribute (rerun with "
            "--noise-multiple 0 to attribute every item that rose past --threshold, or with --query all to rank rows "
            "against every item). "
            f"Setup findings are in the report. Wrote {written}.",
            highlight=False,
        )
        return False
    n_reg = len(res.regressed)
    reg = res.settings.get("regression") or {}
    cut = regression_words(reg) if reg else "see report"
    con.print(f"{n_reg} of {len(res.eval_items)} eval items regressed ({cut}).")
    ids = {r["index"]: r for r in res.examples}
    t = Table(title=f"Most harmful training rows ({res.method}; positive = pushed toward the regression)")
    with_tokens = any("token_harm" in e for e in res.examples[:top])
    for col in ("rank", "row", "id", "harm", "worst item") + (("most harmful tokens",) if with_tokens else ()):
        t.add_column(col, justify="right" if col in ("rank", "row", "harm") else "left")
    for c in res.contributions[:top]:
        worst = max(c["per_item"], key=lambda p: p["score"]) if c["per_item"] else None
        cells = [
            str(ids[c["index"]]["rank"]),
            str(c["index"]),
            str(c["id"] or ""),
            f"{c['score']:.4g}",
            f"{worst['eval_id'] or worst['eval_index']}" if worst else "",
        ]
        if with_tokens:
            cells.append(_tokens_cell(ids[c["index"]].get("token_harm")))
        t.add_row(*cells)
    con.print(t)
    verdict = output.report.verdict if output.report is not None else None
    if verdict is not None:
        rule(con, "Verdict")
        con.print(Text(verdict.headline, style="bold"), highlight=False)
        for e in verdict.evidence:
            con.print(f"  - {e}", highlight=False, markup=False)
        if verdict.text:
            con.print("", highlight=False)
            con.print(verdict.text, highlight=False, markup=False)
        conf = confidence_text(verdict)
        if conf:
            con.print(f"[dim]{conf}[/]", highlight=False)
        for i, step in enumerate(verdict.next_steps, start=1):
            con.print(f"  {i}. {step}", highlight=False)
        for label, rows in rows_to_read(verdict):
            con.print(f"{label}: {listed(rows, 50)}", highlight=False)
    con.print(f"Wrote {written}.", highlight=False)
    return True


def _tokens_cell(pieces) -> str:
    """The row's three highest-harm tokens for the terminal table, e.g. ``"Zor" 0.41  " rocket" 0.22``."""
    from rich.markup import escape

    from gradian.attribute.tokens import top_tokens

    return "  ".join(f"{escape(repr(t))} {h:.3g}" for t, h in top_tokens(pieces or []))
