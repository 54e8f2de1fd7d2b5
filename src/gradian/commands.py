"""Where each `gradian` subcommand comes from. One line per command keeps the CLI's shape visible."""

from __future__ import annotations

from importlib.util import find_spec

import typer


def _not_built(name: str, issue: str) -> typer.models.CommandFunctionType:
    def command() -> None:
        typer.echo(f"`gradian {name}` is not built yet ({issue}).", err=True)
        raise typer.Exit(2)

    command.__doc__ = f"(not built yet) {issue}."
    return command


def register(app: typer.Typer) -> None:
    from gradian import doctor

    app.command("doctor")(doctor.doctor_command)

    if find_spec("gradian.diagnose.cli") is None:
        app.command("diagnose")(_not_built("diagnose", "the diagnose issue"))
    else:
        from gradian.diagnose import cli as diagnose_cli

        app.command("diagnose")(diagnose_cli.diagnose_command)
        app.command("rules")(diagnose_cli.rules_command)

    if find_spec("gradian.attribute.cli") is None:
        app.command("attribute")(_not_built("attribute", "the attribute issue"))
    else:
        from gradian.attribute import cli as attribute_cli

        app.command("attribute")(attribute_cli.attribute_command)

    if find_spec("gradian.train") is None:
        app.command("train")(_not_built("train", "the train issue"))
    else:
        from gradian import train

        app.command("train")(train.train_command)

    if find_spec("gradian.verify") is None:
        app.command("verify")(_not_built("verify", "the train/verify issue"))
    else:
        from gradian import verify

        app.command("verify")(verify.verify_command)

    from gradian.report import cli as report_cli

    app.command("report")(report_cli.report_command)

    from gradian import demo

    app.command("demo")(demo.demo_command)
