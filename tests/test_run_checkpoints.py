"""`--checkpoints` selection and learning-rate weights: a real `gradian train` run with save_steps, and hand-written
trainer_state.json files (warmup, cosine decay, no learning rate, one checkpoint, bad specs)."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest

from conftest import BASE_DIR, REPO
from gradian.errors import GradianError
from gradian.run import discover
from gradian.run.checkpoints import scheduled_lr, select_checkpoints

TRAIN = REPO / "examples" / "stories260k" / "data" / "train.jsonl"
REAL = {"max_steps": 12, "save_steps": 4, "batch_size": 4, "logging_steps": 1, "max_length": 64, "cpu_threads": 1,
        "seed": 3, "lr": 3e-3, "lr_scheduler_type": "cosine", "warmup_ratio": 0.2}  # fmt: skip


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _logged(state: Path) -> dict[int, float]:
    hist = json.loads(state.read_text())["log_history"]
    return {h["step"]: h["learning_rate"] for h in hist if "learning_rate" in h}


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory) -> tuple[Path, Path]:
    """The same tiny fine-tune twice: with save_steps 4 (checkpoint-4/8/12) and without."""
    from gradian.train import train_lora

    tmp = tmp_path_factory.mktemp("ckpt")
    data = tmp / "train.jsonl"
    data.write_text("\n".join(TRAIN.read_text("utf-8").splitlines()[:40]) + "\n", "utf-8")
    saved, plain = tmp / "saved", tmp / "plain"
    train_lora(BASE_DIR, data, saved, config=REAL, progress=False, quiet=True)
    train_lora(BASE_DIR, data, plain, config={k: v for k, v in REAL.items() if k != "save_steps"}, quiet=True,
               progress=False)  # fmt: skip
    return saved, plain


# --- the trainer ---------------------------------------------------------------------------------------------------


def test_train_save_steps_writes_hf_checkpoints(real_runs):
    saved, plain = real_runs
    assert sorted(p.name for p in saved.glob("checkpoint-*")) == ["checkpoint-12", "checkpoint-4", "checkpoint-8"]
    assert not list(plain.glob("checkpoint-*"))  # save_steps None: the final adapter only, as before
    for step in (4, 8, 12):
        ck = saved / f"checkpoint-{step}"
        for name in ("adapter_config.json", "adapter_model.safetensors", "trainer_state.json"):
            assert (ck / name).is_file(), (ck, name)
        assert not (ck / "optimizer.pt").exists()  # save_only_model
        state = json.loads((ck / "trainer_state.json").read_text())
        assert state["global_step"] == step
        assert sorted(_logged(ck / "trainer_state.json")) == list(range(1, step + 1))
    shas = {_sha(saved / f"checkpoint-{s}" / "adapter_model.safetensors") for s in (4, 8, 12)}
    assert len(shas) == 3  # training moved the weights between checkpoints
    # deterministic: saving checkpoints changes nothing, and the final adapter is the last checkpoint
    assert _sha(saved / "adapter_model.safetensors") == _sha(plain / "adapter_model.safetensors")
    assert _sha(saved / "adapter_model.safetensors") == _sha(saved / "checkpoint-12" / "adapter_model.safetensors")
    assert json.loads((saved / "training_args.json").read_text())["save_steps"] == 4


def test_train_rejects_bad_save_steps():
    from gradian.train import build_config

    assert build_config({"save_steps": "50"}).save_steps == 50
    with pytest.raises(GradianError, match="save_steps"):
        build_config({"save_steps": 0})


# --- real trainer_state.json ---------------------------------------------------------------------------------------


def test_all_weights_are_summed_logged_learning_rates(real_runs):
    saved, _ = real_runs
    lr = _logged(saved / "trainer_state.json")
    assert lr[1] == 0.0 and max(lr.values()) == pytest.approx(3e-3)  # warmup, then cosine decay
    choices, notes = select_checkpoints(discover(saved), "all")
    assert [c.path.name for c in choices] == ["checkpoint-4", "checkpoint-8", "checkpoint-12"]
    assert any("same weights as checkpoint-12" in n for n in notes)  # the final adapter is counted once
    sums = [sum(lr[t] for t in range(a, a + 4)) for a in (1, 5, 9)]
    for c, s, a in zip(choices, sums, (1, 5, 9), strict=True):
        assert c.steps == 4 and c.step == a + 3
        assert c.lr == pytest.approx(s / 4)
        assert c.weight == pytest.approx(s / sum(sums))
        assert c.how == f"mean logged learning_rate over steps {a}-{a + 3}"
    assert sum(c.weight for c in choices) == pytest.approx(1.0)
    assert choices[1].weight > choices[0].weight > choices[2].weight  # warmup < peak > decayed tail


def test_last_is_the_adapter_gradian_uses(real_runs):
    saved, _ = real_runs
    (only,), _ = select_checkpoints(discover(saved), "last")
    assert only.path == saved and only.step == 12 and only.steps == 12 and only.weight == 1.0
    assert only.lr == pytest.approx(sum(_logged(saved / "trainer_state.json").values()) / 12)


def test_list_by_step_name_and_path(real_runs):
    saved, _ = real_runs
    lr = _logged(saved / "trainer_state.json")
    art = discover(saved)
    choices, _ = select_checkpoints(art, f"8, checkpoint-4,{saved / 'checkpoint-12'},checkpoint-8")
    assert [c.step for c in choices] == [4, 8, 12]  # sorted, duplicates once
    choices, _ = select_checkpoints(art, "12,4")
    first, second = sum(lr[t] for t in range(1, 5)), sum(lr[t] for t in range(5, 13))
    assert [c.steps for c in choices] == [4, 8]  # checkpoint-12 stands for steps 5-12
    assert choices[0].weight == pytest.approx(first / (first + second))
    assert choices[1].how == "mean logged learning_rate over steps 5-12"


def test_run_given_as_a_checkpoint_dir(real_runs):
    saved, _ = real_runs
    choices, _ = select_checkpoints(discover(saved / "checkpoint-8"), "all")
    assert [c.path.name for c in choices] == ["checkpoint-4", "checkpoint-8"]
    lr = _logged(saved / "checkpoint-8" / "trainer_state.json")
    first, second = sum(lr[t] for t in range(1, 5)), sum(lr[t] for t in range(5, 9))
    assert choices[0].weight == pytest.approx(first / (first + second))


def test_output_dir_given_as_the_adapter_holds_the_checkpoints(real_runs):
    """`--adapter out/` (the HF output_dir: final adapter, checkpoint-*/) combines the same states, with the
    same weights, as `--run out/`; a checkpoint-N given as --adapter, those up to N; a bare
    adapter says where to look."""
    saved, plain = real_runs
    by_run, _ = select_checkpoints(discover(saved), "all")
    by_adapter, _ = select_checkpoints(discover(adapter=saved), "all")
    assert [(c.path, c.steps) for c in by_adapter] == [(c.path, c.steps) for c in by_run]
    assert [c.weight for c in by_adapter] == pytest.approx([c.weight for c in by_run])
    up_to, _ = select_checkpoints(discover(adapter=saved / "checkpoint-8"), "all")
    assert [c.path.name for c in up_to] == ["checkpoint-4", "checkpoint-8"]
    assert discover(adapter=saved).config_files == []  # only the checkpoints: no config is taken from them unasked
    (only,), notes = select_checkpoints(discover(adapter=plain), "all")
    assert only.path == plain and any("beside the adapter (pass --run" in n for n in notes)


def test_configured_schedule_when_no_rate_was_logged(real_runs, tmp_path):
    saved, _ = real_runs
    lr = _logged(saved / "trainer_state.json")
    # the rebuilt HF schedule (cosine, warmup ceil(0.2 x 12) = 3 steps) is the one the trainer logged
    assert [scheduled_lr(3e-3, "cosine", t, 12, 3) for t in range(1, 13)] == pytest.approx([lr[t] for t in lr])
    run = tmp_path / "run"
    shutil.copytree(saved, run)
    for state in run.rglob("trainer_state.json"):
        data = json.loads(state.read_text())
        for h in data["log_history"]:
            h.pop("learning_rate", None)
        state.write_text(json.dumps(data))
    choices, _ = select_checkpoints(discover(run), "all")
    sums = [sum(lr[t] for t in range(a, a + 4)) for a in (1, 5, 9)]
    assert [c.weight for c in choices] == pytest.approx([s / sum(sums) for s in sums])
    assert "configured learning_rate 0.003" in choices[0].how and "cosine schedule over 12 steps" in choices[0].how


# --- hand-written runs ---------------------------------------------------------------------------------------------

ADAPTER_CONFIG = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]}


def _adapter(folder: Path, content: str, *, weights: str = "adapter_model.safetensors") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps(ADAPTER_CONFIG))
    (folder / weights).write_bytes(content.encode())  # never loaded here: only hashed
    return folder


def _state(folder: Path, step: int, history: list[dict], max_steps: int | None = None) -> None:
    data = {"global_step": step, "log_history": history} | ({"max_steps": max_steps} if max_steps else {})
    (folder / "trainer_state.json").write_text(json.dumps(data))


def _run(
    tmp_path: Path, steps: list[int], history: list[dict], *, final: int | None = None, max_steps: int | None = None
) -> Path:
    """checkpoint-<s> for each step (each with the history up to s), and a final adapter of its own at ``final``."""
    run = tmp_path / "run"
    for s in steps:
        upto = [h for h in history if h["step"] <= s]
        _state(_adapter(run / f"checkpoint-{s}", f"weights at {s}"), s, upto, max_steps)
    if final is not None:
        _state(_adapter(run, f"final weights at {final}"), final, history)
    return run


def test_warmup_logged_every_step(tmp_path):
    # HF linear warmup over 10 steps to 1e-3 (step t uses 1e-3 x (t - 1) / 10), then constant; checkpoints 5, 10, 20
    history = [{"step": t, "loss": 1.0, "learning_rate": 1e-3 * min(1.0, (t - 1) / 10)} for t in range(1, 21)]
    choices, notes = select_checkpoints(discover(_run(tmp_path, [5, 10, 20], history)), "all")
    s1, s2, s3 = 1e-4 * (0 + 1 + 2 + 3 + 4), 1e-4 * (5 + 6 + 7 + 8 + 9), 10 * 1e-3
    assert [c.weight for c in choices] == pytest.approx([s1 / (s1 + s2 + s3), s2 / (s1 + s2 + s3), s3 / (s1 + s2 + s3)])
    assert [c.lr for c in choices] == pytest.approx([s1 / 5, s2 / 5, s3 / 10])
    assert [c.steps for c in choices] == [5, 5, 10]
    assert any("20 logged values" in n for n in notes)


def test_cosine_logged_every_ten_steps_is_piecewise_constant(tmp_path):
    v = {s: 1e-3 * 0.5 * (1 + math.cos(math.pi * s / 40)) for s in (10, 20, 30, 40)}
    history = [{"step": s, "loss": 1.0, "learning_rate": v[s]} for s in v]
    history.insert(2, {"step": 20, "eval_loss": 2.0})  # eval entries carry no learning rate
    choices, notes = select_checkpoints(discover(_run(tmp_path, [20, 40], history, final=40)), "all")
    # steps 1-9 take the first logged value; step t takes the value logged at the latest step <= t
    s1 = 19 * v[10] + v[20]
    s2 = 9 * v[20] + 10 * v[30] + v[40]
    assert [c.path.name for c in choices] == ["checkpoint-20", "checkpoint-40"]
    assert any("is step 40, as is checkpoint-40" in n for n in notes)  # other bytes, same step: counted once
    assert [c.weight for c in choices] == pytest.approx([s1 / (s1 + s2), s2 / (s1 + s2)])
    assert choices[0].weight > choices[1].weight  # decayed


def test_final_adapter_later_than_the_newest_checkpoint(tmp_path):
    history = [{"step": s, "loss": 1.0, "learning_rate": 2e-4} for s in range(5, 55, 5)]
    run = _run(tmp_path, [20, 40], history, final=50)
    choices, _ = select_checkpoints(discover(run), "all")
    got = [(c.path.name, c.step, c.steps) for c in choices]
    assert got == [("checkpoint-20", 20, 20), ("checkpoint-40", 40, 20), ("run", 50, 10)]
    assert [c.weight for c in choices] == pytest.approx([0.4, 0.4, 0.2])  # constant rate: weight ~ steps


def test_final_adapter_without_trainer_state_is_taken_at_max_steps(tmp_path):
    # save_model() without save_state(): the final adapter has no trainer_state.json; the run ran to max_steps 40
    history = [{"step": s, "loss": 1.0, "learning_rate": 1e-4 * s} for s in range(1, 31)]
    run = _run(tmp_path, [10, 30], history, max_steps=40)
    _adapter(run, "final weights, no trainer_state.json beside them")
    choices, notes = select_checkpoints(discover(run), "all")
    assert [(c.step, c.steps) for c in choices] == [(10, 10), (30, 20), (40, 10)]
    s = [1e-4 * sum(range(1, 11)), 1e-4 * sum(range(11, 31)), 10 * 30e-4]  # steps 31-40 keep the last logged rate
    assert [c.weight for c in choices] == pytest.approx([x / sum(s) for x in s])
    assert any("took it as step 40 (max_steps)" in n for n in notes)


def test_final_adapter_with_no_known_step_gets_equal_weights(tmp_path):
    history = [{"step": s, "loss": 1.0, "learning_rate": 1e-4 * s} for s in range(1, 31)]
    run = _run(tmp_path, [10, 30], history)  # no max_steps either
    _adapter(run, "final weights, no trainer_state.json beside them")
    choices, notes = select_checkpoints(discover(run), "all")
    assert [c.step for c in choices] == [10, 30, None]
    assert [c.weight for c in choices] == pytest.approx([1 / 3] * 3)
    assert choices[0].how.startswith("a selected adapter has no known step: equal weights")
    assert any("no known step" in n for n in notes)


def test_missing_learning_rate_falls_back_to_config_then_equal(tmp_path):
    history = [{"step": s, "loss": 1.0} for s in range(1, 31)]
    run = _run(tmp_path, [10, 30], history)
    choices, notes = select_checkpoints(discover(run), "all")
    assert [c.weight for c in choices] == [0.5, 0.5] and [c.lr for c in choices] == [None, None]
    assert choices[0].how == "no logged or configured learning rate: equal weights"
    assert "no logged or configured learning rate: equal weights" in notes
    # a constant configured rate: weights proportional to the steps each checkpoint stands for
    args = {"learning_rate": 5e-4, "lr_scheduler_type": "constant", "output_dir": "x", "max_steps": 30}
    (run / "training_args.json").write_text(json.dumps(args))
    choices, _ = select_checkpoints(discover(run), "all")
    assert [c.weight for c in choices] == pytest.approx([1 / 3, 2 / 3])
    assert [c.lr for c in choices] == pytest.approx([5e-4, 5e-4])
    # linear decay from 1e-3 over 30 steps, no warmup: step t uses 1e-3 x (31 - t) / 30
    (run / "training_args.json").write_text(json.dumps(args | {"lr_scheduler_type": "linear", "learning_rate": 1e-3}))
    choices, _ = select_checkpoints(discover(run), "all")
    s1, s2 = sum(31 - t for t in range(1, 11)), sum(31 - t for t in range(11, 31))
    assert [c.weight for c in choices] == pytest.approx([s1 / (s1 + s2), s2 / (s1 + s2)])


def test_single_checkpoint(tmp_path):
    history = [{"step": s, "loss": 1.0, "learning_rate": 1e-4} for s in range(1, 51)]
    (only,), _ = select_checkpoints(discover(_run(tmp_path, [50], history)), "all")
    assert only.path.name == "checkpoint-50" and only.weight == 1.0 and only.steps == 50
    assert only.lr == pytest.approx(1e-4) and only.how.startswith("single checkpoint: weight 1")


def test_all_skips_checkpoints_without_safetensors(tmp_path):
    history = [{"step": s, "loss": 1.0, "learning_rate": 1e-4} for s in range(1, 31)]
    run = _run(tmp_path, [10, 30], history)
    _state(_adapter(run / "checkpoint-20", "pickled", weights="adapter_model.bin"), 20, history[:20])
    (run / "checkpoint-25").mkdir()  # e.g. a full-model checkpoint: no adapter_config.json
    choices, notes = select_checkpoints(discover(run), "all")
    assert [c.step for c in choices] == [10, 30] and [c.steps for c in choices] == [10, 20]
    assert any("checkpoint-20" in n and "pickle" in n for n in notes)
    assert any("checkpoint-25" in n and "no adapter_config.json" in n for n in notes)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("checkpoint-7", r"no checkpoint-7 in the run \(checkpoints: checkpoint-10, checkpoint-20, checkpoint-30\)"),
        ("10,7", "no checkpoint-7"),
        ("elsewhere/ckpt", "elsewhere/ckpt does not exist"),
        ("", "empty checkpoint selection"),
        (" , ", "no checkpoint named"),
        ("checkpoint-20", "adapter_model.bin is a pickle, which gradian never loads.*safe_serialization=True"),
        ("30", "no adapter_model.safetensors in"),
    ],
)
def test_bad_specs_are_one_line_errors(tmp_path, spec, match):
    history = [{"step": s, "loss": 1.0, "learning_rate": 1e-4} for s in range(1, 31)]
    run = _run(tmp_path, [10, 30], history)
    _state(_adapter(run / "checkpoint-20", "pickled", weights="adapter_model.bin"), 20, history[:20])
    (run / "checkpoint-30" / "adapter_model.safetensors").unlink()
    with pytest.raises(GradianError, match=match) as e:
        select_checkpoints(discover(run), spec)
    assert "\n" not in str(e.value) and "Fix:" in str(e.value)


def test_all_with_no_adapter_anywhere_is_an_error(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint-10").mkdir(parents=True)
    with pytest.raises(GradianError, match="no checkpoint-\\* dir or final adapter"):
        select_checkpoints(discover(run), "all")
