"""One command, one report: attribute (bad data) + diagnose (bad setup) → clusters and verdict → report files.

`gradian attribute` and `gradian demo` both run this; the pieces stay usable alone (``gradian.attribute``,
``gradian.diagnose``, ``gradian.report``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class RunOutput:
    attribution: Any  # gradian.attribute.api.AttributionResult
    report: dict[str, Any]  # the joined report (report.json's content)
    paths: dict[str, Path]  # report.html / report.md / report.json (+ drop_rows.*)
    findings: list[Any]  # diagnose findings


def attribute_and_report(
    run: str | Path | None = None,
    *,
    out: str | Path,
    base: str | None = None,
    adapter: str | Path | None = None,
    train: str | Path | None = None,
    eval: str | Path | None = None,  # noqa: A002 - mirrors the CLI flag
    tokenizer: str | Path | None = None,
    config: str | Path | None = None,
    logs: str | Path | None = None,
    **attribute_kwargs: Any,
) -> RunOutput:
    """Run attribution and the setup checks on the same inputs, join them and write the report into ``out``."""
    from gradian.attribute.api import attribute
    from gradian.diagnose.api import diagnose_full
    from gradian.report.build import build_report
    from gradian.report.cli import save_report_inputs
    from gradian.report.render import render_all

    res = attribute(
        run,
        base=base,
        adapter=adapter,
        train=train,
        eval=eval,
        tokenizer=tokenizer,
        config=config,
        out=out,
        **attribute_kwargs,
    )
    if res.partial:
        return RunOutput(res, {}, {}, [])  # a torchrun rank other than 0: rank 0 writes the report
    findings, _notes, ctx = diagnose_full(
        run=run, train=train, eval=eval, adapter=adapter, base=base, tokenizer=tokenizer, config=config, logs=logs
    )
    findings_json = [f.to_dict() for f in findings]
    save_report_inputs(
        out,
        embeddings=res.embeddings,
        embedding_index=res.embedding_index,
        train_examples=ctx.train,
        eval_examples=ctx.eval,
        findings=findings_json,
        logs=ctx.logs,
    )
    report = build_report(
        res.to_json(),
        findings=findings_json,
        embeddings=res.embeddings,
        embedding_index=res.embedding_index,
        train_examples=ctx.train,
        eval_examples=ctx.eval,
        logs=ctx.logs,
    )
    paths = render_all(report, out)
    return RunOutput(res, report, paths, findings)
