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

import dataclasses
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gradian.attribute.generate import EVAL_CUT, EVAL_SAMPLES, EVAL_SEED, MAX_NEW_TOKENS, SIDE_BY_SIDE
from gradian.attribute.plan import auto_proj_dim
from gradian.attribute.regression import (
    DEFAULT_MIN_DELTA,
    RegressionCall,
    RegressionRule,
    call_regressions,
    regression_summary,
)
from gradian.attribute.source import Stats
from gradian.attribute.tokens import TOKEN_HARM_ROWS
from gradian.dist import SINGLE, Dist
from gradian.errors import GradianError


@dataclass
class AttributionResult:
    method: str
    settings: dict[str, Any]
    examples: list[dict[str, Any]]  # rank order: {"index", "id", "score", "rank"}
    regressed: list[dict[str, Any]]
    eval_items: list[dict[str, Any]]
    contributions: list[dict[str, Any]]  # top rows split by regressed item
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    no_regression: bool = False
    item_scores: np.ndarray | None = None  # (n query items, n training rows), not in JSON
    scores: np.ndarray | None = None  # (n training rows,) in training-file order (NaN for dropped rows)
    embeddings: np.ndarray | None = None  # (n scored rows, k) rows in gradient space, for clustering
    embedding_index: list[int] | None = None  # training-file row index of each embedding row
    partial: bool = False  # a torchrun rank other than 0: its rows went to rank 0, which holds the result
    eval_examples: list | None = None  # the eval items as scored (generated completions filled in), not in JSON

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "gradian.report/1",
            "method": self.method,
            "settings": self.settings,
            "no_regression": self.no_regression,
            "examples": self.examples,
            "regressed": self.regressed,
            "eval": self.eval_items,
            "contributions": self.contributions,
            "notes": self.notes,
            "timings": self.timings,
        }

    def write(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "report.json"
        path.write_text(json.dumps(self.to_json(), indent=1, allow_nan=False, default=_json_default))
        return path

    def top(self, k: int = 10) -> list[dict[str, Any]]:
        return self.examples[:k]


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o).__name__)


def _f(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


@dataclass
class AdapterState:
    """One saved state of the adapter to attribute through (``--checkpoints``) and its weight."""

    label: str  # e.g. "checkpoint-41"
    weight: float
    path: Path | None  # adapter dir whose weights are loaded first; None: the model as loaded
    store_parts: dict[str, Any]  # what identifies its gradients in the store (the adapter's fingerprint)


def check_options(method: str, weighting: str, store_dtype: str, fisher: str = "empirical") -> None:
    """One-line errors for option values, before anything is loaded."""
    from gradian.attribute.fisher import FISHERS
    from gradian.attribute.scores import METHODS

    if fisher not in FISHERS:
        raise GradianError(f"unknown --fisher {fisher!r}", fix="use empirical or true")
    if fisher == "true" and method in ("datainf", "exact"):
        raise GradianError(
            f"--fisher true is for the Kronecker-factored methods; --method {method} uses the training gradients "
            "themselves as its curvature",
            fix="use --method ekfac or kfac with --fisher true, or --fisher empirical",
        )
    if method not in METHODS:
        raise GradianError(f"unknown --method {method!r}", fix="use one of " + ", ".join(METHODS))
    if weighting not in ("uniform", "regression"):
        raise GradianError(f"unknown --weighting {weighting!r}", fix="use uniform or regression")
    if store_dtype not in ("auto", "fp32", "bf16"):
        raise GradianError(f"unknown --store-dtype {store_dtype!r}", fix="use auto, fp32 or bf16")


def select_queries(
    base_nll: np.ndarray, ft_nll: np.ndarray, threshold: float, query: str
) -> tuple[list[int], RegressionCall]:
    """Indices of the query items and the regression call (:mod:`gradian.attribute.regression`; ``threshold`` is its
    ``min_delta`` floor)."""
    call = call_regressions(base_nll, ft_nll, RegressionRule(min_delta=threshold))
    if query == "all":
        idx = [int(i) for i in np.flatnonzero(np.isfinite(call.delta))]
    elif query == "regressed":
        idx = [int(i) for i in np.flatnonzero(call.regressed)]
    else:
        raise GradianError(f"unknown --query {query!r}", fix="use regressed or all")
    return idx, call


def run_attribution(
    model,
    train_fx: Sequence,
    eval_fx: list,
    *,
    pad_id: int = 0,
    method: str = "ekfac",
    damping: float | None = None,
    damping_factor: float = 0.1,
    proj_dim: int | None = None,
    proj_seed: int = 0,
    query: str = "regressed",
    weighting: str = "uniform",
    threshold: float = DEFAULT_MIN_DELTA,
    batch_size: int = 8,
    store_dir: str | Path | None = None,
    store_parts: dict[str, Any] | None = None,
    store_dtype: str = "auto",
    train_ids: Sequence[str | None] | None = None,
    eval_ids: list[str | None] | None = None,
    top: int = 20,
    progress: bool = False,
    notes: list[str] | None = None,
    extra_methods: tuple[str, ...] = (),
    shard_rows: int | None = None,
    dist: Dist = SINGLE,
    states: list[AdapterState] | None = None,
    tokenizer: Any = None,
    token_harm: int = TOKEN_HARM_ROWS,
    fisher: str = "empirical",
    fisher_seed: int = 0,
) -> AttributionResult:
    """The core on already formatted rows and a loaded PEFT model (tests and the file-level API both use it).

    ``train_fx`` is any sequence of formatted rows (a list, or :class:`gradian.data.TokenizedRows` read from disk).
    ``extra_methods`` computes other methods' scores from the same stored gradients (``result.settings['also']``).
    ``states`` (``--checkpoints``): adapter states to attribute through, oldest first; the combined score is
    ``sum_c weight_c x harm_c`` (TracIn / LESS), with the eval items that regressed under the model as loaded.
    Under torchrun (``dist``), every rank computes and scores its own shards of the training rows; rank 0 computes the
    eval NLLs and query gradients and broadcasts them, and gathers the scores (other ranks get an empty result).
    ``token_harm``: the top that many rows get ``token_harm`` (their score split over their label tokens, needs the
    ``tokenizer``; :mod:`gradian.attribute.tokens`), one adapter state only."""
    import torch

    from gradian.attribute import engine
    from gradian.attribute.collector import attach_projections, find_lora_blocks
    from gradian.attribute.scores import gradient_embedding, harm_scores, precondition

    check_options(method, weighting, store_dtype, fisher)
    notes = list(notes or [])
    timings: dict[str, float] = {}
    progress = progress and dist.is_main
    train_ids = train_ids if train_ids is not None else [None] * len(train_fx)
    eval_ids = eval_ids or [None] * len(eval_fx)
    blocks = find_lora_blocks(model)
    if not blocks:
        raise GradianError("the adapter has no Linear LoRA layers to attribute")
    n_params = sum(b.d_out * b.d_in for b in blocks)
    if proj_dim is None:
        proj_dim = auto_proj_dim(blocks)
    attach_projections(blocks, proj_dim, proj_seed)
    dev = next(model.parameters()).device
    if store_dtype == "auto":  # the model's own precision: bf16 models (the GPU default) store bf16 gradients
        store_dtype = "bf16" if next(model.parameters()).dtype == torch.bfloat16 else "fp32"
    settings = {
        "method": method,
        "damping": damping,
        "damping_factor": damping_factor,
        "proj_dim": proj_dim,
        "proj_seed": proj_seed,
        "query": query,
        "weighting": weighting,
        "threshold": threshold,
        "batch_size": batch_size,
        "fisher": fisher,
        "loss": "sum over label tokens per training row; mean per completion token per eval item",
        "n_train": len(train_fx),
        "n_eval": len(eval_fx),
        "n_blocks": len(blocks),
        "lora_params": n_params,
        "stored_floats_per_row": sum(b.numel for b in blocks),
        "store_dtype": store_dtype,
        "device": str(dev),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "world_size": dist.world,
    }
    _memory_plan(blocks, _rank_rows(blocks, len(train_fx), batch_size, shard_rows, dist), len(eval_fx), settings,
                 store_dir, shard_rows, dev, notes)  # fmt: skip

    # 1. regression detection (rank 0, broadcast)
    t = time.perf_counter()
    nll = None
    if dist.is_main:
        kw = {"batch_size": batch_size, "progress": progress}
        nll = (
            engine.completion_nll(model, eval_fx, pad_id, adapter=False, description="eval NLL (base)", **kw),
            engine.completion_nll(model, eval_fx, pad_id, adapter=True, description="eval NLL (tuned)", **kw),
        )
    base_nll, ft_nll = dist.broadcast(nll)
    timings["eval_nll_s"] = time.perf_counter() - t
    q_idx, call = select_queries(base_nll, ft_nll, threshold, query)
    delta = call.delta
    settings["regression"] = {**RegressionRule(min_delta=threshold).to_dict(), **call.to_dict()}
    eval_items = [
        {
            "index": int(eval_fx[i].index),
            "id": eval_ids[i],
            "base_nll": _f(base_nll[i]),
            "finetuned_nll": _f(ft_nll[i]),
            "delta": _f(delta[i]),
            "relative": _f(call.relative[i]),
            "n_tokens": int(sum(eval_fx[i].loss_mask[1:])),
            "regressed": bool(call.regressed[i]),
        }
        for i in range(len(eval_fx))
    ]
    regressed = [e for e in eval_items if e["regressed"]]
    if not q_idx:
        msg = (
            f"no eval item regressed in {len(eval_fx)} items: " + regression_summary(call)
            if query == "regressed"
            else "no eval item has completion tokens"
        )
        notes.append(msg)
        return AttributionResult(
            method,
            settings,
            [],
            regressed,
            eval_items,
            [],
            notes,
            timings,
            no_regression=True,
            partial=not dist.is_main,
        )

    # 2-4. per adapter state (one, or several checkpoints): training gradients (one pass over this rank's shards,
    # stored; curvature sums over all ranks), query gradients (rank 0, broadcast), scores streamed over this rank's rows
    w = np.ones(len(q_idx)) if weighting == "uniform" else np.clip(delta[q_idx], 0, None)
    if weighting == "regression" and w.sum() == 0:
        w = np.ones(len(q_idx))
    wt = torch.tensor(w, dtype=torch.float64)
    states = states or [AdapterState("adapter", 1.0, None, store_parts or {})]
    if len(states) > 1:
        settings["checkpoints"] = [{"label": c.label, "weight": c.weight, "path": str(c.path)} for c in states]
    methods = (method, *[x for x in extra_methods if x != method])
    sdev = dev if dev.type in ("cpu", "cuda") else torch.device("cpu")  # fp64 scoring: MPS has no float64
    acc: dict[str, np.ndarray] = {}
    xq: dict[str, torch.Tensor] | None = None  # the main method's preconditioned (weighted) query, for token harm
    seen = np.zeros(len(train_fx), dtype=np.int64)
    skipped: dict[int, str] = {}
    for c in states:
        if c.path is not None:
            from gradian.attribute.loading import load_adapter_weights

            load_adapter_weights(model, c.path)
        tag = f" ({c.label})" if len(states) > 1 else ""
        t = time.perf_counter()
        src, stats, skipped_c = _training_gradients(
            model, blocks, train_fx, pad_id, batch_size, store_dir, c.store_parts, settings, progress, notes,
            shard_rows, store_dtype, dist, tag,
        )  # fmt: skip
        timings["train_pass_s"] = timings.get("train_pass_s", 0.0) + time.perf_counter() - t
        for pos_, why in skipped_c:
            skipped.setdefault(pos_, why)
        fsrc = None
        if fisher == "true" and method in ("ekfac", "kfac"):
            t = time.perf_counter()
            fsrc, stats = _sampled_fisher(model, blocks, train_fx, src, pad_id, batch_size, fisher_seed, dist)
            timings["fisher_s"] = timings.get("fisher_s", 0.0) + time.perf_counter() - t
        t = time.perf_counter()
        V = None
        if dist.is_main:
            V, _ = engine.gradient_pass(
                model,
                blocks,
                [eval_fx[i] for i in q_idx],
                pad_id,
                batch_size=batch_size,
                mean_per_token=True,
                progress=progress,
                description="query gradients" + tag,
            )
            V = {k: v.cpu() for k, v in V.items()}
        V = dist.broadcast(V)
        Vall = {k: torch.cat([v.double(), torch.einsum("m,moi->oi", wt, v.double())[None]]) for k, v in V.items()}
        timings["query_s"] = timings.get("query_s", 0.0) + time.perf_counter() - t
        t = time.perf_counter()
        pos_c = src.positions.numpy()
        seen[pos_c] += 1
        eig = rotated = None
        for m in methods:
            keep = m == method and c is states[-1]  # its rotated rows serve its scores and the embedding
            pre = precondition(
                m, Vall, src, stats, damping=damping, damping_factor=damping_factor, device=sdev, keep_rows=keep,
                fisher=fsrc if m == "ekfac" else None,
            )  # fmt: skip
            h = harm_scores(m, pre.X, src, device=sdev, rotated=pre.rotated).numpy()
            if len(states) == 1:
                acc[m] = h
            else:  # dense over all rows: checkpoints may leave out different (non-finite) rows
                acc.setdefault(m, np.zeros((h.shape[0], len(train_fx))))[:, pos_c] += c.weight * h
            if m == method:
                eig, rotated = pre.eig, pre.rotated
                xq = {n: x[-1] for n, x in pre.X.items()} if len(states) == 1 else None
                settings["damping_used"] = {"mean": float(np.mean(list(pre.damping.values())))} if pre.damping else None
        timings["scores_s"] = timings.get("scores_s", 0.0) + time.perf_counter() - t
    # the clustering embedding: the newest state's gradient geometry (states are oldest first)
    t = time.perf_counter()
    shapes = {b.name: b.shape for b in blocks}
    emb_local = gradient_embedding(
        method, src, stats, eig=eig, rotated=rotated, damping_factor=damping_factor, seed=proj_seed, shapes=shapes,
        device=sdev,
    ).numpy()  # fmt: skip
    del pre, rotated  # the rotated rows are not needed past here
    timings["embedding_s"] = time.perf_counter() - t
    positions = src.positions.numpy()
    if len(states) > 1:  # rows scored at every state
        keep = np.flatnonzero(seen == len(states))
        inv = np.full(len(train_fx), -1)
        inv[positions] = np.arange(len(positions))
        local = {m: a[:, keep] for m, a in acc.items()}
        emb_local, positions = emb_local[inv[keep]], keep
    else:
        local = acc
    skipped_list = sorted(skipped.items())

    # 5. rank 0 gathers every rank's rows
    parts = dist.gather((positions, local, emb_local, skipped_list, notes if not dist.is_main else []))
    if not dist.is_main:
        return AttributionResult(method, settings, [], regressed, eval_items, [], notes, timings, partial=True)
    assert parts is not None
    pos = np.concatenate([p[0] for p in parts])
    order_pos = np.argsort(pos, kind="stable")
    pos = pos[order_pos]
    harm = np.concatenate([p[1][method] for p in parts], axis=1)[:, order_pos]
    emb = np.concatenate([p[2] for p in parts])[order_pos]
    also = {
        m: [float(x) for x in np.concatenate([p[1][m][-1] for p in parts])[order_pos]] for m in local if m != method
    }
    if also:
        settings["also"] = also
    for r, p in enumerate(parts[1:], start=1):
        notes += [f"rank {r}: {x}" for x in p[4]]
    _report_skipped(sorted(x for p in parts for x in p[3]), train_fx, settings, notes)
    file_index = _file_indices(train_fx, pos)
    rows_ids = [train_ids[int(i)] for i in pos]

    total = harm[-1]
    per_item = harm[:-1]
    order = np.argsort(-total, kind="stable")
    examples = [
        {"index": int(file_index[i]), "id": rows_ids[i], "score": float(total[i]), "rank": r + 1}
        for r, i in enumerate(order)
    ]
    contributions = []
    for i in order[:top]:
        contributions.append(
            {
                "index": int(file_index[i]),
                "id": rows_ids[i],
                "score": float(total[i]),
                "per_item": [
                    {
                        "eval_index": int(eval_fx[q].index),
                        "eval_id": eval_ids[q],
                        "weight": float(w[j]),
                        "score": float(per_item[j, i]),
                    }
                    for j, q in enumerate(q_idx)
                ],
            }
        )
    settings["query_items"] = [int(eval_fx[q].index) for q in q_idx]
    if token_harm and tokenizer is not None:
        t = time.perf_counter()
        _add_token_harm(
            model, blocks, xq, [pos[i] for i in order[:token_harm]], total[order[:token_harm]], examples, train_fx,
            tokenizer, pad_id, batch_size, method, settings, notes,
        )  # fmt: skip
        timings["token_harm_s"] = time.perf_counter() - t
    return AttributionResult(
        method,
        settings,
        examples,
        regressed,
        eval_items,
        contributions,
        notes,
        timings,
        item_scores=per_item,
        scores=total,
        embeddings=emb,
        embedding_index=[int(i) for i in file_index],
    )


def _add_token_harm(
    model, blocks, xq, positions, scores, examples, train_fx, tokenizer, pad_id, batch_size, method, settings, notes
) -> None:
    """``token_harm`` on the top rows of ``examples`` (rank order; ``positions`` / ``scores`` of those rows)."""
    from gradian.attribute import tokens

    if xq is None:
        notes.append("token harm not computed: it needs one adapter state (not --checkpoints)")
        return
    fxs = [train_fx[int(p)] for p in positions]
    try:
        harms = tokens.token_harm(model, tokens.lifted_direction(model, blocks, xq), fxs, pad_id, batch_size)
    except (RuntimeError, NotImplementedError) as e:  # e.g. an attention kernel without a forward-mode derivative
        notes.append(f"token harm not computed: {str(e).splitlines()[0][:200]}")
        return
    for e, fx, h, score in zip(examples, fxs, harms, scores, strict=False):
        if method == "cosine" and h.sum() != 0:  # the row's normalisation: a positive factor shared by its tokens
            h = h * (score / h.sum())
        e["token_harm"] = tokens.token_pieces(tokenizer, fx, h)
    settings["token_harm_rows"] = len(fxs)


def _check_generation_options(eval_samples: int, max_new_tokens: int, generations: int, token_harm: int) -> None:
    for flag, v, least in (("--eval-samples", eval_samples, 0), ("--max-new-tokens", max_new_tokens, 1),
                           ("--generations", generations, 0), ("--token-harm", token_harm, 0)):  # fmt: skip
        if v < least:
            raise GradianError(f"{flag} {v} is below {least}", fix=f"pass {flag} {least} or more")


def _complete_eval(
    model, tokenizer, eval_ex, *, max_new_tokens, samples, seed, cut, batch_size, dist: Dist, notes: list[str]
) -> tuple[list, list[dict[str, Any]], dict[str, Any] | None]:
    """The eval items with the base model's completion of every prompt-only row (rank 0 generates, then broadcasts),
    what each item adds to report.json's ``eval``, and ``settings.eval_generation`` (None when no row needed one)."""
    from gradian.attribute.generate import complete_prompts, with_completions

    n = sum(e.prompt_only for e in eval_ex)
    if not n:
        return list(eval_ex), [{} for _ in eval_ex], None
    comp = None
    if dist.is_main:
        comp = complete_prompts(
            model, tokenizer, eval_ex, max_new_tokens=max_new_tokens, samples=samples, seed=seed, cut=cut,
            batch_size=batch_size,
        )  # fmt: skip
    comp = dist.broadcast(comp)
    how = f"sampled (seed {seed})" if samples else "greedy"
    items, extra = with_completions(eval_ex, comp, how)
    each = f"{samples} {how} completions" if samples else "a greedy completion"
    until = ", cut where the fine-tune first departs from it" if cut else ""
    notes.append(
        f"{n} eval row(s) had only a prompt: the base model wrote {each} of at most {max_new_tokens} tokens for each"
        f"{until} (report.json eval[].completion, marked generated)"
    )
    left_out = n * max(samples, 1) - sum(len(v) for v in comp.values())
    if left_out:
        notes.append(
            f"{left_out} generated eval completion(s) left out: empty (the base model stopped at once) or nothing "
            "left before a byte token that forms no character"
        )
    info = {"rows": n, "how": how, "samples": samples, "seed": seed, "max_new_tokens": max_new_tokens, "cut": cut}
    return items, extra, info | {"completions": {str(k): v for k, v in comp.items()}}


def _add_generations(model, tokenizer, res: AttributionResult, eval_fx, cap, max_new_tokens, batch_size) -> None:
    """``regressed[].generations``: the base model's and the fine-tune's greedy continuations of the ``cap`` most
    regressed items."""
    from gradian.attribute.generate import side_by_side

    t = time.perf_counter()
    at = {int(f.index): f for f in eval_fx}
    items = sorted(res.regressed, key=lambda r: -(r.get("delta") or 0.0))[:cap]
    gens = side_by_side(model, tokenizer, [at[int(r["index"])] for r in items], max_new_tokens=max_new_tokens,
                        batch_size=batch_size)  # fmt: skip
    for r, g in zip(items, gens, strict=True):
        if g is not None:
            r["generations"] = g
    res.settings["generations"] = {"items": sum(g is not None for g in gens), "max_new_tokens": max_new_tokens}
    res.timings["generations_s"] = time.perf_counter() - t


def _sampled_fisher(model, blocks, train_fx, src, pad_id, batch_size, seed, dist):
    """``--fisher true``: this rank's rows at labels sampled from the model, and their covariance sums over all
    ranks (:mod:`gradian.attribute.fisher`)."""
    from gradian.attribute.fisher import SampledSource
    from gradian.attribute.plan import cache_bytes

    rows = _Rows(train_fx, src.positions.tolist())
    fsrc = SampledSource(model, blocks, rows, src.positions, pad_id, batch_size, seed, dist, cache_bytes())
    return fsrc, fsrc.stats().all_reduced(dist)


class _Rows:
    """The rows of ``fx`` at ``positions``, read as they are indexed (``fx`` may be rows on disk)."""

    def __init__(self, fx: Sequence, positions: list[int]) -> None:
        self.fx, self.positions = fx, positions

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i: int):
        return self.fx[self.positions[i]]


def _rank_rows(blocks, n: int, batch_size: int, shard_rows: int | None, dist: Dist) -> int:
    """Training rows this rank computes and stores (its round-robin share of the shards)."""
    shard = shard_size(blocks, batch_size, shard_rows)
    return sum(min((i + 1) * shard, n) - i * shard for i in dist.mine(max(1, -(-n // shard))))


def _memory_plan(blocks, n_rows, n_eval, settings, store_dir, shard_rows, dev, notes) -> None:
    """Estimate store, factor and scoring memory before any pass; note it, and refuse (one line, with a
    ``--proj-dim`` that fits) when it will not fit (:mod:`gradian.attribute.plan`)."""
    from gradian.attribute.plan import check_plan, make_plan

    root = Path(store_dir) if store_dir is not None else None
    stored = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root and root.is_dir() else 0
    plan = make_plan(
        blocks,
        n_rows,
        proj_dim=settings["proj_dim"],
        store_dtype=settings["store_dtype"],
        method=settings["method"],
        out_dir=root,
        device=dev,
        n_queries=max(n_eval, 1),
        batch_size=settings["batch_size"],
        shard_size=shard_rows,
        stored_bytes=stored,
    )
    settings["memory_plan"] = plan.to_json()
    notes.extend(plan.lines())
    check_plan(plan)


def _file_indices(train_fx: Sequence, positions: np.ndarray) -> np.ndarray:
    """Training-file row index of each scored position, without building rows from disk (``TokenizedRows.indices``)."""
    if hasattr(train_fx, "indices"):
        return np.asarray(train_fx.indices)[positions]
    return np.array([int(train_fx[int(i)].index) for i in positions], dtype=np.int64)


def _report_skipped(skipped: list[tuple[int, str]], train_fx: Sequence, settings: dict, notes: list[str]) -> None:
    """Rows with non-finite gradients: listed in ``settings["skipped_rows"]``, a note and a warning."""
    import warnings

    if not skipped:
        return
    settings["skipped_rows"] = [
        {"index": int(train_fx[p].index), "position": int(p), "reason": why} for p, why in skipped
    ]
    shown = ", ".join(str(int(train_fx[p].index)) for p, _ in skipped[:20])
    more = f" and {len(skipped) - 20} more" if len(skipped) > 20 else ""
    msg = (
        f"warning: {len(skipped)} training row(s) with non-finite (NaN/Inf) gradients left out, not scored: "
        f"row {shown}{more} (settings.skipped_rows)"
    )
    notes.append(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=3)


def shard_size(blocks, batch_size: int, shard_rows: int | None = None) -> int:
    """Rows per store shard (:func:`gradian.attribute.plan.shard_rows`): about 256 MiB of fp32 gradients, a multiple
    of the batch size. It does not depend on the number of ranks, so a store is reusable with another world size."""
    from gradian.attribute.plan import shard_rows as rule

    return rule(sum(b.numel for b in blocks), batch_size, shard_rows)


def _training_gradients(
    model, blocks, train_fx, pad_id, batch_size, store_dir, store_parts, settings, progress, notes, shard_rows,
    store_dtype, dist, tag="",
):  # fmt: skip
    """This rank's per-example training gradients as a :class:`GradSource`, the covariance sums over *all* ranks, and
    this rank's skipped rows. Through the resumable, checksummed store when ``store_dir`` is given, else in memory.
    Robustness (see :mod:`gradian.attribute.robust`): OOM halves the batch size, rows with non-finite gradients are
    left out (zeros in the store, not yielded by the source) and returned as ``(position, reason)``."""
    import torch

    from gradian.attribute import engine, robust
    from gradian.attribute.collector import PROJ_SCHEME
    from gradian.attribute.source import MemorySource, StoreSource
    from gradian.attribute.store import GradientStore, data_fingerprint, store_key

    names = [b.name for b in blocks]
    n = len(train_fx)
    shard = shard_size(blocks, batch_size, shard_rows)
    n_shards = max(1, -(-n // shard))
    mine = dist.mine(n_shards)
    rows_of = [(min(i * shard, n), min((i + 1) * shard, n)) for i in range(n_shards)]
    n_mine = sum(rows_of[i][1] - rows_of[i][0] for i in mine)
    with engine.progress_bar("training gradients" + tag, n_mine, progress) as advance:
        state = robust.PassState(batch_size, advance=advance)
        with robust.FaultInjector(model, train_fx, pad_id):
            if store_dir is None:
                G: dict[str, list[torch.Tensor]] = {k: [] for k in names}
                stats = Stats.empty()
                skipped: list[tuple[int, str]] = []
                for i in mine:
                    lo, hi = rows_of[i]
                    ch = robust.gradients(model, blocks, train_fx[lo:hi], pad_id, state, offset=lo)
                    for k in names:
                        G[k].append(ch.G[k])
                    stats.add(ch.A, ch.S, ch.n_tokens, ch.n_examples)
                    skipped += [(lo + p, why) for p, why in ch.skipped]
                positions = [p for i in mine for p in range(*rows_of[i])]
                bad = {p for p, _ in skipped}
                keep = torch.tensor([j for j, p in enumerate(positions) if p not in bad], dtype=torch.long)
                empty = {b.name: torch.zeros(0, *b.shape) for b in blocks}  # a rank with no shards
                Gc = {k: (torch.cat(v) if v else empty[k]).index_select(0, keep) for k, v in G.items()}
                src = MemorySource(Gc, torch.tensor(positions, dtype=torch.long)[keep], dist)
                settings["train_rows_computed"] = n
            else:
                parts = dict(store_parts or {})
                parts |= {
                    "data": data_fingerprint(train_fx),
                    "proj_dim": settings["proj_dim"],
                    "proj_seed": settings["proj_seed"],
                    "proj_scheme": PROJ_SCHEME,
                    "dtype": settings["dtype"],
                    "blocks": [[b.name, list(b.shape)] for b in blocks],
                    "schema": 3,
                }
                meta = {
                    "n_examples": n,
                    "shard_size": shard,
                    "batch_size": batch_size,
                    "dtype": store_dtype,
                    "blocks": [{"name": b.name, "kind": b.kind, "shape": list(b.shape)} for b in blocks],
                    "parts": parts,
                }
                store = GradientStore(Path(store_dir), store_key(parts), meta, shards=mine)
                dist.barrier()  # every rank has opened (and cleared an outdated layout) before any writes
                fresh, computed = _fill_store(model, blocks, train_fx, pad_id, store, state, notes, settings, dist)
                src = StoreSource(store, names, dist)
                stats = src.stats(known=fresh, skip=computed)  # the shards just written are not read back for it
                skipped = store.skipped
    notes.extend(state.notes)
    if state.oom_retries:
        settings["oom_retries"] = state.oom_retries
    return src, stats.all_reduced(dist), skipped


def _fill_store(model, blocks, train_fx, pad_id, store, state, notes, settings, dist) -> tuple[Stats, set[int]]:
    """Compute this rank's shards the store does not hold yet (resume), and say what was reused. Returns the
    covariance sums of the shards it computed, and which those are."""
    from gradian.attribute import robust

    for i, why in store.rejected:
        notes.append(f"gradient store shard {i} not used ({why}); recomputed")
    missing = store.missing()
    n_done = len(store.shards) - len(missing)
    if not missing:
        notes.append(f"reused stored training gradients {store.dir}")
    elif n_done:
        notes.append(
            f"resumed stored training gradients at row {store.resume_from()}: {n_done} of {len(store.shards)} shards "
            f"reused, recomputing shard(s) {', '.join(map(str, missing))} ({store.dir})"
        )
    state.advance(sum(store.rows(i)[1] - store.rows(i)[0] for i in store.shards if i not in missing))
    fresh = Stats.empty()
    for i in missing:
        lo, hi = store.rows(i)
        ch = robust.gradients(model, blocks, train_fx[lo:hi], pad_id, state, offset=lo)
        store.write_shard(i, ch.G, ch.A, ch.S, ch.n_tokens, ch.n_examples, [(lo + p, why) for p, why in ch.skipped])
        fresh.add(ch.A, ch.S, ch.n_tokens, ch.n_examples)
    settings["store"] = str(store.dir)
    computed = sum(store.rows(i)[1] - store.rows(i)[0] for i in missing)
    settings["train_rows_computed"] = int(dist.all_reduce_number(computed))
    return fresh, set(missing)


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


def attribute(
    run: str | Path | None = None,
    *,
    base: str | None = None,
    adapter: str | Path | None = None,
    train: str | Path | None = None,
    eval: str | Path | None = None,  # noqa: A002 - mirrors the CLI flag
    out: str | Path | None = None,
    method: str = "ekfac",
    damping: float | None = None,
    damping_factor: float = 0.1,
    proj_dim: int | None = None,
    proj_seed: int = 0,
    query: str = "regressed",
    weighting: str = "uniform",
    threshold: float = DEFAULT_MIN_DELTA,
    device: str | None = None,
    dtype: str | None = None,
    batch_size: int = 8,
    max_length: int | None = None,
    eval_eos: bool = False,
    tokenizer: str | Path | None = None,
    config: str | Path | None = None,
    trust_remote_code: bool = False,
    top: int = 20,
    progress: bool = False,
    extra_methods: tuple[str, ...] = (),
    store_dtype: str = "auto",
    dist: Dist | None = None,
    checkpoints: str = "last",
    eval_samples: int = EVAL_SAMPLES,
    eval_seed: int = EVAL_SEED,
    eval_cut: bool = EVAL_CUT,
    max_new_tokens: int = MAX_NEW_TOKENS,
    generations: int = SIDE_BY_SIDE,
    token_harm: int = TOKEN_HARM_ROWS,
    loaded: Any = None,
    fisher: str = "empirical",
    fisher_seed: int = 0,
) -> AttributionResult:
    """Attribute a fine-tune's regressions to its training rows. Files are found as `gradian attribute` finds them
    (``run`` dir plus explicit paths); writes ``<out>/report.json`` and the gradient store when ``out`` is given.

    Under torchrun (``WORLD_SIZE > 1``) it joins the process group (``dist`` defaults to :func:`gradian.dist.from_env`)
    and only rank 0 returns a full result and writes ``report.json``. ``checkpoints``: ``last`` (the adapter as
    found), ``all`` or a list of checkpoint-* steps/dirs combined with learning-rate weights
    (:mod:`gradian.run.checkpoints`). With ``out``, the training rows are tokenized into ``<out>/tokens`` and read
    from there (memory-mapped), so RAM does not grow with the training file.

    Eval rows with only a prompt get the base model's completion (greedy, or ``eval_samples`` sampled ones seeded by
    ``eval_seed``; at most ``max_new_tokens``; with ``eval_cut`` cut after the first token where the fine-tune's
    most likely next token differs from the base model's); the ``generations`` most regressed items get the base
    model's and the fine-tune's greedy continuation; the ``token_harm`` top rows get their harm split over their
    label tokens (:mod:`gradian.attribute.generate`, :mod:`gradian.attribute.tokens`)."""
    from gradian.attribute.loading import load
    from gradian.attribute.store import adapter_fingerprint, base_fingerprint
    from gradian.data import format_examples, load_examples
    from gradian.dist import device_for, from_env
    from gradian.run.loaded import load_run, packing_refusal

    check_options(method, weighting, store_dtype, fisher)
    _check_generation_options(eval_samples, max_new_tokens, generations, token_harm)
    if out is not None:
        check_out_dir(out)

    if loaded is None:  # a gradian.run.loaded.LoadedRun the caller read already (the pipeline shares it)
        loaded = load_run(run, adapter=adapter, base=base, train=train, eval=eval, tokenizer=tokenizer, config=config,
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
    if max_length is not None:
        fs = dataclasses.replace(fs, max_length=max_length)
    choices, ck_notes = [], []
    if checkpoints and checkpoints != "last":  # checked before the model loads: a bad spec fails in a second
        from gradian.run.checkpoints import select_checkpoints

        choices, ck_notes = select_checkpoints(art, checkpoints)
    dist = dist or from_env(device)
    lm = load(
        art.base,
        art.adapter_dir,
        device=device_for(dist, device),
        dtype=dtype,
        trust_remote_code=trust_remote_code,
        tokenizer_dir=art.tokenizer_dir,
    )
    notes = list(lm.notes)
    t_gen = time.perf_counter()
    eval_ex, eval_extra, gen_info = _complete_eval(
        lm.model, lm.tokenizer, load_examples(art.eval_file, prompt_only=True, text_field=fs.text_field),
        max_new_tokens=max_new_tokens,
        samples=eval_samples, seed=eval_seed, cut=eval_cut, batch_size=batch_size, dist=dist, notes=notes,
    )  # fmt: skip
    t_gen = time.perf_counter() - t_gen
    eval_fx = format_examples(eval_ex, lm.tokenizer, dataclasses.replace(fs, add_eos=eval_eos))
    train_fx, train_ids, n_dropped = _training_rows(art.train_file, lm.tokenizer, fs, out, dist)
    if n_dropped:
        notes.append(f"{n_dropped} training rows the trainer would drop are not scored")
    from gradian.attribute.engine import pad_id_of

    base_fp = base_fingerprint(lm.base)
    parts = {"base": base_fp, "adapter": adapter_fingerprint(lm.adapter_dir)}
    states = None
    if choices:
        notes += ck_notes
        states = [
            AdapterState(
                c.path.name if c.step is None else f"step {c.step}",
                c.weight,
                c.path,
                {"base": base_fp, "adapter": adapter_fingerprint(c.path)},
            )
            for c in choices
        ]
        notes.append(
            "combined over checkpoints (learning-rate weights): "
            + ", ".join(f"{c.path.name} {c.weight:.3f}" for c in choices)
            + f"; {choices[-1].how}"
        )
    res = run_attribution(
        lm.model,
        train_fx,
        eval_fx,
        pad_id=pad_id_of(lm.tokenizer),
        method=method,
        damping=damping,
        damping_factor=damping_factor,
        proj_dim=proj_dim,
        proj_seed=proj_seed,
        query=query,
        weighting=weighting,
        threshold=threshold,
        batch_size=batch_size,
        store_dir=Path(out) / "grads" if out else None,
        store_parts=parts,
        train_ids=train_ids,
        eval_ids=[e.id for e in eval_ex],
        top=top,
        progress=progress,
        notes=notes,
        extra_methods=extra_methods,
        store_dtype=store_dtype,
        dist=dist,
        states=states,
        tokenizer=lm.tokenizer,
        token_harm=token_harm,
        fisher=fisher,
        fisher_seed=fisher_seed,
    )
    res.eval_examples = eval_ex
    for item, extra in zip(res.eval_items, eval_extra, strict=True):
        item.update(extra)
    if gen_info:
        res.settings["eval_generation"] = gen_info
        res.timings["eval_generation_s"] = t_gen
    if generations and res.regressed and dist.is_main:
        if states:  # the side-by-side shows the adapter as found, not the last checkpoint scored
            from gradian.attribute.loading import load_adapter_weights

            load_adapter_weights(lm.model, lm.adapter_dir)
        _add_generations(lm.model, lm.tokenizer, res, eval_fx, generations, max_new_tokens, batch_size)
    res.settings |= {
        "base": lm.base,
        "adapter": str(lm.adapter_dir),
        "train": str(art.train_file),
        "eval": str(art.eval_file),
        "format": {k: v for k, v in dataclasses.asdict(fs).items() if k != "sources"},
        "eval_eos": eval_eos,
    }
    if out and dist.is_main:
        res.write(out)
    return res
