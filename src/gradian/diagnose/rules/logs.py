"""Trainer-log rules (L3xx): loss, grad_norm, learning rate and eval_loss curves."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import TypeGuard

from gradian.diagnose.context import DiagnoseContext
from gradian.diagnose.registry import Hit, Params, rule
from gradian.diagnose.types import Fix


def _finite(x: float | None) -> TypeGuard[float]:
    return x is not None and math.isfinite(x)


def _losses(ctx: DiagnoseContext) -> list[tuple[int, float]]:
    return [(p.step, p.loss) for p in ctx.logs.train if _finite(p.loss)]


def _ev(ctx: DiagnoseContext, steps: list[int], **extra) -> dict:
    return {"steps": steps, "source": ctx.logs.source, **extra}


@rule(
    "L301", "nonfinite", "error", needs=("logs",),
    summary="NaN or Inf in loss, grad_norm or eval_loss (NaN in eval only points to rows with no label tokens).",
    why="A non-finite update corrupts the adapter weights; everything after it is garbage even if the loss "
    "recovers.",
    example='"loss": NaN at step 340.',
    fix="Lower the learning rate, use bf16, check for rows with no labels (zero_trainable).",
    seen_in="gemma_pytorch#24",
)  # fmt: skip
def nonfinite(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    bad: dict[str, list[int]] = {}
    for p in ctx.logs.points:
        for k in ("loss", "grad_norm", "eval_loss"):
            v = getattr(p, k)
            if v is not None and not math.isfinite(v):
                bad.setdefault(k, []).append(p.step)
    if not bad:
        return
    steps = sorted({s for v in bad.values() for s in v})
    if set(bad) == {"eval_loss"}:
        yield Hit(
            f"eval_loss is non-finite at steps {steps[:10]}: eval rows with no label tokens (all -100)?",
            evidence=_ev(ctx, steps, fields=bad),
            fix=Fix(text="Drop eval rows whose prompt fills max length (see zero_trainable), or raise it"),
        )
    else:
        yield Hit(
            f"non-finite values {sorted(bad)} from step {steps[0]} ({len(steps)} log points)",
            evidence=_ev(ctx, steps, fields=bad),
            fix=Fix(text="Lower the learning rate, train in bf16, check for zero-label rows", key="learning_rate"),
        )


@rule(
    "L302", "loss_collapse", "error", needs=("logs",),
    thresholds={"floor": (1e-3, "loss at or below this counts as collapsed"), "min_points": (3, "consecutive "
                "collapsed log points needed"), "drop": (0.9, "a single-log relative drop above this fires")},
    summary="Train loss <= 1e-3 for 3 or more logs, or a > 90% drop from one log to the next.",
    why="A loss of ~0 means the model memorised the data, or the labels are trivial (mask bug, leakage, all "
    "padding).",
    example="loss 2.1, 1.8, 0.0004, 0.0002, 0.0001",
    fix="Check the masking and the data; fewer epochs; lower the learning rate.",
    seen_in="LLaMA-Factory#8004",
)  # fmt: skip
def loss_collapse(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    ls = _losses(ctx)
    low = [s for s, v in ls if v <= t.floor]
    run: list[int] = []
    best: list[int] = []
    for s, v in ls:
        run = run + [s] if v <= t.floor else []
        if len(run) > len(best):
            best = run
    if len(best) >= t.min_points:
        yield Hit(
            f"train loss <= {t.floor:g} for {len(best)} consecutive logs from step {best[0]}",
            evidence=_ev(ctx, low),
            fix=Fix(text="Check the loss mask and data for leakage; train fewer epochs"),
        )
        return
    drops = [s2 for (s1, v1), (s2, v2) in zip(ls, ls[1:], strict=False) if v1 > 0.05 and v2 < (1 - t.drop) * v1]
    if drops:
        yield Hit(
            f"train loss drops by more than {t.drop:.0%} in one log at steps {drops[:5]}",
            evidence=_ev(ctx, drops),
            fix=Fix(text="Check for duplicated/leaked rows and the loss mask; lower the learning rate"),
        )


@rule(
    "L303", "grad_zero", "error", needs=("logs",),
    summary="grad_norm is 0 at every log.",
    why="Nothing trains: no gradient reaches the adapter (frozen by mistake, reentrant checkpointing, all labels "
    "masked).",
    example='"grad_norm": 0.0 throughout.',
    fix="Check requires_grad on the LoRA params, use_reentrant=False, and the label mask.",
    seen_in="microsoft/LoRA#120",
)  # fmt: skip
def grad_zero(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    gs = [(p.step, p.grad_norm) for p in ctx.logs.train if p.grad_norm is not None]
    if len(gs) >= 2 and all(g == 0 for _, g in gs):
        yield Hit(
            f"grad_norm is 0 at all {len(gs)} logs",
            evidence=_ev(ctx, [s for s, _ in gs]),
            fix=Fix(
                text="Use non-reentrant checkpointing and check the label mask",
                key="gradient_checkpointing_kwargs",
                value={"use_reentrant": False},
            ),
        )


@rule(
    "L304", "no_learning", "warning", needs=("logs",),
    thresholds={"ratio": (0.95, "last-quartile median over first-quartile median above which it fires"),
                "min_points": (8, "train log points needed")},
    summary="The median loss of the last quarter of logs is > 95% of the first quarter's.",
    why="The adapter is not learning: the learning rate is too low, the gradient does not reach it, or the labels "
    "are noise.",
    example="loss 1.92 ... 1.90 ... 1.91 over 1,000 steps.",
    fix="Raise the learning rate (1e-4 - 2e-4 for LoRA), check the targets and the mask.",
    seen_in="peft#3554",
)  # fmt: skip
def no_learning(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    ls = _losses(ctx)
    if len(ls) < t.min_points:
        return
    q = len(ls) // 4
    first = statistics.median(v for _, v in ls[:q])
    last = statistics.median(v for _, v in ls[-q:])
    if first > 0 and last > t.ratio * first:
        yield Hit(f"loss barely moved: first-quarter median {first:.4g}, last-quarter median {last:.4g}",
                  evidence=_ev(ctx, [ls[0][0], ls[-1][0]], first_median=first, last_median=last,
                               key="learning_rate", value=ctx.setup.learning_rate),
                  fix=Fix(text="Raise the learning rate", key="learning_rate", value=2e-4))  # fmt: skip


@rule(
    "L305", "spikes", "warning", needs=("logs",), tiers="W/E",
    thresholds={"grad_factor": (10.0, "grad_norm over this times its rolling median is a spike"),
                "loss_factor": (2.0, "loss over this times its rolling median, staying up, is a spike"),
                "window": (10, "rolling-median window (log points)"), "error_count": (3, "spikes for an error")},
    summary="grad_norm > 10x its rolling median, or loss > 2x its rolling median and staying there; 3+ spikes is an "
    "error.",
    why="Spikes mean instability (learning rate too high, bad rows, fp16 overflow); each one can undo progress.",
    example="grad_norm 0.4, 0.5, 38.0, 0.6",
    fix="Lower the learning rate, clip gradients (max_grad_norm 1.0), look at the rows in those batches.",
    seen_in="unsloth#5207",
)  # fmt: skip
def spikes(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    tr = ctx.logs.train
    w = int(t.window)
    out: list[int] = []
    gs = [(p.step, p.grad_norm) for p in tr if _finite(p.grad_norm)]
    for i in range(3, len(gs)):
        med = statistics.median(g for _, g in gs[max(0, i - w) : i])
        if med > 0 and gs[i][1] > t.grad_factor * med:
            out.append(gs[i][0])
    ls = _losses(ctx)
    for i in range(3, len(ls) - 1):
        med = statistics.median(v for _, v in ls[max(0, i - w) : i])
        if med > 0 and ls[i][1] > t.loss_factor * med and ls[i + 1][1] > 0.5 * t.loss_factor * med:
            out.append(ls[i][0])
    out = sorted(set(out))
    if out:
        yield Hit(
            f"{len(out)} spike(s) in grad_norm/loss at steps {out[:10]}",
            severity="error" if len(out) >= t.error_count else "warning",
            evidence=_ev(ctx, out),
            fix=Fix(text="Lower the learning rate and clip gradients", key="max_grad_norm", value=1.0),
        )


@rule(
    "L306", "eval_rising", "warning", needs=("logs",),
    thresholds={"rise": (0.05, "relative rise over the eval minimum"), "min_evals": (2, "evals above the minimum")},
    summary="eval_loss > 5% above its minimum for 2+ evals while the train loss keeps falling.",
    why="Classic overfitting: the final adapter is worse than an earlier checkpoint.",
    example="eval_loss 1.20, 1.05, 1.12, 1.19 while train loss 1.1 -> 0.4.",
    fix="Fewer epochs, load_best_model_at_end with early stopping, or use the best checkpoint.",
    seen_in="transformers#22934",
)  # fmt: skip
def eval_rising(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    ev = [(p.step, p.eval_loss) for p in ctx.logs.eval if _finite(p.eval_loss)]
    if len(ev) < 3:
        return
    i_min = min(range(len(ev)), key=lambda i: ev[i][1])
    best_step, best = ev[i_min]
    after = [(s, v) for s, v in ev[i_min + 1 :] if v > (1 + t.rise) * best]
    if len(after) < t.min_evals:
        return
    ls = _losses(ctx)
    before = [v for s, v in ls if s <= best_step]
    later = [v for s, v in ls if s > best_step]
    if before and later and statistics.median(later[-3:]) < before[-1]:
        yield Hit(f"eval_loss rose from {best:.4g} (step {best_step}) to {after[-1][1]:.4g} while train loss fell",
                  evidence=_ev(ctx, [best_step] + [s for s, _ in after], best_step=best_step, best_eval_loss=best),
                  fix=Fix(text=f"Use the checkpoint at step {best_step}; train fewer epochs with early stopping",
                          key="load_best_model_at_end", value=True))  # fmt: skip


@rule(
    "L307", "epoch_staircase", "warning", needs=("logs",),
    thresholds={"drop": (0.2, "relative loss drop at an epoch boundary that counts as a stair")},
    summary="Train loss drops > 20% at each epoch boundary (memorising).",
    why="A step down exactly when the data repeats means the model recognises rows it has seen: it is memorising.",
    example="loss 1.2 through epoch 1, 0.7 through epoch 2, 0.3 through epoch 3.",
    fix="Train fewer epochs; deduplicate; add data.",
    seen_in="alpaca-lora#502",
)  # fmt: skip
def epoch_staircase(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    pts = [(p.step, p.epoch, p.loss) for p in ctx.logs.train if _finite(p.loss) and p.epoch is not None]
    if not pts:
        return
    n_ep = int(math.floor(max(e for _, e, _ in pts) - 1e-9))
    stairs: list[int] = []
    bounds = 0
    for b in range(1, n_ep + 1):
        pre = [v for _, e, v in pts if b - 0.25 <= e < b]
        post = [v for _, e, v in pts if b < e <= b + 0.25]
        if len(pre) < 2 or len(post) < 2:
            continue
        bounds += 1
        a, c = statistics.median(pre), statistics.median(post)
        if a > 0 and c < (1 - t.drop) * a:
            stairs.append(b)
    if bounds and len(stairs) == bounds:
        steps = [next(s for s, e, _ in pts if e > b) for b in stairs]
        yield Hit(
            f"train loss drops > {t.drop:.0%} at every epoch boundary ({stairs}): memorising",
            evidence=_ev(ctx, steps, epochs=stairs, key="num_epochs", value=ctx.setup.num_epochs),
            fix=Fix(text="Train fewer epochs", key="num_epochs", value=max(1, min(stairs))),
        )


@rule(
    "L308", "eval_below_train", "warning", needs=("logs",),
    thresholds={"ratio": (0.8, "eval_loss below this times the train loss counts")},
    summary="eval_loss stays below 0.8x the train loss.",
    why="An eval set easier than train, or containing train rows (leakage): eval numbers overstate quality.",
    example="train loss 1.4, eval_loss 0.6.",
    fix="Check for train/eval overlap and re-split by hash.",
    seen_in="OpenRLHF#1089",
)  # fmt: skip
def eval_below_train(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    ls = _losses(ctx)
    ev = [(p.step, p.eval_loss) for p in ctx.logs.eval if _finite(p.eval_loss)]
    if len(ev) < 2 or not ls:
        return
    below = []
    for s, v in ev:
        near = [lv for ls_, lv in ls if ls_ <= s][-3:] or [ls[0][1]]
        if v < t.ratio * statistics.median(near):
            below.append(s)
    if len(below) == len(ev):
        yield Hit(
            f"eval_loss is below {t.ratio}x the train loss at all {len(ev)} evals",
            evidence=_ev(ctx, below),
            fix=Fix(text="Check train/eval overlap (train_eval_overlap) and re-split"),
        )


@rule(
    "L309", "loss_scale", "warning", needs=("logs",),
    thresholds={"factor": (1.5, "first loss over this times ln(vocab) fires")},
    summary="The first loss is above 1.5 x ln(vocab) (worse than uniform guessing), or the train loss is about "
    "accumulation x eval_loss.",
    why="A loss above chance at step 1 means wrong labels, a wrong tokenizer or untrained embeddings; a loss "
    "scaled by the accumulation steps is the pre-4.46 accumulation bug.",
    example="vocab 32k (ln = 10.4) and a first loss of 19.",
    fix="Check the tokenizer matches the model, the labels, and the transformers version.",
    seen_in="axolotl#2262",
)  # fmt: skip
def loss_scale(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    ls = _losses(ctx)
    if not ls:
        return
    vocab = ctx.vocab_size()
    if vocab and ls[0][1] > t.factor * math.log(vocab):
        yield Hit(
            f"first loss {ls[0][1]:.3g} > {t.factor} x ln(vocab {vocab}) = {t.factor * math.log(vocab):.3g}",
            evidence=_ev(ctx, [ls[0][0]], vocab_size=vocab),
            fix=Fix(text="Check the tokenizer/model pairing and the labels"),
        )
        return
    ga = ctx.setup.gradient_accumulation_steps or 1
    ev = [(p.step, p.eval_loss) for p in ctx.logs.eval if _finite(p.eval_loss)]
    if ga > 1 and ev:
        s, v = ev[-1]
        near = [lv for ls_, lv in ls if ls_ <= s][-3:]
        if near and v > 0 and abs(statistics.median(near) / v - ga) < 0.15 * ga:
            yield Hit(
                f"train loss is about {ga} (accumulation) x eval_loss: the loss is not normalised",
                evidence=_ev(ctx, [s], key="gradient_accumulation_steps", value=ga),
                fix=Fix(text="Upgrade transformers to >= 4.46"),
            )


@rule(
    "L310", "sparse_logs", "info", needs=("logs",),
    thresholds={"min_points": (5, "train log points below which log rules are unreliable")},
    summary="Fewer than 5 train log points.",
    why="The log rules need a curve; set logging_steps so a run logs at least a few dozen points.",
    example="logging_steps 500 on a 1,200-step run.",
    fix="Lower logging_steps.",
)  # fmt: skip
def sparse_logs(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    n = len(ctx.logs.train)
    if n < t.min_points:
        yield Hit(
            f"only {n} train log points",
            evidence=_ev(ctx, [p.step for p in ctx.logs.train]),
            fix=Fix(text="Log more often", key="logging_steps", value=10),
        )


@rule(
    "L311", "lr_schedule_mismatch", "warning", needs=("logs", "setup"),
    thresholds={"tolerance": (0.1, "relative difference between logged peak and configured learning rate")},
    summary="The logged learning rates do not follow the configured peak or schedule.",
    why="The run trained with a different learning rate than the config says (another config file, a CLI "
    "override, a resumed run).",
    example="config learning_rate 2e-4, logged peak 2e-5.",
    fix="Check which config the run really used; pass that one.",
)  # fmt: skip
def lr_schedule_mismatch(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    lrs = [(p.step, p.learning_rate) for p in ctx.logs.train if _finite(p.learning_rate)]
    cfg = ctx.setup.learning_rate
    if len(lrs) < 3 or not cfg:
        return
    peak = max(v for _, v in lrs)
    if peak > (1 + t.tolerance) * cfg or (peak < (1 - t.tolerance) * cfg and len(lrs) >= 5 and lrs[0][1] != 0):
        # warmup may not reach the peak before the first log; only flag clear misses
        if peak < 0.5 * cfg or peak > (1 + t.tolerance) * cfg:
            yield Hit(
                f"logged peak learning rate {peak:.3g} vs configured {cfg:.3g}",
                evidence=_ev(
                    ctx,
                    [s for s, v in lrs if v == peak][:3],
                    key="learning_rate",
                    value=cfg,
                    config_source=ctx.src("learning_rate"),
                    logged_peak=peak,
                ),
            )
            return
    sched = (ctx.setup.scheduler or "").lower()
    if sched.startswith("constant") and "warmup" not in sched:
        tail = [v for _, v in lrs[len(lrs) // 2 :]]
        if tail and min(tail) < 0.5 * max(tail):
            yield Hit(
                f"scheduler {sched} but the logged learning rate decays",
                evidence=_ev(ctx, [lrs[-1][0]], key="lr_scheduler_type", value=sched),
            )
    elif sched in ("linear", "cosine") and lrs[-1][1] > 0.9 * peak and len(lrs) >= 5:
        total = ctx.logs.total_steps or 0
        if total and lrs[-1][0] >= 0.8 * total:
            yield Hit(
                f"scheduler {sched} but the learning rate did not decay by the end",
                evidence=_ev(ctx, [lrs[-1][0]], key="lr_scheduler_type", value=sched),
            )


def _later_checkpoint(ctx: DiagnoseContext, last: int):
    """The newest checkpoint-N beside the one these logs come from, when N > last (else None)."""
    from gradian.run.discovery import checkpoint_step, list_checkpoints

    for src in (ctx.artifacts.log_file, ctx.artifacts.trainer_state, ctx.artifacts.run_dir):
        if src is None:
            continue
        d = Path(src)
        d = d if d.is_dir() else d.parent
        if checkpoint_step(d) is None:
            continue
        later = [c for c in list_checkpoints(d.parent) if (checkpoint_step(c) or 0) > last]
        if later:
            return later[-1]
    return None


@rule(
    "L312", "run_incomplete", "warning", needs=("logs",), tiers="W/I",
    thresholds={"min_share": (0.95, "share of total steps reached below which it fires")},
    summary="The last logged step is well short of the planned total steps (a mid-run checkpoint of a run whose later "
    "checkpoints sit beside it is only noted, as info).",
    why="The run crashed or was stopped: the adapter you are evaluating may be a mid-run checkpoint.",
    example="max_steps 3000, last log at step 1100.",
    fix="Resume from the last checkpoint, or evaluate knowing it is partial.",
)  # fmt: skip
def run_incomplete(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    total = ctx.logs.total_steps
    if not total or not ctx.logs.points:
        return
    last = max(p.step for p in ctx.logs.points)
    if last < t.min_share * total:
        later = _later_checkpoint(ctx, last)
        if later is not None:  # a mid-run checkpoint of a run that went on: the run is not incomplete
            yield Hit(f"these logs are checkpoint-{last}'s (step {last} of {total}); the run went on to {later.name}",
                      severity="info", evidence=_ev(ctx, [last], total_steps=total, later_checkpoint=str(later)),
                      fix=Fix(text=f"Evaluate {later} (or the final adapter) unless you chose this checkpoint on "
                              "purpose"))  # fmt: skip
            return
        yield Hit(
            f"the logs stop at step {last} of {total} ({last / total:.0%})",
            evidence=_ev(ctx, [last], total_steps=total),
            fix=Fix(text="Resume training from the last checkpoint (resume_from_checkpoint)"),
        )


@rule(
    "L313", "lr_zero", "error", needs=("logs",),
    summary="The logged learning rate is 0 at most logs after the first.",
    why="An lr of 0 (scheduler misconfigured, warmup longer than the run, a resumed scheduler at its end) means "
    "nothing is trained.",
    example='"learning_rate": 0.0 throughout.',
    fix="Check the scheduler, warmup and max_steps.",
)  # fmt: skip
def lr_zero(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    lrs = [(p.step, p.learning_rate) for p in ctx.logs.train if p.learning_rate is not None]
    if len(lrs) < 3:
        return
    zero = [s for s, v in lrs[1:] if v == 0]
    if len(zero) > 0.5 * (len(lrs) - 1):
        yield Hit(
            f"learning rate is 0 at {len(zero)} of {len(lrs)} logs",
            evidence=_ev(ctx, zero),
            fix=Fix(text="Check lr_scheduler_type, warmup and max_steps", key="learning_rate"),
        )
