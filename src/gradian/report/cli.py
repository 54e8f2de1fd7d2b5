"""`gradian report OUT_DIR`: re-render report.html / report.md / report.json from saved results, without computing
any gradient.

What ``gradian attribute --out OUT_DIR`` must save for this (``save_report_inputs`` writes all but report.json):

- ``report.json`` (required): attribute's result, schema ``gradian.report/1`` — ``examples`` (``index``, ``id``,
  ``score``, ``rank``; optional ``per_item``), ``regressed`` (``index``, ``base_nll``, ``finetuned_nll``),
  ``method``, ``settings``, optional top-level ``per_item``. After a first render it is the full report; this
  command accepts that too (derived keys are rebuilt).
- ``embeddings.npy`` — float ``(n_rows, k)`` array, row j = training row j; or ``embeddings.safetensors`` with a
  tensor ``embeddings`` (and optionally an int tensor ``index``: the training row of each embedding row). An
  ``embeddings_index.npy`` next to ``embeddings.npy`` plays the same role. Optional: without it the saved cluster
  assignment in report.json is reused.
- ``rows.jsonl`` — one ``{"index", "id", "text"}`` per training row (text = ``Example.plain_text()``), for cluster
  labels and the text of the top rows. Optional once report.json holds a built report (it keeps the shown rows' text).
- ``eval_rows.jsonl`` — the same for eval rows (text of the regressed items). Optional.
- ``token_profiles.json`` — where the top rows' harm sits by token (:class:`gradian.attribute.token_profiles.
  TokenProfiles`): content groups also take the rows whose harm sits on their tokens. Optional.
- ``findings.json`` — diagnose's findings: a JSON list, or ``{"findings": [...]}``. Optional (falls back to the
  findings in report.json).
- ``trainer_logs.json`` — ``{"source", "total_steps", "points": [{"step", "loss", "eval_loss", "grad_norm",
  "learning_rate", "epoch"}]}``. Optional (falls back to ``logs`` in report.json).

In code, attribute can do::

    from gradian.report import build_report, render_all, save_report_inputs
    save_report_inputs(out, embeddings=emb, train_examples=train, eval_examples=evals, findings=fs, logs=logs)
    render_all(build_report(result, findings=fs, embeddings=emb, train_examples=train, eval_examples=evals,
                            logs=logs), out)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from gradian.errors import GradianError
from gradian.options import VerdictOptions
from gradian.options.cli import given, options_command


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise GradianError(
            f"not valid JSON (line {err.lineno}: {err.msg})", where=str(path), fix="re-run the command that wrote it"
        ) from None
    except OSError as err:
        raise GradianError(f"cannot read it ({err.strerror})", where=str(path)) from None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise GradianError(f"line {n} is not valid JSON ({err.msg})", where=str(path)) from None
    return rows


def _rows(examples: Sequence[Any]) -> list[dict[str, Any]]:
    out = []
    for e in examples:
        if isinstance(e, Mapping):
            out.append({"index": int(e["index"]), "id": e.get("id"), "text": str(e.get("text") or "")})
        else:
            out.append({"index": int(e.index), "id": e.id, "text": e.plain_text()})
    return out


def save_report_inputs(
    out_dir: str | Path,
    *,
    embeddings: Any = None,
    embedding_index: Sequence[int] | None = None,
    train_examples: Sequence[Any] | None = None,
    eval_examples: Sequence[Any] | None = None,
    findings: Sequence[Mapping[str, Any]] | None = None,
    logs: Any = None,
    item_scores: Any = None,
    token_profiles: Any = None,
) -> None:
    """Save what `gradian report` needs besides report.json (see the module docstring). Skips what is None.

    ``item_scores`` (query items x rows, columns in ``embedding_index`` order, rows in ``settings.query_items``
    order) goes to ``item_scores.npy``: the verdict's stability check resamples the regressed items from it."""
    import numpy as np

    from gradian.report.build import logs_to_dict

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if embeddings is not None:
        np.save(out / "embeddings.npy", np.asarray(embeddings, dtype=np.float32))
        if embedding_index is not None:
            np.save(out / "embeddings_index.npy", np.asarray(embedding_index, dtype=np.int64))
    if item_scores is not None:
        np.save(out / "item_scores.npy", np.asarray(item_scores, dtype=np.float32))
    if token_profiles is not None:
        (out / "token_profiles.json").write_text(json.dumps(token_profiles.to_dict()) + "\n", encoding="utf-8")
    for name, ex in (("rows.jsonl", train_examples), ("eval_rows.jsonl", eval_examples)):
        if ex is not None:
            with (out / name).open("w", encoding="utf-8") as f:
                for r in _rows(ex):
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
    if findings is not None:
        (out / "findings.json").write_text(json.dumps(list(findings), indent=2, default=str) + "\n", encoding="utf-8")
    if logs is not None:
        (out / "trainer_logs.json").write_text(json.dumps(logs_to_dict(logs), indent=2) + "\n", encoding="utf-8")


def load_embeddings(out_dir: Path) -> tuple[Any, list[int] | None]:
    """(embeddings, embedding_index) from embeddings.npy or embeddings.safetensors in out_dir, or (None, None)."""
    import numpy as np

    npy, st = out_dir / "embeddings.npy", out_dir / "embeddings.safetensors"
    if npy.is_file():
        try:
            emb = np.load(npy, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise GradianError(f"cannot read it ({err})", where=str(npy)) from None
        return emb, load_embedding_index(out_dir)
    if st.is_file():
        from safetensors.numpy import load_file

        try:
            tensors = load_file(str(st))
        except Exception as err:  # safetensors raises its own error types
            raise GradianError(f"cannot read it ({err})", where=str(st)) from None
        if "embeddings" not in tensors:
            raise GradianError("no tensor named 'embeddings'", where=str(st), fix="save the embeddings as 'embeddings'")
        idx = tensors["index"].astype(int).tolist() if "index" in tensors else None
        return tensors["embeddings"], idx
    return None, None


def load_embedding_index(out_dir: Path) -> list[int] | None:
    """The training row of each embedding (and item_scores.npy column) in out_dir, or None (columns in row order)."""
    import numpy as np

    idx_path = out_dir / "embeddings_index.npy"
    if idx_path.is_file():
        try:
            return np.load(idx_path, allow_pickle=False).astype(int).tolist()
        except (ValueError, OSError) as err:
            raise GradianError(f"cannot read it ({err})", where=str(idx_path)) from None
    if (out_dir / "embeddings.safetensors").is_file() and not (out_dir / "embeddings.npy").is_file():
        # the index is a tensor inside it
        return load_embeddings(out_dir)[1]
    return None


def load_item_scores(out_dir: Path) -> Any:
    """The per-item harm matrix from item_scores.npy, or None (older reports: the verdict skips its stability
    check)."""
    import numpy as np

    path = out_dir / "item_scores.npy"
    if not path.is_file():
        return None
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError) as err:
        raise GradianError(f"cannot read it ({err})", where=str(path)) from None


def load_token_profiles(out_dir: Path) -> Any:
    """The token profiles from token_profiles.json, or None (older reports: groups extend by direction only)."""
    from gradian.attribute.token_profiles import TokenProfiles

    path = out_dir / "token_profiles.json"
    if not path.is_file():
        return None
    raw = _read_json(path)
    try:
        return TokenProfiles.from_dict(raw)
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise GradianError(f"not a token profile file ({err})", where=str(path),
                           fix="re-run `gradian attribute` or delete the file") from None  # fmt: skip


def rerender(out_dir: str | Path, *, seed: int = 0, verdict: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Rebuild and re-render the report in out_dir from what is saved there; ``verdict``: verdict options to change
    (:class:`gradian.options.VerdictOptions` fields) over the ones report.json saved (``options.verdict``)."""
    from gradian.options import VerdictOptions
    from gradian.report.build import build_report
    from gradian.report.render import render_all

    out = Path(out_dir)
    report_path = out / "report.json"
    if not report_path.is_file():
        raise GradianError(
            "no report.json here",
            where=str(out),
            fix="pass the --out dir of `gradian attribute` (it writes report.json)",
        )
    attribution = _read_json(report_path)  # build_report reads it back through the schema (options checked)
    findings = None
    if (out / "findings.json").is_file():
        raw = _read_json(out / "findings.json")
        findings = raw.get("findings", []) if isinstance(raw, Mapping) else raw
        if not isinstance(findings, list):
            raise GradianError("expected a list of findings", where=str(out / "findings.json"))
    emb, idx = load_embeddings(out)
    item_scores = load_item_scores(out)
    train = _read_jsonl(out / "rows.jsonl") if (out / "rows.jsonl").is_file() else None
    evals = _read_jsonl(out / "eval_rows.jsonl") if (out / "eval_rows.jsonl").is_file() else None
    logs = _read_json(out / "trainer_logs.json") if (out / "trainer_logs.json").is_file() else None
    saved = (attribution.get("options") or {}).get("verdict") if isinstance(attribution, Mapping) else None
    policy = VerdictOptions.from_dict(saved).replace(**(verdict or {}))
    report = build_report(
        attribution,
        findings=findings,
        embeddings=emb,
        embedding_index=idx,
        train_examples=train,
        eval_examples=evals,
        logs=logs,
        seed=seed,
        item_scores=item_scores,
        token_profiles=load_token_profiles(out),
        verdict=policy,
    )
    return render_all(report, out)


@options_command(verdict=given(VerdictOptions))
def report_command(
    out_dir: Path = typer.Argument(..., help="The --out dir of `gradian attribute` (holds report.json)."),
    verdict: dict[str, Any] | None = None,
) -> None:
    """Re-render report.html, report.md and report.json from saved results (no gradients are recomputed); a verdict
    threshold given here replaces the one report.json saved."""
    paths = rerender(out_dir, verdict=verdict)
    for p in paths.values():
        typer.echo(str(p))
