"""Load the base model and the PEFT adapter the way the fine-tune used them; pick device and dtype.

* device: ``--device`` or cuda when available (else mps, else cpu).
* dtype: bf16 on a GPU that supports it, fp32 otherwise; curvature factors are always accumulated in fp64 and
  per-example gradients kept in fp32 whatever the model dtype.
* adapter: LoRA and rsLoRA. DoRA is refused with one line. Weights are read only from ``adapter_model.safetensors``:
  ``adapter_model.bin`` is a pickle and is never loaded. ``modules_to_save`` (fully trained copies of modules) and
  LoRA on embeddings are trained by the fine-tune but not attributed; the loader says so in its notes.
* No remote code unless ``trust_remote_code=True``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gradian.errors import GradianError
from gradian.run.discovery import read_adapter_config


@dataclass
class LoadedModel:
    model: Any  # peft.PeftModel in eval mode, LoRA weights requiring grad
    tokenizer: Any
    adapter_config: dict[str, Any]
    device: torch.device
    dtype: torch.dtype
    base: str
    adapter_dir: Path
    notes: list[str] = field(default_factory=list)


def resolve_device(device: str | None = None) -> torch.device:
    if device:
        try:
            dev = torch.device(device)
        except RuntimeError as e:
            raise GradianError(f"unknown device {device!r}", fix="use cpu, cuda or cuda:N") from e
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise GradianError("--device cuda was asked for but no CUDA GPU is visible", fix="use --device cpu")
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_dtype(device: torch.device, dtype: str | None = None) -> torch.dtype:
    names = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
    names |= {"fp16": torch.float16, "float16": torch.float16, "fp64": torch.float64, "float64": torch.float64}
    if dtype and dtype != "auto":
        if dtype not in names:
            raise GradianError(f"unknown dtype {dtype!r}", fix="use auto, fp32, bf16, fp16 or fp64")
        return names[dtype]
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def check_adapter(adapter_dir: str | Path, cfg: dict[str, Any]) -> list[str]:
    """Refuse what cannot be attributed; return notes about what is trained but not attributed."""
    adapter_dir = Path(adapter_dir)
    where = str(adapter_dir / "adapter_config.json")
    peft_type = str(cfg.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        raise GradianError(f"peft_type {peft_type} is not LoRA", where=where, fix="attribute a LoRA adapter")
    if cfg.get("use_dora"):
        raise GradianError(
            "DoRA adapters (use_dora: true) are not supported yet", where=where, fix="attribute a LoRA/rsLoRA adapter"
        )
    if not (adapter_dir / "adapter_model.safetensors").is_file():
        if (adapter_dir / "adapter_model.bin").is_file():
            raise GradianError(
                "adapter_model.bin is a pickle and gradian never unpickles it",
                where=str(adapter_dir / "adapter_model.bin"),
                fix="re-save the adapter with save_pretrained(..., safe_serialization=True) to get "
                "adapter_model.safetensors",
            )
        raise GradianError("no adapter_model.safetensors", where=str(adapter_dir), fix="pass the PEFT adapter dir")
    notes = []
    if cfg.get("modules_to_save"):
        notes.append(f"modules_to_save {cfg['modules_to_save']} were trained fully; they are not attributed")
    targets = cfg.get("target_modules")
    tlist = [targets] if isinstance(targets, str) else list(targets or [])
    if any("embed" in t or "lm_head" in t for t in tlist):
        notes.append("LoRA on embeddings/lm_head is not attributed (only Linear LoRA blocks are)")
    if cfg.get("use_rslora"):
        notes.append("rsLoRA scaling alpha/sqrt(r)")
    if cfg.get("lora_dropout"):
        notes.append(f"lora_dropout {cfg['lora_dropout']} is off while attributing (eval mode)")
    return notes


def adapter_shapes(weights: str | Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes in ``adapter_model.safetensors`` (from its header and size, no tensor read); one line when it is
    not a whole safetensors file (truncated, corrupt, or another format)."""
    from safetensors import safe_open

    try:
        with safe_open(str(weights), framework="pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as e:  # SafetensorError (bad header, short file), OSError: the file cannot be used either way
        why = (str(e).splitlines() or [type(e).__name__])[0][:160]
        raise GradianError(
            f"not a readable safetensors file ({why}); it is truncated, corrupt or in another format",
            where=str(weights),
            fix="copy or save the adapter again (save_pretrained writes adapter_model.safetensors)",
        ) from e


def _lora_module(key: str) -> tuple[str, str] | None:
    """'base_model.model.model.layers.0.q_proj.lora_A.weight' -> ('model.layers.0.q_proj', 'lora_A')."""
    m = re.match(r"^(?:base_model\.model\.)?(.*)\.(lora_A|lora_B)(?:\.[^.]+)?\.weight$", key)
    return (m.group(1), m.group(2)) if m else None


def adapter_misfits(
    shapes: dict[str, tuple[int, ...]], modules: dict[str, Any], *, linear_only: bool = True
) -> tuple[int, list[str]]:
    """How many LoRA tensors (``shapes``, from :func:`adapter_shapes`) fit the base's ``modules`` (``named_modules``)
    and one description per tensor that does not: its module is not in the base (or, with ``linear_only``, not a
    Linear), or its shape differs (an adapter trained on another base with the same module names). Without
    ``linear_only`` a module without ``in_features`` (e.g. GPT-2's Conv1D) is left to PEFT."""
    bad: list[str] = []
    n = 0
    for key, shape in shapes.items():
        parsed = _lora_module(key)
        if parsed is None:
            continue
        name, part = parsed
        mod = modules.get(name)
        if mod is None:
            bad.append(f"{name} (not a module of the base)")
            continue
        if not hasattr(mod, "in_features"):
            if linear_only:
                bad.append(f"{name} (not a Linear in the base)")
            continue
        n += 1
        r = shape[0] if part == "lora_A" else shape[1]
        want = (r, mod.in_features) if part == "lora_A" else (mod.out_features, r)
        if tuple(shape) != want:
            bad.append(f"{key} has shape {list(shape)}, the base needs {list(want)}")
    return n, bad


def misfit_error(bad: list[str], base: str, weights: str | Path) -> GradianError:
    return GradianError(
        f"{len(bad)} LoRA tensors do not fit the base model {base}: {bad[0]}",
        where=str(weights),
        fix="pass the base model the adapter was trained on (adapter_config.json: base_model_name_or_path)",
    )


def load(
    base: str | None,
    adapter_dir: str | Path,
    *,
    device: str | None = None,
    dtype: str | None = None,
    trust_remote_code: bool = False,
    tokenizer_dir: str | Path | None = None,
) -> LoadedModel:
    """Load ``base`` (a local dir or hub id; default: the adapter's base_model_name_or_path) with the adapter."""
    from peft import PeftModel

    adapter_dir = Path(adapter_dir)
    cfg = read_adapter_config(adapter_dir)
    notes = check_adapter(adapter_dir, cfg)
    weights = adapter_dir / "adapter_model.safetensors"
    shapes = adapter_shapes(weights)  # a truncated or foreign file: one line before the base loads
    base = base or cfg.get("base_model_name_or_path")
    if not base:
        raise GradianError("no base model given and adapter_config.json names none", fix="pass --base")
    dev = resolve_device(device)
    dt = resolve_dtype(dev, dtype)
    if dev.type == "cuda":  # reproducible scores: deterministic cuBLAS/kernels where they exist (docs/reliability.md)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    model = load_base_model(base, dt, trust_remote_code)
    _, bad = adapter_misfits(shapes, dict(model.named_modules()), linear_only=False)
    if bad:
        raise misfit_error(bad, str(base), weights)
    model = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=True)
    model.to(dev)
    model.eval()
    for n, p in model.named_parameters():
        p.requires_grad_("lora_" in n)
    tok = _load_tokenizer(tokenizer_dir or adapter_dir, base, trust_remote_code)
    check_vocab(tok, model, tokenizer_dir or adapter_dir, base)
    return LoadedModel(model, tok, cfg, dev, dt, str(base), adapter_dir, notes)


def load_base_model(base: str, dtype: torch.dtype, trust_remote_code: bool = False) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` with one-line errors: a missing or unreadable model, weights that are
    truncated or not safetensors/PyTorch files, a model that needs remote code."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(base, dtype=dtype, trust_remote_code=trust_remote_code)
    except OSError as e:
        raise GradianError(
            f"cannot load base model {base!r} ({str(e).splitlines()[0]})", fix="pass --base with a local model dir"
        ) from e
    except ValueError as e:
        if "trust_remote_code" in str(e):
            raise GradianError(
                f"{base} needs remote code", fix="pass --trust-remote-code if you trust that repository"
            ) from e
        raise
    except Exception as e:
        if type(e).__name__ != "SafetensorError":
            raise
        raise GradianError(
            f"its weights are not a readable safetensors file ({str(e).splitlines()[0][:160]}); truncated or corrupt",
            where=str(base),
            fix="copy or download the base model again",
        ) from e


def check_vocab(tokenizer: Any, model: Any, tokenizer_from: str | Path, base: str) -> None:
    """Refuse a tokenizer whose ids run past the model's input embeddings (another model's tokenizer): those ids would
    fail inside the embedding lookup."""
    emb = model.get_input_embeddings()
    n_emb = getattr(emb, "num_embeddings", None)
    if n_emb is not None and len(tokenizer) > n_emb:
        raise GradianError(
            f"the tokenizer has {len(tokenizer):,} tokens but the base model {base} embeds {n_emb:,}: it belongs to "
            "another model",
            where=str(tokenizer_from),
            fix="pass --tokenizer with the tokenizer the fine-tune used (the base model's, or the run's)",
        )


def _load_tokenizer(first: str | Path, base: str, trust_remote_code: bool) -> Any:
    from gradian.data import load_tokenizer

    for src in (first, base):
        if Path(str(src)).is_dir() and not any(Path(str(src)).glob("tokenizer*")):
            continue
        try:
            return load_tokenizer(src, trust_remote_code=trust_remote_code)
        except (OSError, ValueError):
            continue
    raise GradianError("no tokenizer found in the adapter or base dir", where=str(first), fix="pass --tokenizer")


def load_adapter_weights(model, adapter_dir: str | Path) -> None:
    """Put another saved state of the same adapter (a checkpoint-* dir) into the loaded PEFT ``model``, in place.

    Only ``adapter_model.safetensors`` is read (never a pickle); its LoRA tensors must match the loaded adapter's
    names and shapes, else a one-line error names the dir."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    adapter_dir = Path(adapter_dir)
    f = adapter_dir / "adapter_model.safetensors"
    if not f.is_file():
        raise GradianError(
            "no adapter_model.safetensors", where=str(adapter_dir), fix="pass checkpoints saved with safetensors"
        )
    state = load_file(str(f))
    own = {n: p for n, p in model.named_parameters() if "lora_" in n}
    try:
        res = set_peft_model_state_dict(model, state)
    except RuntimeError as e:  # size mismatch
        raise GradianError(
            f"its LoRA tensors do not fit the loaded adapter ({str(e).splitlines()[-1].strip()})",
            where=str(f),
            fix="combine only checkpoints of one run (same r and target modules)",
        ) from e
    missing = [k for k in getattr(res, "missing_keys", []) if k in own]
    if missing:
        raise GradianError(
            f"it lacks {len(missing)} LoRA tensor(s) of the loaded adapter, e.g. {missing[0]}",
            where=str(f),
            fix="combine only checkpoints of one run (same r and target modules)",
        )
