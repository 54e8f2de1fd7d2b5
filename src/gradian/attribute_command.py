"""`gradian attribute`: options and the terminal output (the command layer, above the pipeline). No torch import at
module import time."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from gradian.attribute.generate import EVAL_CUT, EVAL_SAMPLES, EVAL_SEED, MAX_NEW_TOKENS, SIDE_BY_SIDE
from gradian.attribute.regression import DEFAULT_MIN_DELTA, regression_words
from gradian.attribute.tokens import TOKEN_HARM_ROWS


class FisherKind(str, Enum):
    empirical = "empirical"
    true = "true"


def attribute_command(
    run: Path | None = typer.Option(None, "--run", help="Training output dir (adapter, configs, trainer_state)."),
    base: str | None = typer.Option(None, "--base", help="Base model dir or hub id (default: from adapter_config)."),
    adapter: Path | None = typer.Option(None, "--adapter", help="PEFT adapter dir (adapter_model.safetensors)."),
    train: Path | None = typer.Option(None, "--train", help="Training data file."),
    eval: Path | None = typer.Option(None, "--eval", help="Eval items (prompt/completion) to check for regressions."),  # noqa: A002
    out: Path = typer.Option(
        Path("gradian-attribute"), "--out", help="Output dir: report.json and the gradient store."
    ),
    method: str = typer.Option("ekfac", "--method", help="ekfac | kfac | datainf | exact | identity | cosine."),
    damping: float | None = typer.Option(None, "--damping", help="Absolute damping (default 0.1 x mean eigenvalue)."),
    fisher: FisherKind = typer.Option(
        FisherKind.empirical,
        "--fisher",
        help="Curvature of ekfac/kfac: empirical (the data's labels; free with the training pass) or true (labels "
        "sampled from the fine-tuned model, seeded; one more forward+backward).",
    ),
    fisher_seed: int = typer.Option(0, "--fisher-seed", help="Seed of the labels --fisher true samples."),
    proj_dim: int | None = typer.Option(
        None, "--proj-dim", help="Random projection of each block's wide side (0 = exact; default: auto by size)."
    ),
    query: str = typer.Option("regressed", "--query", help="regressed (default) or all eval items."),
    weighting: str = typer.Option("uniform", "--weighting", help="uniform or regression (weight items by NLL rise)."),
    threshold: float = typer.Option(
        DEFAULT_MIN_DELTA,
        "--threshold",
        help="Floor of the regression rule: an item's NLL must rise by more (nats/token) and beyond the drift.",
    ),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda, cuda:N (default: auto)."),
    dtype: str | None = typer.Option(None, "--dtype", help="auto | fp32 | bf16 | fp64 (default: bf16 on GPU)."),
    batch_size: int = typer.Option(8, "--batch-size", min=1),
    checkpoints: str = typer.Option(
        "last",
        "--checkpoints",
        help="last (the adapter), all (every checkpoint-* of the run) or e.g. 200,400: combined with learning-rate "
        "weights.",
    ),
    store_dtype: str = typer.Option(
        "auto",
        "--store-dtype",
        help="Stored per-row gradients: auto (bf16 for a bf16 model, else fp32), fp32 or bf16 (half the disk; "
        "factors stay fp64).",
    ),
    max_length: int | None = typer.Option(None, "--max-length", help="Override the trainer's max length."),
    eval_eos: bool = typer.Option(False, "--eval-eos", help="Append EOS to eval completions before scoring."),
    eval_samples: int = typer.Option(
        EVAL_SAMPLES,
        "--eval-samples",
        min=0,
        help="Eval rows with only a prompt get the base model's completion: 0 = one greedy completion, N = N sampled "
        "ones (each an eval item).",
    ),
    eval_seed: int = typer.Option(EVAL_SEED, "--eval-seed", help="Seed of the sampled eval completions."),
    eval_cut: bool = typer.Option(
        EVAL_CUT,
        "--eval-cut/--no-eval-cut",
        help="Cut each generated eval completion after the first token where the fine-tune departs: its most likely "
        "next token differs from the base model's, or its NLL of that token is > 0.1 nats higher (--no-eval-cut: "
        "keep it whole).",
    ),
    max_new_tokens: int = typer.Option(
        MAX_NEW_TOKENS, "--max-new-tokens", min=1, help="Tokens generated per eval completion and per continuation."
    ),
    generations: int = typer.Option(
        SIDE_BY_SIDE,
        "--generations",
        min=0,
        help="The N most regressed items are shown as the base model's and the fine-tune's greedy continuations.",
    ),
    token_harm: int = typer.Option(
        TOKEN_HARM_ROWS, "--token-harm", min=0, help="The N top rows get their harm split over their tokens."
    ),
    tokenizer: Path | None = typer.Option(None, "--tokenizer", help="Tokenizer dir (default: adapter, then base)."),
    config: Path | None = typer.Option(None, "--config", help="Training config (TRL/HF JSON, Axolotl/LLaMA-Factory)."),
    logs: Path | None = typer.Option(None, "--logs", help="Trainer logs (trainer_state.json, trainer_log.jsonl)."),
    diagnose_rows: int | None = typer.Option(
        None,
        "--diagnose-rows",
        min=0,
        help="Setup checks read at most this many training rows (default: what fits in 40% of RAM; 0 = all).",
    ),
    verify: bool = typer.Option(False, "--verify", help="Re-train without the culprit rows and measure recovery."),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code", help="Allow the base model's own code."),
    top: int = typer.Option(20, "--top", help="Rows shown and explained per item."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars."),
) -> None:
    """Find the training rows that made the fine-tune worse on eval items the base model did well on."""
    from gradian.pipeline import attribute_and_report

    output = attribute_and_report(
        run,
        base=base,
        adapter=adapter,
        train=train,
        eval=eval,
        out=out,
        method=method,
        damping=damping,
        fisher=fisher.value,
        fisher_seed=fisher_seed,
        proj_dim=proj_dim,
        query=query,
        weighting=weighting,
        threshold=threshold,
        device=device,
        dtype=dtype,
        batch_size=batch_size,
        store_dtype=store_dtype,
        checkpoints=checkpoints,
        max_length=max_length,
        eval_eos=eval_eos,
        eval_samples=eval_samples,
        eval_seed=eval_seed,
        eval_cut=eval_cut,
        max_new_tokens=max_new_tokens,
        generations=generations,
        token_harm=token_harm,
        tokenizer=tokenizer,
        config=config,
        logs=logs,
        diagnose_rows=diagnose_rows,
        trust_remote_code=trust_remote_code,
        top=top,
        progress=not no_progress,
    )
    if not output.paths:  # torchrun rank > 0: rank 0 prints and writes everything
        return
    if not print_attribution(output, top):
        raise typer.Exit(0)
    if verify:
        from gradian.verify import print_table
        from gradian.verify import verify as run_verify

        print_table(run_verify(out))


def print_attribution(output, top: int = 20) -> bool:
    """The terminal summary of a pipeline run (notes, the most harmful rows, the verdict, the files written); False
    when there was nothing to attribute. Prints nothing on a torchrun rank other than 0."""
    from rich.console import Console
    from rich.table import Table

    from gradian.report.render import confidence_text

    res = output.attribution
    if not output.paths:  # torchrun rank > 0: rank 0 prints and writes everything
        return True
    con = Console()
    for note in res.notes:
        con.print(f"[dim]note:[/] {note}", highlight=False)
    written = ", ".join(str(p) for p in output.paths.values())
    if res.no_regression:
        con.print(
            "No eval item regressed beyond the fine-tune's ordinary drift; nothing to attribute (rerun with --query "
            "all to rank rows anyway). "
            f"Setup findings are in the report. Wrote {written}.",
            highlight=False,
        )
        return False
    n_reg = len(res.regressed)
    reg = res.settings.get("regression") or {}
    cut = regression_words(reg) if reg else "see report"
    con.print(f"{n_reg} of {len(res.eval_items)} eval items regressed ({cut}).")
    ids = {r["index"]: r for r in res.examples}
    t = Table(title=f"Most harmful training rows ({res.method}; positive = pushed toward the regression)")
    with_tokens = any("token_harm" in e for e in res.examples[:top])
    for col in ("rank", "row", "id", "harm", "worst item") + (("most harmful tokens",) if with_tokens else ()):
        t.add_column(col, justify="right" if col in ("rank", "row", "harm") else "left")
    for c in res.contributions[:top]:
        worst = max(c["per_item"], key=lambda p: p["score"]) if c["per_item"] else None
        cells = [
            str(ids[c["index"]]["rank"]),
            str(c["index"]),
            str(c["id"] or ""),
            f"{c['score']:.4g}",
            f"{worst['eval_id'] or worst['eval_index']}" if worst else "",
        ]
        if with_tokens:
            cells.append(_tokens_cell(ids[c["index"]].get("token_harm")))
        t.add_row(*cells)
    con.print(t)
    verdict = output.report.get("verdict") or {}
    if verdict:
        con.rule("Verdict")
        con.print(verdict.get("text") or verdict.get("headline") or "", highlight=False)
        conf = confidence_text(verdict)
        if conf:
            con.print(f"[dim]{conf}[/]", highlight=False)
        for i, step in enumerate(verdict.get("next_steps") or [], start=1):
            con.print(f"  {i}. {step}", highlight=False)
    con.print(f"Wrote {written}.", highlight=False)
    return True


def _tokens_cell(pieces) -> str:
    """The row's three highest-harm tokens for the terminal table, e.g. ``"Zor" 0.41  " rocket" 0.22``."""
    from rich.markup import escape

    from gradian.attribute.tokens import top_tokens

    return "  ".join(f"{escape(repr(t))} {h:.3g}" for t, h in top_tokens(pieces or []))
