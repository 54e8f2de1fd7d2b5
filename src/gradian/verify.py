"""`gradian verify OUT_DIR`: check an attribution by re-training without the rows it blames.

Attribution is a first-order estimate; the only ground truth is the counterfactual. ``verify`` reads
``OUT_DIR/report.json`` (written by ``gradian attribute``), re-trains the LoRA adapter from the same base, config and
seed with :func:`gradian.train.train_lora`, and re-measures the regressed eval items:

(a) ``drop_flagged``: without the rows the report blames: the verdict's ``drop_rows`` when the report layer ran
    (the positive-harm rows of the culprit clusters), else the top-K rows by harm score (``k``; default 5% of the
    scored rows, at least 1, only rows with positive harm);
(b) ``drop_random``: without the same number of rows drawn at random (seeded by ``random_seed``) from the other
    rows, i.e. the same amount of data removed, none of it blamed;
(c) ``reference`` (when needed): with every row. Needed whenever the re-train cannot be expected to reproduce the
    fine-tune being explained: the run was not trained by ``gradian train`` (its config is mapped from
    TRL/HF/Axolotl/LLaMA-Factory keys, but the trainer differs), or config overrides / another seed were asked
    for. Recovery is then measured against the reference re-train instead of the original adapter, so every
    number compares like with like. Off for a ``gradian train`` run with its own config (on CPU that run is
    deterministic given its seed, so the reference would reproduce the original adapter).

Each eval item's completion NLL (mean nats per completion token) is measured with the same code and formatting as
``gradian attribute`` (:func:`gradian.attribute.engine.completion_nll`), and

    recovered_i = (finetuned_i - retrained_i) / (finetuned_i - base_i)

over the regressed items: 1 = the regression is gone, 0 = unchanged, < 0 = worse. ``recovered_median`` is its median
over the items, the statistic verify judges by: the ratio blows up on items that barely regressed (a gap of 0.02
nats and a re-training wobble of 0.5 give 25), and a median ignores those where a mean is carried by them.
``recovered_mean`` and ``recovered_total`` (the same ratio on the summed NLLs, weighted to the items that regressed
most) are reported beside it for each re-train.

Not every regressed item is the blamed rows' doing: items the fine-tune should not affect drift too, and the
regression rule lets some of them through. So the recovery is also measured on the *driven* items: the regressed
items on which the blamed rows' own per-item harm (item_scores.npy, saved by ``gradian attribute``) is well above
that of random rows of the same size (:mod:`gradian.verdict.driven`). They are chosen before any re-train, from the
attribution alone, so the re-trains test a prediction; the random-rows control is measured on the same items.

Schedule policy: the re-trains keep the original number of *epochs*, so a run with fewer rows takes fewer optimizer
steps (the linear/cosine schedule then spans the same passes over the data, and every kept row is seen exactly as
often as in the original run). A config with ``max_steps`` > 0 is scaled by kept rows / all rows for the same
reason. The alternative, keeping the step count, would train the kept rows for more epochs, and that extra training
would itself move the eval NLL.

Writes ``OUT_DIR/verify.json`` (schema ``gradian.verify/1``, see :func:`verify`) and the re-trained adapters under
``OUT_DIR/verify/<name>/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import random
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from gradian.errors import GradianError
from gradian.numbers import pct
from gradian.options import AttributeOptions, VerifyOptions
from gradian.options.base import split_kwargs
from gradian.options.cli import options_command
from gradian.report.schema import EvalItem, Report
from gradian.verdict.driven import DrivenItems

SCHEMA = "gradian.verify/1"
DEFAULT_TOP_SHARE = 0.05  # top-K fallback: 5% of the scored rows
POLICY = (
    "same epochs as the original run, so fewer optimizer steps when rows are removed (max_steps, if set, is "
    "scaled by kept/all rows); same base, LoRA config, learning-rate schedule and seed"
)

# TrainingSetup fields (gradian.run.setup) -> TrainConfig keys, for runs not trained by `gradian train`.
_SETUP_KEYS = {
    "learning_rate": "lr",
    "num_epochs": "epochs",
    "max_steps": "max_steps",
    "per_device_batch_size": "batch_size",
    "gradient_accumulation_steps": "grad_accum",
    "max_length": "max_length",
    "lora_r": "r",
    "lora_alpha": "alpha",
    "lora_dropout": "dropout",
    "target_modules": "target_modules",
    "use_rslora": "use_rslora",
    "add_eos": "add_eos",
    "scheduler": "lr_scheduler_type",
    "warmup_ratio": "warmup_ratio",
    "gradient_checkpointing": "gradient_checkpointing",
    "seed": "seed",
}


# --- inputs -------------------------------------------------------------------------------------------------------


def read_report(out_dir: str | Path) -> Report:
    """OUT_DIR/report.json, typed; one line when it is missing, unreadable or lacks the paths a re-train needs."""
    path = Path(out_dir) / "report.json"
    if not path.is_file():
        raise GradianError("no report.json", where=str(out_dir), fix="run `gradian attribute --out DIR` first")
    try:
        report = json.loads(path.read_text("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        fix = "re-run `gradian attribute`"
        raise GradianError(f"cannot read report.json ({first})", where=str(path), fix=fix) from None
    if not isinstance(report, dict) or "settings" not in report or "examples" not in report:
        raise GradianError("report.json has no settings/examples", where=str(path), fix="re-run `gradian attribute`")
    rep = Report.from_dict(report)
    for key in ("base", "adapter", "train", "eval"):
        if not rep.settings.get(key):
            raise GradianError(
                f"report.json settings lack {key!r}",
                where=str(path),
                fix="re-run `gradian attribute` (the file-level API records the paths)",
            )
    return rep


def as_report(report: Report | Mapping[str, Any]) -> Report:
    """report.json's content, typed (a dict, e.g. a stub with only ``settings``, is read back)."""
    return report if isinstance(report, Report) else Report.from_dict(report)


def rows_to_drop(report: Report | Mapping[str, Any], k: int | None = None) -> tuple[list[int], str]:
    """The blamed rows and where they came from: verdict ``drop_rows`` unless ``k`` is given, else top-K by score."""
    report = as_report(report)
    verdict = report.verdict
    drop = list(verdict.drop_rows) if verdict is not None else []
    if drop and k is None:
        return sorted(set(drop)), f"verdict.drop_rows ({(verdict.kind if verdict else '') or '?'})"
    scored = [(float(e.score), e.index) for e in report.examples if e.score is not None and math.isfinite(e.score)]
    ranked = sorted(scored, key=lambda t: (-t[0], t[1]))
    if k is None:
        k = max(1, round(DEFAULT_TOP_SHARE * len(ranked)))
    top = [index for score, index in ranked[:k] if score > 0]
    return sorted(top), f"top {k} rows by harm score (positive scores only)"


def training_config(adapter_dir: str | Path, base: str | None = None) -> tuple[dict[str, Any], str, bool]:
    """(TrainConfig overrides, where they came from, whether the run was trained by ``gradian train``)."""
    adapter_dir = Path(adapter_dir)
    args_path = adapter_dir / "training_args.json"
    if args_path.is_file():
        try:
            data = json.loads(args_path.read_text("utf-8"))
        except ValueError:
            data = {}
        if isinstance(data, dict) and isinstance(data.get("gradian_config"), dict):
            from gradian.train import TrainConfig

            known = TrainConfig.field_names()
            cfg = {k: v for k, v in data["gradian_config"].items() if k in known}
            return cfg, f"{args_path} (gradian_config)", True
    from gradian.run import discover, load_setup

    setup = load_setup(discover(adapter_dir, base=base))
    cfg = {}
    for src, dst in _SETUP_KEYS.items():
        value = getattr(setup, src, None)
        if value is not None:
            cfg[dst] = value
    if setup.masking is not None:
        cfg["completion_only"] = setup.masking != "full"
        cfg["assistant_only"] = setup.masking == "assistant_only"
    if setup.precision == "bf16":
        cfg["bf16"] = True
    elif setup.precision == "fp16":
        cfg["fp16"] = True
    if cfg.get("max_steps") is not None and int(cfg["max_steps"]) <= 0:
        cfg.pop("max_steps")
    where = ", ".join(setup.config_files) or "defaults (no config file found)"
    return cfg, f"{where} (mapped from {setup.framework or 'unknown'} keys)", False


def _originally_excluded(adapter_dir: str | Path) -> set[int]:
    """``gradian_excluded_rows`` of a `gradian train` run (its ``--exclude-rows``), else nothing."""
    path = Path(adapter_dir) / "training_args.json"
    try:
        rows = json.loads(path.read_text("utf-8")).get("gradian_excluded_rows") or []
        return {int(r) for r in rows}
    except (OSError, ValueError, AttributeError, TypeError):
        return set()


# --- measuring ----------------------------------------------------------------------------------------------------


def _eval_rows(report: Report | Mapping[str, Any], tokenizer: Any) -> tuple[list[Any], dict[int, Any]]:
    """The eval items as the report scored them (its formatting, ``eval_eos`` and generated completions), and for
    each item scored by preference (by eval row index) the fine-tune's reply it was compared with."""
    from gradian.attribute.generate import with_reply
    from gradian.data import format_examples, load_examples
    from gradian.data.types import FormatSettings

    report = as_report(report)
    settings, opts = report.settings, report.attribute_options()
    names = {f.name for f in dataclasses.fields(FormatSettings)} - {"sources"}
    fs = FormatSettings(**{k: v for k, v in (settings.get("format") or {}).items() if k in names})
    fs = dataclasses.replace(fs, add_eos=opts.eval_eos)
    rows = load_examples(settings["eval"], prompt_only=True)
    gen = settings.get("eval_generation") or {}
    if any(r.prompt_only for r in rows):  # the completions the base model wrote when the report was made
        from gradian.attribute.generate import with_completions

        rows, _ = with_completions(rows, gen.get("completions") or {}, str(gen.get("how")), gen.get("open"))
    at = {r.index: r for r in rows}
    pref = [e for e in report.eval or [] if e.score == "preference" and e.reply is not None and e.index in at]
    replies = [with_reply(at[e.index], str(e.reply), bool(e.extra.get("reply_open"))) for e in pref]
    rfx = format_examples(replies, tokenizer, fs) if replies else []
    return format_examples(rows, tokenizer, fs), {int(e.index): f for e, f in zip(pref, rfx, strict=True)}


def measure(
    base: str,
    adapter_dir: str | Path,
    report: Report | Mapping[str, Any],
    *,
    device: str | None = None,
    dtype: str | None = None,
    with_base: bool = False,
) -> tuple[dict[int, float], dict[int, float] | None]:
    """Completion NLL of every eval item of ``report`` (by eval row index) with the adapter, and with it disabled if
    asked; for an item scored by preference, its NLL minus that of the fine-tune's reply it was compared with (the
    difference of the two is then the preference, as attribute measured it).

    The same loader, formatting and :func:`gradian.attribute.engine.completion_nll` as ``gradian attribute``."""
    import numpy as np
    from transformers.utils import logging as hf_logging

    from gradian.attribute import engine
    from gradian.attribute.loading import load

    hf_logging.disable_progress_bar()
    report = as_report(report)
    opts = report.attribute_options()
    lm = load(base, adapter_dir, device=device, dtype=dtype)
    fx, replies = _eval_rows(report, lm.tokenizer)
    pad = engine.pad_id_of(lm.tokenizer)
    pos = {int(f.index): k for k, f in enumerate(fx)}

    def nll(adapter: bool) -> np.ndarray:
        out = engine.completion_nll(lm.model, fx, pad, batch_size=opts.batch_size, adapter=adapter)
        if replies:  # a pair's loss: the base model's completion's NLL minus the fine-tune's reply's
            r = engine.completion_nll(lm.model, list(replies.values()), pad, batch_size=opts.batch_size,
                                      adapter=adapter)  # fmt: skip
            out[[pos[i] for i in replies]] -= r
        return out

    tuned = nll(True)
    base_nll = nll(False) if with_base else None

    def as_map(a: np.ndarray) -> dict[int, float]:
        return {int(f.index): float(v) for f, v in zip(fx, a, strict=True) if np.isfinite(v)}

    return as_map(tuned), (as_map(base_nll) if base_nll is not None else None)


@dataclass
class ItemRecovery:
    """One regressed item under one re-train: its NLL and how much of its regression the re-train recovered."""

    index: int
    retrained_nll: float
    recovered: float | None  # None when the item did not rise over its baseline

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "retrained_nll": self.retrained_nll, "recovered": self.recovered}


@dataclass
class Recovery:
    """How much of the regression ``finetuned - base`` one re-train recovered, per item and in summary."""

    recovered_median: float | None
    recovered_mean: float | None
    recovered_total: float | None
    mean_retrained_nll: float | None
    still_regressed: int
    items: list[ItemRecovery]

    def to_dict(self) -> dict[str, Any]:
        return {
            "recovered_median": self.recovered_median,
            "recovered_mean": self.recovered_mean,
            "recovered_total": self.recovered_total,
            "mean_retrained_nll": self.mean_retrained_nll,
            "still_regressed": self.still_regressed,
            "items": [i.to_dict() for i in self.items],
        }


def recovery(
    items: list[int], base: dict[int, float], ft: dict[int, float], retrained: dict[int, float], threshold: float
) -> Recovery:
    """Per-item and summary recovery of the regression ``ft - base`` by ``retrained``."""
    per = []
    for i in items:
        gap = ft[i] - base[i]
        per.append(ItemRecovery(i, retrained[i], (ft[i] - retrained[i]) / gap if gap > 0 else None))
    recs = [p.recovered for p in per if p.recovered is not None]
    gap_sum = sum(ft[i] - base[i] for i in items)
    return Recovery(
        recovered_median=_median(recs),
        recovered_mean=sum(recs) / len(recs) if recs else None,
        recovered_total=(sum(ft[i] - retrained[i] for i in items) / gap_sum) if gap_sum > 0 else None,
        mean_retrained_nll=sum(retrained[i] for i in items) / len(items) if items else None,
        still_regressed=sum(1 for i in items if retrained[i] - base[i] > threshold),
        items=per,
    )


@dataclass
class RetrainRun:
    """One re-train (verify.json ``runs[name]``): the rows it left out, how it trained, and what it recovered."""

    removed: list[int]
    n_rows_trained: int
    global_step: int
    train_loss: float | None
    seconds: float
    adapter: str
    recovery: Recovery | None = None
    other_items_mean_change: float | None = None  # the items that had not regressed, against the baseline
    reference: bool = False  # the re-train on every row that the drops are measured against
    recovered_vs_original: float | None = None  # the reference's own recovery against the original adapter

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "removed": self.removed,
            "n_removed": len(self.removed),
            "n_rows_trained": self.n_rows_trained,
            "global_step": self.global_step,
            "train_loss": self.train_loss,
            "seconds": self.seconds,
            "adapter": self.adapter,
        }
        if self.recovery is not None:
            out |= self.recovery.to_dict()
            out["other_items_mean_change"] = self.other_items_mean_change
        if self.reference and self.recovery is not None:
            out["note"] = "every row; the baseline the drops are measured against"
            out["recovered_vs_original"] = self.recovered_vs_original
        return out


# --- the check ----------------------------------------------------------------------------------------------------


def verify(
    out_dir: str | Path,
    *,
    options: VerifyOptions | None = None,
    config_overrides: dict[str, Any] | None = None,
    progress: bool = False,
    quiet: bool = True,
    write: bool = True,
    **kwargs: Any,
) -> dict[str, Any]:
    """Re-train without the blamed rows and without as many random rows; return (and write) the verify.json dict.

    ``options`` (:class:`gradian.options.VerifyOptions`, or its fields as keyword arguments): ``k``: use the top-K
    rows by score even when the report has a verdict. ``seed``: training seed (default: the original run's).
    ``random_seed``: seed of the random draw. ``epochs`` / ``max_steps``: for every re-train. ``reference``: also
    re-train on every row and measure recovery against that (default: only when needed, see the module docstring).
    ``config_overrides``: TrainConfig keys applied to every re-train (e.g. ``{"epochs": 1}`` for a quick check);
    they, like ``epochs`` and ``max_steps``, imply ``reference``. ``seeds``: re-train with this many training seeds
    (see :func:`seed_plans`); the summary averages their recoveries.

    verify.json::

        {"schema": "gradian.verify/1", "report", "base", "adapter", "train", "eval",
         "config": {...TrainConfig of the re-trains...}, "config_source", "gradian_trained": bool, "policy",
         "n_rows": int, "originally_excluded": [row, ...],
         "removed_from": "verdict.drop_rows (...)" | "top K rows ...", "random_seed",
         "baseline": "original adapter" | "reference re-train (all rows)", "threshold",
         "items": [{"index", "id", "base_nll", "finetuned_nll"}],          # the regressed eval items
         "runs": {"drop_flagged" | "drop_random" | "reference":             # the first training seed's
                    {"removed": [row, ...], "n_removed", "n_rows_trained", "global_step", "train_loss",
                     "seconds", "adapter", "recovered_median", "recovered_mean", "recovered_total",
                     "mean_retrained_nll", "still_regressed", "items": [{"index", "retrained_nll", "recovered"}],
                     "other_items_mean_change"}},
         "seeds": [{"seed", "random_seed", "baseline", "recovered_flagged", "recovered_random",
                    "recovered_mean_flagged", "recovered_mean_random", "recovered_total_flagged",
                    "recovered_total_random", "runs": {...as above...}}],
         "summary": {"recovered_flagged", "recovered_random", "recovered_mean_flagged", "recovered_mean_random",
                     "recovered_total_flagged", "recovered_total_random", "margin", "confirmed", "confirmed_on",
                     "side_effect", "other_items_change_flagged", "other_items_change_random", "n_seeds",
                     "recovered_flagged_per_seed", "recovered_random_per_seed", "margin_per_seed",
                     "driven": {"items", "n_items", "n_driven", "n_rows", "z", "alpha", "expected_by_chance", "p",
                                "significant", "recovered_flagged", "recovered_random", "margin",
                                "recovered_flagged_per_seed", "recovered_random_per_seed"} | null,
                     "text"},
         "timings": {...}}

    ``recovered_flagged`` / ``recovered_random`` are the median per-item recoveries (``recovered_mean_*``: the means).
    With several seeds every summary number is the mean over the seeds of that seed's number (each against its own
    baseline). ``confirmed`` is true when removing the blamed rows recovers at least 0.25 more of the regression
    (median over items) than removing random rows and at least half of it (:func:`holds`), judged on the regressed
    items the blamed rows drive (``summary.driven``, :mod:`gradian.verdict.driven`: chosen from the attribution's
    per-item harm before any re-train) when there are significantly more of them than random rows would drive, else
    on every regressed item (``confirmed_on`` says which). ``side_effect`` is true when, without the blamed rows, the
    eval items that had *not* regressed got worse by more than ``threshold`` nats/token on average (and by
    more than ``threshold`` beyond the random removal): the fix overshoots, e.g. the blamed rows share one label.
    """
    t0 = time.time()
    (opts,) = split_kwargs("verify", kwargs, (VerifyOptions, options))
    plans = seed_plans(plan_verify(Path(out_dir), opts, config_overrides), opts.seeds)
    t = time.time()
    ft_nll, base_nll = measure(plans[0].base, plans[0].adapter, plans[0].report, with_base=True,
                               device=opts.device, dtype=opts.dtype)  # fmt: skip
    assert base_nll is not None
    measured = time.time() - t
    dones = [retrain(p, opts, ft_nll, base_nll, progress=progress, quiet=quiet) for p in plans]
    dones[0].timings = {"measure_original_s": measured} | dones[0].timings
    result = verify_result(plans, dones, t0)
    if write:
        (plans[0].out / "verify.json").write_text(json.dumps(result, indent=1) + "\n", "utf-8")
    return result


@dataclass
class VerifyPlan:
    """What the re-trains are: read from report.json and the run's training config before any training."""

    out: Path
    report: Report
    options: AttributeOptions  # the attribution's, read back from report.json
    base: str
    adapter: Path
    train: Path
    regressed: list[EvalItem]
    drop: list[int]  # the blamed rows
    source: str  # where they came from
    random: list[int]  # as many other rows, drawn at random
    all_rows: list[int]  # the rows the original run trained on
    already: set[int]  # rows the original run itself left out
    config: Any  # gradian.options.TrainOptions of the re-trains
    config_source: str
    overrides: dict[str, Any]
    gradian_trained: bool
    reference: bool
    random_seed: int
    seed_dir: str = ""  # under OUT/verify/: "" for the first training seed, "seed<N>" for the others
    driven: DrivenItems | None = None  # the regressed items the blamed rows drive (None: no item scores saved)

    @property
    def threshold(self) -> float:
        return self.options.threshold

    @property
    def seed(self) -> int:
        return int(self.config.seed)

    def runs(self) -> list[tuple[str, list[int]]]:
        plan: list[tuple[str, list[int]]] = [("drop_flagged", self.drop), ("drop_random", self.random)]
        return [("reference", []), *plan] if self.reference else plan

    def config_for(self, n_removed: int) -> Any:
        """The re-train's config: ``max_steps`` (when set) scaled by kept / all rows."""
        cfg = self.config
        if cfg.max_steps > 0 and n_removed:
            kept = max(1, len(self.all_rows) - n_removed)
            return dataclasses.replace(cfg, max_steps=max(1, round(cfg.max_steps * kept / len(self.all_rows))))
        return cfg


def plan_verify(out: Path, opts: VerifyOptions, config_overrides: dict[str, Any] | None) -> VerifyPlan:
    """Read the report, pick the blamed and the random rows, and build the re-trains' config."""
    from gradian.data import load_examples
    from gradian.train import build_config, normalize_config

    report = read_report(out)
    st = report.settings
    adapter = Path(st["adapter"])
    regressed = [e for e in report.regressed if e.regressed is not False]
    if not regressed or report.no_regression:
        raise GradianError("the report has no regressed eval item: nothing to verify", where=str(out / "report.json"))
    drop, source = rows_to_drop(report, opts.k)
    if not drop:
        raise GradianError(
            "no row has positive harm in the report: nothing to drop", where=str(out / "report.json"), fix="pass --k"
        )
    cfg_dict, cfg_source, gradian_trained = training_config(adapter, str(st["base"]))
    overrides = normalize_config(dict(config_overrides or {}) | opts.train_overrides(), where="config_overrides")
    if opts.seed is not None:
        overrides["seed"] = opts.seed
    changed = any(cfg_dict.get(key) != v for key, v in overrides.items())
    cfg = build_config(cfg_dict | overrides, where=cfg_source)
    reference = opts.reference if opts.reference is not None else (not gradian_trained) or changed
    already = _originally_excluded(adapter)  # rows the original run itself left out stay out of every re-train
    all_rows = [ex.index for ex in load_examples(Path(st["train"])) if ex.index not in already]
    drop = [r for r in drop if r not in already]
    if len(all_rows) - len(set(drop)) < len(drop):
        raise GradianError("the blamed rows are most of the data: no random control possible", fix="pass a smaller --k")
    rand = random_rows(all_rows, drop, opts.random_seed)
    driven = driven_by(out, report, drop, [e.index for e in regressed], opts)
    return VerifyPlan(out, report, report.attribute_options(), str(st["base"]), adapter, Path(st["train"]), regressed,
                      drop, source, rand, all_rows, already, cfg, cfg_source, overrides, gradian_trained,
                      bool(reference), opts.random_seed, driven=driven)  # fmt: skip


def driven_by(
    out: Path, report: Report, drop: list[int], regressed: list[int], opts: VerifyOptions
) -> DrivenItems | None:
    """The regressed items the blamed rows drive, from the per-item harm the attribution saved in ``out``
    (item_scores.npy; :mod:`gradian.verdict.driven`), decided before any re-train; None when it saved none."""
    from gradian.report.cli import load_embedding_index, load_item_scores
    from gradian.verdict.driven import driven_items
    from gradian.verdict.evidence import matched_item_harm

    scores = load_item_scores(out)
    query = report.settings.get("query_items") or []
    matched = None if scores is None else matched_item_harm(scores, query, regressed, load_embedding_index(out))
    if matched is None:
        return None
    return driven_items(matched.S, matched.items, matched.rows, drop, z=opts.driven_z, alpha=opts.driven_alpha)


def item_median(run: dict[str, Any], keep: set[int] | None = None) -> float | None:
    """The median per-item recovery of one re-train in verify.json (``runs[name]``), over the items in ``keep``
    (every measured item when None)."""
    return _median([it["recovered"] for it in run.get("items") or [] if keep is None or it["index"] in keep])


def driven_recovery(seeds: list[dict[str, Any]], driven: DrivenItems) -> dict[str, Any]:
    """verify.json ``summary.driven``: which items the blamed rows drive and, on those items only, each removal's
    median per-item recovery by seed and its mean over the seeds (from the seeds' per-item recoveries)."""
    keep = set(driven.items)
    fl = [item_median(sd["runs"]["drop_flagged"], keep) for sd in seeds]
    rd = [item_median(sd["runs"]["drop_random"], keep) for sd in seeds]
    a, b = _mean(fl), _mean(rd)
    return driven.to_dict() | {
        "recovered_flagged": a,
        "recovered_random": b,
        "margin": a - b if a is not None and b is not None else None,
        "recovered_flagged_per_seed": fl,
        "recovered_random_per_seed": rd,
    }


def random_rows(all_rows: list[int], drop: list[int], random_seed: int) -> list[int]:
    """As many rows as ``drop``, drawn at random (seeded) from the other rows."""
    blamed = set(drop)
    return sorted(random.Random(random_seed).sample([r for r in all_rows if r not in blamed], len(drop)))


def seed_plans(plan: VerifyPlan, n: int) -> list[VerifyPlan]:
    """``plan`` and, for ``n`` > 1, the same check with the next ``n - 1`` training seeds.

    One re-train is one draw: on a small fine-tune another seed can move an item's recovery by tens of points. Each
    extra seed re-trains on every row too (its baseline: another seed cannot be compared with the original adapter),
    draws its own random rows (``random_seed`` + i) and writes under ``OUT/verify/seed<N>/``."""
    plans = [plan]
    for i in range(1, n):
        seed, random_seed = plan.seed + i, plan.random_seed + i
        plans.append(dataclasses.replace(
            plan, config=dataclasses.replace(plan.config, seed=seed), reference=True, random_seed=random_seed,
            random=random_rows(plan.all_rows, plan.drop, random_seed), seed_dir=f"seed{seed}",
        ))  # fmt: skip
    return plans


@dataclass
class Retrained:
    """The re-trains and every eval item's NLL under the original adapter, the base model and each re-train."""

    runs: dict[str, RetrainRun]
    nll: dict[str, dict[int, float]]
    finetuned: dict[int, float]
    base: dict[int, float]
    timings: dict[str, float]


def retrain(
    plan: VerifyPlan,
    opts: VerifyOptions,
    finetuned: dict[int, float],
    base: dict[int, float],
    *,
    progress: bool,
    quiet: bool,
) -> Retrained:
    """Re-train and measure each planned run of one training seed (``finetuned`` / ``base``: the original adapter's
    and the base model's NLL, measured once for every seed)."""
    from gradian.train import train_lora

    timings: dict[str, float] = {}
    tag = f"_{plan.seed_dir}" if plan.seed_dir else ""
    runs: dict[str, RetrainRun] = {}
    nll: dict[str, dict[int, float]] = {}
    for name, removed in plan.runs():
        run_dir = plan.out / "verify" / plan.seed_dir / name
        if not quiet:
            typer.echo(f"re-training {name} (seed {plan.seed}): {len(removed)} rows removed → {run_dir}", err=True)
        # without a progress bar the Trainer prints its log dicts to stdout; keep stdout for the table
        with contextlib.redirect_stdout(io.StringIO()) if not progress else contextlib.nullcontext():
            exclude = sorted(plan.already | set(removed))
            res = train_lora(plan.base, plan.train, run_dir, config=plan.config_for(len(removed)),
                             exclude_rows=exclude, progress=progress, quiet=True)  # fmt: skip
        timings[f"train_{name}{tag}_s"] = res.seconds
        t = time.time()
        nll[name], _ = measure(plan.base, run_dir, plan.report, device=opts.device, dtype=opts.dtype)
        timings[f"measure_{name}{tag}_s"] = time.time() - t
        runs[name] = RetrainRun(removed, res.n_rows_trained, res.global_step, res.train_loss, round(res.seconds, 2),
                                str(run_dir), reference=name == "reference")  # fmt: skip
    return Retrained(runs, nll, finetuned, base, timings)


def _recoveries(plan: VerifyPlan, done: Retrained) -> tuple[list[int], list[int]]:
    """Add each run's recovery of the regressed items (and the other items' change) to ``done.runs``; returns the
    regressed and the other items measured."""
    ft, base, nll = done.finetuned, done.base, done.nll
    reg_idx = [e.index for e in plan.regressed if e.index in ft and e.index in base]
    ref = nll["reference"] if plan.reference else ft
    other_idx = [i for i in ft if i not in set(reg_idx) and i in base]
    for name, r in done.runs.items():
        r.recovery = recovery(reg_idx, base, ref, nll[name], plan.threshold)
        changes = [nll[name][i] - ref[i] for i in other_idx]
        r.other_items_mean_change = sum(changes) / len(other_idx) if other_idx else None
    if plan.reference:
        own = recovery(reg_idx, base, ft, nll["reference"], plan.threshold)
        done.runs["reference"].recovered_vs_original = own.recovered_median
    return reg_idx, other_idx


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _seed_numbers(done: Retrained) -> dict[str, float | None]:
    """One seed's recoveries (median and mean over items, and on the summed NLL) and the other items' change, both
    removals."""
    fl, rd = done.runs["drop_flagged"], done.runs["drop_random"]
    assert fl.recovery is not None and rd.recovery is not None
    return {
        "recovered_flagged": fl.recovery.recovered_median,
        "recovered_random": rd.recovery.recovered_median,
        "recovered_mean_flagged": fl.recovery.recovered_mean,
        "recovered_mean_random": rd.recovery.recovered_mean,
        "recovered_total_flagged": fl.recovery.recovered_total,
        "recovered_total_random": rd.recovery.recovered_total,
        "other_items_change_flagged": fl.other_items_mean_change,
        "other_items_change_random": rd.other_items_mean_change,
    }


def holds(flagged: float | None, random_: float | None) -> bool:
    """verify's rule: removing the blamed rows recovers at least half of the regression and at least 0.25 more of it
    than removing as many random rows."""
    return flagged is not None and random_ is not None and flagged - random_ >= 0.25 and flagged >= 0.5


def _summary(
    plans: list[VerifyPlan], dones: list[Retrained], n_items: int, n_other: int, driven: dict[str, Any] | None
) -> dict[str, Any]:
    """verify.json ``summary``: how much each removal recovered (the mean over seeds), on every regressed item and on
    the items the blamed rows drive, whether the attribution holds, and side effects."""
    per = [_seed_numbers(d) for d in dones]
    avg = {key: _mean([p[key] for p in per]) for key in per[0]}
    a, b = avg["recovered_flagged"], avg["recovered_random"]
    margin = (a - b) if a is not None and b is not None else None
    on_driven = bool(driven and driven["significant"])
    confirmed = holds(driven["recovered_flagged"], driven["recovered_random"]) if driven and on_driven else holds(a, b)
    n, k = len(plans[0].drop), len(plans)

    def each(values: list[float | None]) -> str:
        return f" ({', '.join(_pct(v) for v in values)} by seed)" if k > 1 else ""

    text = (
        (f"Over {k} training seeds, removing" if k > 1 else "Removing")
        + f" the {n} blamed rows recovered {_pct(a)} of the regression (median over the {n_items} regressed items)"
        + each([p["recovered_flagged"] for p in per])
        + f"; removing {n} random rows recovered {_pct(b)}{each([p['recovered_random'] for p in per])}. "
    )
    if driven:
        m, chance = driven["n_driven"], driven["expected_by_chance"]
        text += (
            f"The blamed rows' own scores single out {m} of the {driven['n_items']} regressed items (random rows "
            f"would single out {chance:.1f}; p = {driven['p']:.2g})"
        )
        text += (
            f"; on those, removing them recovered {_pct(driven['recovered_flagged'])}"
            f"{each(driven['recovered_flagged_per_seed'])} and removing random rows "
            f"{_pct(driven['recovered_random'])}{each(driven['recovered_random_per_seed'])}. "
            if on_driven
            else ", no more than chance: judged on every regressed item. "
        )
    if confirmed:
        text += "The attribution holds up."
        if on_driven and not holds(a, b):
            text += " The other regressed items moved for another reason (drift, or a cause these rows do not carry)."
    else:
        text += "The blamed rows do not explain the regression much better than random rows."
    side, th = avg["other_items_change_flagged"], plans[0].threshold
    side_effect = bool(side is not None and side > th and side > (avg["other_items_change_random"] or 0.0) + th)
    if side_effect:
        text += (
            f" But the {n_other} eval items that had not regressed got worse by {side:+.3f} nats/token on "
            "average without the blamed rows: the removal overshoots (look at what the blamed rows share, e.g. one "
            "label), so do not drop them blindly."
        )
    margins = [
        (p["recovered_flagged"] - p["recovered_random"])
        if p["recovered_flagged"] is not None and p["recovered_random"] is not None
        else None
        for p in per
    ]
    return avg | {
        "margin": margin,
        "confirmed": confirmed,
        "confirmed_on": "driven items" if on_driven else "regressed items",
        "side_effect": side_effect,
        "n_seeds": k,
        "recovered_flagged_per_seed": [p["recovered_flagged"] for p in per],
        "recovered_random_per_seed": [p["recovered_random"] for p in per],
        "margin_per_seed": margins,
        "driven": driven,
        "text": text,
    }


def _baseline(plan: VerifyPlan) -> str:
    return "reference re-train (all rows)" if plan.reference else "original adapter"


def verify_result(plans: list[VerifyPlan], dones: list[Retrained], t0: float) -> dict[str, Any]:
    """The verify.json dict (see :func:`verify`): the first seed's plan and runs, every seed's recoveries."""
    plan, done = plans[0], dones[0]
    for p, d in zip(plans[1:], dones[1:], strict=True):
        _recoveries(p, d)
    reg_idx, other_idx = _recoveries(plan, done)
    ids = {e.index: e.id for e in plan.report.eval or []}
    ref = done.nll.get("reference")
    seeds = [
        {"seed": p.seed, "random_seed": p.random_seed, "baseline": _baseline(p)}
        | {k: v for k, v in _seed_numbers(d).items() if k.startswith("recovered")}
        | {"runs": {name: r.to_dict() for name, r in d.runs.items()}}
        for p, d in zip(plans, dones, strict=True)
    ]
    timings = {k: v for d in dones for k, v in d.timings.items()}
    return {
        "schema": SCHEMA,
        "report": str(plan.out / "report.json"),
        "base": plan.base,
        "adapter": str(plan.adapter),
        "train": str(plan.train),
        "eval": str(plan.report.settings["eval"]),
        "config": dataclasses.asdict(plan.config),
        "config_source": plan.config_source,
        "config_overrides": plan.overrides,
        "gradian_trained": plan.gradian_trained,
        "policy": POLICY,
        "n_rows": len(plan.report.examples),
        "originally_excluded": sorted(plan.already),
        "removed_from": plan.source,
        "random_seed": plan.random_seed,
        "baseline": _baseline(plan),
        "threshold": plan.threshold,
        "items": [
            {
                "index": i,
                "id": ids.get(i),
                "base_nll": done.base[i],
                "finetuned_nll": done.finetuned[i],
                **({"reference_nll": ref[i]} if plan.reference and ref is not None else {}),
            }
            for i in reg_idx
        ],
        "runs": seeds[0]["runs"],
        "seeds": seeds,
        "summary": _summary(
            plans, dones, len(reg_idx), len(other_idx), driven_recovery(seeds, plan.driven) if plan.driven else None
        ),  # fmt: skip
        "timings": {k2: round(v, 2) for k2, v in timings.items()} | {"total_s": round(time.time() - t0, 2)},
    }


def _pct(x: float | None) -> str:
    return pct(x, missing="n/a")


def print_table(result: dict[str, Any]) -> None:
    from rich.table import Table

    from gradian.console import make_console

    c = make_console()
    s = result["summary"]
    table = Table(title=f"verify: recovery of the regression on {len(result['items'])} regressed items")
    table.caption = "NLL: mean nats/token over those items; recovered: median over items of (ft - re)/(ft - base)"
    for col in ("re-train", "removed", "steps", "NLL", "recovered", "rec. total", "still regr."):
        table.add_column(col, justify="right" if col != "re-train" else "left")
    mean_ft = sum(i["finetuned_nll"] for i in result["items"]) / max(1, len(result["items"]))
    mean_base = sum(i["base_nll"] for i in result["items"]) / max(1, len(result["items"]))
    table.add_row("base", "", "", f"{mean_base:.3f}", "", "", "")
    table.add_row("fine-tuned", "0", "", f"{mean_ft:.3f}", "", "", str(len(result["items"])))
    seeds = result.get("seeds") or [{"seed": None, "runs": result["runs"]}]
    for seed, (name, r) in ((one, run) for one in seeds for run in one["runs"].items()):
        table.add_row(
            f"{name} (seed {seed['seed']})" if len(seeds) > 1 else name,
            str(r["n_removed"]),
            str(r["global_step"]),
            f"{r['mean_retrained_nll']:.3f}",
            _pct(r["recovered_median"]) if name != "reference" else "(baseline)",
            _pct(r["recovered_total"]) if name != "reference" else "",
            str(r["still_regressed"]),
        )
    c.print(table)
    baseline = (
        result["baseline"] if len(seeds) == 1 else "; ".join(f"seed {sd['seed']}: {sd['baseline']}" for sd in seeds)
    )
    c.print(f"rows removed: {result['removed_from']}; baseline: {baseline}")
    c.print(("[green]" if s["confirmed"] and not s.get("side_effect") else "[yellow]") + s["text"], highlight=False)


@options_command(opts=VerifyOptions)
def verify_command(
    out_dir: Path = typer.Argument(..., help="The `gradian attribute --out` folder (with report.json)."),
    opts: VerifyOptions = VerifyOptions(),
    no_progress: bool = typer.Option(False, "--no-progress", help="No training progress bars."),
) -> None:
    """Re-train without the blamed rows (and without as many random rows) and measure how much of the regression each
    removal recovers. Writes OUT_DIR/verify.json."""
    print_table(verify(out_dir, options=opts, progress=not no_progress, quiet=False))
    typer.echo(f"Wrote {Path(out_dir) / 'verify.json'}.", err=True)
