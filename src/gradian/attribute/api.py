"""`gradian.attribute`: which training rows made a LoRA fine-tune worse on eval items the base model did well on.

Pipeline (one pass over the training data):

1. Score every eval item's completion NLL (mean per completion token, completion as written: no EOS appended unless
   ``eval_eos``) under the base model (adapter disabled) and the fine-tune. An item *regressed* when
   ``finetuned - base > threshold`` (default 0.05 nats/token, i.e. its per-token perplexity rose by more than 5%;
   well above fp32/bf16 noise and below the shifts a harmful fine-tune causes).
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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gradian.errors import GradianError

AUTO_PROJECT_ABOVE = 1 << 16  # LoRA parameters per example; above this, project by default
AUTO_PROJ_DIM = 32


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


def select_queries(
    base_nll: np.ndarray, ft_nll: np.ndarray, threshold: float, query: str
) -> tuple[list[int], np.ndarray]:
    """Indices of the query items and their regression sizes (finetuned - base)."""
    delta = ft_nll - base_nll
    ok = np.isfinite(delta)
    if query == "all":
        idx = [int(i) for i in np.flatnonzero(ok)]
    elif query == "regressed":
        idx = [int(i) for i in np.flatnonzero(ok & (delta > threshold))]
    else:
        raise GradianError(f"unknown --query {query!r}", fix="use regressed or all")
    return idx, delta


def run_attribution(
    model,
    train_fx: list,
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
    threshold: float = 0.05,
    batch_size: int = 8,
    store_dir: str | Path | None = None,
    store_parts: dict[str, Any] | None = None,
    train_ids: list[str | None] | None = None,
    eval_ids: list[str | None] | None = None,
    top: int = 20,
    progress: bool = False,
    notes: list[str] | None = None,
    extra_methods: tuple[str, ...] = (),
    shard_rows: int | None = None,
) -> AttributionResult:
    """The core on already formatted rows and a loaded PEFT model (tests and the file-level API both use it).

    ``extra_methods`` computes other methods' scores from the same stored gradients (``result.settings['also']``)."""
    import torch

    from gradian.attribute import engine
    from gradian.attribute.collector import attach_projections, find_lora_blocks
    from gradian.attribute.scores import METHODS, gradient_embedding, harm_scores, precondition

    if method not in METHODS:
        raise GradianError(f"unknown --method {method!r}", fix="use one of " + ", ".join(METHODS))
    if weighting not in ("uniform", "regression"):
        raise GradianError(f"unknown weighting {weighting!r}", fix="use uniform or regression")
    notes = list(notes or [])
    timings: dict[str, float] = {}
    train_ids = train_ids or [None] * len(train_fx)
    eval_ids = eval_ids or [None] * len(eval_fx)
    blocks = find_lora_blocks(model)
    if not blocks:
        raise GradianError("the adapter has no Linear LoRA layers to attribute")
    n_params = sum(b.d_out * b.d_in for b in blocks)
    if proj_dim is None:
        proj_dim = AUTO_PROJ_DIM if n_params > AUTO_PROJECT_ABOVE else 0
    attach_projections(blocks, proj_dim, proj_seed)
    dev = next(model.parameters()).device
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
        "fisher": "empirical",
        "loss": "sum over label tokens per training row; mean per completion token per eval item",
        "n_train": len(train_fx),
        "n_eval": len(eval_fx),
        "n_blocks": len(blocks),
        "lora_params": n_params,
        "stored_floats_per_row": sum(b.numel for b in blocks),
        "device": str(dev),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
    }

    # 1. regression detection
    t = time.perf_counter()
    base_nll = engine.completion_nll(
        model, eval_fx, pad_id, batch_size=batch_size, adapter=False, progress=progress, description="eval NLL (base)"
    )
    ft_nll = engine.completion_nll(
        model, eval_fx, pad_id, batch_size=batch_size, adapter=True, progress=progress, description="eval NLL (tuned)"
    )
    timings["eval_nll_s"] = time.perf_counter() - t
    q_idx, delta = select_queries(base_nll, ft_nll, threshold, query)
    eval_items = [
        {
            "index": int(eval_fx[i].index),
            "id": eval_ids[i],
            "base_nll": _f(base_nll[i]),
            "finetuned_nll": _f(ft_nll[i]),
            "delta": _f(delta[i]),
            "regressed": bool(np.isfinite(delta[i]) and delta[i] > threshold),
        }
        for i in range(len(eval_fx))
    ]
    regressed = [e for e in eval_items if e["regressed"]]
    if not q_idx:
        msg = (
            f"no eval item regressed (finetuned - base completion NLL > {threshold} nats/token) in {len(eval_fx)} items"
            if query == "regressed"
            else "no eval item has completion tokens"
        )
        notes.append(msg)
        return AttributionResult(method, settings, [], regressed, eval_items, [], notes, timings, no_regression=True)

    # 2. training gradients (one pass, stored)
    t = time.perf_counter()
    G, stats = _training_gradients(
        model, blocks, train_fx, pad_id, batch_size, store_dir, store_parts, settings, progress, notes, shard_rows
    )
    timings["train_pass_s"] = time.perf_counter() - t
    if settings.get("skipped_rows"):  # non-finite gradients: not scored (listed in settings.skipped_rows + notes)
        keep = sorted(set(range(len(train_fx))) - {s["position"] for s in settings["skipped_rows"]})
        G = {k: v[keep] for k, v in G.items()}
        train_fx, train_ids = [train_fx[i] for i in keep], [train_ids[i] for i in keep]

    # 3. query gradients
    t = time.perf_counter()
    q_fx = [eval_fx[i] for i in q_idx]
    V, _ = engine.gradient_pass(
        model,
        blocks,
        q_fx,
        pad_id,
        batch_size=batch_size,
        mean_per_token=True,
        progress=progress,
        description="query gradients",
    )
    w = np.ones(len(q_idx)) if weighting == "uniform" else np.clip(delta[q_idx], 0, None)
    if weighting == "regression" and w.sum() == 0:
        w = np.ones(len(q_idx))
    wt = torch.tensor(w, dtype=torch.float64)
    Vall = {k: torch.cat([v.double(), torch.einsum("m,moi->oi", wt, v.double())[None]]) for k, v in V.items()}
    timings["query_s"] = time.perf_counter() - t

    # 4. scores
    t = time.perf_counter()
    also: dict[str, list[float]] = {}
    harm = None
    eig = None
    for m in (method, *[x for x in extra_methods if x != method]):
        pre = precondition(m, Vall, G, stats, damping=damping, damping_factor=damping_factor, device=dev)
        h = harm_scores(m, pre.X, G).numpy()
        if m == method:
            harm, eig = h, pre.eig
            settings["damping_used"] = {"mean": float(np.mean(list(pre.damping.values())))} if pre.damping else None
        else:
            also[m] = [float(x) for x in h[-1]]
    assert harm is not None
    timings["scores_s"] = time.perf_counter() - t
    t = time.perf_counter()
    emb = gradient_embedding(method, G, stats, eig=eig, damping_factor=damping_factor, seed=proj_seed).numpy()
    timings["embedding_s"] = time.perf_counter() - t
    if also:
        settings["also"] = also

    total = harm[-1]
    per_item = harm[:-1]
    order = np.argsort(-total, kind="stable")
    examples = [
        {"index": int(train_fx[i].index), "id": train_ids[i], "score": float(total[i]), "rank": r + 1}
        for r, i in enumerate(order)
    ]
    contributions = []
    for i in order[:top]:
        contributions.append(
            {
                "index": int(train_fx[i].index),
                "id": train_ids[i],
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
        embedding_index=[int(f.index) for f in train_fx],
    )


def _training_gradients(
    model, blocks, train_fx, pad_id, batch_size, store_dir, store_parts, settings, progress, notes, shard_rows=None
):
    """Per-example training gradients and covariance sums, through the resumable, checksummed store when
    ``store_dir`` is given. Robustness (see :mod:`gradian.attribute.robust`): OOM halves the batch size, rows with
    non-finite gradients are left out and listed in ``settings["skipped_rows"]`` (zeros in G; the caller drops them)."""
    import os
    import warnings

    from gradian.attribute import engine, robust
    from gradian.attribute.scores import Stats

    names = [b.name for b in blocks]
    n = len(train_fx)
    with engine.progress_bar("training gradients", n, progress) as advance:
        state = robust.PassState(batch_size, advance=advance)
        with robust.FaultInjector(model, train_fx, pad_id):
            if store_dir is None:
                ch = robust.gradients(model, blocks, train_fx, pad_id, state)
                G, stats, skipped = ch.G, Stats(ch.A, ch.S, ch.n_tokens, ch.n_examples), ch.skipped
                settings["train_rows_computed"] = n
            else:
                G, stats, skipped = _stored_gradients(
                    model, blocks, names, train_fx, pad_id, batch_size, store_dir, store_parts, settings, notes,
                    shard_rows or int(os.environ.get("GRADIAN_SHARD_ROWS", "0") or 0), state,
                )  # fmt: skip
    notes.extend(state.notes)
    if state.oom_retries:
        settings["oom_retries"] = state.oom_retries
    if skipped:
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
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
    return G, stats


def _stored_gradients(
    model, blocks, names, train_fx, pad_id, batch_size, store_dir, store_parts, settings, notes, shard_rows, state
):
    from gradian.attribute import robust
    from gradian.attribute.scores import Stats
    from gradian.attribute.store import GradientStore, data_fingerprint, store_key

    per_row_bytes = 4 * sum(b.numel for b in blocks)
    shard = max(1, min(4096, (256 << 20) // max(per_row_bytes, 1)) // batch_size) * batch_size
    if shard_rows:
        shard = max(1, shard_rows // batch_size) * batch_size
    parts = dict(store_parts or {})
    parts |= {
        "data": data_fingerprint(train_fx),
        "proj_dim": settings["proj_dim"],
        "proj_seed": settings["proj_seed"],
        "dtype": settings["dtype"],
        "blocks": [[b.name, list(b.shape)] for b in blocks],
        "schema": 2,
    }
    key = store_key(parts)
    meta = {
        "n_examples": len(train_fx),
        "shard_size": shard,
        "batch_size": batch_size,
        "blocks": [{"name": b.name, "kind": b.kind, "shape": list(b.shape)} for b in blocks],
        "parts": parts,
    }
    store = GradientStore(Path(store_dir), key, meta)
    for i, why in store.rejected:
        notes.append(f"gradient store shard {i} not used ({why}); recomputed")
    missing = store.missing()
    n_done = store.n_shards - len(missing)
    if not missing:
        notes.append(f"reused stored training gradients {store.dir}")
    elif n_done:
        notes.append(
            f"resumed stored training gradients at row {store.resume_from()}: {n_done} of {store.n_shards} shards "
            f"reused, recomputing shard(s) "
            f"{', '.join(map(str, missing))} ({store.dir})"
        )
    computed = 0
    state.advance(len(train_fx) - sum(store.rows(i)[1] - store.rows(i)[0] for i in missing))
    for i in missing:
        lo, hi = store.rows(i)
        ch = robust.gradients(model, blocks, train_fx[lo:hi], pad_id, state, offset=lo)
        store.write_shard(i, ch.G, ch.A, ch.S, ch.n_tokens, ch.n_examples, [(lo + p, why) for p, why in ch.skipped])
        computed += hi - lo
    loaded = store.load(names)
    settings["store"] = str(store.dir)
    settings["train_rows_computed"] = computed
    return loaded.G, Stats(loaded.A_sum, loaded.S_sum, loaded.n_tokens, loaded.n_examples), store.skipped


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
    threshold: float = 0.05,
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
) -> AttributionResult:
    """Attribute a fine-tune's regressions to its training rows. Files are found as `gradian attribute` finds them
    (``run`` dir plus explicit paths); writes ``<out>/report.json`` and the gradient store when ``out`` is given."""
    from gradian.attribute.loading import load
    from gradian.attribute.store import adapter_fingerprint, base_fingerprint
    from gradian.data import format_examples, load_examples
    from gradian.run import discover, format_settings, load_setup

    art = discover(run, adapter=adapter, base=base, train=train, eval=eval, tokenizer=tokenizer, config=config)
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
    setup = load_setup(art)
    fs = format_settings(setup)
    if max_length is not None:
        fs = dataclasses.replace(fs, max_length=max_length)
    lm = load(
        art.base,
        art.adapter_dir,
        device=device,
        dtype=dtype,
        trust_remote_code=trust_remote_code,
        tokenizer_dir=art.tokenizer_dir,
    )
    notes = list(lm.notes)
    train_ex = load_examples(art.train_file)
    eval_ex = load_examples(art.eval_file)
    train_fx = format_examples(train_ex, lm.tokenizer, fs)
    eval_fx = format_examples(eval_ex, lm.tokenizer, dataclasses.replace(fs, add_eos=eval_eos))
    keep = [i for i, f in enumerate(train_fx) if not f.dropped]
    if len(keep) < len(train_fx):
        notes.append(f"{len(train_fx) - len(keep)} training rows the trainer would drop are not scored")
    train_fx = [train_fx[i] for i in keep]
    train_ids = [train_ex[i].id for i in keep]
    from gradian.attribute.engine import pad_id_of

    parts = {"base": base_fingerprint(lm.base), "adapter": adapter_fingerprint(lm.adapter_dir)}
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
    )
    res.settings |= {
        "base": lm.base,
        "adapter": str(lm.adapter_dir),
        "train": str(art.train_file),
        "eval": str(art.eval_file),
        "format": {k: v for k, v in dataclasses.asdict(fs).items() if k != "sources"},
        "eval_eos": eval_eos,
    }
    if out:
        res.write(out)
    return res
