"""Find what a training run left on disk: adapter, checkpoints, trainer state, config, logs and tokenizer.

``discover(run)`` accepts an HF/TRL output dir, an Axolotl or LLaMA-Factory output dir, or one ``checkpoint-*`` dir.
Explicit flags override what is found. Anything missing becomes a note; only a path the user named that does not
exist (or an adapter_config.json that is broken) is an error. Nothing here unpickles anything: adapter_model.bin
is recorded, never loaded, and training_args.bin is only listed (read safely later by ``gradian.run.pickled_args``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gradian.errors import GradianError
from gradian.run.configs import (
    card_yaml,
    is_candidate_json,
    is_model_card,
    load_json_file,
    looks_like_hf_args,
    peek_yaml,
    yaml_framework,
)
from gradian.run.types import RunArtifacts

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
_LORA_TYPES = {None, "LORA", "ADALORA", "LOHA", "LOKR"}


def _explicit(flag: str, value: str | Path | None, *, want_dir: bool | None = None) -> Path | None:
    """The path behind an explicit flag; GradianError when it does not exist."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.exists():
        raise GradianError(f"{path} does not exist", where=f"--{flag}", fix=f"check the path given to --{flag}")
    if want_dir is True and not path.is_dir():
        raise GradianError(f"{path} is a file, not a folder", where=f"--{flag}", fix=f"pass the folder to --{flag}")
    if want_dir is False and path.is_dir():
        raise GradianError(f"{path} is a folder, not a file", where=f"--{flag}", fix=f"pass a file to --{flag}")
    return path


def _explicit_base(base: str) -> str:
    """``--base``: a local folder, or a hub id (``org/name``); a local-looking path that is missing, or a file, is
    an error here rather than a failed download later."""
    path = Path(base).expanduser()
    if path.is_file():
        raise GradianError(f"{path} is a file, not a folder", where="--base", fix="pass the base model's folder")
    local = base.startswith(("/", ".", "~")) or base.count("/") > 1 or "\\" in base
    if local and not path.exists():
        raise GradianError(f"{path} does not exist", where="--base", fix="check the path given to --base")
    return base


def checkpoint_step(path: Path) -> int | None:
    m = _CHECKPOINT.match(path.name)
    return int(m.group(1)) if m else None


def list_checkpoints(folder: Path) -> list[Path]:
    """checkpoint-* dirs of ``folder``, oldest (lowest step) first."""
    found = [p for p in folder.iterdir() if p.is_dir() and checkpoint_step(p) is not None]
    return sorted(found, key=lambda p: checkpoint_step(p) or 0)


def read_adapter_config(path: str | Path) -> dict[str, Any]:
    """adapter_config.json (``path``: the file, or the adapter folder), checked for the keys a LoRA adapter must
    have. The one reader of it: discovery, diagnose and attribute all check it the same way."""
    path = Path(path)
    if path.is_dir():
        path = path / "adapter_config.json"
    if not path.is_file():
        raise GradianError("no adapter_config.json", where=str(path.parent), fix="pass the PEFT adapter directory")
    data = load_json_file(path)
    if not isinstance(data, dict):
        raise GradianError(
            f"expected a JSON object, got a {type(data).__name__}",
            where=str(path),
            fix="pass the adapter folder PEFT saved with save_pretrained",
        )
    peft_type = data.get("peft_type")
    if peft_type not in _LORA_TYPES:
        return data  # prompt tuning, IA3, ...: no r / target_modules to check
    missing = [k for k in ("r", "target_modules") if k not in data]
    if missing:
        raise GradianError(
            f"missing {' and '.join(missing)}, so this is not a complete LoRA adapter config",
            where=str(path),
            fix="pass the adapter folder PEFT saved with save_pretrained (it writes r and target_modules)",
        )
    return data


def _has_adapter(folder: Path) -> bool:
    return (folder / "adapter_config.json").is_file()


def _tensorboard_files(folder: Path) -> list[Path]:
    files = list(folder.glob("events.out.tfevents.*"))
    runs = folder / "runs"
    if runs.is_dir():
        files += list(runs.rglob("events.out.tfevents.*"))
    files = [f for f in files if f.is_file()]
    return sorted(files, key=lambda f: (f.stat().st_mtime, str(f)))


def _config_candidates(folder: Path, notes: list[str]) -> list[Path]:
    """Config files directly in ``folder``, in ascending precedence: training_args.bin, JSON dumps, the Axolotl YAML
    of the model card, YAML."""
    found: list[Path] = []
    if (folder / "training_args.bin").is_file():
        found.append(folder / "training_args.bin")
    for path in sorted(folder.glob("*.json")):
        if not is_candidate_json(path) or path.stat().st_size > 1_000_000:
            continue
        try:
            data = load_json_file(path)
        except GradianError:
            notes.append(f"skipped {path.name}: not valid JSON")
            continue
        if isinstance(data, dict) and (looks_like_hf_args(data) or looks_like_hf_args(data.get("args") or {})):
            found.append(path)
    card = folder / "README.md"
    if card.is_file() and card.stat().st_size <= 1_000_000:
        try:
            if card_yaml(card.read_text(encoding="utf-8")) is not None:
                found.append(card)
        except (UnicodeDecodeError, OSError):
            pass
    for path in sorted([*folder.glob("*.yml"), *folder.glob("*.yaml")]):
        if path.stat().st_size > 1_000_000:
            continue
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError, OSError):
            notes.append(f"skipped {path.name}: not valid YAML (pass it with --config to see why)")
            continue
        if isinstance(data, dict) and yaml_framework(data) is not None:
            found.append(path)
    return found


def _peek_base(config_files: list[Path]) -> tuple[str | None, str | None]:
    for path in reversed(config_files):
        if path.suffix.lower() not in (".yml", ".yaml", ".json", ".md"):
            continue
        try:
            data = load_json_file(path) if path.suffix.lower() == ".json" else peek_yaml(path)
        except Exception:  # noqa: BLE001 - peeking only; load_setup reports errors
            continue
        if isinstance(data, dict):
            for key in ("base_model", "model_name_or_path"):
                if isinstance(data.get(key), str) and data[key]:
                    return data[key], f"{path.name}: {key}"
    return None, None


def _dataset_file(config_files: list[Path], split: str) -> Path | None:
    """A local train / eval file named in an Axolotl YAML (datasets / test_datasets path) or a LLaMA-Factory one
    (dataset / eval_dataset, found in dataset_dir's dataset_info.json), when it exists."""
    key = "datasets" if split == "train" else "test_datasets"
    for path in reversed(config_files):
        if path.suffix.lower() not in (".yml", ".yaml") and not is_model_card(path):
            continue
        data = peek_yaml(path)
        lf = _llamafactory_dataset_file(data, path, split) if isinstance(data, dict) else None
        if lf is not None:
            return lf
        entries = data.get(key) if isinstance(data, dict) else None
        if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
            continue
        ds_path = entries[0].get("path")
        if not isinstance(ds_path, str):
            continue
        for candidate in (Path(ds_path), path.parent / ds_path):
            if candidate.is_file():
                return candidate
    return None


def _llamafactory_dataset_file(data: dict[str, Any], config: Path, split: str) -> Path | None:
    """The local file of a LLaMA-Factory config's one ``dataset`` (``eval_dataset``): its ``file_name`` in the
    ``dataset_info.json`` of ``dataset_dir`` (default ``data``), a path relative to where llamafactory-cli ran, looked
    for from the working directory and from the config's folder and the folders above it."""
    names = data.get("dataset" if split == "train" else "eval_dataset")
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    if not isinstance(names, list) or len(names) != 1 or not isinstance(names[0], str):
        return None
    ddir = Path(str(data.get("dataset_dir") or "data"))
    roots = [ddir] if ddir.is_absolute() else [Path.cwd() / ddir, *(d / ddir for d in list(config.parents)[:4])]
    for root in roots:
        info = load_json_file(root / "dataset_info.json") if (root / "dataset_info.json").is_file() else None
        entry = info.get(names[0]) if isinstance(info, dict) else None
        file_name = entry.get("file_name") if isinstance(entry, dict) else None
        if isinstance(file_name, str) and (root / file_name).is_file():
            return root / file_name
    return None


def discover(
    run: str | Path | None = None,
    *,
    adapter: str | Path | None = None,
    base: str | None = None,
    train: str | Path | None = None,
    eval: str | Path | None = None,  # noqa: A002 - the CLI flag's name
    config: str | Path | None = None,
    logs: str | Path | None = None,
    tokenizer: str | Path | None = None,
) -> RunArtifacts:
    """Resolve a run directory plus explicit flags into :class:`RunArtifacts`."""
    art = RunArtifacts()
    run_path = _explicit("run", run)
    adapter_path = _explicit("adapter", adapter)
    config_path = _explicit("config", config)
    logs_path = _explicit("logs", logs)
    tokenizer_path = _explicit("tokenizer", tokenizer, want_dir=True)
    art.train_file = _explicit("train", train)
    art.eval_file = _explicit("eval", eval)

    search_dirs = _find_run_dir(art, run_path)  # where config / logs may be, most specific first
    newest = art.checkpoints[-1] if art.checkpoints else None
    _find_adapter(art, adapter_path, newest)
    if run_path is None and art.adapter_dir is not None:  # an HF output_dir passed as --adapter: for --checkpoints
        art.checkpoints = checkpoints_of(art.adapter_dir)
    _find_trainer_state(art, newest)
    _find_configs(art, search_dirs, newest, config_path)
    _find_logs(art, logs_path, search_dirs)
    _find_base(art, base)
    _find_tokenizer(art, tokenizer_path, search_dirs)
    _find_model_cards(art, newest)
    _find_dataset_files(art)
    return art


def _find_run_dir(art: RunArtifacts, run_path: Path | None) -> list[Path]:
    """The run dir and its checkpoints (a checkpoint-N dir: those up to N); returns the folders to search for config
    and logs, most specific first."""
    search_dirs: list[Path] = []
    if run_path is not None:
        if run_path.is_file():
            if run_path.name == "adapter_config.json":
                run_path = run_path.parent
            else:
                raise GradianError(
                    f"{run_path} is a file", where="--run", fix="pass the training output folder (or a checkpoint-*)"
                )
        art.run_dir = run_path
        art.checkpoints = checkpoints_of(run_path)
        search_dirs = [run_path, run_path.parent] if checkpoint_step(run_path) is not None else [run_path]
    return search_dirs


def checkpoints_of(folder: Path) -> list[Path]:
    """The checkpoint-* dirs a training output folder holds; for a checkpoint-N dir, its siblings up to N."""
    step = checkpoint_step(folder)
    if step is None:
        return list_checkpoints(folder) if folder.is_dir() else []
    return [p for p in list_checkpoints(folder.parent) if (checkpoint_step(p) or 0) <= step]


def _find_adapter(art: RunArtifacts, adapter_path: Path | None, newest: Path | None) -> None:
    """--adapter, else the run dir's adapter, else the newest checkpoint's; then its config and weights file."""
    if adapter_path is not None:
        if adapter_path.is_file():
            adapter_path = adapter_path.parent
        if not _has_adapter(adapter_path):
            raise GradianError(
                f"no adapter_config.json in {adapter_path}",
                where="--adapter",
                fix="pass the folder PEFT's save_pretrained wrote (adapter_config.json + adapter_model.safetensors)",
            )
        art.adapter_dir = adapter_path
    elif art.run_dir is not None:
        if _has_adapter(art.run_dir):
            art.adapter_dir = art.run_dir
        elif newest is not None and _has_adapter(newest):
            art.adapter_dir = newest
            art.notes.append(f"no adapter in {art.run_dir}; using the newest checkpoint's, {newest.name}")
        else:
            art.notes.append(f"no adapter_config.json in {art.run_dir} or its checkpoints")
    if art.adapter_dir is not None:
        art.adapter_config = read_adapter_config(art.adapter_dir / "adapter_config.json")
        weights = art.adapter_dir / "adapter_model.safetensors"
        pickled = art.adapter_dir / "adapter_model.bin"
        if weights.is_file():
            art.adapter_weights = weights
        elif pickled.is_file():
            art.adapter_weights_pickle = pickled
            art.notes.append(
                f"{pickled} is a pickle, which gradian never loads; convert it to adapter_model.safetensors "
                "(load it once yourself with PeftModel.from_pretrained and save_pretrained(safe_serialization=True))"
            )
        else:
            art.notes.append(f"no adapter_model.safetensors in {art.adapter_dir}")


def _find_trainer_state(art: RunArtifacts, newest: Path | None) -> None:
    """trainer_state.json of the run dir, else of the newest checkpoint."""
    if art.run_dir is not None:
        if (art.run_dir / "trainer_state.json").is_file():
            art.trainer_state = art.run_dir / "trainer_state.json"
        elif newest is not None and (newest / "trainer_state.json").is_file():
            art.trainer_state = newest / "trainer_state.json"
        else:
            art.notes.append(f"no trainer_state.json in {art.run_dir} or its checkpoints")


def _find_configs(art: RunArtifacts, search_dirs: list[Path], newest: Path | None, config_path: Path | None) -> None:
    """The config files, lowest precedence first (--config last), and the TensorBoard event files."""
    found: list[Path] = []
    for folder in reversed(search_dirs):
        found += _config_candidates(folder, art.notes)
    if newest is not None and not any(p.name == "training_args.bin" for p in found):
        if (newest / "training_args.bin").is_file():
            found.insert(0, newest / "training_args.bin")
    for folder in search_dirs:
        tb = _tensorboard_files(folder)
        if tb:
            art.tensorboard_files = tb
            break
    if config_path is not None:
        found = [p for p in found if p.resolve() != config_path.resolve()] + [config_path]
        art.config_explicit = config_path
    art.config_files = found
    if not found and not art.tensorboard_files and (art.run_dir is not None or config_path is not None):
        art.notes.append("no training config found (pass the YAML or training_args.json with --config)")


def _find_logs(art: RunArtifacts, logs_path: Path | None, search_dirs: list[Path]) -> None:
    """The trainer logs: --logs, else trainer_state.json, else trainer_log.jsonl, else TensorBoard."""
    if logs_path is not None:
        if logs_path.is_dir():
            tb = _tensorboard_files(logs_path)
            if (logs_path / "trainer_state.json").is_file():
                logs_path = logs_path / "trainer_state.json"
            elif (logs_path / "trainer_log.jsonl").is_file():
                logs_path = logs_path / "trainer_log.jsonl"
            elif tb:
                art.tensorboard_files = tb
                logs_path = tb[-1]
            else:
                raise GradianError(
                    f"no trainer_state.json, trainer_log.jsonl or TensorBoard events in {logs_path}",
                    where="--logs",
                    fix="pass the log file itself",
                )
        elif logs_path.name.startswith("events.out.tfevents"):
            art.tensorboard_files = [logs_path]
        art.log_file = logs_path
    else:
        jsonl = next((d / "trainer_log.jsonl" for d in search_dirs if (d / "trainer_log.jsonl").is_file()), None)
        if art.trainer_state is not None:
            art.log_file = art.trainer_state
        elif jsonl is not None:
            art.log_file = jsonl
        elif art.tensorboard_files:
            art.log_file = art.tensorboard_files[-1]
        elif art.run_dir is not None:
            art.notes.append("no trainer logs found (trainer_state.json, trainer_log.jsonl or TensorBoard events)")
    if len(art.tensorboard_files) > 1 and art.log_file == art.tensorboard_files[-1]:
        art.notes.append(f"{len(art.tensorboard_files)} TensorBoard event files; reading the newest, {art.log_file}")


def _find_base(art: RunArtifacts, base: str | None) -> None:
    """--base, else the adapter config's base model, else one named in a config file."""
    if base is not None:
        art.base = str(_explicit_base(base))
    elif isinstance(art.adapter_config.get("base_model_name_or_path"), str):
        art.base = art.adapter_config["base_model_name_or_path"]
    else:
        art.base, where = _peek_base(art.config_files)
        if art.base is not None:
            art.notes.append(f"base model {art.base} from {where}")
        else:
            art.notes.append("base model unknown (pass --base)")


def _find_tokenizer(art: RunArtifacts, tokenizer_path: Path | None, search_dirs: list[Path]) -> None:
    """--tokenizer, else the adapter dir or run dir, else a local base folder."""
    if tokenizer_path is not None:
        art.tokenizer_dir = tokenizer_path
    else:
        for folder in [d for d in (art.adapter_dir, *search_dirs[:1]) if d is not None]:
            if any((folder / f).is_file() for f in _TOKENIZER_FILES):
                art.tokenizer_dir = folder
                break
        if art.tokenizer_dir is None and art.base is not None:
            base_dir = Path(art.base).expanduser()
            if base_dir.is_dir() and any((base_dir / f).is_file() for f in _TOKENIZER_FILES):
                art.tokenizer_dir = base_dir
            elif not base_dir.is_dir():
                art.notes.append(
                    f"no tokenizer in the run; the base {art.base} is not a local folder (pass --tokenizer)"
                )


def _find_model_cards(art: RunArtifacts, newest: Path | None) -> None:
    """The model cards (README.md) the trainer wrote: they list the versions the run trained with."""
    seen: set[Path] = set()
    for folder in (art.adapter_dir, art.run_dir, newest):
        card = folder / "README.md" if folder is not None else None
        if card is not None and card.is_file() and card.resolve() not in seen:
            seen.add(card.resolve())
            art.model_cards.append(card)


def _find_dataset_files(art: RunArtifacts) -> None:
    """Train / eval files named in an Axolotl or LLaMA-Factory config, when no flag named them."""
    if art.train_file is None:
        art.train_file = _dataset_file(art.config_files, "train")
        if art.train_file is not None:
            art.notes.append(f"train file {art.train_file} from the config's datasets")
    if art.eval_file is None:
        art.eval_file = _dataset_file(art.config_files, "eval")
        if art.eval_file is not None:
            art.notes.append(f"eval file {art.eval_file} from the config's test_datasets")
