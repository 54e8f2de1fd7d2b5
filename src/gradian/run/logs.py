"""The trainer's log history from trainer_state.json, LLaMA-Factory's trainer_log.jsonl or TensorBoard events."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradian.errors import GradianError
from gradian.numbers import as_float
from gradian.run.textfiles import load_json_file
from gradian.run.types import LogPoint, RunArtifacts, TrainerLogs

_SUMMARY_KEYS = {"train_loss", "train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos"}


def _point_from(entry: dict[str, Any], step: int, *, lr_key: str = "learning_rate") -> LogPoint:
    point = LogPoint(step=step, epoch=as_float(entry.get("epoch")))
    point.loss = as_float(entry.get("loss"))
    point.grad_norm = as_float(entry.get("grad_norm"))
    point.learning_rate = as_float(entry.get(lr_key))
    point.eval_loss = as_float(entry.get("eval_loss"))
    skip = {"epoch", "step", "loss", "grad_norm", lr_key, "eval_loss", "current_steps", "total_steps"}
    for key, value in entry.items():
        if key in skip:
            continue
        number = as_float(value)
        if number is not None and not isinstance(value, str):
            point.extra[key] = number
    return point


def read_trainer_state(path: str | Path) -> TrainerLogs:
    """HF ``trainer_state.json``: train entries (loss, grad_norm, learning_rate), eval entries (eval_loss) and the
    final summary (train_loss, train_runtime, ...). Bare NaN / Infinity are accepted."""
    path = Path(path)
    data = load_json_file(path)
    if not isinstance(data, dict):
        raise GradianError(
            f"expected a JSON object at the top level, got a {type(data).__name__}",
            where=str(path),
            fix="pass the trainer_state.json the HF Trainer wrote",
        )
    history = data.get("log_history")
    if history is None:
        history = []
    if not isinstance(history, list):
        raise GradianError(
            f"log_history is a {type(history).__name__}, not a list",
            where=f"{path}: log_history",
            fix="pass the trainer_state.json the HF Trainer wrote",
        )
    logs = TrainerLogs(source=str(path))
    max_steps = data.get("max_steps")
    if isinstance(max_steps, int) and not isinstance(max_steps, bool) and max_steps > 0:
        logs.total_steps = max_steps
    for i, entry in enumerate(history):
        if not isinstance(entry, dict):
            raise GradianError(
                f"log_history entry {i} is a {type(entry).__name__}, not an object",
                where=f"{path}: log_history[{i}]",
                fix="repair or remove that entry",
            )
        if _SUMMARY_KEYS & entry.keys() and "loss" not in entry and "eval_loss" not in entry:
            logs.summary.update({k: v for k, v in entry.items() if k not in ("epoch", "step")})
            continue
        step = entry.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            step_f = as_float(step)
            if step_f is None or not math.isfinite(step_f):
                raise GradianError(
                    f"log_history entry {i} has no integer step (step={step!r})",
                    where=f"{path}: log_history[{i}].step",
                    fix="repair or remove that entry",
                )
            step = int(step_f)
        logs.points.append(_point_from(entry, step))
    for key in ("global_step", "epoch", "num_train_epochs", "train_batch_size", "logging_steps", "eval_steps"):
        if key in data and key not in logs.summary:
            logs.summary[key] = data[key]
    return logs


def read_trainer_log_jsonl(path: str | Path) -> TrainerLogs:
    """LLaMA-Factory ``trainer_log.jsonl``: one object per line with current_steps, total_steps, loss / eval_loss,
    lr and epoch."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise GradianError(f"cannot read the file ({exc})", where=str(path), fix="check the path") from exc
    logs = TrainerLogs(source=str(path))
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GradianError(
                f"invalid JSON at line {lineno} column {exc.colno}: {exc.msg}",
                where=str(path),
                fix="repair or delete that line",
            ) from exc
        if not isinstance(entry, dict):
            raise GradianError(
                f"line {lineno} is a {type(entry).__name__}, not an object",
                where=str(path),
                fix="repair or delete that line",
            )
        step = entry.get("current_steps")
        if not isinstance(step, int) or isinstance(step, bool):
            raise GradianError(
                f"line {lineno} has no integer current_steps (got {step!r})",
                where=str(path),
                fix="repair or delete that line",
            )
        total = entry.get("total_steps")
        if isinstance(total, int) and not isinstance(total, bool) and total > 0:
            logs.total_steps = total
        point = _point_from(entry, step, lr_key="lr")
        for key in ("percentage", "elapsed_time", "remaining_time"):
            point.extra.pop(key, None)
        if point.loss is None and point.eval_loss is None and point.grad_norm is None and point.learning_rate is None:
            continue
        logs.points.append(point)
    return logs


@dataclass
class TensorBoardRead:
    logs: TrainerLogs
    args: dict[str, Any] | None = None  # the "args" text summary (TrainingArguments as JSON)
    notes: list[str] = field(default_factory=list)


def tensorboard_available() -> bool:
    from importlib.util import find_spec

    try:
        return find_spec("tensorboard") is not None
    except (ImportError, ValueError):
        return False


def read_tensorboard(path: str | Path) -> TensorBoardRead:
    """Scalars tagged train/<key> and eval/<key>, and the "args" text summary, from one events file.

    Needs the optional ``tensorboard`` package (``pip install 'gradian[tensorboard]'``)."""
    path = Path(path)
    if not tensorboard_available():
        raise GradianError(
            "reading TensorBoard events needs the tensorboard package",
            where=str(path),
            fix="pip install 'gradian[tensorboard]', or pass trainer_state.json with --logs",
        )
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util import tensor_util

    acc = event_accumulator.EventAccumulator(
        str(path), size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0}
    )
    try:
        acc.Reload()
    except Exception as exc:  # corrupt record, truncated file
        raise GradianError(
            f"unreadable TensorBoard events ({type(exc).__name__}: {exc})",
            where=str(path),
            fix="pass trainer_state.json with --logs instead",
        ) from exc
    tags = acc.Tags()
    by_step: dict[int, dict[str, float]] = {}
    summary: dict[str, Any] = {}
    for tag in tags.get("scalars", []):
        if "/" not in tag:
            continue
        group, key = tag.split("/", 1)
        if group not in ("train", "eval"):
            continue
        name = key if group == "train" else f"eval_{key}"
        for event in acc.Scalars(tag):
            if group == "train" and name in _SUMMARY_KEYS:
                summary[name] = event.value
                continue
            by_step.setdefault(int(event.step), {})[name] = event.value
    args = None
    notes: list[str] = []
    for tag in tags.get("tensors", []):
        if tag.split("/", 1)[0] != "args":
            continue
        for event in acc.Tensors(tag):
            try:
                value = tensor_util.make_ndarray(event.tensor_proto)
                text = value.item() if value.size == 1 else value.flatten()[0]
                text = text.decode("utf-8") if isinstance(text, bytes) else str(text)
                parsed = json.loads(text)
            except Exception:  # noqa: BLE001 - a malformed args summary is only a note
                notes.append(f'{path.name}: the "args" text summary is not JSON; ignored it')
                continue
            if isinstance(parsed, dict):
                args = parsed
        break
    logs = TrainerLogs(source=str(path), summary=summary)
    for step in sorted(by_step):
        values = by_step[step]
        epoch = values.get("epoch")
        train = {k: v for k, v in values.items() if not k.startswith("eval_") and k != "epoch"}
        evals = {k: v for k, v in values.items() if k.startswith("eval_")}
        if train:
            logs.points.append(_point_from({**train, "epoch": epoch}, step))
        if evals:
            logs.points.append(_point_from({**evals, "epoch": epoch}, step))
    return TensorBoardRead(logs=logs, args=args, notes=notes)


def read_log_file(path: str | Path) -> TrainerLogs:
    """Whichever log format ``path`` is, by name."""
    path = Path(path)
    if path.name.startswith("events.out.tfevents"):
        return read_tensorboard(path).logs
    if path.suffix == ".jsonl":
        return read_trainer_log_jsonl(path)
    return read_trainer_state(path)


def load_logs(artifacts: RunArtifacts) -> TrainerLogs:
    """The run's trainer logs: ``artifacts.log_file`` (trainer_state.json, trainer_log.jsonl or TensorBoard events).

    An empty :class:`TrainerLogs` when there is none. A TensorBoard file when tensorboard is not installed is skipped
    with a note in ``artifacts.notes``. ``total_steps`` falls back to trainer_state.json's max_steps when the logs
    came from elsewhere."""
    path = artifacts.log_file
    if path is None:
        return TrainerLogs()
    if path.name.startswith("events.out.tfevents") and not tensorboard_available():
        note = f"skipped TensorBoard logs {path} (pip install 'gradian[tensorboard]' to read them)"
        if note not in artifacts.notes:
            artifacts.notes.append(note)
        return TrainerLogs()
    if path.name.startswith("events.out.tfevents"):
        tb = read_tensorboard(path)
        artifacts.notes.extend(n for n in tb.notes if n not in artifacts.notes)
        logs = tb.logs
    else:
        logs = read_log_file(path)
    if logs.total_steps is None and artifacts.trainer_state is not None and artifacts.trainer_state != path:
        try:
            state = load_json_file(artifacts.trainer_state)
            if isinstance(state, dict) and isinstance(state.get("max_steps"), int) and state["max_steps"] > 0:
                logs.total_steps = state["max_steps"]
        except GradianError:
            pass
    return logs
