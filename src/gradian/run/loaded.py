"""One loaded run: what the trainer saw, read once and shared by ``diagnose``, ``attribute`` and ``tokens``.

:func:`load_run` resolves the inputs (``--run`` plus explicit paths), reads the setup, decides how rows were
formatted (:func:`gradian.run.format_settings`: trainer defaults, EOS, masking, truncation, text column), loads the
tokenizer and the training rows, and formats them. Every command that needs the rows as the trainer saw them gets
them from here, so they cannot disagree. torch is not imported; transformers only when a tokenizer is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradian.data.types import Example, FormatSettings, FormattedExample
from gradian.errors import GradianError
from gradian.run.discovery import discover
from gradian.run.setup import format_settings, load_setup
from gradian.run.types import RunArtifacts, TrainingSetup


@dataclass
class LoadedRun:
    """The run's files, setup, formatting settings, tokenizer and training rows (raw and as the trainer saw them).

    ``formatted`` is None when there is no tokenizer or no rows; ``formatted_note`` then says why. ``problems`` are
    the training rows that could not be read (see :func:`gradian.data.load_examples_with_problems`)."""

    artifacts: RunArtifacts
    setup: TrainingSetup
    format_settings: FormatSettings
    tokenizer: Any = None
    tokenizer_dir: Path | None = None
    train: list[Example] = field(default_factory=list)
    problems: list[Any] = field(default_factory=list)
    formatted: list[FormattedExample] | None = None
    formatted_note: str | None = None
    train_limited: bool = False

    def load_rows(
        self, tokenizer: str | Path | None = None, *, train_limit: int | None = None, format_rows: bool = True
    ) -> LoadedRun:
        """Read the training rows, load the tokenizer and format the rows (the part of :func:`load_run` after the
        format settings); returns self."""
        from gradian.data import format_examples, load_examples_with_problems, load_tokenizer

        art, fs = self.artifacts, self.format_settings
        if art.train_file is not None:
            self.train, self.problems = load_examples_with_problems(
                art.train_file, limit=train_limit, text_field=fs.text_field
            )
            self.train_limited = train_limit is not None and len(self.train) + len(self.problems) >= train_limit
        self.tokenizer_dir, why = tokenizer_path(art, tokenizer)
        if self.tokenizer_dir is None:
            self.formatted_note = why
            return self
        self.tokenizer = load_tokenizer(self.tokenizer_dir)
        if not format_rows:
            return self
        if self.train:
            self.formatted = format_examples(self.train, self.tokenizer, fs)
        else:
            self.formatted_note = "no train rows to tokenize" if art.train_file else "no training file (pass --train)"
        return self

    def require_formatted(self) -> list[FormattedExample]:
        """The formatted training rows, or a one-line error saying what is missing."""
        if self.formatted is None:
            raise GradianError(self.formatted_note or "no formatted rows", fix="pass --train FILE and --base DIR")
        return self.formatted


def packing_refusal(fs: FormatSettings) -> str | None:
    """Why rows cannot be scored one by one under this packing, or None when they can."""
    if fs.packing in (None, "bfd"):
        return None
    return (
        f"packing_strategy {fs.packing} cuts rows across packed sequences, so a row's loss is not its own "
        "and per-row attribution would not be what the trainer computed"
    )


def tokenizer_path(artifacts: RunArtifacts, tokenizer: str | Path | None = None) -> tuple[Path | None, str | None]:
    """Where the trainer's tokenizer is: --tokenizer, else the run (or adapter) dir, else a local base folder; or why
    there is none."""
    base_dir = Path(artifacts.base) if artifacts.base and Path(artifacts.base).is_dir() else None
    path = Path(tokenizer) if tokenizer is not None else artifacts.tokenizer_dir or base_dir
    if path is not None:
        return path, None
    if artifacts.base:
        return (
            None,
            f"the base model {artifacts.base!r} is not a local directory (no model hub access); pass --tokenizer",
        )
    return None, "no tokenizer: pass --tokenizer DIR or --base DIR (a local model directory)"


def load_run(
    run: str | Path | None = None,
    *,
    train: str | Path | None = None,
    eval: str | Path | None = None,  # noqa: A002 - the CLI flag's name
    config: str | Path | None = None,
    logs: str | Path | None = None,
    adapter: str | Path | None = None,
    base: str | None = None,
    tokenizer: str | Path | None = None,
    train_limit: int | None = None,
    format_rows: bool = True,
    read_rows: bool = True,
) -> LoadedRun:
    """Read a run once: discovery, setup, format settings, tokenizer, training rows and their formatting.

    ``read_rows=False`` stops after the format settings (``attribute`` streams the rows itself, with the tokenizer
    it loads beside the model); ``format_rows=False`` after the tokenizer. What cannot be found stays empty; only bad
    files raise :class:`GradianError`."""
    p = lambda x: Path(x) if x is not None else None  # noqa: E731
    art = discover(
        run=p(run), adapter=p(adapter), base=base, train=p(train), eval=p(eval), config=p(config), logs=p(logs),
        tokenizer=p(tokenizer),
    )  # fmt: skip
    setup = load_setup(art)
    fs = format_settings(setup)
    lr = LoadedRun(artifacts=art, setup=setup, format_settings=fs)
    if not read_rows:
        return lr
    return lr.load_rows(tokenizer, train_limit=train_limit, format_rows=format_rows)
