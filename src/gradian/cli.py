"""The `gradian` command line. Each command's options and body live beside the code they drive
(``gradian.diagnose.cli``, ``gradian.attribute_command``, ...); this module only assembles them and turns
``GradianError`` into one line on stderr with exit code 2."""

from __future__ import annotations

import sys

import typer

from gradian import __version__
from gradian.errors import GradianError

app = typer.Typer(
    name="gradian",
    help="Debug a LoRA fine-tune that got worse: bad data (attribute) and bad setup (diagnose).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gradian {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks instead of one-line errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    _state["debug"] = debug


def _register() -> None:
    """Attach every command. Command modules must not import torch at import time (keeps --help fast)."""
    from gradian.commands import register

    register(app)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    _register()
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        app(args=argv, standalone_mode=True)
    except SystemExit as done:  # click ends every command this way, 0 on success
        if done.code in (0, None):
            from gradian.dist import close

            close()
        raise
    except GradianError as err:
        if debug:
            raise
        from gradian.dist import leave, rank_prefix, record_failure

        line = f"error: {rank_prefix()}{err.one_line()}"
        typer.echo(line, err=True)
        record_failure(line)
        leave(err.exit_code)
    except OSError as err:  # a path no check caught (a folder where a file goes, unreadable): still one line
        if debug or err.filename is None:
            raise
        where = err.filename2 or err.filename
        typer.echo(
            f"error: {where}: {err.strerror or type(err).__name__}. Fix: check that path (a file or a folder, as "
            "`gradian COMMAND --help` says, that you can read or write).",
            err=True,
        )
        from gradian.dist import leave

        leave(2)
    except RuntimeError as err:  # under torchrun: a collective broken by another rank's exit
        from gradian.dist import leave, peer_lost, rank_prefix, record_failure, say_stopped

        if debug or not peer_lost(err):
            raise
        line = (
            f"error: {rank_prefix()}stopped: another torchrun rank failed (its error line is above). "
            "Fix: fix that error and rerun."
        )
        say_stopped(line)
        record_failure(line, caused_by_peer=True)
        leave(2)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
