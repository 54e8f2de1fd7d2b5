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
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import typer

from gradian.errors import GradianError

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


@dataclass
class TrainConfig:
    """Hyperparameters of a `gradian train` run. Defaults suit a small model on a CPU; override any of them."""

    lr: float = 2e-4
    epochs: float = 3.0
    max_steps: int = -1  # > 0 overrides epochs
    batch_size: int = 8
    eval_batch_size: int = 8
    grad_accum: int = 1
    max_length: int | None = 1024  # TRL SFTConfig default; None: no truncation
    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.05
    target_modules: list[str] | str = "all-linear"  # every linear projection except the output head
    use_rslora: bool = False
    seed: int = 42
    completion_only: bool = True  # loss on the completion only (prompt/completion rows)
    assistant_only: bool = False  # loss on assistant turns only (chat rows; needs {% generation %} markers)
    add_eos: bool = True  # append EOS to each completion / text (TRL >= 0.16)
    logging_steps: int = 10
    lr_scheduler_type: str = "linear"
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    eval_strategy: str = "epoch"  # when an eval file is given: "epoch", "steps" or "no"
    eval_steps: int | None = None
    save_steps: int | None = None  # > 0: also save checkpoint-<step>/ (adapter + trainer_state.json) every N steps
    bf16: bool = False
    fp16: bool = False
    gradient_checkpointing: bool = False
    cpu_threads: int | None = None  # torch.set_num_threads for this run (None: torch's default)

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}


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


def build_config(overrides: dict[str, Any] | None = None, *, where: str = "config") -> TrainConfig:
    """A :class:`TrainConfig` from defaults + ``overrides`` (already-normalized keys), with types checked."""
    cfg = TrainConfig()
    for key, value in (overrides or {}).items():
        if key in _PATH_KEYS:
            continue
        default = getattr(cfg, key)
        setattr(cfg, key, _coerce(key, value, default, where))
    if cfg.batch_size < 1 or cfg.grad_accum < 1 or cfg.eval_batch_size < 1:
        raise GradianError("batch sizes and grad_accum must be >= 1", where=where, fix="set them to 1 or more")
    if cfg.cpu_threads is not None and cfg.cpu_threads < 1:
        raise GradianError("cpu_threads must be >= 1", where=f"{where}: cpu_threads", fix="omit it or set e.g. 1")
    if cfg.save_steps is not None and cfg.save_steps < 1:
        raise GradianError("save_steps must be >= 1", where=f"{where}: save_steps", fix="omit it or set e.g. 50")
    if cfg.r < 1:
        raise GradianError("LoRA r must be >= 1", where=f"{where}: r", fix="set r to e.g. 8")
    if cfg.max_length is not None and cfg.max_length < 2:
        raise GradianError("max_length must be >= 2", where=f"{where}: max_length", fix="set e.g. 1024")
    if cfg.epochs <= 0 and cfg.max_steps <= 0:
        raise GradianError("nothing to train: epochs <= 0 and no max_steps", where=where, fix="set epochs > 0")
    return cfg


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
    config: TrainConfig | dict[str, Any] | None = None,
    exclude_rows: list[int] | str | Path | None = None,
    progress: bool = True,
    quiet: bool = False,
) -> TrainResult:
    """Fine-tune a LoRA adapter on ``base`` with the rows of ``train`` and write a HF output folder to ``out``.

    ``config`` is a :class:`TrainConfig` or a mapping of its keys (aliases such as ``learning_rate`` accepted).
    ``exclude_rows`` is a list of 0-based train row indices, or a file of them, to leave out (counterfactual runs).
    ``cpu_threads`` sets torch's thread count for this run only.
    """
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model
    from transformers import Trainer, TrainingArguments
    from transformers.utils import logging as hf_logging

    from gradian.data import load_tokenizer

    t0 = time.time()
    if config is None:
        cfg = TrainConfig()
    elif isinstance(config, TrainConfig):
        cfg = config
    else:
        cfg = build_config(normalize_config(dict(config)))
    exclude_file: str | None = None
    if isinstance(exclude_rows, str | Path):
        exclude_file = str(exclude_rows)
        exclude = read_exclude_rows(exclude_rows)
    else:
        exclude = sorted({int(i) for i in exclude_rows or []})

    base_s, train_p, out_p = str(base), Path(train), Path(out)
    if not train_p.exists():
        raise GradianError("train file not found", where=str(train), fix="check the path")
    if eval_path is not None and not Path(eval_path).exists():
        raise GradianError("eval file not found", where=str(eval_path), fix="check the path")
    if out_p.exists() and not out_p.is_dir():
        raise GradianError("--out exists and is a file", where=str(out), fix="pass a folder")

    tokenizer = load_tokenizer(base_s)
    examples, excluded, train_rows, skipped, n_trunc = _format(train_p, tokenizer, cfg, exclude, "train")
    eval_rows = None
    if eval_path is not None:
        _, _, eval_rows, _, _ = _format(Path(eval_path), tokenizer, cfg, None, "eval")

    if cfg.cpu_threads is not None:
        torch.set_num_threads(cfg.cpu_threads)
    transformers.set_seed(cfg.seed)
    hf_logging.set_verbosity_error()
    from gradian.attribute.loading import load_base_model

    model = load_base_model(base_s, torch.float32)
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
        model = get_peft_model(model, lora)
    except ValueError as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise GradianError(
            f"LoRA target_modules do not fit the model ({first[:200]})",
            where="target_modules",
            fix="use all-linear or module names such as q_proj,v_proj",
        ) from None

    has_eval = eval_rows is not None and cfg.eval_strategy != "no"
    arg_kwargs: dict[str, Any] = dict(
        output_dir=str(out_p),
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
    args = TrainingArguments(**{k: v for k, v in arg_kwargs.items() if k in accepted})
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=_Rows(train_rows),
        eval_dataset=_Rows(eval_rows) if has_eval and eval_rows else None,
        data_collator=_Collator(_pad_id(tokenizer)),
    )
    out_p.mkdir(parents=True, exist_ok=True)
    train_out = trainer.train()
    eval_loss = None
    if has_eval:
        last = [h for h in trainer.state.log_history if "eval_loss" in h]
        if last and last[-1].get("step") == trainer.state.global_step:
            eval_loss = last[-1]["eval_loss"]
        else:
            eval_loss = trainer.evaluate().get("eval_loss")

    model.save_pretrained(str(out_p))
    tokenizer.save_pretrained(str(out_p))
    trainer.save_state()

    pad_id = _pad_id(tokenizer)
    dump = args.to_dict()
    dump.update(
        {
            # TRL SFTConfig keys: how the rows were formatted (what diagnose reads)
            "max_length": cfg.max_length,
            "completion_only_loss": cfg.completion_only,
            "assistant_only_loss": cfg.assistant_only,
            "packing": False,
            "padding_free": False,
            "truncation_mode": "keep_start",
            "add_eos": cfg.add_eos,
            "eos_token": tokenizer.eos_token,
            "pad_token": tokenizer.convert_ids_to_tokens(pad_id),
            "padding_side": "right",
            # TRL ModelConfig-style keys for the adapter
            "model_name_or_path": base_s,
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
            "gradian_n_rows_loaded": len(examples) + len(excluded),
            "gradian_n_train_rows": len(train_rows),
            "gradian_excluded_rows": excluded,
            "gradian_exclude_rows_file": exclude_file,
            "gradian_skipped_rows": {str(k): v for k, v in sorted(skipped.items())},
            "gradian_n_truncated_rows": n_trunc,
            "gradian_config": asdict(cfg),
            "gradian_versions": {
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "peft": _version("peft"),
            },
        }
    )
    (out_p / "training_args.json").write_text(json.dumps(dump, indent=2, default=str) + "\n", "utf-8")

    result = TrainResult(
        out=out_p,
        n_rows_loaded=len(examples) + len(excluded),
        n_rows_trained=len(train_rows),
        excluded_rows=excluded,
        skipped_rows=skipped,
        n_truncated=n_trunc,
        global_step=trainer.state.global_step,
        train_loss=train_out.training_loss,
        eval_loss=eval_loss,
        seconds=time.time() - t0,
    )
    if not quiet:
        _print_summary(result)
    return result


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
    from rich.console import Console

    c = Console(stderr=True)
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


def train_command(
    base: str | None = typer.Option(None, "--base", help="Base model folder (or config key base)."),
    train: Path | None = typer.Option(None, "--train", help="Training rows (JSONL or any format gradian reads)."),
    eval_file: Path | None = typer.Option(None, "--eval", help="Eval rows (optional): eval_loss gets logged."),
    out: Path | None = typer.Option(None, "--out", help="Output folder (adapter, tokenizer, trainer_state.json)."),
    config: Path | None = typer.Option(None, "--config", help="YAML config; flags override its keys."),
    lr: float | None = typer.Option(None, "--lr", help="Learning rate (default 2e-4)."),
    epochs: float | None = typer.Option(None, "--epochs", help="Epochs (default 3)."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Stop after this many optimizer steps."),
    batch_size: int | None = typer.Option(None, "--batch-size", help="Per-device batch size (default 8)."),
    grad_accum: int | None = typer.Option(None, "--grad-accum", help="Gradient accumulation steps (default 1)."),
    max_length: int | None = typer.Option(None, "--max-length", help="Truncate rows to this many tokens (1024)."),
    r: int | None = typer.Option(None, "--r", help="LoRA rank (default 8)."),
    alpha: float | None = typer.Option(None, "--alpha", help="LoRA alpha (default 16)."),
    dropout: float | None = typer.Option(None, "--dropout", help="LoRA dropout (default 0.05)."),
    target_modules: str | None = typer.Option(
        None, "--target-modules", help="Comma-separated module names, or all-linear (default)."
    ),
    use_rslora: bool | None = typer.Option(None, "--use-rslora/--no-rslora", help="Rank-stabilized LoRA scaling."),
    seed: int | None = typer.Option(None, "--seed", help="Seed (default 42)."),
    completion_only: bool | None = typer.Option(
        None, "--completion-only/--full-loss", help="Loss on the completion only (default) or on every token."
    ),
    add_eos: bool | None = typer.Option(None, "--add-eos/--no-eos", help="Append EOS to completions (default on)."),
    logging_steps: int | None = typer.Option(None, "--logging-steps", help="Log every N steps (default 10)."),
    save_steps: int | None = typer.Option(
        None, "--save-steps", help="Also save checkpoint-<step>/ every N steps (default: final adapter only)."
    ),
    exclude_rows: Path | None = typer.Option(
        None, "--exclude-rows", help="File of 0-based train row indices to drop (JSON list or one per line)."
    ),
    cpu_threads: int | None = typer.Option(None, "--cpu-threads", help="torch threads on CPU (default: torch's)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
) -> None:
    """Fine-tune a LoRA adapter (transformers Trainer + PEFT, TRL-style formatting) and write a HF output folder."""
    values: dict[str, Any] = {}
    where = "flags"
    if config is not None:
        values.update(read_config_file(config))
        where = str(config)
    flags = {
        "base": base,
        "train": train,
        "eval": eval_file,
        "out": out,
        "exclude_rows": exclude_rows,
        "lr": lr,
        "epochs": epochs,
        "max_steps": max_steps,
        "batch_size": batch_size,
        "grad_accum": grad_accum,
        "max_length": max_length,
        "r": r,
        "alpha": alpha,
        "dropout": dropout,
        "target_modules": target_modules,
        "use_rslora": use_rslora,
        "seed": seed,
        "completion_only": completion_only,
        "add_eos": add_eos,
        "logging_steps": logging_steps,
        "save_steps": save_steps,
        "cpu_threads": cpu_threads,
    }
    values.update({k: v for k, v in flags.items() if v is not None})
    for key, flag in (("base", "--base"), ("train", "--train"), ("out", "--out")):
        if not values.get(key):
            raise GradianError(f"{flag} is required", where=flag, fix=f"pass {flag} or set {key} in --config")
    cfg = build_config(values, where=where)
    train_lora(
        values["base"],
        values["train"],
        values["out"],
        eval_path=values.get("eval"),
        config=cfg,
        exclude_rows=values.get("exclude_rows"),
        progress=not no_progress,
    )
