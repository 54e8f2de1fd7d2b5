"""`gradian demo`: the whole job on the bundled stories260K example, no GPU and no download.

The example (examples/stories260k/) is a real LoRA fine-tune of a real tiny Llama with a planted harmful cluster and a
planted mechanical fault; `examples/stories260k/build_example.py` rebuilds it.
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


def demo_command(
    out: Path = typer.Option(Path("gradian-out"), "--out", help="Where the report goes."),
    example: Path | None = typer.Option(None, "--example", help="Example dir (default: the bundled one)."),
) -> None:
    """Run doctor, diagnose and attribute on the bundled example and write the report."""
    from gradian.commands import run_pipeline_on_example

    run_pipeline_on_example(example or example_dir(), out)
