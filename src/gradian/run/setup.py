"""Turn the config files of a run into one normalized :class:`TrainingSetup`, and that into :class:`FormatSettings`.

Precedence, lowest first: TensorBoard "args", training_args.bin, JSON dumps (training_args.json, sft_config.json),
YAML (Axolotl / LLaMA-Factory), then ``--config``; adapter_config.json wins for the LoRA fields (it is what PEFT
actually saved). Framework defaults fill what no file set, with a source like ``"axolotl default"``:

- TRL (SFTConfig): max_length 1024; completion_only_loss=None means loss on the completion only for
  prompt/completion rows; assistant_only_loss False; packing False; EOS appended (TRL >= 0.16).
- Axolotl: sequence_len 512, over-long rows dropped, rows without labels kept unless packing; train_on_inputs false
  (prompt masked; assistant turns only for ``type: chat_template``); sample_packing false; micro_batch_size 1;
  gradient_accumulation_steps 1; num_epochs 1; lr_scheduler cosine; val_set_size 0.
- LLaMA-Factory: cutoff_len 2048; train_on_prompt false; ``template`` picks the slots rows are encoded with;
  finetuning_type lora with lora_rank 8, lora_alpha 2 x rank, lora_dropout 0, lora_target all; packing off;
  val_size 0; gradient checkpointing on with use_reentrant_gc true; HF defaults for learning_rate (5e-5), epochs (3),
  batch size (8), scheduler (linear).
- transformers Trainer: no max length or masking of its own (the user's collator decides); nothing assumed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from gradian.data.types import FormatSettings
from gradian.errors import GradianError
from gradian.numbers import as_float
from gradian.options.train import TRL_MAX_LENGTH
from gradian.run.configs import (
    AXOLOTL_DEPRECATED,
    AXOLOTL_KEYS,
    HF_DEPRECATED,
    LLAMAFACTORY_KEYS,
    ConfigFile,
    read_config,
)
from gradian.run.types import RunArtifacts, TrainingSetup
from gradian.run.versions import (
    RecordedVersion,
    VersionWindow,
    card_versions,
    check_window,
    parse_version,
    trl_range_from_config,
    trl_range_from_fields,
)

# trl/trainer/sft_trainer.py: 0.15.2 :432 tokenizes the text as it is; 0.16.0 :456 appends eos_token_id when the
# tokenized row does not end with it.
TRL_APPENDS_EOS = VersionWindow("trl", (0, 16), "appends EOS to string rows", "append none", ("0.15.2", "0.16.0"))

_MISSING = object()
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_ATTN = {
    "flash_attention": "flash_attention_2",
    "sdp_attention": "sdpa",
    "flex_attention": "flex_attention",
    "eager_attention": "eager",
    "xformers_attention": "xformers",
}
_LF_ATTN = {"fa2": "flash_attention_2", "sdpa": "sdpa", "disabled": "eager", "fa3": "flash_attention_3"}


# --- typed getters: a wrong type is a one-line error naming the file, line and key ---------------------------------


def _type_error(cf: ConfigFile, key: str, value: Any, want: str, example: str) -> GradianError:
    return GradianError(
        f"expected {want}, got {value!r}", where=cf.where(key), fix=f"set {key} to {want}, e.g. {key}: {example}"
    )


def _float(cf: ConfigFile, key: str, data: dict[str, Any] | None = None) -> Any:
    value = (cf.data if data is None else data).get(key, _MISSING)
    if value is _MISSING or value is None:
        return value
    number = as_float(value)
    if number is None:
        raise _type_error(cf, key, value, "a number", "2.0e-4")
    return number


def _int(cf: ConfigFile, key: str, data: dict[str, Any] | None = None) -> Any:
    value = (cf.data if data is None else data).get(key, _MISSING)
    if value is _MISSING or value is None:
        return value
    if isinstance(value, bool):
        raise _type_error(cf, key, value, "an integer", "8")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            number = float(value)
            if number.is_integer():
                return int(number)
        except ValueError:
            pass
    raise _type_error(cf, key, value, "an integer", "8")


def _bool(cf: ConfigFile, key: str, data: dict[str, Any] | None = None) -> Any:
    value = (cf.data if data is None else data).get(key, _MISSING)
    if value is _MISSING or value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _type_error(cf, key, value, "true or false", "true")


def _str(cf: ConfigFile, key: str, data: dict[str, Any] | None = None) -> Any:
    value = (cf.data if data is None else data).get(key, _MISSING)
    if value is _MISSING or value is None:
        return value
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise _type_error(cf, key, value, "a string", '"cosine"')


def _modules(cf: ConfigFile, key: str, data: dict[str, Any] | None = None, *, comma: bool = False) -> Any:
    """A module list, or a regex / "all-linear" string; LLaMA-Factory writes comma-separated strings."""
    value = (cf.data if data is None else data).get(key, _MISSING)
    if value is _MISSING or value is None:
        return value
    if isinstance(value, str):
        if comma:
            if value.strip() == "all":
                return "all-linear"
            return [v.strip() for v in value.split(",") if v.strip()]
        return value
    if isinstance(value, (list, tuple, set)) and all(isinstance(v, str) for v in value):
        return sorted(value) if isinstance(value, set) else list(value)
    raise _type_error(cf, key, value, "a list of module names", "[q_proj, v_proj]")


# --- accumulating values with their sources -------------------------------------------------------------------------


class _Builder:
    def __init__(self) -> None:
        self.setup = TrainingSetup()
        self.flags: dict[str, tuple[Any, str]] = {}  # masking inputs: key -> (value, source)

    def set(self, name: str, value: Any, source: str, *, allow_none: bool = False) -> None:
        if value is _MISSING or (value is None and not allow_none):
            return
        old = getattr(self.setup, name)
        old_src = self.setup.sources.get(name)
        if old is not None and value is not None and old != value and old_src and not old_src.endswith("default"):
            self.setup.notes.append(f"{name}: {value!r} in {source} overrides {old!r} in {old_src}")
        setattr(self.setup, name, value)
        self.setup.sources[name] = source

    def default(self, name: str, value: Any, source: str) -> None:
        if name not in self.setup.sources:
            setattr(self.setup, name, value)
            self.setup.sources[name] = source

    def flag(self, key: str, value: Any, source: str) -> None:
        if value is not _MISSING:
            self.flags[key] = (value, source)

    def deprecated(self, key: str) -> None:
        if key not in self.setup.deprecated_keys:
            self.setup.deprecated_keys.append(key)


def _src(cf: ConfigFile, key: str) -> str:
    return f"{cf.name}: {key}"


def _positive_int(cf: ConfigFile, key: str) -> Any:
    """An int key that counts only when > 0 (max_steps: -1 and 0 mean "use the epochs")."""
    value = _int(cf, key)
    return value if value not in (_MISSING, None) and value > 0 else _MISSING


_modules_comma = partial(_modules, comma=True)  # LLaMA-Factory: "q_proj,v_proj"

# A framework's mapping as data: (TrainingSetup field, the config's key, the typed getter that reads it), applied in
# order (a later row overrides an earlier one for the same field, with a note).
Mapping = tuple[tuple[str, str, Callable[[ConfigFile, str], Any]], ...]


def _set_all(b: _Builder, cf: ConfigFile, mapping: Mapping) -> None:
    for name, key, get in mapping:
        b.set(name, get(cf, key), _src(cf, key))


def _precision(b: _Builder, cf: ConfigFile) -> None:
    bf16 = cf.data.get("bf16")
    if isinstance(bf16, str) and bf16.strip().lower() == "auto":
        b.set("precision", "bf16", f"{cf.name}: bf16 (auto: bf16 where the GPU supports it)")
        return
    bf16 = _bool(cf, "bf16")
    fp16 = _bool(cf, "fp16")
    if bf16 is True:
        b.set("precision", "bf16", _src(cf, "bf16"))
    elif fp16 is True:
        b.set("precision", "fp16", _src(cf, "fp16"))
    elif bf16 is False and fp16 in (False, _MISSING, None):
        b.set("precision", "fp32", _src(cf, "bf16"))


def _warmup(b: _Builder, cf: ConfigFile) -> None:
    steps = cf.data.get("warmup_steps", _MISSING)
    if isinstance(steps, float) and 0 < steps < 1:  # transformers 5: a float below 1 is a ratio
        b.set("warmup_ratio", steps, _src(cf, "warmup_steps"))
    else:
        b.set("warmup_steps", _int(cf, "warmup_steps"), _src(cf, "warmup_steps"))
    ratio = _float(cf, "warmup_ratio")
    if ratio not in (_MISSING, None):
        b.set("warmup_ratio", ratio, _src(cf, "warmup_ratio"))


def _checkpointing(b: _Builder, cf: ConfigFile) -> None:
    for key in ("gradient_checkpointing", "activation_checkpointing"):
        value = cf.data.get(key, _MISSING)
        if isinstance(value, str) and value.lower().startswith("offload"):
            b.set("gradient_checkpointing", True, _src(cf, key))
        elif value is not _MISSING:
            b.set("gradient_checkpointing", _bool(cf, key), _src(cf, key))
    for key in ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"):
        kwargs = cf.data.get(key)
        if isinstance(kwargs, str):  # a JSON dump of old versions may hold it as a string
            import json

            try:
                kwargs = json.loads(kwargs)
            except ValueError:
                kwargs = None
        if isinstance(kwargs, dict) and "use_reentrant" in kwargs:
            b.set("use_reentrant", _bool(cf, "use_reentrant", kwargs), f"{cf.name}: {key}.use_reentrant")


def _eval_strategy(b: _Builder, cf: ConfigFile) -> None:
    old = _str(cf, "evaluation_strategy")
    if old not in (_MISSING, None):
        b.deprecated("evaluation_strategy")
        b.set("eval_strategy", old, _src(cf, "evaluation_strategy"))
    new = _str(cf, "eval_strategy")
    if new not in (_MISSING, None):
        b.set("eval_strategy", new, _src(cf, "eval_strategy"))


_HF_TRAINING: Mapping = (  # TrainingArguments (TRL, transformers, LLaMA-Factory)
    ("learning_rate", "learning_rate", _float),
    ("num_epochs", "num_train_epochs", _float),
    ("max_steps", "max_steps", _positive_int),
    ("per_device_batch_size", "per_device_train_batch_size", _int),
    ("gradient_accumulation_steps", "gradient_accumulation_steps", _int),
    ("seed", "seed", _int),
    ("scheduler", "lr_scheduler_type", _str),
)
_HF_SFT: Mapping = (  # TRL's SFTConfig
    ("packing", "packing", _bool),
    ("packing_strategy", "packing_strategy", _str),
    ("truncation_mode", "truncation_mode", _str),
    ("dataset_text_field", "dataset_text_field", _str),
)
_AXOLOTL_TRAINING: Mapping = (
    ("base_model", "base_model", _str),
    ("learning_rate", "learning_rate", _float),
    ("num_epochs", "num_epochs", _float),
    ("max_steps", "max_steps", _positive_int),
    ("per_device_batch_size", "micro_batch_size", _int),
    ("gradient_accumulation_steps", "gradient_accumulation_steps", _int),
    ("world_size", "world_size", _int),
)
_AXOLOTL_LORA_TARGETS: Mapping = (
    ("lora_r", "lora_r", _int),
    ("lora_alpha", "lora_alpha", _float),
    ("lora_dropout", "lora_dropout", _float),
    ("target_modules", "lora_target_modules", _modules),
)
_AXOLOTL_LORA_VARIANT: Mapping = (
    ("use_rslora", "peft_use_rslora", _bool),
    ("use_dora", "peft_use_dora", _bool),
    ("modules_to_save", "lora_modules_to_save", _modules),
)
_LLAMAFACTORY_LORA: Mapping = (
    ("lora_r", "lora_rank", _int),
    ("lora_alpha", "lora_alpha", _float),
    ("lora_dropout", "lora_dropout", _float),
    ("target_modules", "lora_target", _modules_comma),
    ("modules_to_save", "additional_target", _modules_comma),
    ("use_rslora", "use_rslora", _bool),
    ("use_dora", "use_dora", _bool),
)
_PEFT_LORA: Mapping = (  # adapter_config.json
    ("lora_r", "r", _int),
    ("lora_alpha", "lora_alpha", _float),
    ("lora_dropout", "lora_dropout", _float),
    ("target_modules", "target_modules", _modules),
    ("use_rslora", "use_rslora", _bool),
    ("use_dora", "use_dora", _bool),
    ("modules_to_save", "modules_to_save", _modules),
)


def _common_hf(b: _Builder, cf: ConfigFile) -> None:
    """TrainingArguments keys, shared by TRL / transformers dumps and LLaMA-Factory YAML."""
    _set_all(b, cf, _HF_TRAINING)
    _warmup(b, cf)
    _checkpointing(b, cf)
    _eval_strategy(b, cf)
    _precision(b, cf)
    for key in HF_DEPRECATED:
        if key in ("evaluation_strategy", "max_seq_length"):
            continue
        if cf.data.get(key) not in (None, False, "", "auto", _MISSING) and key in cf.data:
            b.deprecated(key)


def _apply_hf(b: _Builder, cf: ConfigFile) -> None:
    """A TrainingArguments / SFTConfig dump (JSON, training_args.bin or TensorBoard "args")."""
    _common_hf(b, cf)
    data = cf.data
    if "max_seq_length" in data and data["max_seq_length"] is not None:
        b.set("max_length", _int(cf, "max_seq_length"), _src(cf, "max_seq_length"))
        b.set("max_length_key", "max_seq_length", _src(cf, "max_seq_length"))
        b.deprecated("max_seq_length")
    elif "max_length" in data and cf.framework == "trl":
        b.set("max_length", _int(cf, "max_length"), _src(cf, "max_length"), allow_none=True)  # None: no truncation
        b.set("max_length_key", "max_length", _src(cf, "max_length"))
    elif "max_seq_length" in data:  # TRL < 0.16 with max_seq_length None: min(model_max_length, 1024)
        b.set("max_length", TRL_MAX_LENGTH, f"{cf.name}: max_seq_length (null: TRL default {TRL_MAX_LENGTH})")
    _set_all(b, cf, _HF_SFT)
    eos = _str(cf, "eos_token")
    if eos != "<EOS_TOKEN>":  # TrainingArguments.to_dict writes every *_token field as "<KEY_TOKEN>", set or not
        b.set("eos_token", eos, _src(cf, "eos_token"))
    b.set("completion_only_loss", _bool(cf, "completion_only_loss"), _src(cf, "completion_only_loss"))
    b.flag("completion_only_loss", _bool(cf, "completion_only_loss"), _src(cf, "completion_only_loss"))
    b.flag("assistant_only_loss", _bool(cf, "assistant_only_loss"), _src(cf, "assistant_only_loss"))
    init = data.get("model_init_kwargs")
    if isinstance(init, dict) and isinstance(init.get("attn_implementation"), str):
        b.set("attn_implementation", init["attn_implementation"], f"{cf.name}: model_init_kwargs.attn_implementation")
    if cf.framework == "axolotl":  # AxolotlTrainingArguments carry some of the YAML's keys
        _set_all(b, cf, (("packing", "sample_packing", _bool), ("max_length", "sequence_len", _int)))


def _apply_axolotl(b: _Builder, cf: ConfigFile) -> None:
    data = cf.data
    _set_all(b, cf, _AXOLOTL_TRAINING)
    seq = _int(cf, "sequence_len")
    if seq not in (_MISSING, None):
        b.set("max_length", seq, _src(cf, "sequence_len"))
        b.set("max_length_key", "sequence_len", _src(cf, "sequence_len"))
    b.set("packing", _bool(cf, "sample_packing"), _src(cf, "sample_packing"))
    b.flag("train_on_inputs", _bool(cf, "train_on_inputs"), _src(cf, "train_on_inputs"))
    _set_all(b, cf, _AXOLOTL_LORA_TARGETS)
    if _bool(cf, "lora_target_linear") is True:
        b.set("target_modules", "all-linear", _src(cf, "lora_target_linear"))
    _set_all(b, cf, _AXOLOTL_LORA_VARIANT)
    _precision(b, cf)
    b.set("scheduler", _str(cf, "lr_scheduler"), _src(cf, "lr_scheduler"))
    _warmup(b, cf)
    _checkpointing(b, cf)
    _eval_strategy(b, cf)
    _set_all(b, cf, (("eval_size", "val_set_size", _float), ("seed", "seed", _int)))
    if isinstance(data.get("attn_implementation"), str):
        b.set("attn_implementation", data["attn_implementation"], _src(cf, "attn_implementation"))
    for key, impl in _ATTN.items():
        if _bool(cf, key) is True:
            b.set("attn_implementation", impl, _src(cf, key))
    datasets = data.get("datasets")
    if datasets is not None:
        if not isinstance(datasets, list) or not all(isinstance(d, dict) for d in datasets):
            raise GradianError(
                f"expected a list of {{path, type}} entries, got {datasets!r}"[:200],
                where=cf.where("datasets"),
                fix="write datasets as a list, e.g. datasets: [{path: train.jsonl, type: alpaca}]",
            )
        types = [str(d.get("type")) for d in datasets if isinstance(d.get("type"), str)]
        b.flag("chat_template", any(t.startswith("chat_template") for t in types), _src(cf, "datasets"))
    special = data.get("special_tokens")
    if special is not None and not isinstance(special, dict):
        raise _type_error(cf, "special_tokens", special, "a mapping", "{eos_token: </s>}")
    for key in data:
        if key not in AXOLOTL_KEYS and key not in b.setup.unknown_keys:
            b.setup.unknown_keys.append(key)
        if key in AXOLOTL_DEPRECATED and data[key] is not None:
            b.deprecated(key)
    if data.get("adapter") in (None, ""):
        b.setup.notes.append(f"{cf.name}: no adapter key, so Axolotl trains all parameters (not LoRA)")


def _apply_llamafactory(b: _Builder, cf: ConfigFile) -> None:
    data = cf.data
    _common_hf(b, cf)
    b.set("base_model", _str(cf, "model_name_or_path"), _src(cf, "model_name_or_path"))
    cutoff = _int(cf, "cutoff_len")
    if cutoff not in (_MISSING, None):
        b.set("max_length", cutoff, _src(cf, "cutoff_len"))
        b.set("max_length_key", "cutoff_len", _src(cf, "cutoff_len"))
    b.flag("train_on_prompt", _bool(cf, "train_on_prompt"), _src(cf, "train_on_prompt"))
    b.set("packing", _bool(cf, "packing"), _src(cf, "packing"))
    if _bool(cf, "neat_packing") is True:
        b.set("packing", True, _src(cf, "neat_packing"))
    b.set("eval_size", _float(cf, "val_size"), _src(cf, "val_size"))
    b.flag("finetuning_type", _str(cf, "finetuning_type"), _src(cf, "finetuning_type"))
    _set_all(b, cf, _LLAMAFACTORY_LORA)
    flash = _str(cf, "flash_attn")
    if flash in _LF_ATTN:
        b.set("attn_implementation", _LF_ATTN[flash], _src(cf, "flash_attn"))
    disable = _bool(cf, "disable_gradient_checkpointing")
    if disable not in (_MISSING, None):
        b.set("gradient_checkpointing", not disable, _src(cf, "disable_gradient_checkpointing"))
    b.set("use_reentrant", _bool(cf, "use_reentrant_gc"), _src(cf, "use_reentrant_gc"))
    for key in data:
        if key not in LLAMAFACTORY_KEYS and key not in b.setup.unknown_keys:
            b.setup.unknown_keys.append(key)


def _apply_adapter_config(b: _Builder, config: dict[str, Any], name: str = "adapter_config.json") -> None:
    cf = ConfigFile(path=Path(name), kind="adapter_config", framework=None, data=config)
    _set_all(b, cf, _PEFT_LORA)
    for key in ("rank_pattern", "alpha_pattern"):
        value = config.get(key)
        if value is not None and not isinstance(value, dict):
            raise _type_error(cf, key, value, "a mapping of module pattern to value", "{q_proj: 16}")
    base = _str(cf, "base_model_name_or_path")
    if base not in (_MISSING, None) and b.setup.base_model is None:
        b.set("base_model", base, _src(cf, "base_model_name_or_path"))


def _read_all(artifacts: RunArtifacts, notes: list[str]) -> list[ConfigFile]:
    files: list[ConfigFile] = []
    for path in artifacts.config_files:
        try:
            files.append(read_config(path))
        except GradianError as exc:
            if path.name == "training_args.bin" and path != artifacts.config_explicit:
                notes.append(f"skipped {path}: {exc.message}")  # a discovered pickle is a bonus, not a must
                continue
            raise
    if not files and artifacts.tensorboard_files:
        from gradian.run.logs import read_tensorboard, tensorboard_available

        path = artifacts.tensorboard_files[-1]
        if not tensorboard_available():
            notes.append(f"skipped TensorBoard args in {path} (pip install 'gradian[tensorboard]' to read them)")
        else:
            tb = read_tensorboard(path)
            notes.extend(tb.notes)
            if tb.args:
                from gradian.run.configs import hf_framework

                files.append(ConfigFile(path=path, kind="tensorboard_args", framework=hf_framework(tb.args),
                                        data=tb.args))  # fmt: skip
    return files


def _versions(b: _Builder, artifacts: RunArtifacts, files: list[ConfigFile]) -> None:
    """The versions the run recorded: ``*_version`` config keys, adapter_config's peft_version, the model cards'
    lists, a full fine-tune's config.json; the first source found wins, a disagreeing later one is noted."""
    found: list[RecordedVersion] = []
    peft = artifacts.adapter_config.get("peft_version")
    if isinstance(peft, str) and peft:
        found.append(RecordedVersion("peft", peft.split("@")[0], "adapter_config.json: peft_version"))
    for cf in files:
        for lib in ("transformers", "trl", "peft", "axolotl", "llamafactory", "torch"):
            value = cf.data.get(f"{lib}_version")
            if isinstance(value, str) and value:
                found.append(RecordedVersion(lib, value, _src(cf, f"{lib}_version")))
    for card in artifacts.model_cards:
        found += card_versions(card)
    if artifacts.adapter_dir is not None:
        found += _config_json_version(artifacts.adapter_dir / "config.json")
    for rv in found:
        have = b.setup.versions.get(rv.package)
        if have is None:
            b.setup.versions[rv.package] = rv.version
            b.setup.sources[f"versions.{rv.package}"] = rv.source
        elif parse_version(have) != parse_version(rv.version):
            b.setup.notes.append(f"{rv.source} says {rv.package} {rv.version}; using {have} from "
                                 f"{b.setup.sources[f'versions.{rv.package}']}")  # fmt: skip
    if "trl" not in b.setup.versions:
        implied = trl_range_from_config(b.setup.packing_strategy, b.setup.sources.get("packing_strategy"))
        pickled = [trl_range_from_fields(cf.data, cf.path.name) for cf in files if cf.kind == "training_args_bin"]
        implied = implied or next((r for r in pickled if r is not None), None)
        if implied is not None:
            b.setup.version_ranges["trl"] = implied
    b.setup.notes.append(_versions_note(b.setup))


def _config_json_version(cfg: Path) -> list[RecordedVersion]:
    """transformers_version of a config.json saved next to the weights (only a full fine-tune saves one)."""
    if not cfg.is_file():
        return []
    try:
        import json

        value = json.loads(cfg.read_text(encoding="utf-8")).get("transformers_version")
    except (ValueError, OSError, AttributeError):
        return []
    return (
        [RecordedVersion("transformers", value, "config.json: transformers_version")] if isinstance(value, str) else []
    )


def _versions_note(setup: TrainingSetup) -> str:
    """One line for diagnose to print: the versions the run recorded and where, or that it recorded none, and what
    its config implies."""
    implied = "".join(f"; {r.label(p)} implied by {r.source}" for p, r in setup.version_ranges.items())
    if not setup.versions:
        return ("the run recorded no library versions (no model card README.md, no *_version key): checks that "
                f"depend on a version say so instead of assuming one{implied}")  # fmt: skip
    by_source: dict[str, list[str]] = {}
    for package, version in setup.versions.items():
        by_source.setdefault(setup.sources.get(f"versions.{package}", "?"), []).append(f"{package} {version}")
    listed = "; ".join(f"{', '.join(v)} ({src})" for src, v in by_source.items())
    trainer = (setup.framework or "").lower()
    missing = "" if not trainer or trainer in setup.versions or trainer == "transformers" else (
        f"; no {trainer} version recorded"
    )  # fmt: skip
    return f"versions recorded by the run: {listed}{missing}{implied}"


def _framework(files: list[ConfigFile], artifacts: RunArtifacts) -> tuple[str | None, str | None]:
    for cf in reversed(files):  # highest precedence first
        if cf.kind in ("axolotl_yaml", "llamafactory_yaml"):
            return cf.framework, cf.name
    for cf in reversed(files):
        if cf.framework in ("trl", "axolotl", "llamafactory"):
            return cf.framework, cf.name
    if artifacts.log_file is not None and artifacts.log_file.name == "trainer_log.jsonl":
        return "llamafactory", "trainer_log.jsonl"
    for cf in reversed(files):
        if cf.framework:
            return cf.framework, cf.name
    return None, None


def _defaults_and_masking(b: _Builder, framework: str | None) -> None:
    s = b.setup
    flags = b.flags
    if framework == "trl":
        d = "TRL default"
        if "max_length" not in s.sources:
            b.default("max_length", TRL_MAX_LENGTH, f"{d} (max_length {TRL_MAX_LENGTH})")
        b.default("packing", False, d)
        if s.packing:
            b.default("packing_strategy", "bfd", f"{d} (packing_strategy bfd)")
            s.notes.append(_packing_note(s.packing_strategy))
        b.default("add_eos", True, f"{d} (EOS appended since TRL 0.16)")
        assistant = flags.get("assistant_only_loss", (None, ""))
        completion = flags.get("completion_only_loss", (None, ""))
        if assistant[0] is True:
            b.set("masking", "assistant_only", assistant[1])
        elif completion[0] is False:
            b.set("masking", "full", completion[1])
        else:
            src = completion[1] or f"{d} (completion_only_loss=None: prompt masked for prompt/completion rows)"
            b.set("masking", "completion_only", src)
    elif framework == "axolotl":
        d = "axolotl default"
        if "max_length" not in s.sources:
            b.default("max_length", 512, f"{d} (sequence_len 512)")
        for name, value in (("per_device_batch_size", 1), ("gradient_accumulation_steps", 1), ("num_epochs", 1.0),
                            ("scheduler", "cosine"), ("packing", False), ("eval_size", 0.0),
                            ("add_eos", True)):  # fmt: skip
            b.default(name, value, d)
        if s.lora_r is not None:
            b.default("lora_dropout", 0.0, d)
        train_on_inputs = flags.get("train_on_inputs", (False, f"{d} (train_on_inputs false)"))
        chat = flags.get("chat_template", (False, ""))
        if train_on_inputs[0] is True:
            b.set("masking", "full", train_on_inputs[1])
        elif chat[0]:
            b.set("masking", "assistant_only", f"{chat[1]} (type chat_template, train_on_inputs false)")
        else:
            b.set("masking", "completion_only", train_on_inputs[1])
    elif framework == "llamafactory":
        d = "LLaMA-Factory default"
        if "max_length" not in s.sources:
            b.default("max_length", 2048, f"{d} (cutoff_len 2048)")
        finetuning = flags.get("finetuning_type", ("lora", d))[0]
        if finetuning == "lora":
            b.default("lora_r", 8, f"{d} (lora_rank 8)")
            b.default("lora_alpha", float(2 * (s.lora_r or 8)), f"{d} (lora_alpha = 2 x lora_rank)")
            b.default("lora_dropout", 0.0, d)
            b.default("target_modules", "all-linear", f"{d} (lora_target all)")
        else:
            s.notes.append(f"finetuning_type {finetuning}: not a LoRA run")
        for name, value in (("packing", False), ("eval_size", 0.0), ("learning_rate", 5e-5), ("num_epochs", 3.0),
                            ("per_device_batch_size", 8), ("gradient_accumulation_steps", 1),
                            ("scheduler", "linear"), ("gradient_checkpointing", True), ("use_reentrant", True),
                            ("add_eos", True)):  # fmt: skip
            b.default(name, value, d)
        train_on_prompt = flags.get("train_on_prompt", (False, f"{d} (train_on_prompt false)"))
        b.set("masking", "full" if train_on_prompt[0] else "completion_only", train_on_prompt[1])


def _packing_note(strategy: str | None) -> str:
    """What TRL's packing changes about the rows, for diagnose to say."""
    if strategy == "bfd":
        return (
            "packing (bfd): TRL packs whole rows into sequences of max_length tokens; each row keeps its first "
            "max_length tokens whatever truncation_mode says, and rows with no label are not dropped; padding-free "
            "attention keeps rows apart, so attribution scores each row on its own"
        )
    return (
        f"packing ({strategy}): TRL cuts rows across packed sequences of max_length tokens, so a row's tokens are "
        "trained in pieces, without the context before the cut; attribute refuses this run (a row's loss is not its "
        "own)"
    )


def load_setup(artifacts: RunArtifacts) -> TrainingSetup:
    """The normalized training setup from every config file ``artifacts`` lists plus adapter_config.json."""
    b = _Builder()
    files = _read_all(artifacts, b.setup.notes)
    framework, where = _framework(files, artifacts)
    # precedence: TensorBoard args < training_args.bin < JSON < YAML < --config (discovery already put it last)
    order = {"tensorboard_args": 0, "training_args_bin": 1, "hf_json": 2, "axolotl_yaml": 3, "llamafactory_yaml": 3}
    explicit = files[-1] if files and artifacts.config_files and files[-1].path == artifacts.config_files[-1] else None
    ranked = sorted(files, key=lambda cf: (cf is explicit, order.get(cf.kind, 0)))
    for cf in ranked:
        if cf.kind == "axolotl_yaml":
            _apply_axolotl(b, cf)
        elif cf.kind == "llamafactory_yaml":
            _apply_llamafactory(b, cf)
        else:
            _apply_hf(b, cf)
        b.setup.raw.update(cf.data)
        b.setup.config_files.append(str(cf.path))
    if artifacts.adapter_config:
        _apply_adapter_config(b, artifacts.adapter_config)
        b.setup.raw["adapter_config"] = dict(artifacts.adapter_config)
    if b.setup.base_model is None and artifacts.base:
        b.set("base_model", artifacts.base, "--base / discovery")
    b.setup.framework = framework
    if framework:
        b.setup.sources["framework"] = where or ""
    _defaults_and_masking(b, framework)
    _versions(b, artifacts, files)
    return b.setup


def _eos_decision(setup: TrainingSetup) -> tuple[bool, str]:
    """Whether the trainer appended EOS to string rows, and why: one decision for diagnose and attribute alike.

    The plain transformers Trainer (the user's own tokenization; HF tokenizers add no EOS) and TRL < 0.16 append
    none; TRL >= 0.16, Axolotl and LLaMA-Factory do. A config that sets it explicitly wins."""
    src = setup.sources.get("add_eos") or ""
    if setup.add_eos is not None and "default" not in src:
        return setup.add_eos, src
    fw = (setup.framework or "").lower()
    if fw == "transformers":
        return False, "transformers Trainer: the tokenizer appends no EOS"
    trl = check_window(setup.versions, setup.sources, TRL_APPENDS_EOS, setup.version_ranges)
    if fw == "trl" and trl.inside is False:
        return False, f"{trl.note()}: {TRL_APPENDS_EOS.describe()}"
    if setup.add_eos is not None:
        return setup.add_eos, src
    if trl.known:
        return True, f"{trl.note()}: {TRL_APPENDS_EOS.label} appends EOS"
    return True, f"default ({trl.note()}; {TRL_APPENDS_EOS.label} appends EOS)"


def format_settings(setup: TrainingSetup) -> FormatSettings:
    """How the trainer turned rows into tokens, from the setup (TRL >= 0.16 defaults where nothing is known).

    The one place that decides it: diagnose, attribute and ``gradian tokens`` all format rows with these settings."""
    fs = FormatSettings()
    src = fs.sources
    fw = setup.framework
    if "max_length" in setup.sources:
        fs.max_length = setup.max_length
        src["max_length"] = setup.sources["max_length"]
    else:
        src["max_length"] = f"default (TRL: {TRL_MAX_LENGTH})"
    if setup.masking is not None:
        fs.mask = "full" if setup.masking == "full" else "completion_only"
        fs.assistant_only = setup.masking == "assistant_only" or (
            fw in ("axolotl", "llamafactory") and setup.masking != "full"
        )
        src["mask"] = src["assistant_only"] = setup.sources.get("masking", "")
        if fw == "trl" and fs.assistant_only and setup.completion_only_loss is False:
            fs.mask = "full"  # TRL: assistant mask only; the completion mask needs completion_only_loss
            src["mask"] = setup.sources.get("completion_only_loss", "")
    else:
        src["mask"] = "default (TRL: completion_only_loss=None)"
        src["assistant_only"] = "default (TRL: assistant_only_loss=False)"
    fs.add_eos, src["add_eos"] = _eos_decision(setup)
    if fw == "axolotl":
        strategy = str(setup.raw.get("excess_length_strategy") or "drop").lower()
        fs.drop_long = strategy == "drop"
        src["drop_long"] = (
            "config: excess_length_strategy" if "excess_length_strategy" in setup.raw
            else "axolotl default (over-long rows are dropped)"
        )  # fmt: skip
    else:
        src["drop_long"] = f"{fw or 'TRL'} truncates over-long rows"
    if setup.truncation_mode in ("keep_start", "keep_end"):
        fs.truncation_mode = setup.truncation_mode  # type: ignore[assignment]
        src["truncation_mode"] = setup.sources.get("truncation_mode", "")
    if setup.dataset_text_field:
        fs.text_field = setup.dataset_text_field
        src["text_field"] = setup.sources.get("dataset_text_field", "")
    if setup.eos_token:
        fs.eos_token = setup.eos_token
        src["eos_token"] = setup.sources.get("eos_token", "")
    if fw in ("axolotl", "llamafactory"):
        fs.sharegpt_roles = "map"
        src["sharegpt_roles"] = f"{fw} maps ShareGPT roles (human -> user, gpt -> assistant)"
    if setup.packing:
        fs.packing = setup.packing_strategy or "bfd"
        src["packing"] = setup.sources.get("packing_strategy") or setup.sources.get("packing", "")
    fs.drop_unlabeled = fw not in ("llamafactory", "axolotl")
    src["drop_unlabeled"] = {
        "llamafactory": "LLaMA-Factory keeps rows without labels",
        "axolotl": "Axolotl drops rows without labels only when it packs (sample_packing)",
    }.get(fw or "", "TRL drops rows left fully masked after truncation")
    if fw in ("axolotl", "llamafactory"):
        fs.trainer = fw  # type: ignore[assignment]
        src["trainer"] = f"{fw}: its own tokenization rules"
    if fw == "llamafactory" and isinstance(setup.raw.get("template"), str):
        fs.template = setup.raw["template"]
        src["template"] = "config: template"
    return fs
