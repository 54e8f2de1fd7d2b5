"""Trainer logs: trainer_state.json (with bare NaN / Infinity), trainer_log.jsonl, TensorBoard events."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from gradian.run import discover, load_logs, load_setup, read_trainer_log_jsonl, read_trainer_state
from gradian.run.logs import tensorboard_available

RUNS = Path(__file__).parent / "fixtures" / "runs"


def test_trainer_state_with_nan_and_inf() -> None:
    logs = read_trainer_state(RUNS / "trl_run" / "checkpoint-20" / "trainer_state.json")
    assert logs.total_steps == 20
    assert len(logs.train) == 20
    assert [p.step for p in logs.eval] == [10, 20]
    assert logs.eval[0].eval_loss == pytest.approx(2.2)
    assert "eval_runtime" in logs.eval[0].extra
    by_step = {p.step: p for p in logs.train}
    assert math.isnan(by_step[14].grad_norm)
    assert by_step[15].loss == math.inf
    assert by_step[1].extra["mean_token_accuracy"] == pytest.approx(0.31)  # TRL's extras kept
    assert by_step[1].learning_rate is not None and by_step[1].epoch == pytest.approx(0.1)


def test_summary_entry(tmp_path: Path) -> None:
    state = json.loads((RUNS / "trl_run" / "checkpoint-20" / "trainer_state.json").read_text())
    state["log_history"].append(
        {"epoch": 2.0, "step": 20, "total_flos": 34680.0, "train_loss": 2.1, "train_runtime": 12.5,
         "train_samples_per_second": 25.6, "train_steps_per_second": 1.6}
    )  # fmt: skip
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    art = discover(tmp_path)
    logs = load_logs(art)
    assert logs.summary["train_loss"] == 2.1
    assert logs.summary["train_runtime"] == 12.5
    assert len(logs.train) == 20  # the summary is not a train point


def test_trainer_log_jsonl() -> None:
    logs = read_trainer_log_jsonl(RUNS / "llamafactory_run" / "trainer_log.jsonl")
    assert logs.total_steps == 30
    assert [p.step for p in logs.train] == [5, 10, 15, 20, 25, 30]
    assert [p.step for p in logs.eval] == [10, 20, 30]
    assert logs.train[0].learning_rate == pytest.approx(5e-05 * (1 - 5 / 31))
    assert "percentage" not in logs.train[0].extra


def test_no_logs_is_empty(tmp_path: Path) -> None:
    logs = load_logs(discover(tmp_path))
    assert logs.points == [] and logs.source is None


def _write_tensorboard_run(run_dir: Path) -> None:
    """What transformers' TensorBoardCallback writes: the args as a text summary, then rewritten scalars."""
    from torch.utils.tensorboard import SummaryWriter

    logdir = run_dir / "runs" / "Dec02_10-00-00_host"
    writer = SummaryWriter(log_dir=str(logdir))
    writer.add_text(
        "args",
        json.dumps({"output_dir": str(run_dir), "learning_rate": 1e-4, "num_train_epochs": 1,
                    "per_device_train_batch_size": 8, "lr_scheduler_type": "linear", "max_seq_length": 512,
                    "packing": True, "evaluation_strategy": "steps"}, indent=2),
    )  # fmt: skip
    for step in range(1, 7):
        writer.add_scalar("train/loss", 3.0 - 0.1 * step, step)
        writer.add_scalar("train/grad_norm", 1.0 + 0.01 * step, step)
        writer.add_scalar("train/learning_rate", 1e-4, step)
        writer.add_scalar("train/epoch", step / 6, step)
    writer.add_scalar("eval/loss", 2.5, 3)
    writer.add_scalar("eval/runtime", 0.4, 3)
    writer.add_scalar("eval/loss", 2.4, 6)
    writer.add_scalar("train/train_loss", 2.65, 6)
    writer.add_scalar("train/train_runtime", 9.5, 6)
    writer.close()


@pytest.mark.skipif(not tensorboard_available(), reason="tensorboard not installed")
def test_tensorboard_run(tmp_path: Path) -> None:
    _write_tensorboard_run(tmp_path)
    art = discover(tmp_path)
    assert len(art.tensorboard_files) == 1
    assert art.log_file == art.tensorboard_files[0]
    logs = load_logs(art)
    assert [p.step for p in logs.train] == [1, 2, 3, 4, 5, 6]
    assert logs.train[0].loss == pytest.approx(2.9)
    assert logs.train[0].epoch == pytest.approx(1 / 6)
    assert [(p.step, round(p.eval_loss, 3)) for p in logs.eval] == [(3, 2.5), (6, 2.4)]
    assert logs.eval[0].extra["eval_runtime"] == pytest.approx(0.4)
    assert logs.summary["train_loss"] == pytest.approx(2.65)

    setup = load_setup(art)  # the "args" text summary is the config when nothing else is there
    assert setup.framework == "trl"
    assert setup.learning_rate == 1e-4
    assert setup.max_length == 512 and setup.max_length_key == "max_seq_length"
    assert setup.packing is True
    assert sorted(setup.deprecated_keys) == ["evaluation_strategy", "max_seq_length"]
    assert setup.sources["learning_rate"].endswith(": learning_rate")


def test_tensorboard_missing_package_is_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = tmp_path / "runs" / "x" / "events.out.tfevents.1.host"
    events.parent.mkdir(parents=True)
    events.write_bytes(b"")
    monkeypatch.setattr("gradian.run.logs.tensorboard_available", lambda: False)
    art = discover(tmp_path)
    logs = load_logs(art)
    assert logs.points == []
    assert any("pip install 'gradian[tensorboard]'" in n for n in art.notes)
    setup = load_setup(art)
    assert any("skipped TensorBoard args" in n for n in setup.notes)


def test_trainer_state_preferred_over_jsonl(tmp_path: Path) -> None:
    shutil.copy(RUNS / "llamafactory_run" / "trainer_log.jsonl", tmp_path)
    shutil.copy(RUNS / "trl_run" / "checkpoint-10" / "trainer_state.json", tmp_path)
    art = discover(tmp_path)
    assert art.log_file == tmp_path / "trainer_state.json"
    assert load_logs(discover(tmp_path, logs=tmp_path / "trainer_log.jsonl")).total_steps == 30
