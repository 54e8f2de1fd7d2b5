"""Which adapter states `gradian attribute --checkpoints` combines, and the weight of each.

TracIn (Pruthi et al. 2020) and LESS (Xia et al. 2024) sum influence over checkpoints, each weighted by the learning
rate of the training it stands for. Here checkpoint c stands for the optimizer steps in (previous selected step,
step_c], and its weight is the sum of the learning rate over those steps, normalised so all weights sum to 1.

The learning rate of each step comes from, in order:

1. the ``learning_rate`` values logged in the newest trainer_state.json (or the run's trainer_log.jsonl /
   TensorBoard logs), piecewise constant: a step takes the value logged at the latest step at or before it, and
   steps before the first logged value take that first value (the HF Trainer logs the rate each step used);
2. the configured learning rate and scheduler (linear, cosine, constant, constant_with_warmup, with warmup) from the
   run's config files, rebuilt as the HF Trainer's schedule;
3. nothing: equal weights.

Nothing here imports torch or unpickles a file: an ``adapter_model.bin`` is never loaded.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gradian.errors import GradianError
from gradian.run.discovery import checkpoint_step
from gradian.run.logs import load_logs, read_trainer_state
from gradian.run.types import RunArtifacts, TrainerLogs

_STEP = re.compile(r"^\d+$")
_SCHEDULES = ("linear", "cosine", "constant", "constant_with_warmup")


@dataclass
class CheckpointChoice:
    """One adapter state to attribute through, and its share of the combined score."""

    path: Path  # the adapter dir to load (a checkpoint-* dir, or the run's final adapter dir)
    step: int | None  # global step (None for a final adapter with no known step)
    lr: float | None  # mean learning rate over the steps this checkpoint stands for
    steps: int  # optimizer steps it stands for (since the previous selected checkpoint)
    weight: float  # normalised: all weights sum to 1
    how: str  # one line: where the weight came from


def select_checkpoints(art: RunArtifacts, spec: str = "last") -> tuple[list[CheckpointChoice], list[str]]:
    """The adapter states ``spec`` names (``"last"``, ``"all"``, or a comma list of steps, checkpoint-* names or
    paths), oldest first, with learning-rate weights; and notes on what was skipped or assumed.

    ``"last"`` is the adapter gradian uses anyway (``art.adapter_dir``), weight 1. ``"all"`` is every checkpoint-*
    dir with adapter_config.json + adapter_model.safetensors (others are skipped with a note), plus the run's final
    adapter when its weights differ from every checkpoint's (sha256 of adapter_model.safetensors)."""
    notes: list[str] = []
    text = (spec or "").strip()
    if not text:
        raise GradianError("empty checkpoint selection", where="--checkpoints", fix="pass last, all or e.g. 200,400")
    if text.lower() == "last":
        if art.adapter_dir is None:
            raise GradianError("no PEFT adapter found", where="--checkpoints last", fix="pass --adapter DIR or --run")
        _check_adapter(art.adapter_dir, "--checkpoints last")
        picked = [(_dir_step(art, art.adapter_dir, notes), art.adapter_dir)]
    elif text.lower() == "all":
        picked = _all(art, notes)
    else:
        picked = _listed(art, text, notes)
    picked.sort(key=lambda sp: (sp[0] is None, sp[0] or 0))
    return _weigh(art, picked, notes), notes


# --- which dirs ---------------------------------------------------------------------------------------------------


def _adapter_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be loaded as an adapter state, or None when it can."""
    if not (folder / "adapter_config.json").is_file():
        return f"no adapter_config.json in {folder}"
    if (folder / "adapter_model.safetensors").is_file():
        return None
    if (folder / "adapter_model.bin").is_file():
        return (
            f"{folder / 'adapter_model.bin'} is a pickle, which gradian never loads "
            "(re-save it with save_pretrained(safe_serialization=True))"
        )
    return f"no adapter_model.safetensors in {folder}"


def _check_adapter(folder: Path, where: str) -> None:
    problem = _adapter_problem(folder)
    if problem is None:
        return
    if "pickle" in problem:
        raise GradianError(
            f"{folder / 'adapter_model.bin'} is a pickle, which gradian never loads",
            where=where,
            fix="load it once with PeftModel.from_pretrained and save_pretrained(safe_serialization=True)",
        )
    raise GradianError(
        problem, where=where, fix="pick a folder PEFT's save_pretrained wrote (adapter_config.json + safetensors)"
    )


def _state_int(state: Path | None, key: str) -> int | None:
    """An integer field (global_step, max_steps) of a trainer_state.json; None when absent or unreadable."""
    from gradian.run.configs import load_json_file

    if state is None:
        return None
    try:
        data = load_json_file(state)
    except GradianError:
        return None
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _global_step(state: Path) -> int | None:
    return _state_int(state, "global_step")


def _dir_step(art: RunArtifacts, folder: Path, notes: list[str] | None = None) -> int | None:
    """The global step of the adapter state in ``folder``: its checkpoint-N name, else its own trainer_state.json;
    for the run dir without one, the max_steps of the newest checkpoint's trainer_state.json (the run's end)."""
    step = checkpoint_step(folder)
    if step is not None:
        return step
    if (folder / "trainer_state.json").is_file():
        return _global_step(folder / "trainer_state.json")
    if art.run_dir is not None and _same(folder, art.run_dir):
        step = _state_int(art.trainer_state, "max_steps")
        if step is not None and notes is not None:
            notes.append(f"no trainer_state.json beside the final adapter; took it as step {step} (max_steps)")
        return step or None
    return None


def _same(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _same_weights(a: Path, b: Path) -> bool:
    fa, fb = a / "adapter_model.safetensors", b / "adapter_model.safetensors"
    return fa.stat().st_size == fb.stat().st_size and _sha256(fa) == _sha256(fb)


def _all(art: RunArtifacts, notes: list[str]) -> list[tuple[int | None, Path]]:
    picked: list[tuple[int | None, Path]] = []
    for ck in art.checkpoints:
        problem = _adapter_problem(ck)
        if problem is None:
            picked.append((checkpoint_step(ck), ck))
        else:
            notes.append(f"skipped {ck.name}: {problem}")
    final = art.adapter_dir
    if final is not None and not any(_same(final, ck) for ck in art.checkpoints):
        problem = _adapter_problem(final)
        twin = next((ck for _, ck in picked if problem is None and _same_weights(final, ck)), None)
        step = _dir_step(art, final, notes) if problem is None and twin is None else None
        if problem is not None:
            notes.append(f"skipped the final adapter: {problem}")
        elif twin is not None:
            notes.append(f"the final adapter in {final} has the same weights as {twin.name} (sha256); counted once")
        elif step is not None and any(s == step for s, _ in picked):
            ck = next(p for s, p in picked if s == step)
            notes.append(f"the final adapter in {final} is step {step}, as is {ck.name}; used {ck.name}")
        else:
            if step is None and picked:
                notes.append(f"the final adapter in {final} has no known step (no trainer_state.json, no max_steps)")
            picked.append((step, final))
    if not picked:
        raise GradianError(
            "no checkpoint-* dir or final adapter with adapter_config.json + adapter_model.safetensors",
            where=str(art.run_dir) if art.run_dir else "--checkpoints all",
            fix="pass --run the training output folder, or save checkpoints with save_steps",
        )
    if not art.checkpoints:
        where = "in the run" if art.run_dir else "beside the adapter (pass --run the training output folder)"
        notes.append(f"no checkpoint-* dirs {where}: attributing through the final adapter only")
    return picked


def _listed(art: RunArtifacts, text: str, notes: list[str]) -> list[tuple[int | None, Path]]:
    have = ", ".join(ck.name for ck in art.checkpoints) or "none"
    where = str(art.run_dir) if art.run_dir else "--checkpoints"
    picked: list[tuple[int | None, Path]] = []
    step: int | None
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        by_name = re.fullmatch(r"checkpoint-(\d+)", item)
        if _STEP.match(item) or by_name:
            step = int(by_name.group(1) if by_name else item)
            folder = next((ck for ck in art.checkpoints if checkpoint_step(ck) == step), None)
            if folder is None:
                raise GradianError(
                    f"no checkpoint-{step} in the run (checkpoints: {have})",
                    where=where,
                    fix="pick from those, or pass --checkpoints all / last",
                )
        else:
            folder = Path(item).expanduser()
            if not folder.exists() and art.run_dir is not None and not folder.is_absolute():
                folder = art.run_dir / item
            if not folder.exists():
                raise GradianError(
                    f"{item} does not exist (checkpoints in the run: {have})",
                    where="--checkpoints",
                    fix="name a checkpoint by step (200), by dir name (checkpoint-200) or by path",
                )
            if folder.is_file() and folder.name == "adapter_config.json":
                folder = folder.parent
            step = _dir_step(art, folder, notes)
        _check_adapter(folder, "--checkpoints")
        if any(_same(folder, p) for _, p in picked):
            continue
        twin = next((p for s, p in picked if step is not None and s == step), None)
        if twin is not None:
            raise GradianError(
                f"{twin} and {folder} are both step {step}",
                where="--checkpoints",
                fix="name each training step once",
            )
        picked.append((step, folder))
    if not picked:
        raise GradianError("no checkpoint named", where="--checkpoints", fix="pass last, all or e.g. 200,400")
    return picked


# --- weights ------------------------------------------------------------------------------------------------------


def _newest_logs(art: RunArtifacts, notes: list[str]) -> TrainerLogs | None:
    """The log history of the newest trainer_state.json (highest global_step) among the run's and its checkpoints',
    else the run's other logs (trainer_log.jsonl, TensorBoard)."""
    states = [art.trainer_state] if art.trainer_state is not None else []
    states += [ck / "trainer_state.json" for ck in art.checkpoints if (ck / "trainer_state.json").is_file()]
    ranked = sorted(states, key=lambda p: _global_step(p) or -1, reverse=True)
    for state in ranked:
        try:
            return read_trainer_state(state)
        except GradianError as e:
            notes.append(f"skipped {state} for learning rates: {e.message}")
    if art.log_file is not None and art.log_file not in states:
        try:
            return load_logs(art)
        except GradianError as e:
            notes.append(f"skipped {art.log_file} for learning rates: {e.message}")
    return None


def _logged_rates(logs: TrainerLogs | None) -> dict[int, float]:
    out: dict[int, float] = {}
    for p in logs.points if logs is not None else []:
        if p.learning_rate is not None and math.isfinite(p.learning_rate) and p.learning_rate >= 0:
            out[p.step] = p.learning_rate
    return dict(sorted(out.items()))


def _piecewise(rates: dict[int, float]) -> Callable[[int], float]:
    """Step -> learning rate: the value logged at the latest step <= t, else the first logged value."""
    steps = sorted(rates)
    values = [rates[s] for s in steps]

    def rate(t: int) -> float:
        return values[max(0, bisect.bisect_right(steps, t) - 1)]

    return rate


def scheduled_lr(lr: float, scheduler: str, t: int, total: int, warmup: int) -> float:
    """The HF Trainer's learning rate at optimizer step ``t`` (1-based) of ``total``, with ``warmup`` steps."""
    i = t - 1  # the scheduler's 0-based step
    if i < warmup:
        return lr * i / max(1, warmup)
    if scheduler == "constant" or scheduler == "constant_with_warmup":
        return lr
    progress = (i - warmup) / max(1, total - warmup)
    if scheduler == "cosine":
        return lr * max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    return lr * max(0.0, (total - i) / max(1, total - warmup))  # linear


def _configured(
    art: RunArtifacts, last_step: int, logs: TrainerLogs | None, notes: list[str]
) -> tuple[Callable[[int], float], str] | None:
    """A per-step learning-rate function from the run's config, and a description; None when no rate is known."""
    from gradian.run.setup import load_setup

    try:
        setup = load_setup(art)
    except GradianError as e:
        notes.append(f"could not read the training config for learning rates: {e.message}")
        return None
    if setup.learning_rate is None or not math.isfinite(setup.learning_rate) or setup.learning_rate <= 0:
        return None
    lr = float(setup.learning_rate)
    scheduler = (setup.scheduler or "constant").lower()
    if scheduler not in _SCHEDULES:
        notes.append(f"scheduler {scheduler} is not rebuilt; assumed a constant learning rate")
        scheduler = "constant"
    total = (logs.total_steps if logs is not None else None) or (setup.max_steps or 0)
    total = max(total if total > 0 else last_step, last_step)
    if scheduler == "constant":
        warmup = 0
    elif setup.warmup_steps:
        warmup = setup.warmup_steps
    else:
        warmup = math.ceil(total * (setup.warmup_ratio or 0.0))
    where = setup.sources.get("learning_rate", "config")
    desc = f"configured learning_rate {lr:g} ({where}), {scheduler} schedule over {total} steps"
    if warmup:
        desc += f" with {warmup} warmup steps"
    return (lambda t: scheduled_lr(lr, scheduler, t, total, warmup)), desc


def _weigh(art: RunArtifacts, picked: list[tuple[int | None, Path]], notes: list[str]) -> list[CheckpointChoice]:
    steps_known = all(step is not None for step, _ in picked)
    intervals: list[tuple[int, int]] = []  # (first step, last step) each checkpoint stands for
    prev = 0
    for step, _ in picked:
        intervals.append((prev + 1, step or 0))
        prev = step or prev
    choices = [
        CheckpointChoice(path=p, step=s, lr=None, steps=max(0, b - a + 1) if steps_known else 0, weight=0.0, how="")
        for (s, p), (a, b) in zip(picked, intervals, strict=True)
    ]
    last_step = max((s for s, _ in picked if s is not None), default=0)

    rate: Callable[[int], float] | None = None
    source = ""
    if steps_known and last_step > 0:
        logs = _newest_logs(art, notes)
        rates = _logged_rates(logs)
        if rates:
            rate = _piecewise(rates)
            source = "logged"
            ended = max(rates)
            known = logs.summary.get("global_step") if logs is not None else None
            notes.append(f"learning rates from {logs.source if logs else 'the logs'} ({len(rates)} logged values)")
            if isinstance(known, int) and known < last_step and ended < last_step:
                notes.append(f"logs end at step {known}; steps {known + 1}-{last_step} use its last learning rate")
        else:
            found = _configured(art, last_step, logs, notes)
            if found is not None:
                rate, source = found
    for c, (a, b) in zip(choices, intervals, strict=True):
        if rate is not None and c.steps > 0:
            lrs = [rate(t) for t in range(a, b + 1)]
            c.lr = sum(lrs) / len(lrs)
            c.weight = sum(lrs)
            c.how = f"mean logged learning_rate over steps {a}-{b}"
            if source != "logged":
                c.how = f"mean learning_rate over steps {a}-{b} from the {source}"
    total = sum(c.weight for c in choices)
    if len(choices) == 1:
        only = choices[0]
        only.weight = 1.0
        only.how = "single checkpoint: weight 1" + (f" ({only.how})" if only.how else "")
    elif rate is not None and total > 0 and all(c.steps > 0 for c in choices):
        for c in choices:
            c.weight /= total
    else:
        if not steps_known:
            why = "a selected adapter has no known step: equal weights"
        elif rate is None:
            why = "no logged or configured learning rate: equal weights"
        else:
            why = "learning rates sum to 0 over the selected steps: equal weights"
        for c in choices:
            c.weight = 1.0 / len(choices)
            c.how = why + (f" ({c.how})" if c.how else "")
        notes.append(why)
    return choices
