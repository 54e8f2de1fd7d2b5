"""`gradian train`: a small, honest LoRA SFT trainer (transformers ``Trainer`` + PEFT).

Why not TRL's ``SFTTrainer``: TRL is a heavy dependency (datasets, accelerate extras, its own version window) for what
is, for LoRA SFT on prompt/completion, chat or text rows, a tokenization step plus a padding collator. Gradian already
owns that tokenization: :func:`gradian.data.format_examples` reproduces TRL >= 0.16 ``SFTTrainer`` (EOS appended,
completion-only / assistant-only loss, keep-start truncation at ``max_length``), and ``diagnose`` and ``attribute``
read rows through the very same function. Training through it means the rows the trainer saw are, token for token,
the rows Gradian later explains.

What a run writes to ``--out`` (a standard Hugging Face output folder, readable by ``gradian diagnose --run``):

- ``adapter_config.json`` + ``adapter_model.safetensors`` (``PeftModel.save_pretrained``),
- the tokenizer (``save_pretrained``; unchanged: padding uses a pad id internally, the tokenizer gets no pad token),
- ``trainer_state.json`` (``Trainer.save_state()``: ``log_history`` with loss, grad_norm, learning_rate, eval_loss),
- ``training_args.json``: ``TrainingArguments.to_dict()`` plus the TRL ``SFTConfig`` keys that describe the
  formatting (``max_length``, ``completion_only_loss``, ``assistant_only_loss``, ``packing: false``, ``pad_token``),
  TRL ``ModelConfig``-style LoRA keys (``lora_r``, ``lora_alpha``, ...) and ``gradian_*`` keys (data files, rows
  used, rows excluded).
- with ``save_steps``, ``checkpoint-<step>/`` every ``save_steps`` optimizer steps, as the HF Trainer writes them
  (``save_only_model``: adapter, ``trainer_state.json`` and ``training_args.bin``; no optimizer state).

Padding is on the right with a pad id (the tokenizer's pad token, else ``<unk>``, else EOS); padded positions get
``attention_mask`` 0 and label -100, so an EOS used as pad is never masked out of the loss where it is a real label.
On CPU a run is deterministic given ``seed`` (LoRA init, shuffling and dropout are all seeded).
"""

from __future__ import annotations

import functools
import inspect
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import typer

from gradian.errors import GradianError
from gradian.options import OptionError, TrainOptions
from gradian.options.cli import given, options_command

# The config keys `--config FILE` accepts, with the other spellings users bring from TRL / HF / Axolotl.
_ALIASES: dict[str, str] = {
    "learning_rate": "lr",
    "num_train_epochs": "epochs",
    "num_epochs": "epochs",
    "per_device_train_batch_size": "batch_size",
    "micro_batch_size": "batch_size",
    "gradient_accumulation_steps": "grad_accum",
    "max_seq_length": "max_length",
    "sequence_len": "max_length",
    "lora_r": "r",
    "lora_rank": "r",
    "lora_alpha": "alpha",
    "lora_dropout": "dropout",
    "lora_target_modules": "target_modules",
    "completion_only_loss": "completion_only",
    "assistant_only_loss": "assistant_only",
    "per_device_eval_batch_size": "eval_batch_size",
    "exclude_rows_file": "exclude_rows",
    "eval_file": "eval",
    "train_file": "train",
    "base_model": "base",
    "model_name_or_path": "base",
    "output_dir": "out",
}
_PATH_KEYS = ("base", "train", "eval", "out", "exclude_rows")


TrainConfig = TrainOptions  # the hyperparameters of a run (gradian.options.TrainOptions: defaults, help, checks)


@dataclass
class TrainResult:
    out: Path
    n_rows_loaded: int
    n_rows_trained: int
    excluded_rows: list[int]
    skipped_rows: dict[int, str]  # row index -> why the trainer left it out (no label tokens, dropped as too long)
    n_truncated: int
    global_step: int
    train_loss: float | None
    eval_loss: float | None
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)


# --- config -------------------------------------------------------------------------------------------------------


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML (or JSON) mapping of config keys, normalized to :class:`TrainConfig` names (plus base/train/eval/out)."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise GradianError("config file not found", where=str(path), fix="check the path")
    try:
        data = yaml.safe_load(p.read_text("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise GradianError(f"cannot parse the config ({first})", where=str(path), fix="fix the YAML") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise GradianError("config must be a mapping of key: value", where=str(path), fix="write one key per line")
    return normalize_config(data, where=str(path))


def normalize_config(data: dict[str, Any], *, where: str = "config") -> dict[str, Any]:
    known = TrainConfig.field_names() | set(_PATH_KEYS)
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = _ALIASES.get(str(key), str(key))
        if name not in known:
            raise GradianError(
                f"unknown config key {key!r}",
                where=where,
                fix="use one of " + ", ".join(sorted(known)),
            )
        out[name] = value
    return out


def build_config(overrides: dict[str, Any] | None = None, *, where: str = "config") -> TrainOptions:
    """A :class:`TrainOptions` from defaults + ``overrides`` (already-normalized keys), with types checked; a bad value
    is one line naming ``where`` and the key."""
    defaults = TrainOptions()
    values = {
        key: _coerce(key, value, getattr(defaults, key), where)
        for key, value in (overrides or {}).items()
        if key not in _PATH_KEYS
    }
    try:
        return TrainOptions(**values)
    except OptionError as e:
        raise GradianError(e.message, where=f"{where}: {e.where}" if e.where else where, fix=e.fix) from None


def _coerce(key: str, value: Any, default: Any, where: str) -> Any:
    bad = GradianError(f"bad value {value!r} for {key}", where=f"{where}: {key}", fix=f"e.g. {key}: {default!r}")
    if key == "max_length":
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        try:
            return int(value)
        except (TypeError, ValueError):
            raise bad from None
    if key == "target_modules":
        if isinstance(value, str):
            v = value.strip()
            if v == "all-linear" or any(c in v for c in "()[]*|\\^$"):
                return v  # PEFT's "all-linear", or a regex
            return [s.strip() for s in v.split(",") if s.strip()]
        if isinstance(value, list | tuple) and all(isinstance(s, str) for s in value):
            return list(value)
        raise bad
    if key in ("eval_steps", "save_steps", "cpu_threads"):
        if value is None:
            return None
        try:
            return int(value)
        except (TypeError, ValueError):
            raise bad from None
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise bad
    if isinstance(default, int):
        try:
            f = float(value)
        except (TypeError, ValueError):
            raise bad from None
        if f != int(f):
            raise bad
        return int(f)
    if isinstance(default, float):
        try:
            return float(value)  # YAML reads "2e-4" as a string
        except (TypeError, ValueError):
            raise bad from None
    if isinstance(default, str):
        return str(value)
    return value


def read_exclude_rows(path: str | Path) -> list[int]:
    """Row indices (0-based, as :class:`gradian.data.Example.index`) from a JSON list or one integer per line.

    Lines may carry ``#`` comments; a JSON object with an ``indices`` / ``rows`` list is accepted too (what
    ``gradian attribute`` writes).
    """
    p = Path(path)
    if not p.is_file():
        raise GradianError("exclude-rows file not found", where=str(path), fix="check the path")
    text = p.read_text("utf-8").strip()
    if not text:
        return []
    if text[0] in "[{":
        try:
            data = json.loads(text)
        except ValueError as e:
            raise GradianError(f"invalid JSON ({e})", where=str(path), fix="write a JSON list of row indices") from None
        if isinstance(data, dict):
            data = data.get("indices", data.get("rows"))
        if not isinstance(data, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in data):
            raise GradianError(
                "expected a JSON list of integer row indices", where=str(path), fix="e.g. [3, 17, 42]"
            ) from None
        rows = data
    else:
        rows = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            s = line.split("#", 1)[0].strip().rstrip(",")
            if not s:
                continue
            try:
                rows.append(int(s))
            except ValueError:
                raise GradianError(
                    f"not a row index: {s!r}", where=f"{path} line {lineno}", fix="one 0-based row index per line"
                ) from None
    if any(i < 0 for i in rows):
        raise GradianError("row indices must be >= 0", where=str(path), fix="use 0-based row indices")
    return sorted(set(rows))


# --- training -----------------------------------------------------------------------------------------------------


def _pad_id(tokenizer: Any) -> int:
    for attr in ("pad_token_id", "unk_token_id", "eos_token_id"):
        v = getattr(tokenizer, attr, None)
        if v is not None:
            return int(v)
    return 0


class _Collator:
    """Right-pad ``input_ids`` with ``pad_id``; labels -100 and attention_mask 0 on padding."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, rows: list[dict[str, list[int]]]) -> dict[str, Any]:
        import torch

        n = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), n), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), n), -100, dtype=torch.long)
        attn = torch.zeros((len(rows), n), dtype=torch.long)
        for i, r in enumerate(rows):
            k = len(r["input_ids"])
            ids[i, :k] = torch.tensor(r["input_ids"], dtype=torch.long)
            labels[i, :k] = torch.tensor(r["labels"], dtype=torch.long)
            attn[i, :k] = 1
        return {"input_ids": ids, "labels": labels, "attention_mask": attn}


def _format(path: Path, tokenizer: Any, cfg: TrainConfig, exclude: list[int] | None, role: str):
    from gradian.data import FormatSettings, format_examples, load_examples

    examples = load_examples(path)
    if not examples:
        raise GradianError(f"{role} file has no rows", where=str(path), fix="point at a file with rows")
    excluded: list[int] = []
    if exclude:
        present = {ex.index for ex in examples}
        missing = [i for i in exclude if i not in present]
        if missing:
            raise GradianError(
                f"--exclude-rows names row indices not in the file ({', '.join(map(str, missing[:5]))}"
                + (", ..." if len(missing) > 5 else "")
                + f"; it has {len(examples)} rows, 0-based)",
                where=str(path),
                fix="use 0-based indices of the same train file",
            )
        drop = set(exclude)
        excluded = sorted(drop)
        examples = [ex for ex in examples if ex.index not in drop]
        if not examples:
            raise GradianError("--exclude-rows drops every row", where=str(path), fix="exclude fewer rows")
    settings = FormatSettings(
        max_length=cfg.max_length,
        mask="completion_only" if cfg.completion_only else "full",
        assistant_only=cfg.assistant_only,
        add_eos=cfg.add_eos,
    )
    formatted = format_examples(examples, tokenizer, settings)
    rows: list[dict[str, Any]] = []
    skipped: dict[int, str] = {}
    for fx in formatted:
        if fx.dropped:
            skipped[fx.index] = "dropped (longer than max_length)"
        elif fx.n_label_tokens == 0:
            skipped[fx.index] = "no tokens carry loss"
        else:
            rows.append({"input_ids": list(fx.input_ids), "labels": fx.labels(), "index": fx.index})
    if not rows:
        raise GradianError(
            f"no {role} row has any token that carries loss",
            where=str(path),
            fix="check max_length (prompts longer than it leave no completion) and the row format",
        )
    n_truncated = sum(1 for fx in formatted if fx.truncated)
    return examples, excluded, rows, skipped, n_truncated


class _Rows:
    """A map-style dataset over formatted rows (Trainer needs ``__len__``/``__getitem__``)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        r = self.rows[i]
        return {"input_ids": r["input_ids"], "labels": r["labels"]}


def _keeps_thread_count(fn):
    """``cpu_threads`` applies to one run: the process's torch thread count is restored afterwards."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import torch

        threads = torch.get_num_threads()
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    return wrapper


@_keeps_thread_count
def train_lora(
    base: str | Path,
    train: str | Path,
    out: str | Path,
    *,
    eval_path: str | Path | None = None,
    config: TrainOptions | dict[str, Any] | None = None,
    exclude_rows: list[int] | str | Path | None = None,
    progress: bool = True,
    quiet: bool = False,
) -> TrainResult:
    """Fine-tune a LoRA adapter on ``base`` with the rows of ``train`` and write a HF output folder to ``out``.

    ``config`` is a :class:`TrainOptions` or a mapping of its keys (aliases such as ``learning_rate`` accepted).
    ``exclude_rows`` is a list of 0-based train row indices, or a file of them, to leave out (counterfactual runs).
    ``cpu_threads`` sets torch's thread count for this run only.
    """
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    t0 = time.time()
    cfg = _as_config(config)
    exclude_file: str | None = None
    if isinstance(exclude_rows, str | Path):
        exclude_file = str(exclude_rows)
        exclude = read_exclude_rows(exclude_rows)
    else:
        exclude = sorted({int(i) for i in exclude_rows or []})
    out_p = Path(out)
    _check_paths(Path(train), eval_path, out_p)
    data = _TrainData.read(str(base), Path(train), eval_path, cfg, exclude)
    trainer, args = _trainer(str(base), data, cfg, out_p, progress)
    out_p.mkdir(parents=True, exist_ok=True)
    train_out = trainer.train()
    eval_loss = _final_eval_loss(trainer) if trainer.eval_dataset is not None else None
    trainer.model.save_pretrained(str(out_p))
    data.tokenizer.save_pretrained(str(out_p))
    trainer.save_state()
    dump = args.to_dict() | _run_record(str(base), train, eval_path, cfg, data, exclude_file)
    (out_p / "training_args.json").write_text(json.dumps(dump, indent=2, default=str) + "\n", "utf-8")
    result = TrainResult(
        out=out_p,
        n_rows_loaded=data.n_loaded,
        n_rows_trained=len(data.train_rows),
        excluded_rows=data.excluded,
        skipped_rows=data.skipped,
        n_truncated=data.n_truncated,
        global_step=trainer.state.global_step,
        train_loss=train_out.training_loss,
        eval_loss=eval_loss,
        seconds=time.time() - t0,
    )
    if not quiet:
        _print_summary(result)
    return result


def _as_config(config: TrainOptions | dict[str, Any] | None) -> TrainOptions:
    if config is None:
        return TrainOptions()
    if isinstance(config, TrainOptions):
        return config
    return build_config(normalize_config(dict(config)))


def _check_paths(train: Path, eval_path: str | Path | None, out: Path) -> None:
    if not train.exists():
        raise GradianError("train file not found", where=str(train), fix="check the path")
    if eval_path is not None and not Path(eval_path).exists():
        raise GradianError("eval file not found", where=str(eval_path), fix="check the path")
    if out.exists() and not out.is_dir():
        raise GradianError("--out exists and is a file", where=str(out), fix="pass a folder")


@dataclass
class _TrainData:
    """The tokenizer and the formatted rows a run trains (and evaluates) on."""

    tokenizer: Any
    n_loaded: int  # rows in the train file, excluded ones included
    excluded: list[int]
    train_rows: list[dict[str, Any]]
    skipped: dict[int, str]
    n_truncated: int
    eval_rows: list[dict[str, Any]] | None

    @classmethod
    def read(cls, base: str, train: Path, eval_path: str | Path | None, cfg: TrainOptions, exclude: list[int]):
        from gradian.data import load_tokenizer

        tokenizer = load_tokenizer(base)
        examples, excluded, train_rows, skipped, n_trunc = _format(train, tokenizer, cfg, exclude, "train")
        eval_rows = None
        if eval_path is not None:
            _, _, eval_rows, _, _ = _format(Path(eval_path), tokenizer, cfg, None, "eval")
        return cls(tokenizer, len(examples) + len(excluded), excluded, train_rows, skipped, n_trunc, eval_rows)


def _trainer(base: str, data: _TrainData, cfg: TrainOptions, out: Path, progress: bool) -> tuple[Any, Any]:
    """The HF ``Trainer`` over the PEFT model, and its ``TrainingArguments``."""
    import torch
    import transformers
    from transformers import Trainer
    from transformers.utils import logging as hf_logging

    if cfg.cpu_threads is not None:
        torch.set_num_threads(cfg.cpu_threads)
    transformers.set_seed(cfg.seed)
    hf_logging.set_verbosity_error()
    model = _peft_model(base, cfg)
    has_eval = data.eval_rows is not None and cfg.eval_strategy != "no"
    args = _training_arguments(cfg, out, has_eval, progress)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=_Rows(data.train_rows),
        eval_dataset=_Rows(data.eval_rows) if has_eval and data.eval_rows else None,
        data_collator=_Collator(_pad_id(data.tokenizer)),
    )
    return trainer, args


def _peft_model(base: str, cfg: TrainOptions) -> Any:
    import torch
    from peft import LoraConfig, get_peft_model

    from gradian.attribute.loading import load_base_model

    model = load_base_model(base, torch.float32)
    lora = LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,  # type: ignore[arg-type]  # peft types it int; a float alpha works (scale alpha / r)
        lora_dropout=cfg.dropout,
        target_modules=_resolve_targets(model, cfg.target_modules),
        use_rslora=cfg.use_rslora,
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, lora)
    except ValueError as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise GradianError(
            f"LoRA target_modules do not fit the model ({first[:200]})",
            where="target_modules",
            fix="use all-linear or module names such as q_proj,v_proj",
        ) from None


def _training_arguments(cfg: TrainOptions, out: Path, has_eval: bool, progress: bool) -> Any:
    """``TrainingArguments`` of a run, for the installed transformers (keys it does not know are left out)."""
    import torch
    from transformers import TrainingArguments

    arg_kwargs: dict[str, Any] = dict(
        output_dir=str(out),
        learning_rate=cfg.lr,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=cfg.eval_batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        lr_scheduler_type=cfg.lr_scheduler_type,
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        logging_steps=cfg.logging_steps,
        logging_strategy="steps",
        eval_strategy=cfg.eval_strategy if has_eval else "no",
        eval_steps=cfg.eval_steps,
        save_strategy="steps" if cfg.save_steps else "no",
        save_steps=cfg.save_steps or 500,
        save_only_model=True,  # adapter + trainer_state.json; no optimizer / RNG state
        report_to="none",
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=cfg.bf16,
        fp16=cfg.fp16,
        remove_unused_columns=False,
        dataloader_pin_memory=torch.cuda.is_available(),
        disable_tqdm=not progress,
        dataloader_num_workers=0,
    )
    accepted = inspect.signature(TrainingArguments.__init__).parameters
    if cfg.gradient_checkpointing:  # renamed activation_checkpointing in transformers 5
        key = "activation_checkpointing" if "activation_checkpointing" in accepted else "gradient_checkpointing"
        arg_kwargs[key] = True
    if cfg.warmup_ratio:
        if "warmup_ratio" in accepted:
            arg_kwargs["warmup_ratio"] = cfg.warmup_ratio
        else:  # transformers >= 5: warmup_steps takes a float ratio in [0, 1)
            arg_kwargs["warmup_steps"] = cfg.warmup_ratio
    return TrainingArguments(**{k: v for k, v in arg_kwargs.items() if k in accepted})


def _final_eval_loss(trainer: Any) -> float | None:
    """The eval loss at the last step: logged there already, else evaluated now."""
    last = [h for h in trainer.state.log_history if "eval_loss" in h]
    if last and last[-1].get("step") == trainer.state.global_step:
        return last[-1]["eval_loss"]
    return trainer.evaluate().get("eval_loss")


def _run_record(base: str, train: str | Path, eval_path: str | Path | None, cfg: TrainOptions, data: _TrainData,
                exclude_file: str | None) -> dict[str, Any]:  # fmt: skip
    """What ``training_args.json`` adds to ``TrainingArguments.to_dict()``: TRL SFTConfig and ModelConfig keys, and
    gradian's own record of the run."""
    import torch
    import transformers

    tokenizer = data.tokenizer
    return {
        # TRL SFTConfig keys: how the rows were formatted (what diagnose reads)
        "max_length": cfg.max_length,
        "completion_only_loss": cfg.completion_only,
        "assistant_only_loss": cfg.assistant_only,
        "packing": False,
        "padding_free": False,
        "truncation_mode": "keep_start",
        "add_eos": cfg.add_eos,
        "eos_token": tokenizer.eos_token,
        "pad_token": tokenizer.convert_ids_to_tokens(_pad_id(tokenizer)),
        "padding_side": "right",
        # TRL ModelConfig-style keys for the adapter
        "model_name_or_path": base,
        "use_peft": True,
        "lora_r": cfg.r,
        "lora_alpha": cfg.alpha,
        "lora_dropout": cfg.dropout,
        "lora_target_modules": cfg.target_modules,
        "use_rslora": cfg.use_rslora,
        # gradian's own record of the run
        "gradian_trainer": "gradian train (transformers Trainer + PEFT, TRL-compatible formatting)",
        "gradian_train_file": str(train),
        "gradian_eval_file": str(eval_path) if eval_path is not None else None,
        "gradian_n_rows_loaded": data.n_loaded,
        "gradian_n_train_rows": len(data.train_rows),
        "gradian_excluded_rows": data.excluded,
        "gradian_exclude_rows_file": exclude_file,
        "gradian_skipped_rows": {str(k): v for k, v in sorted(data.skipped.items())},
        "gradian_n_truncated_rows": data.n_truncated,
        "gradian_config": asdict(cfg),
        "gradian_versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": _version("peft"),
        },
    }


def _resolve_targets(model: Any, targets: list[str] | str) -> list[str] | str:
    """``"all-linear"`` as a sorted list of module names (every ``nn.Linear`` but the output head), so
    ``adapter_config.json`` is the same on every run; other values go to PEFT unchanged."""
    if targets != "all-linear":
        return targets
    import torch

    head = model.get_output_embeddings()
    names = {
        name.rsplit(".", 1)[-1]
        for name, mod in model.named_modules()
        if isinstance(mod, torch.nn.Linear) and mod is not head and name
    }
    return sorted(names) if names else targets


def _version(pkg: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def _print_summary(r: TrainResult) -> None:
    from gradian.console import make_console

    c = make_console(stderr=True)
    parts = [f"{r.n_rows_trained} rows", f"{r.global_step} steps", f"{r.seconds:.1f}s"]
    if r.train_loss is not None:
        parts.append(f"train loss {r.train_loss:.4f}")
    if r.eval_loss is not None:
        parts.append(f"eval loss {r.eval_loss:.4f}")
    c.print(f"[green]trained[/green] {', '.join(parts)} → {r.out}")
    if r.excluded_rows:
        c.print(f"excluded {len(r.excluded_rows)} rows (--exclude-rows)")
    if r.n_truncated:
        c.print(f"[yellow]{r.n_truncated} rows truncated at max_length[/yellow] (see `gradian diagnose`)")
    if r.skipped_rows:
        c.print(f"[yellow]{len(r.skipped_rows)} rows left out[/yellow] (no loss tokens or dropped)")


# --- CLI ----------------------------------------------------------------------------------------------------------


@options_command(cfg=given(TrainOptions))
def train_command(
    base: str | None = typer.Option(None, "--base", help="Base model folder (or config key base)."),
    train: Path | None = typer.Option(None, "--train", help="Training rows (JSONL or any format gradian reads)."),
    eval_file: Path | None = typer.Option(None, "--eval", help="Eval rows (optional): eval_loss gets logged."),
    out: Path | None = typer.Option(None, "--out", help="Output folder (adapter, tokenizer, trainer_state.json)."),
    config: Path | None = typer.Option(None, "--config", help="YAML config; flags override its keys."),
    cfg: dict[str, Any] | None = None,
    exclude_rows: Path | None = typer.Option(
        None, "--exclude-rows", help="File of 0-based train row indices to drop (JSON list or one per line)."
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
) -> None:
    """Fine-tune a LoRA adapter (transformers Trainer + PEFT, TRL-style formatting) and write a HF output folder.
    Each option defaults to the --config file's key, else to the default shown."""
    values: dict[str, Any] = read_config_file(config) if config is not None else {}
    paths = {"base": base, "train": train, "eval": eval_file, "out": out, "exclude_rows": exclude_rows}
    values.update({k: v for k, v in {**paths, **(cfg or {})}.items() if v is not None})
    for key, flag in (("base", "--base"), ("train", "--train"), ("out", "--out")):
        if not values.get(key):
            raise GradianError(f"{flag} is required", where=flag, fix=f"pass {flag} or set {key} in --config")
    train_lora(
        values["base"],
        values["train"],
        values["out"],
        eval_path=values.get("eval"),
        config=build_config(values, where=str(config) if config is not None else "flags"),
        exclude_rows=values.get("exclude_rows"),
        progress=not no_progress,
    )
