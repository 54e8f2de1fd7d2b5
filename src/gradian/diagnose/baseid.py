"""Whether the base given is the base an adapter was trained on, by content: the model config (architecture, sizes,
layer count, vocabulary), the shapes the adapter's LoRA weights need against the base's modules, and, where both
bases are local and small, a hash of their weights. A name is only a name: a local copy of a hub model is the same
base. Only safetensors headers are read (never the weights, except to hash a small base)."""

from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# config.json keys that must agree for an adapter to fit (absent on either side: not compared).
CONFIG_KEYS = ("model_type", "architectures", "hidden_size", "num_hidden_layers", "intermediate_size",
               "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size")  # fmt: skip
HASH_MAX_BYTES = 256 * 2**20  # hash both bases' weights when each is at most this size
_LAYER = re.compile(r"\.\d+\.")  # a layer index inside a module path
_LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(.+?)\.(lora_A|lora_B|lora_embedding_A|lora_embedding_B)(?:\.|$)")


@dataclass
class BaseComparison:
    """What comparing the given base with the adapter's record found. ``compared`` names what was checked;
    ``config_diffs`` (key, recorded, given), ``shape_diffs`` (module, what the adapter needs, what the base has) and
    ``missing`` (LoRA modules the base has no weight for) are the mismatches; ``same_weights`` is None where not
    hashed."""

    compared: list[str] = field(default_factory=list)
    config_diffs: list[tuple[str, Any, Any]] = field(default_factory=list)
    shape_diffs: list[tuple[str, str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    lora_modules: int = 0
    shapes_compared: bool = False
    same_weights: bool | None = None

    @property
    def mismatched(self) -> bool:
        return bool(self.config_diffs or self.shape_diffs or self.missing)


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from a safetensors header; empty when unreadable."""
    try:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            if n > 100_000_000:
                return {}
            header = json.loads(f.read(n))
    except (OSError, ValueError, struct.error):
        return {}
    if not isinstance(header, dict):
        return {}
    return {k: list(v["shape"]) for k, v in header.items() if isinstance(v, dict) and "shape" in v}


def weight_files(base_dir: Path) -> list[Path]:
    """A local base's safetensors files (one model.safetensors, or the shards)."""
    return sorted(p for p in base_dir.glob("*.safetensors") if p.name != "adapter_model.safetensors")


def recorded_config(name: str) -> dict[str, Any]:
    """config.json of the base an adapter records: a local folder, else the Hugging Face cache (never the network)."""
    if not name:
        return {}
    local = Path(name).expanduser()
    path: Path | None = local / "config.json" if local.is_dir() else None
    if path is None and re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(name, "config.json")
        except Exception:  # noqa: BLE001 - no hub library, a malformed cache: nothing to compare
            cached = None
        path = Path(cached) if isinstance(cached, str) else None
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _base_tensor(shapes: dict[str, list[int]], module: str) -> list[int] | None:
    """The base weight behind an adapter module path, allowing for a prefix one side adds (``model.``)."""
    candidates = [module, module.split(".", 1)[-1], f"model.{module}"]
    for c in candidates:
        if f"{c}.weight" in shapes:
            return shapes[f"{c}.weight"]
    tail = f".{module.split('.', 1)[-1]}.weight"
    hits = [k for k in shapes if k.endswith(tail)]
    if len(hits) == 1:
        return shapes[hits[0]]
    if module.endswith("lm_head"):  # tied embeddings: the output layer is the input embedding
        emb = [k for k in shapes if k.endswith("embed_tokens.weight")]
        return shapes[emb[0]] if len(emb) == 1 else None
    return None


def compare_shapes(adapter: dict[str, list[int]], base: dict[str, list[int]], fan_in_fan_out: bool,
                   out: BaseComparison) -> None:  # fmt: skip
    """Each LoRA A / B weight against the base module it adapts: A is [r, in], B is [out, r]."""
    modules: dict[str, dict[str, list[int]]] = {}
    for key, lora_shape in adapter.items():
        m = _LORA_KEY.match(key)
        if m and len(lora_shape) == 2:
            modules.setdefault(m.group(1), {})[m.group(2)] = lora_shape
    out.lora_modules = len(modules)
    if not modules:
        return
    found = {m: _base_tensor(base, m) for m in modules}
    kinds = {_LAYER.sub(".N.", m) for m, s in found.items() if s is not None}
    if sum(1 for m in modules if _LAYER.sub(".N.", m) in kinds) * 2 < len(modules):
        return  # the module names do not line up (another saving convention): no verdict from shapes
    out.shapes_compared = True
    out.compared.append(f"the {len(modules)} LoRA target shapes")
    for module, parts in modules.items():
        shape = found[module]
        if shape is None:
            out.missing.append(module)
            continue
        if len(shape) != 2:
            continue
        embedding = "lora_embedding_A" in parts or "lora_embedding_B" in parts
        fan_in, fan_out = (shape[0], shape[1]) if embedding or fan_in_fan_out else (shape[1], shape[0])
        a = parts.get("lora_A") or parts.get("lora_embedding_A")
        b = parts.get("lora_B") or parts.get("lora_embedding_B")
        need_in, need_out = (a[1] if a else None), (b[0] if b else None)
        if (need_in is not None and need_in != fan_in) or (need_out is not None and need_out != fan_out):
            out.shape_diffs.append((module, f"in {need_in} / out {need_out}", f"in {fan_in} / out {fan_out}"))


def compare_configs(recorded: dict[str, Any], given: dict[str, Any], out: BaseComparison) -> None:
    keys = [k for k in CONFIG_KEYS if recorded.get(k) is not None and given.get(k) is not None]
    if not keys:
        return
    out.compared.append("config (" + ", ".join(keys) + ")")
    out.config_diffs += [(k, recorded[k], given[k]) for k in keys if recorded[k] != given[k]]


def _digest(files: list[Path]) -> str | None:
    if not files or sum(p.stat().st_size for p in files) > HASH_MAX_BYTES:
        return None
    h = hashlib.sha256()
    for p in files:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


def compare_bases(recorded: str, given: str, given_config: dict[str, Any], adapter_weights: Path | None,
                  fan_in_fan_out: bool) -> BaseComparison:  # fmt: skip
    """Compare the base the adapter records (``recorded``: a name or folder) with the one given."""
    out = BaseComparison()
    given_dir = Path(given).expanduser() if given and Path(given).expanduser().is_dir() else None
    compare_configs(recorded_config(recorded), given_config, out)
    base_shapes: dict[str, list[int]] = {}
    for f in weight_files(given_dir) if given_dir is not None else []:
        base_shapes.update(safetensors_shapes(f))
    if adapter_weights is not None and base_shapes:
        compare_shapes(safetensors_shapes(adapter_weights), base_shapes, fan_in_fan_out, out)
    recorded_dir = Path(recorded).expanduser() if recorded and Path(recorded).expanduser().is_dir() else None
    if given_dir is not None and recorded_dir is not None and not out.mismatched:
        a, b = _digest(weight_files(recorded_dir)), _digest(weight_files(given_dir))
        if a is not None and b is not None:
            out.same_weights = a == b
            out.compared.append("the weights' sha256")
    return out
