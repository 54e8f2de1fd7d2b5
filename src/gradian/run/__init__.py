"""Run discovery, config readers, trainer logs and the normalized training setup.

``discover(run, ...)`` finds what a training run left on disk, ``load_setup(artifacts)`` reads its config files into
one :class:`TrainingSetup`, ``format_settings(setup)`` says how rows became tokens, and ``load_logs(artifacts)``
reads the trainer's log history. Nothing here imports torch or unpickles a file.
"""

from __future__ import annotations

from gradian.run.discovery import discover, read_adapter_config
from gradian.run.logs import load_logs, read_tensorboard, read_trainer_log_jsonl, read_trainer_state
from gradian.run.pickled_args import PickledArgs, read_training_args_bin
from gradian.run.setup import format_settings, load_setup
from gradian.run.types import LogPoint, RunArtifacts, TrainerLogs, TrainingSetup

__all__ = [
    "LogPoint",
    "PickledArgs",
    "RunArtifacts",
    "TrainerLogs",
    "TrainingSetup",
    "discover",
    "read_adapter_config",
    "format_settings",
    "load_logs",
    "load_setup",
    "read_tensorboard",
    "read_trainer_log_jsonl",
    "read_trainer_state",
    "read_training_args_bin",
]
