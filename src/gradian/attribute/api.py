"""`gradian.attribute`: which training rows made a LoRA fine-tune worse on eval items the base model did well on.

Pipeline (one pass over the training data):

1. Score every eval item's completion NLL (mean per completion token, completion as written: no EOS appended unless
   ``eval_eos``) under the base model (adapter disabled) and the fine-tune. An item *regressed* when its rise is
   larger than the fine-tune's ordinary drift on this eval set (:mod:`gradian.attribute.regression`; ``threshold``
   is the rule's floor in nats/token).
2. Query gradients at the fine-tuned adapter, one per regressed item (kept, so each row's harm can be split by item);
   the query is their sum (``weighting="uniform"``) or weighted by the regression size (``"regression"``).
3. One forward+backward per training batch: per-example LoRA gradients from hooks and K-FAC covariance sums, stored
   in shards under ``<out>/grads`` (reused by later runs with other eval items or methods, resumable).
4. EK-FAC (default), K-FAC, DataInf, exact (dense damped empirical Fisher via Woodbury), identity or cosine
   preconditioning, then ``harm_i = -<H^-1 grad f, G_i>``: positive = training on row i pushed the model toward the
   regression (see :mod:`gradian.attribute.scores`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gradian.attribute.core import TokenPass, check_options, run_attribution
from gradian.attribute.files import _training_rows, attribute_files, check_out_dir
from gradian.attribute.gradients import shard_size
from gradian.attribute.result import AdapterState, AttributionResult, RowIds
from gradian.attribute.stages import select_queries
from gradian.attribute.token_profiles import ProfileNeed
from gradian.dist import Dist
from gradian.options import AttributeOptions, RunInputs
from gradian.options.base import split_kwargs as split_options

__all__ = [
    "AdapterState",
    "AttributionResult",
    "RowIds",
    "TokenPass",
    "_training_rows",
    "attribute",
    "check_options",
    "check_out_dir",
    "run_attribution",
    "select_queries",
    "shard_size",
]


def split_kwargs(
    kwargs: dict[str, Any], inputs: RunInputs | None, options: AttributeOptions | None
) -> tuple[RunInputs, AttributeOptions]:
    """``attribute(..., train=..., method=...)``: keyword arguments into the run's inputs and the options."""
    ins, opts = split_options("attribute", kwargs, (RunInputs, inputs), (AttributeOptions, options))
    return ins, opts


def attribute(
    run: str | Path | None = None,
    *,
    options: AttributeOptions | None = None,
    inputs: RunInputs | None = None,
    out: str | Path | None = None,
    dist: Dist | None = None,
    loaded: Any = None,
    progress: bool = False,
    wants_profiles: Callable[[AttributionResult], ProfileNeed | None] | None = None,
    **kwargs: Any,
) -> AttributionResult:
    """Attribute a fine-tune's regressions to its training rows. Files are found as `gradian attribute` finds them
    (``run`` dir plus the paths in ``inputs``); writes ``<out>/report.json`` (with the options, ``options``) and the
    gradient store when ``out`` is given. ``kwargs``: any :class:`RunInputs` path or :class:`AttributeOptions`
    field (``train=..., method="kfac"``), applied over ``inputs`` / ``options``.

    Under torchrun (``WORLD_SIZE > 1``) it joins the process group (``dist`` defaults to :func:`gradian.dist.from_env`)
    and only rank 0 returns a full result and writes ``report.json``. ``checkpoints``: ``last`` (the adapter as
    found), ``all`` or a list of checkpoint-* steps/dirs combined with learning-rate weights
    (:mod:`gradian.run.checkpoints`). With ``out``, the training rows are tokenized into ``<out>/tokens`` and read
    from there (memory-mapped), so RAM does not grow with the training file.

    Eval rows with only a prompt get the base model's completion (greedy, or ``eval_samples`` sampled ones seeded by
    ``eval_seed``; at most ``max_new_tokens``; with ``eval_cut`` cut after the first token where the fine-tune's
    most likely next token differs from the base model's); the ``generations`` most regressed items get the base
    model's and the fine-tune's greedy continuation; the ``token_harm`` top rows get their harm split over their
    label tokens (:mod:`gradian.attribute.generate`, :mod:`gradian.attribute.tokens`); the top ``token_profiles``
    share get token profiles when ``wants_profiles(result)`` (the report pipeline's verdict check) asks for them, or
    with ``token_profiles_always``."""
    if run is not None:
        kwargs["run"] = run
    ins, opts = split_kwargs(kwargs, inputs, options)
    return attribute_files(ins, opts, out=out, dist=dist, loaded=loaded, progress=progress,
                           wants_profiles=wants_profiles)  # fmt: skip
