"""The file-level attribution (``gradian.attribute(...)``): find and check the run's files, load the model, complete
the prompt-only eval rows, read the training rows, run the stages (:func:`gradian.attribute.api.run_attribution`),
then add the side-by-side generations and the inputs to the result."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradian.attribute.continuations import Continuations
from gradian.attribute.core import TokenPass, run_attribution
from gradian.attribute.result import AdapterState, AttributionResult, RowIds
from gradian.attribute.token_profiles import ProfileNeed
from gradian.dist import Dist
from gradian.errors import GradianError
from gradian.options import AttributeOptions, RunInputs

if TYPE_CHECKING:
    from gradian.run.checkpoints import CheckpointChoice


@dataclass
class Loaded:
    """The checked inputs and the loaded model: what the stages start from."""

    art: Any  # gradian.run.discovery.RunArtifacts
    fs: Any  # gradian.data.FormatSettings of the training rows
    lm: Any  # gradian.attribute.loading.LoadedModel
    dist: Dist
    notes: list[str]


def attribute_files(ins: RunInputs, opts: AttributeOptions, *, out: str | Path | None, dist: Dist | None,
                    loaded: Any, progress: bool,
                    wants_profiles: Callable[[AttributionResult], ProfileNeed | None] | None = None,
                    ) -> AttributionResult:  # fmt: skip
    """:func:`gradian.attribute.api.attribute` once its keyword arguments are split into inputs and options."""
    from gradian.attribute.engine import pad_id_of
    from gradian.data import format_examples

    if out is not None:
        check_out_dir(out)
    art, fs, choices, ck_notes = _checked_inputs(ins, opts, loaded)
    ld = _load_model(art, fs, opts, dist)
    # what generation scored, read again (rank 0 scores); generation scores in fp32: an fp64 run scores afresh
    memo = Continuations() if ld.dist.is_main and str(ld.lm.dtype) != "torch.float64" else None
    t_gen = time.perf_counter()
    eval_ex, eval_extra, gen_info = _complete_eval(ld.lm.model, ld.lm.tokenizer, art.eval_file, fs, opts, ld.dist,
                                                   ld.notes, memo)  # fmt: skip
    t_gen = time.perf_counter() - t_gen
    eval_fx = format_examples(eval_ex, ld.lm.tokenizer, dataclasses.replace(fs, add_eos=opts.eval_eos))
    train_fx, train_ids, n_dropped = _training_rows(art.train_file, ld.lm.tokenizer, fs, out, ld.dist)
    if n_dropped:
        ld.notes.append(f"{n_dropped} training rows the trainer would drop are not scored")
    states = _adapter_states(ld, choices, ck_notes, opts.gradients == "auto")
    replies: Callable[[], list | None] | None = None
    reply_texts: dict[int, tuple[str, bool]] = {}
    if gen_info and not opts.eval_samples and opts.eval_preference:
        generated = [bool(x.get("generated")) for x in eval_extra]
        replies, reply_texts = _replies(ld, eval_ex, eval_fx, generated, fs, opts, memo)
    res = run_attribution(
        ld.lm.model, train_fx, eval_fx, opts, pad_id=pad_id_of(ld.lm.tokenizer),
        store_dir=Path(out) / "grads" if out else None, ids=RowIds(train_ids, [e.id for e in eval_ex]),
        notes=ld.notes, dist=ld.dist, states=states, tokens=TokenPass(ld.lm.tokenizer, wants_profiles, replies, memo),
        progress=progress,
    )  # fmt: skip
    res.eval_examples = eval_ex
    for i, (item, extra) in enumerate(zip(res.eval_items, eval_extra, strict=True)):
        item.update(extra)
        if item.get("score") == "preference" and i in reply_texts:  # the fine-tune's reply: the pair's other side
            item["reply"], item["reply_open"] = reply_texts[i]
    if gen_info:
        res.settings["eval_generation"] = gen_info
        res.timings["eval_generation_s"] = t_gen
    if opts.generations and res.regressed and ld.dist.is_main:
        if choices:  # the side-by-side shows the adapter as found, not the last checkpoint scored
            from gradian.attribute.loading import load_adapter_weights

            load_adapter_weights(ld.lm.model, ld.lm.adapter_dir)
        _add_generations(ld.lm.model, ld.lm.tokenizer, res, eval_fx, opts, memo)
    res.settings |= {
        "base": ld.lm.base,
        "adapter": str(ld.lm.adapter_dir),
        "train": str(art.train_file),
        "eval": str(art.eval_file),
        "format": {k: v for k, v in dataclasses.asdict(fs).items() if k != "sources"},
        "eval_eos": opts.eval_eos,
    }
    res.options = opts.to_dict()
    if out and ld.dist.is_main:
        res.write(out)
    return res


def _checked_inputs(ins: RunInputs, opts: AttributeOptions, loaded: Any) -> tuple[Any, Any, list, list[str]]:
    """The run's files (``loaded``: a :class:`gradian.run.loaded.LoadedRun` the caller read already), their format
    settings and the chosen checkpoints; one line for anything missing, before the model loads."""
    from gradian.run.loaded import load_run, packing_refusal

    if loaded is None:
        loaded = load_run(ins.run, **ins.as_kwargs("adapter", "base", "train", "eval", "tokenizer", "config"),
                          read_rows=False)  # fmt: skip
    art = loaded.artifacts
    if art.adapter_dir is None:
        if getattr(art, "adapter_weights_pickle", None):
            raise GradianError(
                "adapter_model.bin is a pickle and gradian never unpickles it",
                where=str(art.adapter_weights_pickle),
                fix="re-save the adapter with safe_serialization=True",
            )
        raise GradianError("no PEFT adapter found", fix="pass --adapter DIR (with adapter_config.json)")
    if art.train_file is None:
        raise GradianError("no training file found", fix="pass --train FILE")
    if art.eval_file is None:
        raise GradianError("no eval file found", fix="pass --eval FILE (the items the fine-tune got worse on)")
    fs = loaded.format_settings  # the same decision diagnose and `gradian tokens` use
    refusal = packing_refusal(fs)
    if refusal:
        raise GradianError(
            f"cannot attribute a packed run: {refusal}",
            where=fs.sources.get("packing") or "config: packing",
            fix="retrain with packing_strategy bfd (the default) or packing off, or use `gradian diagnose` only",
        )
    if opts.max_length is not None:
        fs = dataclasses.replace(fs, max_length=opts.max_length)
    choices: list[CheckpointChoice] = []
    ck_notes: list[str] = []
    if opts.checkpoints and opts.checkpoints != "last":  # checked before the model loads: a bad spec fails in a second
        from gradian.run.checkpoints import select_checkpoints

        choices, ck_notes = select_checkpoints(art, opts.checkpoints)
    return art, fs, choices, ck_notes


def _load_model(art: Any, fs: Any, opts: AttributeOptions, dist: Dist | None) -> Loaded:
    from gradian.attribute.loading import load
    from gradian.dist import device_for, from_env

    dist = dist or from_env(opts.device)
    lm = load(art.base, art.adapter_dir, device=device_for(dist, opts.device), dtype=opts.dtype,
              trust_remote_code=opts.trust_remote_code, tokenizer_dir=art.tokenizer_dir)  # fmt: skip
    return Loaded(art, fs, lm, dist, list(lm.notes))


def _adapter_states(ld: Loaded, choices: list, ck_notes: list[str], recorded: bool = True) -> list[AdapterState]:
    """The adapter as found (with the gradients a GradianCallback recorded beside it, when ``recorded`` and there
    are some), or the chosen checkpoints (``--checkpoints``) with their weights and store keys."""
    from gradian.attribute.recorded import record_dir
    from gradian.attribute.store import adapter_fingerprint, base_fingerprint

    base_fp = base_fingerprint(ld.lm.base)
    if not choices:
        parts = {"base": base_fp, "adapter": adapter_fingerprint(ld.lm.adapter_dir)}
        rec = record_dir(ld.lm.adapter_dir) if recorded else None
        return [AdapterState("adapter", 1.0, None, parts, rec)]
    ld.notes += ck_notes
    ld.notes.append(
        "combined over checkpoints (learning-rate weights): "
        + ", ".join(f"{c.path.name} {c.weight:.3f}" for c in choices)
        + f"; {choices[-1].how}"
    )
    return [
        AdapterState(
            c.path.name if c.step is None else f"step {c.step}",
            c.weight,
            c.path,
            {"base": base_fp, "adapter": adapter_fingerprint(c.path)},
        )  # fmt: skip
        for c in choices
    ]


def _complete_eval(model, tokenizer, eval_file, fs, opts: AttributeOptions, dist: Dist, notes: list[str],
                   memo: Continuations | None) -> tuple[list, list[dict[str, Any]], dict[str, Any] | None]:  # fmt: skip
    """The eval items with the base model's completion of every prompt-only row (rank 0 generates, then broadcasts),
    what each item adds to report.json's ``eval``, and ``settings.eval_generation`` (None when no row needed one)."""
    from gradian.attribute.generate import complete_prompts, with_completions
    from gradian.data import load_examples

    eval_ex = load_examples(eval_file, prompt_only=True, text_field=fs.text_field)
    n = sum(e.prompt_only for e in eval_ex)
    if not n:
        return list(eval_ex), [{} for _ in eval_ex], None
    samples, seed, cut, max_new = opts.eval_samples, opts.eval_seed, opts.eval_cut, opts.max_new_tokens
    got = None
    if dist.is_main:
        got = complete_prompts(model, tokenizer, eval_ex, max_new_tokens=max_new, samples=samples, seed=seed,
                               cut=cut, cut_rise=opts.eval_cut_rise, min_tokens=opts.eval_min_tokens,
                               batch_size=opts.batch_size, memo=memo)  # fmt: skip
    comp, opened = dist.broadcast(got)
    how = f"sampled (seed {seed})" if samples else "greedy"
    items, extra = with_completions(eval_ex, comp, how, opened)
    each = f"{samples} {how} completions" if samples else "a greedy completion"
    until = (
        f", cut where the fine-tune first departs from it (at least {opts.eval_min_tokens} tokens); an unfinished "
        "reply is scored without an end of turn"
        if cut
        else ""
    )
    notes.append(
        f"{n} eval row(s) had only a prompt: the base model wrote {each} of at most {max_new} tokens for each"
        f"{until} (report.json eval[].completion, marked generated)"
    )
    left_out = n * max(samples, 1) - sum(len(v) for v in comp.values())
    if left_out:
        notes.append(
            f"{left_out} generated eval completion(s) left out: empty (the base model stopped at once) or nothing "
            "left before a byte token that forms no character"
        )
    info = {"rows": n, "how": how, "samples": samples, "seed": seed, "max_new_tokens": max_new, "cut": cut,
            "min_tokens": opts.eval_min_tokens}  # fmt: skip
    return (
        items,
        extra,
        info
        | {
            "completions": {str(k): v for k, v in comp.items()},
            "open": {str(k): v for k, v in opened.items()},
        },
    )


def _replies(ld: Loaded, items: list, fxs: list, generated: list[bool], fs: Any, opts: AttributeOptions,
             memo: Continuations | None) -> tuple[Callable[[], list | None], dict[int, tuple[str, bool]]]:  # fmt: skip
    """What the regression stage calls when no item regressed by NLL: the fine-tune's greedy reply to each generated
    item (rank 0 generates and broadcasts the texts), formatted as the items are; and the texts by item position,
    filled in by that call (report.json ``eval[].reply`` and ``reply_open``)."""
    texts: dict[int, tuple[str, bool]] = {}

    def replies() -> list | None:
        from gradian.attribute.generate import finetuned_replies, reply_of
        from gradian.data import format_examples

        got = None
        if ld.dist.is_main:
            got = finetuned_replies(ld.lm.model, ld.lm.tokenizer, items, fxs, generated,
                                    max_new_tokens=opts.max_new_tokens, batch_size=opts.batch_size,
                                    memo=memo)  # fmt: skip
        got = ld.dist.broadcast(got)
        keep = [i for i, r in enumerate(got) if r is not None]
        fx = format_examples([got[i] for i in keep], ld.lm.tokenizer, dataclasses.replace(fs, add_eos=opts.eval_eos))
        out: list = [None] * len(items)
        for i, f in zip(keep, fx, strict=True):
            out[i] = f
            r = got[i]
            texts[i] = (reply_of(r), r.open_end)
        return out

    return replies, texts


def _add_generations(model, tokenizer, res: AttributionResult, eval_fx, opts: AttributeOptions,
                     memo: Continuations | None) -> None:  # fmt: skip
    """``regressed[].generations``: the base model's and the fine-tune's greedy continuations of the
    ``opts.generations`` most regressed items (those the eval generation wrote already, from ``memo``)."""
    from gradian.attribute.generate import side_by_side

    t = time.perf_counter()
    at = {int(f.index): f for f in eval_fx}
    items = sorted(res.regressed, key=lambda r: -(r.get("delta") or 0.0))[: opts.generations]
    gens = side_by_side(model, tokenizer, [at[int(r["index"])] for r in items], max_new_tokens=opts.max_new_tokens,
                        batch_size=opts.batch_size, memo=memo)  # fmt: skip
    for r, g in zip(items, gens, strict=True):
        if g is not None:
            r["generations"] = g
    res.settings["generations"] = {"items": sum(g is not None for g in gens), "max_new_tokens": opts.max_new_tokens}
    res.timings["generations_s"] = time.perf_counter() - t


def check_out_dir(out: str | Path) -> None:
    """``--out`` must be a folder gradian can create and write (checked before anything loads)."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise GradianError("--out names a file, not a folder", where=str(p), fix="pass a folder path, or remove it")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GradianError(
            f"cannot create the --out folder ({e.strerror or e})", where=str(e.filename or p), fix="pass another --out"
        ) from e
    if not os.access(p, os.W_OK | os.X_OK):
        raise GradianError("the --out folder is not writable", where=str(p), fix="pass a folder you can write to")


def _training_rows(path: Path, tokenizer, fs, out, dist: Dist) -> tuple[Sequence, list[str | None], int]:
    """The scored training rows (the trainer's drops left out), their ids, and how many were dropped. Streamed
    into ``<out>/tokens`` (reused while the file, tokenizer and settings are unchanged) when there is an ``out``."""
    from gradian.data import TokenizedRows, format_examples, iter_examples, load_examples, source_fingerprint
    from gradian.data.tokenized import tokenize_to_disk

    if out is None:
        ex = load_examples(path, text_field=fs.text_field)
        fx = format_examples(ex, tokenizer, fs)
        keep = [i for i, f in enumerate(fx) if not f.dropped]
        return [fx[i] for i in keep], [ex[i].id for i in keep], len(fx) - len(keep)
    folder = Path(out) / ("tokens" if not dist.active else f"tokens-rank{dist.rank}")
    fp = source_fingerprint(path, tokenizer, fs)
    try:
        rows = TokenizedRows.open_if_matches(folder, fp) or tokenize_to_disk(
            iter_examples(path, text_field=fs.text_field), tokenizer, fs, folder, source=path
        )
    except OSError as e:
        raise GradianError(
            f"cannot write the tokenized training rows ({e.strerror or e})",
            where=str(e.filename or folder),
            fix=f"remove {folder} (it must be a folder gradian can write), or pass another --out",
        ) from e
    return rows, rows.ids(), rows.n_dropped
