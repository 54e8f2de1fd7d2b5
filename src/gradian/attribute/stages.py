"""The stages of an attribution, each returning a typed result (:func:`gradian.attribute.api.run_attribution` runs
them in order):

0. :func:`prepare` → :class:`Context`: the LoRA blocks, their projection, the precision and the memory plan;
1. :func:`find_regressions` → :class:`Regressions`: the eval items' NLL under the base model and the fine-tune,
   which regressed, and the query items with their weights;
2. per adapter state, :func:`gradian.attribute.gradients.training_gradients` (the training gradients and store),
   then :func:`score_states` → :class:`Scored`: the query gradients and every method's harm per query item;
3. :func:`gradian.attribute.assemble.assemble`: rank 0 gathers the rows and builds the result.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gradian.attribute.continuations import Continuations
from gradian.attribute.gradients import GradientPass, TrainingGradients, rank_rows, training_gradients
from gradian.attribute.plan import auto_proj_dim
from gradian.attribute.regression import (
    DEFAULT_NOISE_MULTIPLE,
    RegressionCall,
    RegressionRule,
    call_regressions,
    regression_summary,
)
from gradian.attribute.result import AdapterState, finite
from gradian.dist import Dist
from gradian.errors import GradianError
from gradian.options import AttributeOptions

LOSS = "sum over label tokens per training row; mean per completion token per eval item"


@dataclass
class Context:
    """Stage 0's result: what every later stage reads (``options`` with ``proj_dim`` and ``store_dtype`` resolved)."""

    model: Any
    train_fx: Sequence
    eval_fx: list
    pad_id: int
    options: AttributeOptions
    blocks: list[Any]
    device: Any  # the model's
    score_device: Any  # fp64 scoring: the model's device, or the CPU (MPS has no float64)
    dist: Dist
    store_dir: Path | None
    progress: bool
    settings: dict[str, Any]  # report.json settings: the inputs, the model and the memory plan
    notes: list[str]

    def gradient_pass(self) -> GradientPass:
        o = self.options
        key = {"proj_dim": o.proj_dim, "proj_seed": o.proj_seed, "dtype": self.settings["dtype"]}
        return GradientPass(self.model, self.blocks, self.train_fx, self.pad_id, o.batch_size, self.dist,
                            self.store_dir, o.store_dtype, o.shard_rows, key, self.progress)  # fmt: skip


def prepare(model: Any, train_fx: Sequence, eval_fx: list, pad_id: int, opts: AttributeOptions, *,
            store_dir: str | Path | None, dist: Dist, progress: bool) -> Context:  # fmt: skip
    """Find the LoRA blocks, attach their projection, resolve the automatic options, and plan the memory (one line
    and a ``--proj-dim`` that fits when it will not fit, before any pass)."""
    import torch

    from gradian.attribute.collector import attach_projections, find_lora_blocks

    blocks = find_lora_blocks(model)
    if not blocks:
        raise GradianError("the adapter has no Linear LoRA layers to attribute")
    proj_dim = opts.proj_dim if opts.proj_dim is not None else auto_proj_dim(blocks)
    attach_projections(blocks, proj_dim, opts.proj_seed)
    first = next(model.parameters())
    store_dtype = opts.store_dtype
    if store_dtype == "auto":  # the model's own precision: bf16 models (the GPU default) store bf16 gradients
        store_dtype = "bf16" if first.dtype == torch.bfloat16 else "fp32"
    o = opts.replace(proj_dim=proj_dim, store_dtype=store_dtype)
    settings = {
        "method": o.method, "damping": o.damping, "damping_factor": o.damping_factor, "proj_dim": proj_dim,
        "proj_seed": o.proj_seed, "query": o.query, "weighting": o.weighting, "threshold": o.threshold,
        "noise_multiple": o.noise_multiple,
        "batch_size": o.batch_size, "fisher": o.fisher, "loss": LOSS, "n_train": len(train_fx),
        "n_eval": len(eval_fx), "n_blocks": len(blocks), "lora_params": sum(b.d_out * b.d_in for b in blocks),
        "stored_floats_per_row": sum(b.numel for b in blocks), "store_dtype": store_dtype, "device": str(first.device),
        "dtype": str(first.dtype).removeprefix("torch."), "world_size": dist.world,
    }  # fmt: skip
    root = Path(store_dir) if store_dir is not None else None
    plan = _memory_plan(blocks, rank_rows(blocks, len(train_fx), o.batch_size, o.shard_rows, dist), len(eval_fx), o,
                        root, first.device)  # fmt: skip
    sdev = first.device if first.device.type in ("cpu", "cuda") else torch.device("cpu")
    return Context(model, train_fx, eval_fx, pad_id, o, blocks, first.device, sdev, dist, root, progress,
                   settings | {"memory_plan": plan.to_json()}, plan.lines())  # fmt: skip


def _memory_plan(blocks, n_rows: int, n_eval: int, o: AttributeOptions, root: Path | None, dev: Any) -> Any:
    """Estimate store, factor and scoring memory (:mod:`gradian.attribute.plan`); refuses when it will not fit."""
    from gradian.attribute.plan import check_plan, make_plan

    stored = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root and root.is_dir() else 0
    plan = make_plan(blocks, n_rows, proj_dim=o.proj_dim, store_dtype=o.store_dtype, method=o.method, out_dir=root,
                     device=dev, n_queries=max(n_eval, 1), batch_size=o.batch_size, shard_size=o.shard_rows,
                     stored_bytes=stored)  # fmt: skip
    check_plan(plan)
    return plan


@dataclass
class Regressions:
    """Stage 1's result: the eval items' NLLs, which regressed, and the query."""

    eval_items: list[dict[str, Any]]  # report.json ``eval``
    call: RegressionCall
    query: list[int]  # positions in eval_fx of the query items
    weights: np.ndarray  # each query item's weight in the summed query
    settings: dict[str, Any]  # report.json settings["regression"]
    seconds: float
    partners: list | None = None  # scored by preference: the fine-tune's reply per query item (the pair's other side)
    nll_call: RegressionCall | None = None  # scored by preference: the NLL rule's call, which found no regression

    @property
    def regressed(self) -> list[dict[str, Any]]:
        return [e for e in self.eval_items if e["regressed"]]

    def nothing_to_attribute(self, n_eval: int, query: str) -> str | None:
        """The note when there is no query item, else None."""
        if self.query:
            return None
        if query == "regressed" and self.nll_call is not None:
            return (f"no eval item regressed in {n_eval} items, neither by NLL ({regression_summary(self.nll_call)}) "
                    f"nor by preference ({regression_summary(self.call)})")  # fmt: skip
        if query == "regressed":
            return f"no eval item regressed in {n_eval} items: " + regression_summary(self.call)
        return "no eval item has completion tokens"


def select_queries(
    base_nll: np.ndarray,
    ft_nll: np.ndarray,
    threshold: float,
    query: str,
    noise_multiple: float = DEFAULT_NOISE_MULTIPLE,
) -> tuple[list[int], RegressionCall]:
    """Indices of the query items and the regression call (:mod:`gradian.attribute.regression`; ``threshold`` is its
    ``min_delta`` floor, ``noise_multiple`` its drift gate)."""
    from gradian.attribute.regression import call_regressions

    call = call_regressions(base_nll, ft_nll, RegressionRule(min_delta=threshold, noise_multiple=noise_multiple))
    if query == "all":
        idx = [int(i) for i in np.flatnonzero(np.isfinite(call.delta))]
    elif query == "regressed":
        idx = [int(i) for i in np.flatnonzero(call.regressed)]
    else:
        raise GradianError(f"unknown --query {query!r}", fix="use regressed or all")
    return idx, call


def find_regressions(ctx: Context, eval_ids: Sequence[str | None], replies: Callable[[], list | None] | None = None,
                     memo: Continuations | None = None) -> Regressions:  # fmt: skip
    """Every eval item's completion NLL under the base model and the fine-tune (rank 0, broadcast), and the rule's
    call on which regressed. When none did and ``replies`` gives the fine-tune's own replies to generated items
    (:func:`gradian.attribute.generate.finetuned_replies`, formatted), the items are scored by preference instead
    (:func:`_preference`). ``memo``: what the eval generation scored already
    (:mod:`gradian.attribute.continuations`)."""
    o, dist = ctx.options, ctx.dist
    t = time.perf_counter()
    nll = None
    if dist.is_main:
        nll = (_nll(ctx, ctx.eval_fx, adapter=False, what="eval NLL (base)", memo=memo),
               _nll(ctx, ctx.eval_fx, adapter=True, what="eval NLL (tuned)", memo=memo))  # fmt: skip
    base_nll, ft_nll = dist.broadcast(nll)
    q_idx, call = select_queries(base_nll, ft_nll, o.threshold, o.query, o.noise_multiple)
    items = [
        {
            "index": int(f.index),
            "id": eval_ids[i],
            "base_nll": finite(base_nll[i]),
            "finetuned_nll": finite(ft_nll[i]),
            "delta": finite(call.delta[i]),
            "relative": finite(call.relative[i]),
            "n_tokens": int(sum(f.loss_mask[1:])),
            "regressed": bool(call.regressed[i]),
        }
        for i, f in enumerate(ctx.eval_fx)
    ]
    reg = Regressions(items, call, q_idx, _weights(o, call, q_idx), {"regression": _rule(o, call)}, 0.0)
    if not q_idx and replies is not None and o.query == "regressed":
        pref = _preference(ctx, reg, replies(), base_nll, ft_nll, memo)
        reg = pref or reg
    reg.seconds = time.perf_counter() - t
    return reg


def _nll(ctx: Context, fxs: Sequence, *, adapter: bool, what: str, memo: Continuations | None) -> np.ndarray:
    from gradian.attribute import engine

    return engine.completion_nll(ctx.model, fxs, ctx.pad_id, adapter=adapter, description=what,
                                 batch_size=ctx.options.batch_size, progress=ctx.progress, memo=memo)  # fmt: skip


def _weights(o: AttributeOptions, call: RegressionCall, q_idx: list[int]) -> np.ndarray:
    w = np.ones(len(q_idx)) if o.weighting == "uniform" else np.clip(call.delta[q_idx], 0, None)
    if o.weighting == "regression" and w.sum() == 0:
        w = np.ones(len(q_idx))
    return w


def _rule(o: AttributeOptions, call: RegressionCall) -> dict[str, Any]:
    return {**RegressionRule(min_delta=o.threshold, noise_multiple=o.noise_multiple).to_dict(), **call.to_dict()}


def _preference(ctx: Context, reg: Regressions, replies: list | None, base_nll: np.ndarray, ft_nll: np.ndarray,
                memo: Continuations | None = None) -> Regressions | None:  # fmt: skip
    """The generated items scored by preference: how much more the fine-tune prefers its own greedy reply ``r`` over
    the base model's ``b`` than the base model does, ``[nll_ft(b) - nll_base(b)] - [nll_ft(r) - nll_base(r)]``
    (mean nats per token of each, the two replies cut to the same length; 0 where they agree). A fine-tune trained
    on replies like the base model's own makes them *more* likely while its greedy reply turns into another one (a
    refusal): the base reply's NLL does not rise, the preference does. The fine-tune's greedy reply is the one it
    prefers, so the shift goes one way and its own spread is no drift: an item regresses when its shift clears the
    floor and ``noise_multiple`` x the drift of its NLL (the regression rule per item). The query item of a
    regressed one is the pair: ``grad nll(b) - grad nll(r)``. None when no reply differs."""
    o, dist = ctx.options, ctx.dist
    pos = [i for i, r in enumerate(replies or []) if r is not None]
    if not dist.broadcast(len(pos) if dist.is_main else None):
        return None
    nll = None
    if dist.is_main:
        fx = [replies[i] for i in pos]  # type: ignore[index]
        nll = (pos, _nll(ctx, fx, adapter=False, what="replies NLL (base)", memo=memo),
               _nll(ctx, fx, adapter=True, what="replies NLL (tuned)", memo=memo))  # fmt: skip
    pos, rb, rf = dist.broadcast(nll)
    pref = np.zeros(len(base_nll))
    pref[~np.isfinite(base_nll - ft_nll)] = np.nan
    pref[pos] = (ft_nll[pos] - base_nll[pos]) - (rf - rb)
    # per item: the set's tests (sign, family) read nothing here
    rule = RegressionRule(min_delta=o.threshold, noise_multiple=o.noise_multiple, gate="item", shift_alpha=0.0,
                          family_alpha=0.0)  # fmt: skip
    call = call_regressions(base_nll, base_nll + pref, rule, drift=reg.call.drift)
    q_idx = [int(i) for i in np.flatnonzero(call.regressed)]
    at = dict(zip(pos, zip(rb, rf, strict=True), strict=True))
    items = []
    for i, e in enumerate(reg.eval_items):
        b = at.get(i)
        items.append(e | {
            "score": "preference", "delta": finite(call.delta[i]), "relative": finite(call.relative[i]),
            "regressed": bool(call.regressed[i]),
            "reply_base_nll": finite(b[0]) if b else None, "reply_finetuned_nll": finite(b[1]) if b else None,
        })  # fmt: skip
    settings = {"regression": {**rule.to_dict(), **call.to_dict(), "score": "preference", "replies_differ": len(pos)}}
    partners = [replies[i] for i in q_idx] if replies is not None else []
    return Regressions(items, call, q_idx, _weights(o, call, q_idx), settings, 0.0, partners, reg.call)


@dataclass
class Scored:
    """Stage 2's result over every adapter state: each method's harm per query item (plus the weighted total as the
    last row), the newest state's gradients for the embedding, and what the passes report."""

    harm: dict[str, np.ndarray] = field(default_factory=dict)  # one state: this rank's rows; several: every row
    seen: np.ndarray | None = None  # how many states scored each training row
    skipped: dict[int, str] = field(default_factory=dict)
    last: TrainingGradients | None = None  # the newest state's gradients (states are oldest first)
    eig: Any = None  # the main method's eigen-decomposition at the newest state
    rotated: Any = None  # its rotated rows (kept for the embedding)
    query_direction: dict[str, Any] | None = None  # the main method's preconditioned weighted query (one state)
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def time(self, key: str, t0: float) -> None:
        self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t0


def score_states(ctx: Context, reg: Regressions, states: list[AdapterState]) -> Scored:
    """Per adapter state (one, or several checkpoints): training gradients (one pass over this rank's shards,
    stored; curvature sums over all ranks), query gradients (rank 0, broadcast), scores streamed over this rank's
    rows; the combined score is ``sum_c weight_c x harm_c`` (TracIn / LESS)."""
    out = Scored(seen=np.zeros(len(ctx.train_fx), dtype=np.int64))
    for c in states:
        if c.path is not None:
            from gradian.attribute.loading import load_adapter_weights

            load_adapter_weights(ctx.model, c.path)
        tag = f" ({c.label})" if len(states) > 1 else ""
        _score_state(ctx, reg, c, tag, out, newest=c is states[-1], several=len(states) > 1)
    return out


def _score_state(ctx: Context, reg: Regressions, c: AdapterState, tag: str, out: Scored, *, newest: bool,
                 several: bool) -> None:  # fmt: skip
    from gradian.attribute.gradients import with_sampled_fisher
    from gradian.attribute.scores import harm_scores, precondition

    o = ctx.options
    t = time.perf_counter()
    p = ctx.gradient_pass()
    tg = training_gradients(p, c, tag)
    out.time("train_pass_s", t)
    out.notes += tg.notes
    out.settings |= tg.settings
    for pos_, why in tg.skipped:
        out.skipped.setdefault(pos_, why)
    if o.samples_true_fisher:
        t = time.perf_counter()
        tg = with_sampled_fisher(p, tg, o.fisher_seed)
        out.time("fisher_s", t)
    t = time.perf_counter()
    queries = _query_gradients(ctx, reg, tag)
    out.time("query_s", t)
    t = time.perf_counter()
    pos_c = tg.source.positions.numpy()
    assert out.seen is not None
    out.seen[pos_c] += 1
    for m in o.methods:
        keep = m == o.method and newest  # its rotated rows serve its scores and the embedding
        pre = precondition(
            m, queries, tg.source, tg.stats, damping=o.damping, damping_factor=o.damping_factor,
            device=ctx.score_device, keep_rows=keep, fisher=tg.fisher,  # only EK-FAC fits to sampled labels
        )  # fmt: skip
        h = harm_scores(m, pre.X, tg.source, device=ctx.score_device, rotated=pre.rotated).numpy()
        if not several:
            out.harm[m] = h
        else:  # dense over all rows: checkpoints may leave out different (non-finite) rows
            out.harm.setdefault(m, np.zeros((h.shape[0], len(ctx.train_fx))))[:, pos_c] += c.weight * h
        if m == o.method:
            out.eig, out.rotated = pre.eig, pre.rotated
            out.query_direction = {n: x[-1] for n, x in pre.X.items()} if not several else None
            damping = {"mean": float(np.mean(list(pre.damping.values())))} if pre.damping else None
            out.settings["damping_used"] = damping
    out.last = tg
    out.time("scores_s", t)


def _query_gradients(ctx: Context, reg: Regressions, tag: str) -> dict[str, Any]:
    """The query items' gradients (rank 0, broadcast), each block stacked with their weighted sum as the last row."""
    import torch

    from gradian.attribute import engine

    V = None
    if ctx.dist.is_main:
        V, _ = engine.gradient_pass(
            ctx.model, ctx.blocks, [ctx.eval_fx[i] for i in reg.query], ctx.pad_id, batch_size=ctx.options.batch_size,
            mean_per_token=True, progress=ctx.progress, description="query gradients" + tag,
        )  # fmt: skip
        assert V is not None
        if reg.partners:  # preference items: the pair's gradient, toward the base model's reply, away from its own
            R, _ = engine.gradient_pass(
                ctx.model, ctx.blocks, reg.partners, ctx.pad_id, batch_size=ctx.options.batch_size,
                mean_per_token=True, progress=ctx.progress, description="query gradients (replies)" + tag,
            )  # fmt: skip
            assert R is not None
            V = {k: v - R[k] for k, v in V.items()}
        V = {k: v.cpu() for k, v in V.items()}
    V = ctx.dist.broadcast(V)
    wt = torch.tensor(reg.weights, dtype=torch.float64)
    return {k: torch.cat([v.double(), torch.einsum("m,moi->oi", wt, v.double())[None]]) for k, v in V.items()}
