"""Where each `gradian` subcommand comes from. One line per command keeps the CLI's shape visible.

Command modules must not import torch at import time, so `gradian --help` stays fast."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from gradian import attribute_command, demo, doctor, tokens, train, verify
    from gradian.diagnose import cli as diagnose_cli
    from gradian.report import cli as report_cli

    app.command("doctor")(doctor.doctor_command)
    app.command("diagnose")(diagnose_cli.diagnose_command)
    app.command("rules")(diagnose_cli.rules_command)
    app.command("attribute")(attribute_command.attribute_command)
    app.command("report")(report_cli.report_command)
    app.command("verify")(verify.verify_command)
    app.command("tokens")(tokens.tokens_command)
    app.command("train")(train.train_command)
    app.command("demo")(demo.demo_command)
