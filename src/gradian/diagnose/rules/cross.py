"""Cross-cutting rules (X4xx): adapter x base model x tokenizer x data x logs."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

from gradian.diagnose.baseid import BaseComparison, compare_bases, safetensors_shapes
from gradian.diagnose.context import DiagnoseContext
from gradian.diagnose.registry import Hit, Params, rule
from gradian.diagnose.rules.config import total_steps
from gradian.diagnose.types import Fix


@rule(
    "X401", "rslora_serving", "warning", needs=("adapter",),
    summary="The adapter uses rsLoRA (alpha/sqrt(r)); serving stacks that ignore use_rslora scale it by alpha/r.",
    why="Served with the plain LoRA scale the update is sqrt(r) times too small: the adapter seems to do nothing.",
    example="use_rslora: true, r=64, served by a stack that reads only r and lora_alpha.",
    fix="Check your serving stack honours use_rslora, or merge the adapter before serving.",
)  # fmt: skip
def rslora_serving(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    ac = ctx.artifacts.adapter_config
    if ac.get("use_rslora"):
        r = ac.get("r")
        yield Hit(
            f"adapter uses rsLoRA (r={r}); a server that ignores it scales the update {math.sqrt(r or 1):.1f}x "
            "too small",
            evidence={"key": "use_rslora", "value": True, "source": "adapter_config.json"},
            fix=Fix(text="Verify the serving stack supports use_rslora, or merge the adapter into the base"),
        )


def _tokenizer_config(d: Path | None) -> dict:
    if d is None or not (d / "tokenizer_config.json").is_file():
        return {}
    try:
        return json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


@rule(
    "X402", "template_train_vs_serve", "warning", needs=("adapter", "tokenizer"),
    summary="The chat template saved with the adapter differs from the tokenizer's template used for training.",
    why="Served with the saved template, the model sees turn markers it was not trained on.",
    example="Trained with a custom ChatML template; the adapter dir carries the base Llama template.",
    fix="Save the tokenizer you trained with next to the adapter (tokenizer.save_pretrained(output_dir)).",
)  # fmt: skip
def template_train_vs_serve(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    adapter_dir = ctx.artifacts.adapter_dir
    saved = _tokenizer_config(adapter_dir).get("chat_template")
    used = ctx.chat_template()
    if adapter_dir and saved and used and saved.strip() != used.strip():
        yield Hit("the adapter's saved chat template differs from the training tokenizer's",
                  evidence={"file": str(adapter_dir / "tokenizer_config.json"), "key": "chat_template",
                            "value": saved[:120], "source": "adapter dir"},
                  fix=Fix(text="Save the training tokenizer with the adapter"))  # fmt: skip


@rule(
    "X403", "qlora_merge", "warning", needs=("setup",),
    summary="An adapter trained on a 4-bit base and a merged model next to it (merged naively into a "
    "quantized or a different-precision base).",
    why="Merging into the dequantized 4-bit weights, or into the fp16 weights the adapter never saw, shifts the "
    "outputs: the merged model is worse than base+adapter.",
    example="load_in_4bit: true and a merged/ folder with model.safetensors.",
    fix="Merge into the same base precision you trained against (dequantize the 4-bit base first), and compare "
    "outputs before and after merging.",
)  # fmt: skip
def qlora_merge(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    raw = ctx.setup.raw
    q4 = bool(raw.get("load_in_4bit")) or str(raw.get("adapter", "")).lower() == "qlora" or \
        str(raw.get("quantization_bit", "")) == "4"  # fmt: skip
    rd = ctx.artifacts.run_dir
    if not q4 or rd is None:
        return
    merged = [p for p in [rd, *(d for d in rd.iterdir() if d.is_dir())] if (p / "config.json").is_file()
              and any(p.glob("model*.safetensors"))]  # fmt: skip
    if merged:
        yield Hit(
            f"4-bit (QLoRA) training and a merged model at {merged[0]}",
            evidence={
                "key": "load_in_4bit",
                "value": True,
                "source": ctx.src("load_in_4bit") or "config",
                "file": str(merged[0]),
            },
            fix=Fix(text="Merge into a dequantized base at the training precision"),
        )


@rule(
    "X404", "adapter_base_mismatch", "error", needs=("adapter",), tiers="E/W/I",
    summary="The base given is not the base the adapter was trained on, by content: the model config "
    "(architecture, hidden sizes, layer count, vocabulary) differs from the adapter's recorded base, or the "
    "adapter's LoRA weights do not fit the base's modules (error); the same shapes but other weights (warning, "
    "both bases local); a name that differs while the content matches or cannot be read (info).",
    why="An adapter applied to another base loads (PEFT only warns about names) but computes garbage; shape "
    "mismatches fail late. A local copy of the hub model the adapter names is the same base.",
    example="adapter trained on a 2048-wide model, diagnosed with a 4096-wide one of the same module names.",
    fix="Pass the base the adapter was trained on (adapter_config.json base_model_name_or_path).",
)  # fmt: skip
def adapter_base_mismatch(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    ac = ctx.artifacts.adapter_config
    want = str(ac.get("base_model_name_or_path") or "")
    given = ctx.artifacts.base or ""
    w = ctx.artifacts.adapter_weights
    cmp = compare_bases(want, given, ctx.base_config, w if w is not None and w.suffix == ".safetensors" else None,
                        bool(ac.get("fan_in_fan_out")))  # fmt: skip
    _fallback_width_check(ctx, w, cmp)
    ev = {"key": "base_model_name_or_path", "value": want, "source": "adapter_config.json", "given_base": given,
          "compared": cmp.compared}  # fmt: skip
    fix = Fix(text=f"Pass the base the adapter was trained on ({want or 'see adapter_config.json'})", key="base",
              value=want or None)  # fmt: skip
    if cmp.mismatched:
        yield Hit(_mismatch_message(cmp, given), evidence={**ev, **_diff_evidence(cmp), "file": str(w) if w else None},
                  fix=fix)  # fmt: skip
        return
    if cmp.same_weights is False:
        yield Hit(f"the base given ({given!r}) has the shapes of the adapter's base ({want!r}) but other weights "
                  "(sha256 differs)", severity="warning", evidence=ev, fix=fix)  # fmt: skip
        return
    if want and given and not _same_name(want, given):
        how = f"they match by {', '.join(cmp.compared)}" if cmp.compared else (
            "nothing to compare them by (no local config or weights for both)")  # fmt: skip
        yield Hit(
            f"adapter_config names {want!r}, the base given is {given!r}: {how}",
            severity="info",
            evidence=ev,
            fix=Fix(text="Nothing to do if the base given is a copy of the adapter's base"),
        )


def _same_name(want: str, given: str) -> bool:
    norm = lambda s: Path(s.rstrip("/")).name.lower()  # noqa: E731
    return norm(want) == norm(given) or Path(given).resolve() == Path(want).resolve()


def _fallback_width_check(ctx: DiagnoseContext, w: Path | None, cmp: BaseComparison) -> None:
    """Without the base's weights: attention LoRA inputs against the base config's hidden size."""
    hidden = ctx.base_config.get("hidden_size")
    if cmp.shapes_compared or not hidden or w is None or w.suffix != ".safetensors":
        return
    shapes = safetensors_shapes(w)
    bad = [k for k, s in shapes.items() if "lora_A" in k and any(p in k for p in ("q_proj", "k_proj", "v_proj"))
           and len(s) == 2 and s[1] != hidden]  # fmt: skip
    if shapes:
        cmp.compared.append("the attention LoRA inputs against the base hidden size")
    cmp.shape_diffs += [
        (k.rsplit(".lora_A", 1)[0].removeprefix("base_model.model."), f"in {shapes[k][1]}", f"hidden size {hidden}")
        for k in bad
    ]


def _mismatch_message(cmp: BaseComparison, given: str) -> str:
    if cmp.config_diffs:
        diffs = ", ".join(f"{k} {a} vs {b}" for k, a, b in cmp.config_diffs[:4])
        return f"the base given ({given!r}) differs from the adapter's base: {diffs} (recorded vs given)"
    missing = f"the base given has no weight for {len(cmp.missing)} LoRA target modules (e.g. {cmp.missing[0]})" if (
        cmp.missing) else ""  # fmt: skip
    if cmp.shape_diffs:
        module, need, has = cmp.shape_diffs[0]
        return (f"{len(cmp.shape_diffs)} LoRA weights do not fit the base given: {module} needs {need}, the base "
                f"has {has}" + (f"; {missing}" if missing else ""))  # fmt: skip
    return missing


def _diff_evidence(cmp: BaseComparison) -> dict[str, object]:
    return {
        "config_diffs": [{"key": k, "recorded": a, "given": b} for k, a, b in cmp.config_diffs],
        "tensors": [m for m, _, _ in cmp.shape_diffs[:10]],
        "shape_diffs": [{"module": m, "needs": n, "base": h} for m, n, h in cmp.shape_diffs[:10]],
        "missing_modules": cmp.missing[:10],
    }


@rule(
    "X405", "steps_data_mismatch", "warning", needs=("logs", "setup", "train"),
    thresholds={"factor": (2.0, "ratio between logged and expected total steps that fires")},
    summary="The logged total steps disagree (> 2x) with the steps expected from the given data and config.",
    why="The data or config you passed is not what the run trained on: the diagnosis would be about another run.",
    example="trainer_state max_steps 3,000; train.jsonl 400 rows, batch 8, 2 epochs = 100 steps.",
    fix="Pass the exact train file and config the run used.",
)  # fmt: skip
def steps_data_mismatch(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    logged = ctx.logs.total_steps
    s = ctx.setup
    if not logged or (s.max_steps and s.max_steps > 0):
        return
    expected, how = total_steps(ctx)
    if not expected or "rows" not in how:
        return
    r = logged / expected
    if r > t.factor or r < 1 / t.factor:
        yield Hit(
            f"the logs planned {logged} steps; the given data and config give {expected} ({how})",
            evidence={"steps": [logged], "expected_steps": expected, "computed": how, "source": ctx.logs.source},
            fix=Fix(text="Pass the train file and config this run used"),
        )


@rule(
    "X406", "vocab_mismatch", "error", needs=("tokenizer",),
    summary="The tokenizer has more tokens than the base model's embedding matrix.",
    why="Token ids beyond the embedding size index out of range (CUDA assert) or, with resizing, get untrained "
    "rows.",
    example="tokenizer of 32,002 tokens (added <|im_start|>, <|im_end|>) with vocab_size 32,000.",
    fix="Resize the embeddings and train them (modules_to_save), or use the model's own tokenizer.",
)  # fmt: skip
def vocab_mismatch(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    vs = ctx.base_config.get("vocab_size")
    try:
        n = len(ctx.tokenizer)
    except TypeError:
        return
    if vs and n > int(vs):
        yield Hit(f"tokenizer has {n} tokens, the model's vocab_size is {vs}",
                  evidence={"key": "vocab_size", "value": vs, "source": "base config.json", "tokenizer_size": n},
                  fix=Fix(text="Use the model's tokenizer, or resize and train the embeddings", key="modules_to_save",
                          value=["embed_tokens", "lm_head"]))  # fmt: skip


@rule(
    "X407", "mask_format_mismatch", "warning", needs=("setup", "train"),
    summary="Completion-only (or assistant-only) loss is configured but the rows are plain text, so the whole "
    "sequence is trained.",
    why="Text rows have no prompt/completion split: the mask setting silently does nothing.",
    example="completion_only_loss: true with {\"text\": \"### Question ... ### Answer ...\"} rows.",
    fix="Convert rows to prompt/completion (or messages), or use a response-marker collator.",
)  # fmt: skip
def mask_format_mismatch(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    mask = ctx.setup.masking
    if mask not in ("completion_only", "assistant_only"):
        return
    text_rows = [e.index for e in ctx.train if e.format == "text"]
    if text_rows and len(text_rows) == len(ctx.train) and not ctx.setup.raw.get("response_template"):
        yield Hit(f"{mask} loss is configured but all {len(text_rows)} rows are plain text (full loss)",
                  evidence={"key": "masking", "value": mask, "source": ctx.src("masking") or "unknown",
                            "count": len(text_rows), "total": len(ctx.train), "file": ctx.train_file},
                  fix=Fix(text="Convert the rows to prompt/completion or messages"))  # fmt: skip
