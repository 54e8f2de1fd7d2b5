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
    diagnose_rows: int | None = None,
    **attribute_kwargs: Any,
) -> RunOutput:
    """Run attribution and the setup checks on the same inputs, join them and write the report into ``out``.

    The attribution streams the training file; the setup checks and the cluster labels hold rows in memory (about
    7.5 KiB each), so on a file bigger than that budget they read only its first ``diagnose_rows`` rows (default:
    what fits in 40% of the available RAM; 0 = all) and the report says so. The rows the report shows are read
    from the file whatever their position."""
    from gradian.attribute.api import attribute
    from gradian.diagnose.api import diagnose_full
    from gradian.report.build import build_report
    from gradian.report.cli import save_report_inputs
    from gradian.report.render import render_all
    from gradian.run.loaded import load_run

    # read once: attribute and diagnose share the run's files, setup and formatting settings
    loaded = load_run(run, train=train, eval=eval, config=config, logs=logs, adapter=adapter, base=base,
                      tokenizer=tokenizer, read_rows=False)  # fmt: skip
    res = attribute(
        run,
        base=base,
        adapter=adapter,
        train=train,
        eval=eval,
        tokenizer=tokenizer,
        config=config,
        out=out,
        loaded=loaded,
        **attribute_kwargs,
    )
    if res.partial:
        return RunOutput(res, {}, {}, [])  # a torchrun rank other than 0: rank 0 writes the report
    n_rows = int(res.settings.get("n_train", 0))
    limit = diagnose_row_budget() if diagnose_rows is None else (diagnose_rows or None)
    limit = limit if limit is not None and limit < n_rows else None
    findings, _notes, ctx = diagnose_full(
        run=run, train=train, eval=eval, adapter=adapter, base=base, tokenizer=tokenizer, config=config, logs=logs,
        train_limit=limit, loaded=loaded,
    )  # fmt: skip
    train_rows = list(ctx.train)
    if ctx.train_limited:
        msg = (
            f"gradian diagnose and the cluster labels read the first {limit:,} of the training file's rows (memory "
            f"budget; --diagnose-rows 0 reads all): setup findings about later rows are not in this report"
        )
        res.notes.append(msg)
        train_rows += _shown_rows(ctx.train_file, res, {e.index for e in ctx.train})
    findings_json = [f.to_dict() for f in findings]
    eval_rows = res.eval_examples if res.eval_examples is not None else ctx.eval  # generated completions filled in
    save_report_inputs(
        out,
        embeddings=res.embeddings,
        embedding_index=res.embedding_index,
        train_examples=train_rows,
        eval_examples=eval_rows,
        findings=findings_json,
        logs=ctx.logs,
        item_scores=res.item_scores,
    )
    report = build_report(
        res.to_json(),
        findings=findings_json,
        embeddings=res.embeddings,
        embedding_index=res.embedding_index,
        train_examples=train_rows,
        eval_examples=eval_rows,
        logs=ctx.logs,
        item_scores=res.item_scores,
    )
    paths = render_all(report, out)
    return RunOutput(res, report, paths, findings)


ROW_BYTES = 7.5 * 1024  # diagnose's memory per short training row (measured; docs/limitations.md)


def diagnose_row_budget(share: float = 0.4) -> int | None:
    """Training rows the in-memory setup checks may read: ``share`` of the available RAM at ``ROW_BYTES`` a row
    (at least 100,000); None when the available RAM is unknown."""
    from gradian.attribute.plan import probe_ram_available

    ram = probe_ram_available()
    return None if ram is None else max(100_000, int(share * ram / ROW_BYTES))


def _shown_rows(train_file: str | None, res: Any, have: set[int], top: int = 200) -> list[Any]:
    """The training rows the report shows (the top of the ranking) that diagnose did not read: one streamed pass."""
    from gradian.data import iter_examples

    want = {int(e["index"]) for e in res.examples[:top]} - have
    if not want or train_file is None:
        return []
    found = []
    for ex in iter_examples(train_file, strict=False):
        if ex.index in want:
            found.append(ex)
            if len(found) == len(want):
                break
    return found
