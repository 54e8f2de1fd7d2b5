"""Config rules (C2xx): the training configuration, alone or against the tokenizer and the data size."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from gradian.data.templates import END_OF_TURN_TOKENS
from gradian.diagnose.context import DiagnoseContext
from gradian.diagnose.registry import Hit, Params, rule
from gradian.diagnose.rules._util import fmt_num, key_ev
from gradian.diagnose.types import Fix
from gradian.run.versions import VersionWindow, installed_version, parse_version

LINEAR_FAMILIES = {
    "llama": {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
    "gpt2": {"c_attn", "c_proj", "c_fc"},
    "falcon": {"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"},
    "phi": {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"},
}
FLASH_ATTN = ("flash_attention_2", "flash_attention_3", "flex_attention", "kernels", "flash")

# The versions these rules depend on, read in the libraries' own source (the wheels of huggingface/trl and
# transformers at each end) and run at both ends by tests/test_version_ends.py.
# trl#3749. 0.19.1 trl/trainer/sft_trainer.py:794 select_columns("input_ids") before pack_dataset; 0.20.0 :833 keeps
# completion_mask / assistant_masks in the packed columns.
PACKING_KEEPS_MASK = VersionWindow(
    "trl", (0, 20), "keeps the completion/assistant mask when packing",
    "pack input_ids alone and train on the prompts", ("0.19.1", "0.20.0"))  # fmt: skip
# trl/trainer/sft_config.py: 0.15.2 has max_seq_length alone; 0.16.0 adds max_length and copies a max_seq_length
# into it (:183); 0.20.0 has max_length alone. SFTConfig is a dataclass: a field it lacks is a TypeError, and
# `trl sft --config` refuses it too (trl/scripts/utils.py:226 at 0.20.0), so the key is refused, not ignored.
READS_MAX_LENGTH = VersionWindow(
    "trl", (0, 16), "reads max_length", "have only max_seq_length and refuse max_length", ("0.15.2", "0.16.0")
)
DROPS_MAX_SEQ_LENGTH = VersionWindow(
    "trl", (0, 20), "has no max_seq_length and refuses it", "copy it into max_length (deprecated)", ("0.19.1", "0.20.0")
)
# trl#3200. 0.16.0 trl/trainer/sft_trainer.py:236 transformers' DataCollatorForLanguageModeling (labels -100 where
# input_ids == pad_token_id); 0.16.1 :73 TRL's own collator, which pads the labels with -100 by position.
LABELS_EOS = VersionWindow(
    "trl",
    (0, 16, 1),
    "labels EOS and pads labels by position",
    "mask padding by id, so EOS gets no label",
    ("0.16.0", "0.16.1"),
)
# trl#5470. 1.1.0 trl/trainer/sft_trainer.py:923 swaps in get_training_chat_template(...) when assistant_only_loss is
# set and the template has no {% generation %}; 1.0.0 has the function (chat_template_utils.py:773) but SFTTrainer
# never calls it, and refuses such rows ("no assistant tokens").
PATCHES_TEMPLATES = VersionWindow(
    "trl", (1, 1), "swaps in a tagged copy of the templates it ships", "use the template as it is", ("1.0.0", "1.1.0")
)
# transformers#34191. 4.46.0 transformers/trainer.py:5033 get_batch_samples counts the accumulated batch's tokens
# (num_items_in_batch) before the loss; 4.45.2 :3520 divides each micro-batch's mean loss by the accumulation steps.
GRAD_ACCUM_FIXED = VersionWindow(
    "transformers",
    (4, 46),
    "normalises the loss over accumulated tokens",
    "average it per micro-batch",
    ("4.45.2", "4.46.0"),
)


def _lr(ctx: DiagnoseContext) -> float | None:
    return ctx.setup.learning_rate


def total_steps(ctx: DiagnoseContext) -> tuple[int | None, str]:
    s = ctx.setup
    if s.max_steps and s.max_steps > 0:
        return s.max_steps, ctx.src("max_steps") or "max_steps"
    eb = s.effective_batch_size
    if ctx.train and eb and s.num_epochs:
        steps = math.ceil(len(ctx.train) / eb) * s.num_epochs
        return int(math.ceil(steps)), f"{len(ctx.train)} rows / effective batch {eb} x {fmt_num(s.num_epochs)} epochs"
    if ctx.logs.total_steps:
        return ctx.logs.total_steps, f"trainer logs ({ctx.logs.source})"
    return None, "unknown"


def effective_epochs(ctx: DiagnoseContext) -> tuple[float | None, str, str]:
    s = ctx.setup
    eb = s.effective_batch_size
    if s.max_steps and s.max_steps > 0 and ctx.train and eb:
        return s.max_steps * eb / len(ctx.train), "max_steps", "max_steps x effective batch / rows"
    if s.num_epochs is not None:
        return float(s.num_epochs), "num_epochs", ctx.src("num_epochs") or "config"
    return None, "num_epochs", "unset"


@rule(
    "C201", "lr_for_full_ft", "warning", needs=("setup",),
    thresholds={"max_lr": (5e-5, "adapter learning rates at or below this are full fine-tuning rates")},
    summary="Adapter (LoRA) training with a full fine-tuning learning rate (<= 5e-5; SFTConfig's default is 2e-5).",
    why="LoRA updates a low-rank delta from zero and needs roughly 10x the full fine-tuning rate: at 2e-5 the adapter "
    "barely moves and the run looks like it 'did nothing'.",
    example="SFTConfig(learning_rate=2e-5) with a LoraConfig(r=16).",
    fix="Use 1e-4 to 2e-4 for LoRA SFT.",
    seen_in="Qwen3-VL#127",
)  # fmt: skip
def lr_for_full_ft(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    lr = _lr(ctx)
    if lr is not None and ctx.is_adapter_run() and lr <= t.max_lr:
        yield Hit(
            f"learning_rate {fmt_num(lr)} is a full fine-tuning rate; this is a LoRA run",
            evidence=key_ev(ctx, "learning_rate", lr),
            fix=Fix(text="Raise the learning rate to 1e-4 - 2e-4", key="learning_rate", value=2e-4),
        )


@rule(
    "C202", "lr_too_high", "error", needs=("setup",),
    thresholds={
        "min_lr": (1e-3, "adapter learning rates at or above this are too high"),
        "min_model_params": (50e6, "bases known to be smaller than this are exempt (tiny models need high rates)"),
    },
    summary="LoRA learning rate >= 1e-3 on a real-size model (base >= 50M parameters, or of unknown size).",
    why="The adapter diverges or collapses into repetition within a few hundred steps.",
    example="learning_rate: 0.003 with lora_r 16.",
    fix="Lower it to 1e-4 - 2e-4.",
    seen_in="alpaca-lora#391",
)  # fmt: skip
def lr_too_high(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    lr = _lr(ctx)
    params = ctx.base_params_estimate()
    if params is not None and params < t.min_model_params:
        return
    if lr is not None and ctx.is_adapter_run() and lr >= t.min_lr:
        yield Hit(
            f"learning_rate {fmt_num(lr)} is too high for LoRA",
            evidence=key_ev(ctx, "learning_rate", lr),
            fix=Fix(text="Lower the learning rate", key="learning_rate", value=2e-4),
        )


@rule(
    "C203", "epochs_overfit", "warning", needs=("setup",), tiers="W/E",
    thresholds={
        "warn_epochs": (3.0, "epochs above which it warns (with fewer than warn_rows rows)"),
        "warn_rows": (10000, "row count under which warn_epochs applies"),
        "error_epochs": (10.0, "epochs at or above which it errors, whatever the size"),
        "small_epochs": (5.0, "epochs above which it errors on a small set"),
        "small_rows": (1000, "row count under which small_epochs applies"),
    },
    summary="Too many epochs for the data size: > 3 with < 10k rows (warning); >= 10, or > 5 with < 1k rows (error).",
    why="LoRA memorises small sets quickly: train loss goes to ~0 while eval loss rises and outputs parrot the data.",
    example="num_train_epochs 12 on 400 rows.",
    fix="Train 1-3 epochs, with eval and early stopping.",
    seen_in="Qwen#785, transformers#22934",
)  # fmt: skip
def epochs_overfit(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    ep, key, how = effective_epochs(ctx)
    if ep is None:
        return
    n = len(ctx.train) if ctx.train else None
    sev = None
    if ep >= t.error_epochs or (n is not None and n < t.small_rows and ep > t.small_epochs):
        sev = "error"
    elif n is not None and n < t.warn_rows and ep > t.warn_epochs:
        sev = "warning"
    if sev:
        yield Hit(f"{fmt_num(round(ep, 2))} epochs over {n if n is not None else 'an unknown number of'} rows",
                  severity=sev, evidence={**key_ev(ctx, key, ep), "rows": None, "count": n, "computed": how},
                  fix=Fix(text="Train 1-3 epochs and use eval-based early stopping", key=key,
                          value=3 if key == "num_epochs" else None))  # fmt: skip


@rule(
    "C204", "too_few_steps", "warning", needs=("setup",), tiers="W/E",
    thresholds={"min_steps": (20, "optimizer steps below which it warns")},
    summary="Fewer than 20 optimizer steps in total (warning), or warmup as long as the whole run (error).",
    why="A handful of steps with a large effective batch barely moves the adapter; with warmup >= total steps the "
    "learning rate never reaches its peak.",
    example="200 rows, batch 8 x accumulation 16, 1 epoch = 2 steps.",
    fix="Smaller batch or accumulation, more epochs, shorter warmup.",
    seen_in="LAVIS#72",
)  # fmt: skip
def too_few_steps(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    steps, how = total_steps(ctx)
    if steps is None:
        return
    s = ctx.setup
    if s.warmup_steps and s.warmup_steps >= steps:
        yield Hit(
            f"warmup_steps {s.warmup_steps} >= total steps {steps}",
            severity="error",
            evidence={**key_ev(ctx, "warmup_steps", s.warmup_steps), "total_steps": steps, "computed": how},
            fix=Fix(text="Shorten warmup to ~3-10% of the steps", key="warmup_ratio", value=0.05),
        )
    elif s.warmup_ratio is not None and s.warmup_ratio >= 1:
        yield Hit(
            f"warmup_ratio {s.warmup_ratio} covers the whole run",
            severity="error",
            evidence=key_ev(ctx, "warmup_ratio", s.warmup_ratio),
            fix=Fix(text="Use warmup_ratio 0.03-0.1", key="warmup_ratio", value=0.05),
        )
    if steps < t.min_steps:
        ga, bs = s.gradient_accumulation_steps or 1, s.per_device_batch_size or 1
        cur: float | None
        value: int | None
        if ga > 1:
            key, cur, value = "gradient_accumulation_steps", ga, 1
            text = "Reduce gradient accumulation (or train more epochs)"
        elif bs > 1:
            key, cur, value = "per_device_train_batch_size", bs, max(1, bs * steps // t.min_steps)
            text = "Use a smaller per-device batch (or train more epochs, or add data)"
        else:  # the effective batch is already 1: only more passes or more rows give more steps
            key, cur = "num_train_epochs", s.num_epochs
            value = math.ceil((s.num_epochs or 1) * t.min_steps / max(1, steps)) if s.num_epochs else None
            text = "Train more epochs or add data (the effective batch is already 1)"
        src = ctx.src({"num_train_epochs": "num_epochs", "per_device_train_batch_size": "per_device_batch_size"}
                      .get(key, key))  # fmt: skip
        yield Hit(f"only {steps} optimizer steps ({how})",
                  evidence={"key": key, "value": cur, "source": src or "unknown", "total_steps": steps,
                            "effective_batch_size": s.effective_batch_size, "computed": how},
                  fix=Fix(text=text, key=key, value=value))  # fmt: skip


@rule(
    "C205", "packing_with_completion_mask", "error", needs=("setup",), tiers="E/I",
    summary="Packing together with completion-only or assistant-only loss on a TRL that drops the mask when packing "
    "(TRL < 0.20; TRL >= 0.20 keeps it). The TRL version is the one the run's model card records, else the one "
    "its packing_strategy implies (ffd: 0.19, bfd: >= 0.20); unknown: an info note.",
    why="With packing, TRL before 0.20 packed input_ids alone: the prompt mask is silently lost and the model trains "
    "on the prompts. TRL 0.20 (trl#3749) packs the completion and assistant masks with the rows.",
    example="SFTConfig(packing=True, completion_only_loss=True) on TRL 0.19.",
    fix="Upgrade to TRL >= 0.20, or set packing=False.",
    seen_in="trl#3749, trl#1163",
)  # fmt: skip
def packing_with_completion_mask(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    s = ctx.setup
    mask = ctx.masking()
    if not s.packing or mask not in ("completion_only", "assistant_only"):
        return
    if ctx.framework() not in ("trl", "transformers", ""):
        return
    trl = ctx.version_window(PACKING_KEEPS_MASK)
    if trl.inside:
        return
    ev = {**key_ev(ctx, "packing", True), "masking": mask, "masking_source": ctx.src("masking"), **trl.evidence()}
    if trl.inside is False:
        yield Hit(
            f"packing with {mask} loss drops the loss mask on {trl.note()}",
            evidence=ev,
            fix=Fix(text="Set packing=False, or train with TRL >= 0.20", key="packing", value=False),
        )
        return
    yield Hit(
        f"packing with {mask} loss: {trl.note()}, and {PACKING_KEEPS_MASK.describe()}",
        severity="info",
        evidence=ev,
        fix=Fix(text="If the run used TRL < 0.20, set packing=False or upgrade TRL"),
    )


@rule(
    "C206", "packing_cross_attention", "warning", needs=("setup",),
    summary="Packing without position_ids-aware attention (sdpa/eager): packed rows attend to each other.",
    why="Rows packed into one sequence leak context across examples; the model learns spurious continuations.",
    example="packing: true with attn_implementation sdpa.",
    fix="Use flash_attention_2 / flex attention with position_ids (padding_free), or disable packing.",
    seen_in="trl#3067",
)  # fmt: skip
def packing_cross_attention(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    s = ctx.setup
    if not s.packing:
        return
    attn = (s.attn_implementation or "").lower()
    if attn and any(f in attn for f in FLASH_ATTN):
        return
    if ctx.framework() == "llamafactory" and s.raw.get("neat_packing"):
        return
    yield Hit(f"packing with attention {attn or 'default (sdpa/eager)'}: packed rows attend across boundaries",
              evidence={**key_ev(ctx, "attn_implementation", attn or None), "packing_source": ctx.src("packing")},
              fix=Fix(text="Use flash attention with position_ids", key="attn_implementation",
                      value="flash_attention_2"))  # fmt: skip


@rule(
    "C207", "max_len_key_ignored", "warning", needs=("setup",), tiers="W/I",
    summary="The max length is set under a key the run's TRL does not have (max_seq_length on TRL >= 0.20, "
    "max_length on TRL < 0.16). Unknown TRL version with max_seq_length: an info note.",
    why="SFTConfig refuses a key it does not have (TypeError; `trl sft` refuses the config file), so a run that "
    "recorded one was not configured with it: a wrapper dropped the key and the default (1024) applied, or the "
    "record is not the config the run trained with. Rows were truncated or padded differently than it says.",
    example="max_seq_length: 4096 in a recorded config on TRL 0.21, whose SFTConfig has only max_length.",
    fix="Rename the key (max_length on TRL >= 0.16).",
    seen_in="trl#2947",
)  # fmt: skip
def max_len_key_ignored(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    s = ctx.setup
    if ctx.framework() not in ("trl",) or not s.max_length_key:
        return
    if s.max_length_key == "max_seq_length":
        trl = ctx.version_window(DROPS_MAX_SEQ_LENGTH)
        ev = {**key_ev(ctx, "max_length", s.max_length), "key": "max_seq_length", **trl.evidence()}
        fix = Fix(text="Rename max_seq_length to max_length", key="max_length", value=s.max_length)
        if trl.inside:
            yield Hit(
                f"max_seq_length is not a setting of {trl.note()} (SFTConfig refuses it): the run did not train "
                "with it, and where it was dropped the default max_length 1024 applied",
                evidence=ev,
                fix=fix,
            )
        elif trl.inside is None:
            yield Hit(
                f"max_seq_length: {trl.note()}, and {DROPS_MAX_SEQ_LENGTH.describe()}",
                severity="info",
                evidence=ev,
                fix=fix,
            )
    elif s.max_length_key == "max_length":
        trl = ctx.version_window(READS_MAX_LENGTH)
        if trl.inside is False:
            yield Hit(
                f"max_length is not a setting of {trl.note()} (SFTConfig refuses it; it reads max_seq_length)",
                evidence={**key_ev(ctx, "max_length", s.max_length), **trl.evidence()},
                fix=Fix(text="Rename max_length to max_seq_length", key="max_seq_length", value=s.max_length),
            )


@rule(
    "C208", "fp16_on_bf16_model", "warning", needs=("setup",), tiers="W/E",
    summary="fp16 training of a model stored in bf16 (error when the logs show non-finite values).",
    why="bf16 weights and activations overflow fp16's range: NaN losses or silently clipped activations.",
    example="fp16: true for a Llama-3 / Gemma checkpoint with torch_dtype bfloat16.",
    fix="Train in bf16 (bf16: true, fp16: false).",
    seen_in="unsloth#5074",
)  # fmt: skip
def fp16_on_bf16_model(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    if ctx.setup.precision != "fp16":
        return
    dtype = str(ctx.base_config.get("torch_dtype") or ctx.base_config.get("dtype") or "")
    if "bfloat16" not in dtype:
        return
    bad = [
        p.step
        for p in ctx.logs.points
        for v in (p.loss, p.grad_norm, p.eval_loss)
        if v is not None and not math.isfinite(v)
    ]
    extra = f"; non-finite values at steps {bad[:5]}" if bad else ""
    yield Hit(f"fp16 training of a model stored in {dtype}{extra}",
              severity="error" if bad else "warning",
              evidence={**key_ev(ctx, "precision", "fp16"), "model_dtype": dtype, "steps": bad},
              fix=Fix(text="Train in bf16", key="bf16", value=True))  # fmt: skip


def _targets(ctx: DiagnoseContext):
    tm = ctx.setup.target_modules
    if tm is None and ctx.artifacts.adapter_config:
        tm = ctx.artifacts.adapter_config.get("target_modules")
    return tm


@rule(
    "C209", "lora_coverage", "warning", needs=("setup",), tiers="W/E",
    thresholds={"min_share": (0.25, "share of the linear layer kinds targeted below which it errors")},
    summary="LoRA targets only q/v projections (warning), or fewer than 25% of the linear layer kinds (error).",
    why="Adapting attention q/v only leaves the MLP (most parameters, most knowledge) frozen; quality lags "
    "all-linear LoRA clearly.",
    example='target_modules=["q_proj", "v_proj"] (PEFT\'s default for Llama).',
    fix='Target all linear layers (target_modules="all-linear", lora_target_linear: true, lora_target: all).',
    seen_in="peft#2845",
)  # fmt: skip
def lora_coverage(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    tm = _targets(ctx)
    if not ctx.is_adapter_run() or tm is None:
        return
    if isinstance(tm, str):
        if tm.lower() in ("all-linear", "all_linear", "all") or not re.fullmatch(r"[\w.,\s]+", tm):
            return  # all-linear, or a regex we cannot evaluate without the model
        tm = [x.strip() for x in tm.split(",") if x.strip()]
    names = {str(x).split(".")[-1] for x in tm}
    if "all-linear" in names or "all" in names:
        return
    fam = max(LINEAR_FAMILIES, key=lambda f: len(names & LINEAR_FAMILIES[f]))
    kinds = LINEAR_FAMILIES[fam]
    covered = names & kinds
    if not covered:
        return
    share = len(covered) / len(kinds)
    key = "target_modules"
    if share < t.min_share:
        yield Hit(
            f"LoRA targets {sorted(covered)}: {len(covered)}/{len(kinds)} linear layer kinds ({share:.0%})",
            severity="error",
            evidence={**key_ev(ctx, key, sorted(names)), "share": round(share, 3)},
            fix=Fix(text="Target all linear layers", key=key, value="all-linear"),
        )
    elif covered <= {"q_proj", "v_proj", "query", "value"} or (fam == "llama" and covered <= {"q_proj", "v_proj"}):
        yield Hit(f"LoRA targets only {sorted(covered)} (attention q/v); the MLP stays frozen",
                  evidence={**key_ev(ctx, key, sorted(names)), "share": round(share, 3)},
                  fix=Fix(text="Target all linear layers", key=key, value="all-linear"))  # fmt: skip


@rule(
    "C210", "lora_scale", "info", needs=("setup",), tiers="I/W",
    thresholds={"max_scale": (4.0, "alpha/r above which it warns"), "min_scale": (0.25, "alpha/r below which (at a "
                "low learning rate) it notes"), "big_rank": (64, "rank at or above which rsLoRA is advised")},
    summary="LoRA scale alpha/r (alpha/sqrt(r) with rsLoRA) > 4 (warning), < 0.25 at a low learning rate, or a large "
    "rank without rsLoRA (info).",
    why="The scale multiplies the adapter's output: too large destabilises training, too small makes the effective "
    "learning rate tiny; plain LoRA's 1/r scaling wastes high ranks.",
    example="r=8, lora_alpha=128 (scale 16).",
    fix="Use alpha ~ 2r, or use_rslora for r >= 64.",
    seen_in="peft#1244",
)  # fmt: skip
def lora_scale(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    s = ctx.setup
    r, a = s.lora_r, s.lora_alpha
    if not r or a is None:
        return
    scale = a / math.sqrt(r) if s.use_rslora else a / r
    ev = {**key_ev(ctx, "lora_alpha", a), "lora_r": r, "use_rslora": bool(s.use_rslora), "scale": round(scale, 4)}
    if scale > t.max_scale:
        yield Hit(
            f"LoRA scale {scale:.2f} (alpha {a:g} / r {r}) is large",
            severity="warning",
            evidence=ev,
            fix=Fix(text="Set lora_alpha to about 2r", key="lora_alpha", value=2 * r),
        )
    elif scale < t.min_scale and (s.learning_rate or 0) <= 1e-4:
        yield Hit(
            f"LoRA scale {scale:.2f} with learning rate {fmt_num(s.learning_rate)}: a tiny effective step",
            evidence=ev,
            fix=Fix(text="Set lora_alpha to about 2r", key="lora_alpha", value=2 * r),
        )
    if r >= t.big_rank and not s.use_rslora:
        yield Hit(
            f"rank {r} without rsLoRA: the 1/r scale shrinks the update",
            evidence=ev,
            fix=Fix(text="Enable rsLoRA", key="use_rslora", value=True),
        )


def _embeddings_trained(ctx: DiagnoseContext) -> bool:
    mts = list(ctx.setup.modules_to_save or []) + list(ctx.artifacts.adapter_config.get("modules_to_save") or [])
    tm = _targets(ctx)
    tms = [tm] if isinstance(tm, str) else list(tm or [])
    allm = " ".join(map(str, mts + tms)).lower()
    return (any(k in allm for k in ("embed", "lm_head", "wte")) or bool(ctx.setup.raw.get("trainable_token_indices"))
            or bool(ctx.artifacts.adapter_config.get("trainable_token_indices")))  # fmt: skip


def _added_tokens(ctx: DiagnoseContext) -> list[str]:
    raw = ctx.setup.raw
    out: list[str] = []
    for key in ("tokens", "added_tokens", "new_special_tokens", "add_tokens"):
        v = raw.get(key)
        if isinstance(v, list):
            out += [str(x) for x in v]
        elif isinstance(v, str) and v:
            out += [x.strip() for x in v.split(",") if x.strip()]
    sp = raw.get("special_tokens")
    if isinstance(sp, dict) and ctx.tokenizer is not None:
        vocab: dict[str, int] = getattr(ctx.tokenizer, "get_vocab", dict)()
        out += [str(v) for v in sp.values() if isinstance(v, str) and v not in vocab]
    return out


@rule(
    "C211", "new_tokens_unsaved", "error", needs=("setup",),
    summary="Tokens are added to the tokenizer but the embeddings / lm_head are neither trained nor saved.",
    why="New tokens get random (or mean) embeddings that LoRA never trains and the adapter never saves: the model "
    "cannot read or emit them, and the saved adapter does not match the resized model.",
    example="Axolotl tokens: [<|tool|>] without lora_modules_to_save: [embed_tokens, lm_head].",
    fix="Add embed_tokens and lm_head to modules_to_save, or use trainable_token_indices.",
    seen_in="axolotl#1570, peft#2898",
)  # fmt: skip
def new_tokens_unsaved(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    added = _added_tokens(ctx)
    vocab_cfg = ctx.base_config.get("vocab_size")
    grown = ctx.tokenizer is not None and vocab_cfg and len(ctx.tokenizer) > int(vocab_cfg)
    if not (added or grown) or not ctx.is_adapter_run() or _embeddings_trained(ctx):
        return
    yield Hit(
        f"tokens added ({added[:5] or f'tokenizer {len(ctx.tokenizer)} > model vocab {vocab_cfg}'}) but "
        "embed_tokens/lm_head are not trained or saved",
        evidence={
            "key": "modules_to_save",
            "value": ctx.setup.modules_to_save,
            "source": ctx.src("modules_to_save") or "unset",
            "added_tokens": added[:50],
        },
        fix=Fix(text="Train and save the embeddings", key="modules_to_save", value=["embed_tokens", "lm_head"]),
    )


_TEMPLATE_TOKENS = ("<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                    "<start_of_turn>", "<end_of_turn>", "<|user|>", "<|assistant|>", "<|end|>")  # fmt: skip


def _embedding_matrix(base_dir: str) -> Any:
    """The input embedding matrix of a local base model's safetensors (None when not found)."""
    from pathlib import Path

    files = sorted(Path(base_dir).glob("*.safetensors")) if Path(base_dir).is_dir() else []
    if not files:
        return None
    from safetensors import safe_open

    for f in files:
        with safe_open(str(f), framework="pt") as st:
            for k in st.keys():
                if k.endswith(("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "tok_embeddings.weight")):
                    return st.get_tensor(k).float()
    return None


def _untrained_rows(ctx: DiagnoseContext, ids: dict[str, int]) -> list[str]:
    """Tokens whose embedding row in the base is untrained: all (near) zero, or equal to the mean of all rows (how
    base checkpoints ship reserved tokens; the check Unsloth runs). Empty when the weights are not local."""
    if not ids or not ctx.artifacts.base:
        return []
    emb = _embedding_matrix(str(ctx.artifacts.base))
    if emb is None:
        return []
    mean = emb.mean(0)
    out = []
    for tok, i in ids.items():
        if 0 <= i < emb.shape[0]:
            row = emb[i]
            if float(row.abs().max()) <= 1e-8 or float((row - mean).abs().max()) <= 1e-6:
                out.append(tok)
    return out


@rule(
    "C212", "untrained_template_tokens", "error", needs=("setup", "tokenizer"),
    summary="A chat template whose special tokens have untrained embedding rows in the base model's weights (all "
    "zero, or the mean row), with the embeddings frozen. Read from the local weights, never guessed from the name.",
    why="Base checkpoints ship untrained rows for template tokens like <|im_start|> / <|eot_id|>; frozen under LoRA "
    "they stay garbage, the loss spikes or NaNs, and the model never learns to end turns.",
    example="Llama-3-8B (base) + the Llama-3 instruct chat template, LoRA without embeddings.",
    fix="Start from the instruct model, or train embed_tokens/lm_head (modules_to_save).",
    seen_in="unsloth#915",
)  # fmt: skip
def untrained_template_tokens(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    base = ctx.setup.base_model or ctx.artifacts.base or ""
    tmpl = ctx.chat_template()
    if not base or not tmpl or _embeddings_trained(ctx) or not any(e.messages for e in ctx.train):
        return
    specials = [s for s in (getattr(ctx.tokenizer, "all_special_tokens", None) or []) if s and s in tmpl]
    added = list(getattr(ctx.tokenizer, "added_tokens_encoder", {}) or {})
    used = sorted({m for m in (*_TEMPLATE_TOKENS, *specials, *added) if m in tmpl})
    ids = {m: ctx.tokenizer.convert_tokens_to_ids(m) for m in used}
    ids = {m: i for m, i in ids.items() if isinstance(i, int) and i != getattr(ctx.tokenizer, "unk_token_id", None)}
    untrained = _untrained_rows(ctx, ids)  # read from the base's weights, not guessed from its name
    if not untrained:
        return
    yield Hit(f"the base model's embedding rows for {untrained} (used by the chat template) are untrained, and "
              "the embeddings are frozen",
              evidence={"key": "base_model", "value": base, "source": ctx.src("base_model") or "unknown",
                        "template_tokens": untrained},
              fix=Fix(text="Use the instruct model, or train the embeddings", key="modules_to_save",
                      value=["embed_tokens", "lm_head"]))  # fmt: skip


@rule(
    "C213", "pad_is_eos", "error", needs=("tokenizer",), tiers="E/I",
    summary="The pad token is the EOS token and the collator masks padding by id, so EOS never gets a label "
    "(transformers' DataCollatorForLanguageModeling; TRL < 0.16.1). Unknown TRL version: an info note.",
    why="transformers' DataCollatorForLanguageModeling (and TRL < 0.16.1, which used it) set labels=-100 wherever "
    "input_ids == pad: every EOS is masked, and the model never learns to stop. TRL >= 0.16.1 pads the labels by "
    "position (trl#3200).",
    example="tokenizer.pad_token = tokenizer.eos_token with DataCollatorForLanguageModeling.",
    fix="Use a distinct pad token (e.g. the tokenizer's <|finetune_right_pad_id|> or a new [PAD]).",
    seen_in="alignment-handbook#127, trl#6357",
)  # fmt: skip
def pad_is_eos(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    tok = ctx.tokenizer
    pad, eos = getattr(tok, "pad_token_id", None), getattr(tok, "eos_token_id", None)
    if pad is None or eos is None or pad != eos:
        return
    fw = ctx.framework()
    if fw not in ("transformers", "trl"):
        return
    trl = ctx.version_window(LABELS_EOS)
    if fw == "trl" and trl.inside:
        return
    ev = {"key": "pad_token", "value": getattr(tok, "pad_token", None), "source": "tokenizer", "framework": fw}
    fix = Fix(text="Set a pad token distinct from EOS", key="pad_token", value="<pad>")
    if fw == "transformers" or trl.inside is False:
        version = {} if fw == "transformers" else trl.evidence()
        yield Hit(f"pad_token_id == eos_token_id ({eos}) and the {fw} collator masks padding by id: EOS gets no label",
                  evidence={**ev, **version}, fix=fix)  # fmt: skip
        return
    yield Hit(
        f"pad_token_id == eos_token_id ({eos}): {trl.note()}, and {LABELS_EOS.describe()}",
        severity="info",
        evidence={**ev, **trl.evidence()},
        fix=fix,
    )


@rule(
    "C214", "eos_turn_mismatch", "error", needs=("tokenizer",),
    summary="The chat template ends turns with a token that is neither the tokenizer's EOS nor in the "
    "generation config's eos_token_id.",
    why="The model learns to end turns with <|im_end|> / <|eot_id|>, but generation stops only at EOS: outputs run "
    "on into invented user turns.",
    example="ChatML template with eos_token </s> and generation_config eos_token_id 2.",
    fix="Set eos_token to the end-of-turn token, and add its id to generation_config.eos_token_id.",
    seen_in="LLaMA-Factory#7454, axolotl#2073",
)  # fmt: skip
def eos_turn_mismatch(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    tmpl = ctx.chat_template()
    tok = ctx.tokenizer
    if not tmpl:
        return
    eot = next((m for m in END_OF_TURN_TOKENS if m in tmpl), None)
    eos = getattr(tok, "eos_token", None)
    if eot is None or eot == eos:
        return
    try:
        eot_id = tok.convert_tokens_to_ids(eot)
    except Exception:
        eot_id = None
    gen = ctx.generation_config.get("eos_token_id")
    gen_ids = gen if isinstance(gen, list) else [gen] if gen is not None else []
    if eot_id is not None and eot_id in gen_ids:
        return
    yield Hit(f"the chat template ends turns with {eot!r} but eos_token is {eos!r} and generation_config "
              f"eos_token_id is {gen}",
              evidence={"key": "eos_token", "value": eos, "source": "tokenizer", "end_of_turn": eot,
                        "end_of_turn_id": eot_id, "generation_eos_token_id": gen},
              fix=Fix(text=f"Set eos_token to {eot!r} and add its id to generation_config.eos_token_id",
                      key="eos_token", value=eot))  # fmt: skip


def _trl_patches(ctx: DiagnoseContext) -> tuple[bool, str, str]:
    """Whether the run's TRL swaps in its own {% generation %}-tagged copy of this template (SFTTrainer does so,
    from TRL 1.1, for the templates it ships: Qwen2.5/3, Llama-3, Gemma, Phi-3, ...), asked of the installed TRL
    itself. Returns (patched, severity, why): severity "" when that holds for the run, "error" when the run's
    recorded TRL predates the patching, "warning" when it is older than the installed one and the template is not one
    that TRL 1.1 already patched (it may not patch this one yet), "info" when the run recorded no TRL version."""
    if ctx.framework() not in ("trl", ""):
        return False, "", ""
    try:
        from trl.chat_template_utils import get_training_chat_template
    except Exception:  # TRL absent or too old to patch templates
        return False, "", ""
    try:
        patched = get_training_chat_template(ctx.tokenizer) is not None
    except Exception:  # TRL raises for templates it cannot patch
        return False, "", ""
    if not patched:
        return False, "", ""
    trl, here = ctx.version_window(PATCHES_TEMPLATES), installed_version("trl")
    if trl.inside is False:
        return True, "error", f"{trl.note()}, and {PATCHES_TEMPLATES.describe()}"
    if trl.inside is None:
        return True, "info", f"{trl.note()}, and {PATCHES_TEMPLATES.describe()}"
    first = getattr(ctx.tokenizer, "chat_template", None) in _first_patched()
    if not first and here and (parse_version(trl.recorded) or ()) < (parse_version(here) or ()):
        return True, "warning", f"{trl.note()} (patching checked with TRL {here})"
    return True, "", ""


def _first_patched() -> set[str]:
    """The templates every TRL in PATCHES_TEMPLATES patches: those 1.1.0 patches (trl/chat_template_utils.py:478-489
    at 1.1.0: GPT-OSS, Llama-3, Qwen2.5, Qwen3), as the installed TRL ships them."""
    from trl import chat_template_utils as u

    names = ("gptoss_chat_template", "llama3_chat_template", "qwen2_5_chat_template", "qwen3_chat_template")
    return {t for t in (getattr(u, n, None) for n in names) if isinstance(t, str)}


@rule(
    "C215", "assistant_mask_no_tag", "error", needs=("setup", "tokenizer"), tiers="E/W/I",
    summary="Assistant-only loss with a chat template that lacks {% generation %} tags and that the run's TRL does "
    "not patch itself (TRL >= 1.1 swaps in tagged copies of the templates it ships: Qwen2.5/3, Llama-3, Gemma, "
    "Phi-3, ...). A template only a newer TRL patches: a warning; unknown TRL version: an info note.",
    why="TRL builds the assistant mask from the template's generation tags; without them the mask is all zeros "
    "(error in new TRL, silent zero loss in some versions) or the whole sequence is trained.",
    example="assistant_only_loss=True with Llama-3's stock template on TRL 0.21.",
    fix="Use a template with {% generation %} blocks, or prompt/completion rows with completion-only loss.",
    seen_in="trl#4201, trl#5470",
)  # fmt: skip
def assistant_mask_no_tag(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    if ctx.masking() != "assistant_only" or ctx.framework() not in ("trl", "transformers", ""):
        return
    tmpl = ctx.chat_template()
    if tmpl and re.search(r"{%-?\s*generation\s*-?%}", tmpl):
        return
    patched, severity, how = _trl_patches(ctx)
    ev = {**key_ev(ctx, "masking", "assistant_only"), "chat_template": bool(tmpl)}
    if patched and severity in ("warning", "info"):
        yield Hit(f"the template has no {{% generation %}} tags; TRL patches it for assistant-only loss, but {how}",
                  severity=severity, evidence={**ev, "trl": how},
                  fix=Fix(text="Train with the TRL version installed here (it swaps in a tagged template), or "
                          "use completion-only loss", key="masking", value="completion_only"))  # fmt: skip
        return
    if patched and not severity:
        return
    yield Hit("assistant-only loss but the tokenizer's chat template has no {% generation %} tags"
              + (f" ({how})" if how else ""), evidence={**ev, **({"trl": how} if how else {})},
              fix=Fix(text="Use a generation-tagged template, or completion-only loss", key="masking",
                      value="completion_only"))  # fmt: skip


@rule(
    "C216", "loss_on_prompt", "warning", needs=("setup",),
    summary="The loss covers the prompt: train_on_inputs / train_on_prompt true, completion_only_loss false, or "
    "instruction data stored as plain text.",
    why="The model spends capacity reproducing prompts; on short answers most of the gradient is prompt tokens, and "
    "it learns to generate questions.",
    example="Axolotl train_on_inputs: true with alpaca rows.",
    fix="Mask the prompt: completion_only_loss / train_on_inputs: false / train_on_prompt: false.",
    seen_in="axolotl#1068",
)  # fmt: skip
def loss_on_prompt(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    mask = ctx.masking()
    structured = [e for e in ctx.train if e.prompt is not None or e.messages]
    fx_rows = []
    if ctx.formatted is not None:
        fx_rows = [f.index for f in ctx.formatted if f.n_prompt_tokens == 0 and f.n_label_tokens > 0]
    if mask == "full" and (structured or not ctx.train):
        key = "masking"
        src = ctx.src("masking") or "unknown"
        yield Hit(
            f"the loss covers the prompt (masking=full, from {src})",
            evidence={"key": key, "value": "full", "source": src, "rows": fx_rows[:0], "count": len(structured)},
            fix=Fix(
                text="Mask the prompt: completion_only_loss=True (TRL), train_on_inputs: false (Axolotl), "
                "train_on_prompt: false (LLaMA-Factory)",
                key=key,
                value="completion_only",
            ),
        )
        return
    from gradian.diagnose.rules.content import template_layout  # the markers learned from the file, + known ones

    text_rows, markers = template_layout(ctx)
    if text_rows and len(text_rows) >= 0.5 * len(ctx.train):
        yield Hit(f"{len(text_rows)} instruction-style rows are stored as plain text ({', '.join(markers)}): the "
                  "loss covers their prompts",
                  evidence={"rows": text_rows, "count": len(text_rows), "total": len(ctx.train),
                            "file": ctx.train_file, "markers": markers},
                  fix=Fix(text="Store rows as prompt/completion or messages so the prompt can be masked"))  # fmt: skip


# Trainers that make the checkpointed layers' inputs require grad whatever use_reentrant says: TRL's SFTTrainer calls
# enable_input_require_grads() on the PEFT model it trains with reentrant checkpointing (trl/trainer/sft_trainer.py
# since 0.7.5); Axolotl's load_adapter does for every adapter (src/axolotl/loaders/adapter.py); LLaMA-Factory's
# checkpointing wrapper sets requires_grad on each trainable layer's hidden states
# (src/llamafactory/model/model_utils/checkpointing.py, get_custom_gradient_checkpointing_func).
INPUT_GRADS_BY_FRAMEWORK = ("trl", "axolotl", "llamafactory")
# transformers 5.0.0 modeling_utils.py: enabling checkpointing on a model read from input_ids calls
# enable_input_require_grads(); 4.57.6 only for adapters loaded through transformers' own PEFT integration, so a
# get_peft_model model under the Trainer fails its first backward.
TF_INPUT_GRADS = VersionWindow(
    "transformers", (5, 0), "enables input grads with checkpointing", "only for integrated adapters",
    ("4.57.6", "5.0.0"),
)  # fmt: skip


@rule(
    "C217", "checkpointing_no_input_grads", "error", needs=("setup",),
    summary="Gradient checkpointing with use_reentrant=True on a frozen base (LoRA) without input grads: a "
    "transformers Trainer run before transformers 5 (TRL, Axolotl, LLaMA-Factory and transformers 5 make the inputs "
    "require grad themselves).",
    why="Reentrant checkpointing needs an input that requires grad; with a frozen embedding none does, so no "
    "gradient reaches the adapter unless enable_input_require_grads() was called: transformers 4.57's Trainer fails "
    "its first backward ('element 0 of tensors does not require grad'), or the adapter's gradients are zero where "
    "something else requires grad.",
    example="gradient_checkpointing_kwargs={'use_reentrant': True} with PEFT LoRA.",
    fix="Set gradient_checkpointing_kwargs={'use_reentrant': False}.",
    seen_in="transformers#26221",
)  # fmt: skip
def checkpointing_no_input_grads(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    s = ctx.setup
    if not (s.gradient_checkpointing and s.use_reentrant is True and ctx.is_adapter_run()):
        return
    tf = ctx.version_window(TF_INPUT_GRADS)
    if ctx.framework() in INPUT_GRADS_BY_FRAMEWORK or tf.inside:
        return
    ev = {**key_ev(ctx, "use_reentrant", True), **tf.evidence()}
    fix = Fix(text="Use non-reentrant checkpointing", key="gradient_checkpointing_kwargs",
              value={"use_reentrant": False})  # fmt: skip
    if tf.inside is False:
        msg = f"gradient checkpointing with use_reentrant=True on a LoRA run with {tf.note()}"
        yield Hit(msg, evidence=ev, fix=fix)
        return
    yield Hit(f"gradient checkpointing with use_reentrant=True on a LoRA run: {tf.note()}, and "
              f"{TF_INPUT_GRADS.describe()}", severity="info", evidence=ev, fix=fix)  # fmt: skip


@rule(
    "C218", "grad_accum_loss_bug", "warning", needs=("setup",),
    summary="Gradient accumulation > 1 on transformers < 4.46, whose loss normalisation was wrong (a run that "
    "recorded no transformers version is not flagged).",
    why="Before 4.46 the loss was averaged per micro-batch, not per token: with accumulation the effective loss is "
    "mis-scaled and rows of different lengths are weighted wrongly.",
    example="gradient_accumulation_steps 8 on transformers 4.44.",
    fix="Upgrade transformers to >= 4.46.",
    seen_in="transformers#34191",
)  # fmt: skip
def grad_accum_loss_bug(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    ga = ctx.setup.gradient_accumulation_steps or 1
    tf = ctx.version_window(GRAD_ACCUM_FIXED)
    if ga > 1 and tf.inside is False:
        yield Hit(f"gradient_accumulation_steps {ga} with {tf.note()}: loss mis-normalised",
                  evidence={**key_ev(ctx, "gradient_accumulation_steps", ga), **tf.evidence()},
                  fix=Fix(text="Upgrade transformers to >= 4.46"))  # fmt: skip


@rule(
    "C219", "no_eval", "warning", needs=("setup",),
    summary="No eval split, or evaluation disabled.",
    why="Without an eval loss, overfitting (eval_rising) and leakage cannot be seen until after deployment.",
    example="LLaMA-Factory with val_size 0 (the default); eval_strategy 'no'.",
    fix="Hold out 2-5% (val_size / val_set_size / eval_dataset) and evaluate every few hundred steps.",
    seen_in="LLaMA-Factory val_size default 0",
)  # fmt: skip
def no_eval(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    s = ctx.setup
    has_eval = bool(ctx.eval) or ctx.artifacts.eval_file is not None or bool(s.eval_size) or bool(ctx.logs.eval)
    if s.eval_strategy and s.eval_strategy.lower() == "no" and not ctx.logs.eval:
        yield Hit(
            "evaluation is disabled (eval_strategy 'no')",
            evidence=key_ev(ctx, "eval_strategy", s.eval_strategy),
            fix=Fix(text="Evaluate regularly", key="eval_strategy", value="steps"),
        )
    elif not has_eval:
        yield Hit(
            "no eval split: no eval file, eval/val size unset, no eval_loss in the logs",
            evidence={"key": "eval_size", "value": s.eval_size, "source": ctx.src("eval_size") or "unset"},
            fix=Fix(text="Hold out 2-5% of the data for evaluation", key="eval_size", value=0.05),
        )


@rule(
    "C220", "deprecated_keys", "warning", needs=("setup",),
    summary="Deprecated config keys (evaluation_strategy, max_seq_length, ...).",
    why="Deprecated keys are ignored or mapped differently across versions: the run may not use what you set.",
    example="evaluation_strategy: steps (now eval_strategy).",
    fix="Rename them (see the message).",
    seen_in="axolotl deprecations",
)  # fmt: skip
def deprecated_keys(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    keys = ctx.setup.deprecated_keys
    if keys:
        yield Hit(
            f"deprecated keys: {', '.join(keys)}",
            evidence={"key": keys[0], "keys": keys, "source": ", ".join(ctx.setup.config_files) or "config"},
            fix=Fix(text="Rename: evaluation_strategy -> eval_strategy, max_seq_length -> max_length", key=keys[0]),
        )


@rule(
    "C221", "big_batch", "info", needs=("setup",),
    thresholds={"max_batch": (32, "effective batch above which it notes")},
    summary="Effective batch size > 32 for LoRA.",
    why="Large batches mean few steps on small sets and usually no gain for LoRA SFT.",
    example="per_device 8 x accumulation 16 x 2 GPUs = 256.",
    fix="Keep the effective batch <= 32.",
    seen_in="TRL docs",
)  # fmt: skip
def big_batch(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    eb = ctx.setup.effective_batch_size
    if eb and eb > t.max_batch and ctx.is_adapter_run():
        yield Hit(f"effective batch size {eb}", evidence={**key_ev(ctx, "gradient_accumulation_steps",
                  ctx.setup.gradient_accumulation_steps), "effective_batch_size": eb},
                  fix=Fix(text="Lower gradient accumulation", key="gradient_accumulation_steps",
                          value=max(1, (ctx.setup.gradient_accumulation_steps or 1) * 32 // eb)))  # fmt: skip


@rule(
    "C222", "unknown_keys", "warning", needs=("setup",),
    summary="Config keys the framework does not know (typos, keys from another framework).",
    why="Unknown keys are silently ignored: 'lora_dropuot: 0.1' leaves the default in place.",
    example="lora_dropuot: 0.1; num_epoch: 3.",
    fix="Fix the spelling or remove the keys.",
    seen_in="LLaMA-Factory unknown args",
)  # fmt: skip
def unknown_keys(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    keys = ctx.setup.unknown_keys
    if keys:
        yield Hit(
            f"unknown config keys: {', '.join(keys[:10])}",
            evidence={"key": keys[0], "keys": keys, "source": ", ".join(ctx.setup.config_files) or "config"},
            fix=Fix(text="Fix the spelling or remove the keys", key=keys[0]),
        )


@rule(
    "C223", "dropout_high", "warning", needs=("setup",),
    thresholds={"max_dropout": (0.3, "LoRA dropout above which it warns")},
    summary="LoRA dropout above 0.3.",
    why="High dropout on the adapter input slows learning sharply for little regularisation gain.",
    example="lora_dropout: 0.5",
    fix="Use 0.0-0.1.",
)  # fmt: skip
def dropout_high(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    d = ctx.setup.lora_dropout
    if d is not None and d > t.max_dropout:
        yield Hit(
            f"lora_dropout {d}",
            evidence=key_ev(ctx, "lora_dropout", d),
            fix=Fix(text="Lower LoRA dropout", key="lora_dropout", value=0.05),
        )


@rule(
    "C224", "max_length_over_model", "warning", needs=("setup",),
    summary="The max length exceeds the model's context (max_position_embeddings).",
    why="Positions beyond the trained context extrapolate badly (RoPE) or crash (learned positions).",
    example="max_length 8192 on a model with max_position_embeddings 2048.",
    fix="Keep the max length within the model's context, or configure RoPE scaling.",
)  # fmt: skip
def max_length_over_model(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    ml = ctx.setup.max_length
    mpe = ctx.base_config.get("max_position_embeddings") or ctx.base_config.get("n_positions")
    if ml and mpe and ml > int(mpe) and not ctx.base_config.get("rope_scaling"):
        yield Hit(
            f"max length {ml} exceeds the model's context {mpe}",
            evidence={**key_ev(ctx, ctx.setup.max_length_key or "max_length", ml), "max_position_embeddings": mpe},
            fix=Fix(text="Lower the max length", key=ctx.setup.max_length_key or "max_length", value=int(mpe)),
        )


@rule(
    "C225", "max_steps_overrides_epochs", "info", needs=("setup",),
    summary="max_steps is set and overrides num_epochs, and the two disagree by more than 10%.",
    why="HF Trainer ignores num_train_epochs when max_steps > 0: the run trains for a different number of epochs "
    "than the config suggests.",
    example="num_train_epochs 3 and max_steps 5000 over 2,000 rows with batch 8 (20 epochs).",
    fix="Set max_steps -1 (or remove it) to train by epochs.",
)  # fmt: skip
def max_steps_overrides_epochs(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    s = ctx.setup
    eb = s.effective_batch_size
    if not (s.max_steps and s.max_steps > 0 and s.num_epochs and ctx.train and eb):
        return
    ep = s.max_steps * eb / len(ctx.train)
    if abs(ep - s.num_epochs) > 0.1 * s.num_epochs:
        yield Hit(f"max_steps {s.max_steps} means {ep:.2f} epochs, not num_epochs {fmt_num(s.num_epochs)}",
                  evidence={**key_ev(ctx, "max_steps", s.max_steps), "num_epochs": s.num_epochs,
                            "effective_epochs": round(ep, 3)},
                  fix=Fix(text="Remove max_steps to train by epochs", key="max_steps", value=-1))  # fmt: skip


@rule(
    "C226", "max_length_default", "info", needs=("setup",),
    summary="No max length is set: the framework default applies (TRL 1024, Axolotl 512, LLaMA-Factory 2048).",
    why="The default may cut long rows (or waste memory); it also changed across versions.",
    example="An SFTConfig without max_length (1024) on 3,000-token documents.",
    fix="Set the max length explicitly.",
)  # fmt: skip
def max_length_default(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    if ctx.setup.max_length is not None:
        return
    ml, src = ctx.effective_max_length()
    if ml:
        yield Hit(
            f"no max length set; the {src} of {ml} applies",
            evidence={"key": "max_length", "value": ml, "source": src},
            fix=Fix(text="Set the max length explicitly", key="max_length", value=ml),
        )
