"""What run discovery finds, the normalized training setup and the trainer's logs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradian.run.versions import VersionRange


@dataclass
class TrainingSetup:
    """The training configuration, whatever file it came from (TRL/HF JSON, Axolotl or LLaMA-Factory YAML,
    training_args.bin, TensorBoard "args", adapter_config.json). ``None`` means unknown. ``sources`` maps each known
    field to where its value came from, e.g. ``"axolotl.yml: learning_rate"``."""

    framework: str | None = None  # "trl" | "transformers" | "axolotl" | "llamafactory"
    base_model: str | None = None
    learning_rate: float | None = None
    num_epochs: float | None = None
    max_steps: int | None = None
    per_device_batch_size: int | None = None
    gradient_accumulation_steps: int | None = None
    world_size: int | None = None
    max_length: int | None = None
    max_length_key: str | None = None  # the key the user set (max_seq_length / max_length / sequence_len / cutoff_len)
    packing: bool | None = None
    packing_strategy: str | None = None  # TRL packing_strategy: "bfd" (default), "bfd_split", "wrapped"
    masking: str | None = None  # "completion_only" | "assistant_only" | "full"
    add_eos: bool | None = None
    completion_only_loss: bool | None = None  # TRL's flag as set (None: the default, on for prompt/completion rows)
    truncation_mode: str | None = None  # TRL truncation_mode: "keep_start" | "keep_end"
    dataset_text_field: str | None = None  # TRL dataset_text_field (the column of text rows)
    eos_token: str | None = None  # TRL SFTConfig.eos_token (replaces the tokenizer's EOS)
    lora_r: int | None = None
    lora_alpha: float | None = None
    lora_dropout: float | None = None
    target_modules: list[str] | str | None = None  # list, or a regex string as PEFT allows
    use_rslora: bool | None = None
    use_dora: bool | None = None
    modules_to_save: list[str] | None = None
    precision: str | None = None  # "bf16" | "fp16" | "fp32"
    scheduler: str | None = None
    warmup_steps: int | None = None
    warmup_ratio: float | None = None
    gradient_checkpointing: bool | None = None
    use_reentrant: bool | None = None
    eval_strategy: str | None = None
    eval_size: float | None = None  # val_set_size / val_size
    seed: int | None = None
    attn_implementation: str | None = None
    versions: dict[str, str] = field(default_factory=dict)  # package -> version the run recorded (sources: where)
    version_ranges: dict[str, VersionRange] = field(default_factory=dict)  # implied by the config, where unrecorded
    raw: dict[str, Any] = field(default_factory=dict)  # merged raw keys of every config file read
    unknown_keys: list[str] = field(default_factory=list)
    deprecated_keys: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    config_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # config files skipped, conflicts between sources, defaults used

    @property
    def effective_batch_size(self) -> int | None:
        if self.per_device_batch_size is None:
            return None
        return self.per_device_batch_size * (self.gradient_accumulation_steps or 1) * (self.world_size or 1)


@dataclass
class LogPoint:
    """One logged step: a train entry (loss, grad_norm, learning_rate) or an eval entry (eval_loss)."""

    step: int
    epoch: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    learning_rate: float | None = None
    eval_loss: float | None = None
    extra: dict[str, float] = field(default_factory=dict)


@dataclass
class TrainerLogs:
    """The trainer's log history (trainer_state.json, trainer_log.jsonl or TensorBoard scalars)."""

    points: list[LogPoint] = field(default_factory=list)
    source: str | None = None
    total_steps: int | None = None  # max_steps from trainer_state / total_steps from trainer_log.jsonl
    summary: dict[str, Any] = field(default_factory=dict)  # train_loss, train_runtime, ...

    @property
    def train(self) -> list[LogPoint]:
        return [p for p in self.points if p.loss is not None or p.grad_norm is not None]

    @property
    def eval(self) -> list[LogPoint]:
        return [p for p in self.points if p.eval_loss is not None]


@dataclass
class RunArtifacts:
    """What `--run DIR` (plus explicit flags) resolved to. Paths are None where nothing was found."""

    run_dir: Path | None = None
    adapter_dir: Path | None = None
    adapter_config: dict[str, Any] = field(default_factory=dict)
    adapter_weights: Path | None = None  # adapter_model.safetensors only
    adapter_weights_pickle: Path | None = None  # adapter_model.bin: recorded, never unpickled
    trainer_state: Path | None = None
    checkpoints: list[Path] = field(default_factory=list)  # checkpoint-* dirs, oldest first
    config_files: list[Path] = field(default_factory=list)
    config_explicit: Path | None = None  # the one given with --config (always last in config_files)
    log_file: Path | None = None  # trainer_state.json, trainer_log.jsonl or a TensorBoard events file
    tensorboard_files: list[Path] = field(default_factory=list)  # events.out.tfevents.* found under the run
    tokenizer_dir: Path | None = None
    model_cards: list[Path] = field(default_factory=list)  # README.md the trainer wrote (adapter, run, checkpoint)
    base: str | None = None  # --base, else adapter_config.base_model_name_or_path
    train_file: Path | None = None
    eval_file: Path | None = None
    notes: list[str] = field(default_factory=list)
