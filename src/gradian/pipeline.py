"""One command, one report: attribute (bad data) + diagnose (bad setup) → clusters and verdict → report files.

`gradian attribute` and `gradian demo` both run this; the pieces stay usable alone (``gradian.attribute``,
``gradian.diagnose``, ``gradian.report``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradian.options import AttributeOptions, RunInputs, VerdictOptions
from gradian.report.schema import Report


@dataclass
class RunOutput:
    attribution: Any  # gradian.attribute.api.AttributionResult
    report: Report | None  # the joined report (report.json's content); None on a torchrun rank other than 0
    paths: dict[str, Path]  # report.html / report.md / report.json (+ drop_rows.*)
    findings: list[Any]  # diagnose findings


def attribute_and_report(
    run: str | Path | None = None,
    *,
    out: str | Path,
    inputs: RunInputs | None = None,
    options: AttributeOptions | None = None,
    verdict: VerdictOptions | None = None,
    diagnose_rows: int | None = None,
    progress: bool = False,
    **kwargs: Any,
) -> RunOutput:
    """Run attribution and the setup checks on the same inputs, join them and write the report into ``out``.
    ``kwargs``: any :class:`RunInputs` path or :class:`AttributeOptions` field, over ``inputs`` / ``options``;
    ``verdict``: the verdict's thresholds (default :class:`VerdictOptions`).

    The attribution streams the training file; the setup checks and the cluster labels hold rows in memory (about
    7.5 KiB each), so on a file bigger than that budget they read only its first ``diagnose_rows`` rows (default:
    what fits in 40% of the available RAM; 0 = all) and the report says so. The rows the report shows are read
    from the file whatever their position."""
    from gradian.attribute.api import attribute, split_kwargs
    from gradian.run.loaded import load_run
    from gradian.run.versions import versions_record

    if run is not None:
        kwargs["run"] = run
    ins, opts = split_kwargs(kwargs, inputs, options)
    # read once: attribute and diagnose share the run's files, setup and formatting settings
    loaded = load_run(ins.run, **ins.as_kwargs("train", "eval", "config", "logs", "adapter", "base", "tokenizer"),
                      read_rows=False)  # fmt: skip
    checks = SetupChecks(ins, loaded, diagnose_rows)
    run_verdict = RunVerdict(checks, verdict or VerdictOptions())
    wants = run_verdict.wants_profiles if opts.token_profiles and not opts.token_profiles_always else None
    res = attribute(options=opts, inputs=ins, out=out, loaded=loaded, progress=progress, wants_profiles=wants)
    if res.partial:
        return RunOutput(res, None, {}, [])  # a torchrun rank other than 0: rank 0 writes the report
    setup = checks.read(res)
    res.settings["versions"] = versions_record(setup.ctx.setup.versions, setup.ctx.setup.sources)
    if setup.limited:
        res.notes.append(setup.limited)
    return _write_report(out, res, setup.findings, setup.ctx, checks.train_rows(res), run_verdict)


@dataclass
class SetupRead:
    """What diagnose read for the report: its findings, its context (logs, files), the training rows it holds and,
    when the memory budget kept it to the file's first rows, the note that says so."""

    findings: list[Any]
    ctx: Any  # gradian.diagnose.context.DiagnoseContext
    rows: list[Any]
    limited: str


@dataclass
class SetupChecks:
    """diagnose on the run's inputs, run once: inside the attribution, when it asks whether the verdict wants token
    profiles (:class:`RunVerdict`, while the model is still loaded for them), or after it. ``diagnose_rows``: rows the
    in-memory checks read (None: what fits the memory budget; 0: all)."""

    inputs: RunInputs
    loaded: Any
    diagnose_rows: int | None
    done: SetupRead | None = None

    def read(self, res: Any) -> SetupRead:
        """Run the checks (once) on as many rows as the budget allows of the ``res.settings["n_train"]`` rows."""
        from gradian.diagnose.api import diagnose_full

        if self.done is not None:
            return self.done
        n_rows = int(res.settings.get("n_train", 0))
        limit = diagnose_row_budget() if self.diagnose_rows is None else (self.diagnose_rows or None)
        limit = limit if limit is not None and limit < n_rows else None
        findings, _notes, ctx = diagnose_full(self.inputs, train_limit=limit, loaded=self.loaded)
        note = ""
        if ctx.train_limited:
            note = (
                f"gradian diagnose and the cluster labels read the first {limit:,} of the training file's rows "
                f"(memory budget; --diagnose-rows 0 reads all): setup findings about later rows are not in this report"
            )
        self.done = SetupRead(findings, ctx, list(ctx.train), note)
        return self.done

    def train_rows(self, res: Any) -> list[Any]:
        """The training rows the report and the verdict read: those diagnose read and, when the memory budget kept it
        to the file's first rows, the rows the report shows."""
        setup = self.read(res)
        if not setup.limited:
            return setup.rows
        return setup.rows + _shown_rows(setup.ctx.train_file, res, {e.index for e in setup.ctx.train})


@dataclass
class RunVerdict:
    """The run's verdict, decided once (:mod:`gradian.verdict`). Its evidence is built when the attribution asks
    whether token profiles are wanted (:meth:`wants_profiles`: the steps before ``tokens`` run then, while the model
    is still loaded), else after the attribution; the other steps run once the token profiles are in."""

    checks: SetupChecks
    options: VerdictOptions
    evidence: Any = None  # gradian.verdict.evidence.Evidence
    partial: Any = None  # gradian.verdict.decision.Decision, stopped before the tokens step

    def _evidence(self, res: Any) -> Any:
        from gradian.report.build import verdict_evidence

        setup = self.checks.read(res)
        return verdict_evidence(res.to_json(), findings=setup.findings, embeddings=res.embeddings,
                                embedding_index=res.embedding_index, train_examples=self.checks.train_rows(res),
                                item_scores=res.item_scores, verdict_options=self.options)  # fmt: skip

    def wants_profiles(self, res: Any) -> Any:
        """What the verdict's ``tokens`` step will read of the token profiles (a
        :class:`gradian.attribute.token_profiles.ProfileNeed`: the content groups it extends), or None when it names
        no content group before any token profile (what the profiles are for)."""
        from gradian.attribute.token_profiles import ProfileNeed
        from gradian.verdict.steps import decide

        self.evidence = self._evidence(res)
        self.partial = decide(self.evidence, self.options, stop="tokens")
        if not self.partial.names_content_group:
            return None
        groups = [list(g.rows) for g in self.partial.groups if g.cause == "content" and len(g.rows) >= 2]
        return ProfileNeed(groups, self.options.token_share)

    def verdict(self, res: Any, eval_rows: Any) -> Any:
        """The verdict: the steps from where :meth:`wants_profiles` stopped (or all of them), with the token profiles
        and the regressed items' texts (generated completions filled in)."""
        from gradian.report.build import regressed_texts
        from gradian.verdict.steps import decide
        from gradian.verdict.words import write

        ev = self.evidence if self.evidence is not None else self._evidence(res)
        ev.token_profiles = res.token_profiles
        ev.item_texts = regressed_texts(res.to_json(), eval_rows)
        return write(ev, decide(ev, self.options, resume=self.partial), self.options)


def _write_report(out: str | Path, res: Any, findings: list[Any], ctx: Any, train_rows: list[Any],
                  run_verdict: RunVerdict) -> RunOutput:  # fmt: skip
    """Join the attribution and the findings into the report, save what `gradian report` re-renders from, and
    render the report files."""
    from gradian.report.build import build_report
    from gradian.report.cli import save_report_inputs
    from gradian.report.render import render_all

    findings_json = [f.to_dict() for f in findings]
    if res.token_profiles is None:  # a profile file left by an earlier run in this dir belongs to other scores
        (Path(out) / "token_profiles.json").unlink(missing_ok=True)
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
        token_profiles=res.token_profiles,
    )
    report = build_report(
        res.to_json(),
        findings=findings,
        embeddings=res.embeddings,
        embedding_index=res.embedding_index,
        train_examples=train_rows,
        eval_examples=eval_rows,
        logs=ctx.logs,
        item_scores=res.item_scores,
        token_profiles=res.token_profiles,
        verdict=run_verdict.verdict(res, eval_rows),
    )
    paths = render_all(report, out)
    return RunOutput(res, report, paths, findings)


ROW_BYTES = 7.5 * 1024  # diagnose's memory per short training row (measured; docs/how-to/large-files.md)


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
