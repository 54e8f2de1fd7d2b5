"""The attribution core on formatted rows and a loaded model: :func:`run_attribution` runs the stages of
:mod:`gradian.attribute.stages` in order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradian.attribute.continuations import Continuations
from gradian.attribute.regression import regression_summary
from gradian.attribute.result import AdapterState, AttributionResult, RowIds
from gradian.attribute.stages import find_regressions, prepare, score_states
from gradian.attribute.token_profiles import ProfileNeed
from gradian.dist import SINGLE, Dist
from gradian.options import AttributeOptions


def check_options(method: str, weighting: str, store_dtype: str, fisher: str = "empirical") -> None:
    """One-line errors for option values, before anything is loaded (:class:`gradian.options.AttributeOptions`)."""
    AttributeOptions(method=method, weighting=weighting, store_dtype=store_dtype, fisher=fisher)


@dataclass(frozen=True)
class TokenPass:
    """What the passes over text need: the tokenizer (to name the tokens), from the report pipeline whether the
    verdict on a result needs token profiles (None: only with ``token_profiles_always``), and from the file-level
    API the fine-tune's own replies to generated eval items, formatted, made when no item regressed by NLL
    (``replies``; see :func:`gradian.attribute.stages.find_regressions`), and the token log-probabilities the eval
    generation computed (``memo``)."""

    tokenizer: Any
    wants_profiles: Callable[[AttributionResult], ProfileNeed | None] | None = None
    replies: Callable[[], list | None] | None = None
    memo: Continuations | None = None  # what the eval generation already scored (rank 0)


def run_attribution(
    model: Any,
    train_fx: Sequence,
    eval_fx: list,
    options: AttributeOptions | None = None,
    *,
    pad_id: int = 0,
    store_dir: str | Path | None = None,
    ids: RowIds | None = None,
    notes: list[str] | None = None,
    dist: Dist = SINGLE,
    states: list[AdapterState] | None = None,
    tokens: TokenPass | None = None,
    progress: bool = False,
) -> AttributionResult:
    """The core on already formatted rows and a loaded PEFT model (tests and the file-level API both use it).

    ``train_fx`` is any sequence of formatted rows (a list, or :class:`gradian.data.TokenizedRows` read from disk).
    ``options.extra_methods`` computes other methods' scores from the same stored gradients
    (``result.settings['also']``). ``states`` (``--checkpoints``): adapter states to attribute through, oldest first;
    the combined score is ``sum_c weight_c x harm_c`` (TracIn / LESS), with the eval items that regressed under the
    model as loaded. Under torchrun (``dist``), every rank computes and scores its own shards of the training rows;
    rank 0 computes the eval NLLs and query gradients and broadcasts them, and gathers the scores (other ranks get
    an empty result). ``options.token_harm``: the top that many rows get ``token_harm`` (their score split over their
    label tokens, needs ``tokens``, a :class:`TokenPass`; :mod:`gradian.attribute.tokens`), one adapter state only;
    the top ``options.token_profiles`` share of the rows get token profiles when ``tokens.wants_profiles(result)``
    says the verdict needs them (the report pipeline's check: does it name a content group), or with
    ``token_profiles_always``; ``tokens.replies``: the fine-tune's own replies, when no item regressed by NLL.

    The stages (:mod:`gradian.attribute.stages`): prepare → regressed items → per adapter state, training gradients
    and scores → assembly (:mod:`gradian.attribute.assemble`)."""
    from gradian.attribute.assemble import assemble

    opts = options or AttributeOptions()
    ids = ids or RowIds.none(len(train_fx), len(eval_fx))
    store = Path(store_dir) if store_dir is not None else None
    ctx = prepare(
        model, train_fx, eval_fx, pad_id, opts, store_dir=store, dist=dist, progress=progress and dist.is_main
    )
    notes = [*(notes or []), *ctx.notes]
    reg = find_regressions(ctx, ids.eval, tokens.replies if tokens is not None else None,
                           tokens.memo if tokens is not None else None)  # fmt: skip
    if reg.nll_call is not None:
        n = reg.settings["regression"]["replies_differ"]
        notes.append(
            f"no eval item regressed by NLL ({regression_summary(reg.nll_call)}), but the fine-tune's greedy reply "
            f"differs from the base model's on {n} generated item(s): they are scored by preference, how much more "
            "the fine-tune prefers its own reply over the base model's than the base model does (eval[].score)"
        )
    settings = ctx.settings | reg.settings
    timings = {"eval_nll_s": reg.seconds}
    nothing = reg.nothing_to_attribute(len(eval_fx), opts.query)
    if nothing:
        notes.append(nothing)
        return AttributionResult(opts.method, settings, [], reg.regressed, reg.eval_items, [], notes, timings,
                                 no_regression=True, partial=not dist.is_main)  # fmt: skip
    states = states or [AdapterState("adapter", 1.0, None, {})]
    if len(states) > 1:
        settings["checkpoints"] = [{"label": c.label, "weight": c.weight, "path": str(c.path)} for c in states]
    scored = score_states(ctx, reg, states)
    notes += scored.notes
    settings |= scored.settings
    timings |= scored.timings
    return assemble(ctx, reg, scored, ids, n_states=len(states), notes=notes, timings=timings, settings=settings,
                    tokens=tokens)  # fmt: skip
