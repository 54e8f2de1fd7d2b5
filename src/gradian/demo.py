"""`gradian demo`: the whole job on the bundled stories260K example, no GPU and no download.

The example (examples/stories260k/) is a real LoRA fine-tune of a real tiny Llama with a planted harmful cluster and a
planted mechanical fault (truncated completions); `examples/stories260k/build_example.py` rebuilds it. The demo runs
what a user runs, through the same library calls: `gradian doctor`, then `gradian attribute` (which also runs
diagnose and writes the report).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def example_paths(example: Path) -> dict[str, Any]:
    """The example's inputs, as `gradian attribute` and `gradian doctor` take them."""
    return {
        "run": example / "run",
        "base": str(example / "base"),
        "train": example / "data" / "train.jsonl",
        "eval": example / "data" / "eval.jsonl",
    }


def demo_command(
    out: Path = typer.Option(Path("gradian-out"), "--out", help="Where the report goes."),
    example: Path | None = typer.Option(None, "--example", help="Example dir (default: the bundled one)."),
) -> None:
    """Run doctor, then attribute + diagnose, on the bundled example and write the report."""
    from gradian.attribute_command import print_attribution
    from gradian.console import make_console, rule
    from gradian.doctor import render, run_doctor
    from gradian.pipeline import attribute_and_report

    ex = example or example_dir()
    paths = example_paths(ex)
    con = make_console()
    rule(con, f"gradian doctor ({ex})")
    render(run_doctor(run=paths["run"], base=paths["base"], train=paths["train"], eval_path=paths["eval"], out=out))
    rule(con, "gradian attribute (+ diagnose, report)")
    print_attribution(attribute_and_report(**paths, out=out, progress=True))
    con.print(f"Open {out / 'report.html'} in a browser.", highlight=False)
