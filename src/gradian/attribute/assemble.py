"""The last stage of an attribution: the clustering embedding, rank 0 gathering every rank's rows, the ranking, the
split by regressed item, and the top rows' token harm, into one :class:`AttributionResult`."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradian.attribute import tokens
from gradian.attribute.result import AttributionResult, RowIds
from gradian.attribute.stages import Context, Regressions, Scored
from gradian.attribute.token_profiles import (
    KeyOf,
    ProfileNeed,
    TokenProfiles,
    count_holders,
    harm_tokens,
    label_ids,
    row_keys,
    row_profile,
)


@dataclass
class Gathered:
    """Every rank's rows on rank 0, in training-file order of their positions."""

    positions: np.ndarray  # positions in train_fx
    harm: np.ndarray  # the main method: (query items + 1, rows); the last row is the weighted total
    embeddings: np.ndarray
    also: dict[str, list[float]]  # the other methods' totals
    skipped: list[tuple[int, str]]
    rank_notes: list[str]


def assemble(
    ctx: Context,
    reg: Regressions,
    scored: Scored,
    ids: RowIds,
    *,
    n_states: int,
    notes: list[str],
    timings: dict[str, float],
    settings: dict[str, Any],
    tokens: Any = None,
) -> AttributionResult:
    """Gather, rank and build the result (``settings``, ``notes`` and ``timings`` so far are extended here), then
    the token pass (:func:`_token_pass`; ``tokens``: a :class:`gradian.attribute.core.TokenPass`, None: no pass)."""
    o = ctx.options
    local_pos, local_harm, local_emb = _local_rows(ctx, scored, n_states, timings)
    g = _gather(ctx, (local_pos, local_harm, local_emb, sorted(scored.skipped.items()), notes))
    top = _ranked(ctx, reg, ids, g, notes, timings, settings) if g is not None else None
    if tokens is not None:  # every rank takes part: the token pass is split over the ranks
        _token_pass(ctx, scored.query_direction, top, tokens.tokenizer, tokens.wants_profiles)
    if top is None:
        return AttributionResult(o.method, settings, [], reg.regressed, reg.eval_items, [], notes, timings,
                                 partial=True)  # fmt: skip
    return top.res


@dataclass
class _Ranked:
    """Rank 0's result and the ranking the token pass reads (indices into the gathered positions)."""

    res: AttributionResult
    positions: np.ndarray  # positions in train_fx
    order: np.ndarray  # most harmful first
    total: np.ndarray
    file_index: np.ndarray


def _ranked(ctx: Context, reg: Regressions, ids: RowIds, g: Gathered, notes: list[str], timings: dict[str, float],
            settings: dict[str, Any]) -> _Ranked:  # fmt: skip
    """Rank 0: the gathered rows ranked by harm, with the top rows' split by regressed item (``settings`` and
    ``notes`` are extended; the result holds them and the timings)."""
    o = ctx.options
    if g.also:
        settings["also"] = g.also
    notes += g.rank_notes
    settings |= _report_skipped(g.skipped, ctx.train_fx, notes)
    file_index = _file_indices(ctx.train_fx, g.positions)
    rows_ids = [ids.train[int(i)] for i in g.positions]
    total, per_item = g.harm[-1], g.harm[:-1]
    order = np.argsort(-total, kind="stable")
    examples = [
        {"index": int(file_index[i]), "id": rows_ids[i], "score": float(total[i]), "rank": r + 1}
        for r, i in enumerate(order)
    ]
    contributions = [_contribution(ctx, reg, ids, int(file_index[i]), rows_ids[i], total[i], per_item[:, i])
                     for i in order[: o.top]]  # fmt: skip
    settings["query_items"] = [int(ctx.eval_fx[q].index) for q in reg.query]
    res = AttributionResult(o.method, settings, examples, reg.regressed, reg.eval_items, contributions, notes,
                            timings, item_scores=per_item, scores=total, embeddings=g.embeddings,
                            embedding_index=[int(i) for i in file_index])  # fmt: skip
    return _Ranked(res, g.positions, order, total, file_index)


def _token_pass(ctx: Context, xq: dict[str, Any] | None, top: _Ranked | None, tokenizer: Any,
                wants_profiles: Callable[[AttributionResult], ProfileNeed | None] | None) -> None:  # fmt: skip
    """The top ``token_harm`` rows' harm split over their label tokens (into their examples) and, when
    ``wants_profiles`` says what the verdict will read (a :class:`ProfileNeed`), the token profiles of the rows of
    the top ``token_profiles`` share that can move a group: the groups' rows, then the rows that hold the groups'
    harm tokens (every row of the share with ``token_profiles_always``). Forward-mode passes split over the torchrun
    ranks; rank 0 holds the ranking, ``top``, decides what each pass takes and gathers the rows."""
    o = ctx.options
    if top is None:  # another rank: its share of both passes
        _split_pass(ctx, xq, None)
        _split_pass(ctx, xq, None)
        return
    t = time.perf_counter()
    res, n_rows = top.res, len(top.order)
    need = wants_profiles(res) if wants_profiles is not None and not o.token_profiles_always else None
    n = math.ceil(o.token_profiles * n_rows) if o.token_profiles_always or need is not None else 0
    in_groups = {r for g in need.groups for r in g} if need is not None else set()
    first = [j for j in range(max(min(o.token_harm, n_rows), n))
             if j < o.token_harm or need is None or int(top.file_index[top.order[j]]) in in_groups]  # fmt: skip
    done = _split_pass(ctx, xq, _plan(top, first))
    harms: dict[int, np.ndarray] = {}
    fxs: dict[int, Any] = {}
    second: list[int] = []
    keys = None
    rows: dict[int, tuple[float, dict[str, float]]] = {}  # training row -> profile, taken once per row
    key_of = KeyOf(lambda i: tokens.token_text(tokenizer, i))
    if isinstance(done, tuple):
        harms, fxs = dict(zip(first, done[0], strict=True)), dict(zip(first, done[1], strict=True))
        if need is not None and n:  # then the rows that hold a group's harm tokens
            rows = _profile_rows(key_of, top, [j for j in first if j < n], fxs, harms)
            keys = sorted({k for g in need.groups for k in harm_tokens(g, TokenProfiles(rows, {}), need.share)})
            holds = set(keys)
            second = [j for j in range(n) if j not in harms and holds & set(_label_keys(ctx, top, j, key_of))]
    more = _split_pass(ctx, xq, _plan(top, second))
    if isinstance(done, str) or isinstance(more, str):
        res.notes.append(done if isinstance(done, str) else str(more))
        return
    if more is not None:
        harms |= dict(zip(second, more[0], strict=True))
        fxs |= dict(zip(second, more[1], strict=True))
    shown = min(o.token_harm, n_rows)
    for j, e in enumerate(res.examples[:shown]):
        e["token_harm"] = tokens.token_pieces(tokenizer, fxs[j], harms[j])
    res.settings["token_harm_rows"] = shown
    if n:
        rest = range(min(n, n_rows)) if need is None else second  # with token_profiles_always: the whole share
        rows |= _profile_rows(key_of, top, rest, fxs, harms)
        res.token_profiles = _profiles(ctx, key_of, top, rows, keys)
        res.settings["token_profile_rows"] = len(res.token_profiles.rows)
    res.timings["token_harm_s"] = time.perf_counter() - t


def _plan(top: _Ranked | None, ranks: Sequence[int]) -> tuple[list[int], list[float]] | None:
    """What one token pass takes: the train_fx positions and scores of the rows at these ``ranks`` (rank 0)."""
    if top is None:
        return None
    rows = top.order[list(ranks)]
    return [int(p) for p in top.positions[rows]], [float(x) for x in top.total[rows]]


def _label_keys(ctx: Context, top: _Ranked, j: int, key_of: KeyOf) -> list[str]:
    """The token keys of the label tokens of the row at rank ``j``."""
    return row_keys(label_ids(ctx.train_fx[int(top.positions[top.order[j]])]).tolist(), key_of)


def _split_pass(ctx: Context, xq: dict[str, Any] | None, plan: tuple[list[int], list[float]] | None
                ) -> tuple[list[np.ndarray], list[Any]] | str | None:  # fmt: skip
    """One forward-mode pass over rank 0's ``plan``, split over the ranks: on rank 0 the rows' token harms and
    formatted rows in plan order, or the note saying why they could not be computed; None on the other ranks."""
    positions, scores = ctx.dist.broadcast(plan)
    mine = range(ctx.dist.rank, len(positions), ctx.dist.world)
    fxs = [ctx.train_fx[positions[i]] for i in mine]
    my_notes: list[str] = []
    harms = _token_harms(ctx, xq, fxs, np.array([scores[i] for i in mine]), my_notes) if fxs else []
    parts = ctx.dist.gather((harms, my_notes)) if positions else [(harms, my_notes)]
    if parts is None:
        return None
    if any(h is None for h, _ in parts):
        return next(m for h, ms in parts if h is None for m in ms)
    got = [h for h, _ in parts if h is not None]
    split = [got[i % len(got)][i // len(got)] for i in range(len(positions))]  # row i went to rank i % world
    own = dict(zip(mine, fxs, strict=True))  # rank 0 reads only the rows the other ranks split
    return split, [own[i] if i in own else ctx.train_fx[p] for i, p in enumerate(positions)]


def _local_rows(ctx: Context, scored: Scored, n_states: int, timings: dict[str, float]):
    """This rank's positions, harm per method and clustering embedding (the newest state's gradient geometry)."""
    from gradian.attribute.scores import gradient_embedding

    assert scored.last is not None and scored.seen is not None
    o, src = ctx.options, scored.last.source
    t = time.perf_counter()
    shapes = {b.name: b.shape for b in ctx.blocks}
    emb = gradient_embedding(
        o.method, src, scored.last.stats, eig=scored.eig, rotated=scored.rotated, damping_factor=o.damping_factor,
        seed=o.proj_seed, shapes=shapes, device=ctx.score_device,
    ).numpy()  # fmt: skip
    scored.rotated = None  # the rotated rows are not needed past here
    timings["embedding_s"] = time.perf_counter() - t
    positions = src.positions.numpy()
    if n_states == 1:
        return positions, scored.harm, emb
    kept = np.flatnonzero(scored.seen == n_states)  # rows scored at every state
    inv = np.full(len(ctx.train_fx), -1)
    inv[positions] = np.arange(len(positions))
    return kept, {m: a[:, kept] for m, a in scored.harm.items()}, emb[inv[kept]]


def _gather(ctx: Context, local: tuple) -> Gathered | None:
    """Rank 0 gathers every rank's rows (None on the other ranks)."""
    method = ctx.options.method
    pos_, harm_, emb_, skipped_, notes_ = local
    parts = ctx.dist.gather((pos_, harm_, emb_, skipped_, notes_ if not ctx.dist.is_main else []))
    if not ctx.dist.is_main:
        return None
    assert parts is not None
    pos = np.concatenate([p[0] for p in parts])
    order_pos = np.argsort(pos, kind="stable")
    harm = np.concatenate([p[1][method] for p in parts], axis=1)[:, order_pos]
    emb = np.concatenate([p[2] for p in parts])[order_pos]
    also = {
        m: [float(x) for x in np.concatenate([p[1][m][-1] for p in parts])[order_pos]] for m in harm_ if m != method
    }
    rank_notes = [f"rank {r}: {x}" for r, p in enumerate(parts[1:], start=1) for x in p[4]]
    return Gathered(pos[order_pos], harm, emb, also, sorted(x for p in parts for x in p[3]), rank_notes)


def _contribution(ctx: Context, reg: Regressions, ids: RowIds, index: int, row_id: Any, total: float,
                  per_item: np.ndarray) -> dict[str, Any]:  # fmt: skip
    """One top row's harm split over the query items."""
    return {
        "index": index,
        "id": row_id,
        "score": float(total),
        "per_item": [
            {
                "eval_index": int(ctx.eval_fx[q].index),
                "eval_id": ids.eval[q],
                "weight": float(reg.weights[j]),
                "score": float(per_item[j]),
            }
            for j, q in enumerate(reg.query)
        ],
    }


def _token_harms(ctx: Context, xq: dict[str, Any] | None, fxs: Sequence[Any], scores: np.ndarray,
                 notes: list[str]) -> list[np.ndarray] | None:  # fmt: skip
    """Each row's harm split over its label tokens (formatted rows ``fxs``, with ``scores``), or None (with a note)
    when it could not be computed."""
    from gradian.attribute.methods import method_of

    normalized = method_of(ctx.options.method).normalized
    if xq is None:
        notes.append("token harm not computed: it needs one adapter state (not --checkpoints)")
        return None
    try:
        direction = tokens.lifted_direction(ctx.model, ctx.blocks, xq)
        harms = tokens.token_harm(ctx.model, direction, fxs, ctx.pad_id, ctx.options.batch_size)
    except (RuntimeError, NotImplementedError) as err:  # e.g. an attention kernel without a forward-mode derivative
        notes.append(f"token harm not computed: {str(err).splitlines()[0][:200]}")
        return None
    if normalized:  # the row's normalisation: a factor shared by its tokens
        harms = [h * (score / h.sum()) if h.sum() != 0 else h for h, score in zip(harms, scores, strict=True)]
    return harms


def _profile_rows(key_of: KeyOf, top: _Ranked, ranks: Sequence[int], fxs: dict[int, Any], harms: dict[int, np.ndarray]
                  ) -> dict[int, tuple[float, dict[str, float]]]:  # fmt: skip
    """Training-file row -> profile, for the rows at these ``ranks`` (formatted rows ``fxs`` and token ``harms`` by
    rank)."""
    return {
        int(top.file_index[top.order[j]]): row_profile(row_keys(label_ids(fxs[j]).tolist(), key_of), harms[j])
        for j in ranks
    }


def _profiles(ctx: Context, key_of: KeyOf, top: _Ranked, rows: dict[int, tuple[float, dict[str, float]]],
              keys: list[str] | None) -> TokenProfiles:  # fmt: skip
    """The token profiles of ``rows`` (:func:`_profile_rows`) and how many of the scored rows hold each of their
    keys; ``keys``: the harm tokens they were taken for."""
    held = {k for _, ks in rows.values() for k in ks}
    holders = count_holders((ctx.train_fx[int(p)] for p in top.positions), key_of, held) if held else {}
    return TokenProfiles(rows, holders, keys)


def _file_indices(train_fx: Sequence, positions: np.ndarray) -> np.ndarray:
    """Training-file row index of each scored position, without building rows from disk (``TokenizedRows.indices``)."""
    if hasattr(train_fx, "indices"):
        return np.asarray(train_fx.indices)[positions]
    return np.array([int(train_fx[int(i)].index) for i in positions], dtype=np.int64)


def _report_skipped(skipped: list[tuple[int, str]], train_fx: Sequence, notes: list[str]) -> dict[str, Any]:
    """Rows with non-finite gradients: ``settings["skipped_rows"]`` (returned), a note and a warning."""
    if not skipped:
        return {}
    rows = [{"index": int(train_fx[p].index), "position": int(p), "reason": why} for p, why in skipped]
    shown = ", ".join(str(int(train_fx[p].index)) for p, _ in skipped[:20])
    more = f" and {len(skipped) - 20} more" if len(skipped) > 20 else ""
    msg = (
        f"warning: {len(skipped)} training row(s) with non-finite (NaN/Inf) gradients left out, not scored: "
        f"row {shown}{more} (settings.skipped_rows)"
    )
    notes.append(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=4)
    return {"skipped_rows": rows}
