"""`gradian demo`: the whole job on the bundled stories260K example, no GPU and no download.

The example (examples/stories260k/) is a real LoRA fine-tune of a real tiny Llama with a planted harmful cluster and a
planted mechanical fault (truncated completions); `examples/stories260k/build_example.py` rebuilds it. The demo runs
exactly what a user runs: `gradian doctor`, then `gradian attribute` (which also runs diagnose and writes the report).
"""

from __future__ import annotations

from pathlib import Path

import typer

from gradian.errors import GradianError


def example_dir() -> Path:
    """The bundled example, found beside the source tree (an editable install or a clone)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        cand = parent / "examples" / "stories260k"
        if (cand / "run").is_dir():
            return cand
    raise GradianError(
        "the bundled example is not here",
        where="examples/stories260k",
        fix="run `gradian demo` from a clone of the Gradian repository (pip install -e .)",
    )


def example_args(example: Path) -> list[str]:
    return [
        "--run", str(example / "run"),
        "--base", str(example / "base"),
        "--train", str(example / "data" / "train.jsonl"),
        "--eval", str(example / "data" / "eval.jsonl"),
    ]  # fmt: skip


def demo_command(
    out: Path = typer.Option(Path("gradian-out"), "--out", help="Where the report goes."),
    example: Path | None = typer.Option(None, "--example", help="Example dir (default: the bundled one)."),
) -> None:
    """Run doctor, then attribute + diagnose, on the bundled example and write the report."""
    from rich.console import Console

    from gradian.cli import app

    ex = example or example_dir()
    con = Console()
    con.rule(f"gradian doctor ({ex})")
    try:
        app(args=["doctor", *example_args(ex), "--out", str(out)], standalone_mode=False)
    except SystemExit:
        pass
    con.rule("gradian attribute (+ diagnose, report)")
    app(args=["attribute", *example_args(ex), "--out", str(out)], standalone_mode=False)
    con.print(f"Open {out / 'report.html'} in a browser.", highlight=False)
