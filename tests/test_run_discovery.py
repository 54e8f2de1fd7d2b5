"""Run discovery over realistic output dirs (TRL, LLaMA-Factory, Axolotl) and explicit flags."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gradian.errors import GradianError
from gradian.run import discover

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "tests" / "fixtures" / "runs"
TRL = RUNS / "trl_run"


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixtures' adapters name their base as examples/stories260k/base, relative to the repo root."""
    monkeypatch.chdir(REPO)


def test_trl_output_dir() -> None:
    art = discover(TRL)
    assert art.run_dir == TRL
    assert art.adapter_dir == TRL
    assert art.adapter_weights == TRL / "adapter_model.safetensors"
    assert art.adapter_config["r"] == 4
    assert [p.name for p in art.checkpoints] == ["checkpoint-10", "checkpoint-20"]
    # no trainer_state.json in the output dir (no save_state()): the newest checkpoint's
    assert art.trainer_state == TRL / "checkpoint-20" / "trainer_state.json"
    assert art.log_file == art.trainer_state
    assert art.config_files == [TRL / "checkpoint-20" / "training_args.bin"]
    assert art.tokenizer_dir == TRL
    assert art.base == "examples/stories260k/base"
    assert art.notes == []


def test_checkpoints_sorted_by_step_number(tmp_path: Path) -> None:
    for step in (100, 20, 5, 1000):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / "checkpoint-final").mkdir()  # not a step: ignored
    art = discover(tmp_path)
    assert [p.name for p in art.checkpoints] == ["checkpoint-5", "checkpoint-20", "checkpoint-100", "checkpoint-1000"]
    assert any("no adapter_config.json" in n for n in art.notes)
    assert any("no trainer_state.json" in n for n in art.notes)


def test_checkpoint_dir_as_run() -> None:
    art = discover(TRL / "checkpoint-10")
    assert art.adapter_dir == TRL / "checkpoint-10"
    assert [p.name for p in art.checkpoints] == ["checkpoint-10"]
    assert art.trainer_state == TRL / "checkpoint-10" / "trainer_state.json"
    assert art.config_files == [TRL / "checkpoint-10" / "training_args.bin"]
    assert art.tokenizer_dir == Path("examples/stories260k/base")  # none in the checkpoint: the base's


def test_adapter_from_newest_checkpoint_and_pickled_weights_noted(tmp_path: Path) -> None:
    ck = tmp_path / "checkpoint-3"
    ck.mkdir()
    shutil.copy(TRL / "adapter_config.json", ck / "adapter_config.json")
    (ck / "adapter_model.bin").write_bytes(b"\x80\x02cos\nsystem\n(S'touch pwned'\ntR.")
    art = discover(tmp_path)
    assert art.adapter_dir == ck
    assert art.adapter_weights is None
    assert art.adapter_weights_pickle == ck / "adapter_model.bin"
    assert any("never loads" in n for n in art.notes)
    assert not (tmp_path / "pwned").exists()


def test_llamafactory_output_dir() -> None:
    art = discover(RUNS / "llamafactory_run")
    assert art.config_files == [RUNS / "llamafactory_run" / "training_args.yaml"]
    assert art.log_file == RUNS / "llamafactory_run" / "trainer_log.jsonl"
    assert art.trainer_state is None


def test_explicit_flags_override(tmp_path: Path) -> None:
    train = tmp_path / "train.jsonl"
    train.write_text('{"text": "hi"}\n')
    art = discover(
        TRL,
        adapter=TRL / "checkpoint-10",
        base="some/base",
        train=train,
        config=RUNS / "axolotl" / "axolotl.yml",
        logs=TRL / "checkpoint-10" / "trainer_state.json",
        tokenizer="examples/stories260k/base",
    )
    assert art.adapter_dir == TRL / "checkpoint-10"
    assert art.base == "some/base"
    assert art.train_file == train
    assert art.config_files[-1] == RUNS / "axolotl" / "axolotl.yml"  # --config last: highest precedence
    assert art.log_file == TRL / "checkpoint-10" / "trainer_state.json"
    assert art.tokenizer_dir == Path("examples/stories260k/base")


def test_axolotl_config_only_finds_base_and_train_file() -> None:
    art = discover(config=RUNS / "axolotl" / "axolotl.yml")
    assert art.base == "examples/stories260k/base"
    assert art.train_file == RUNS / "axolotl" / "data" / "train.jsonl"
    assert art.tokenizer_dir == Path("examples/stories260k/base")


def test_json_dump_found_by_keys(tmp_path: Path) -> None:
    (tmp_path / "my_args.json").write_text('{"learning_rate": 1e-4, "per_device_train_batch_size": 2}')
    (tmp_path / "results.json").write_text('{"accuracy": 0.5}')
    (tmp_path / "notes.yaml").write_text("just: notes\n")
    art = discover(tmp_path)
    assert art.config_files == [tmp_path / "my_args.json"]


@pytest.mark.parametrize("flag", ["run", "adapter", "train", "eval", "config", "logs", "tokenizer"])
def test_missing_explicit_path_is_an_error(flag: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(GradianError) as info:
        discover(**{flag: missing})
    assert str(info.value) == f"--{flag}: {missing} does not exist. Fix: check the path given to --{flag}."


def test_llamafactory_config_finds_its_dataset_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LLaMA-Factory names datasets, not files: ``dataset`` / ``eval_dataset`` are keys of dataset_dir's
    dataset_info.json, and dataset_dir is relative to where llamafactory-cli ran (here the config's folder above)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "mine.json").write_text('[{"instruction": "Say hi.", "output": "Hi."}]')
    (data / "held.json").write_text('[{"instruction": "Say bye.", "output": "Bye."}]')
    (data / "dataset_info.json").write_text('{"mine": {"file_name": "mine.json"}, "held": {"file_name": "held.json"}}')
    saves = tmp_path / "saves" / "lora"
    saves.mkdir(parents=True)
    (saves / "training_args.yaml").write_text("stage: sft\nfinetuning_type: lora\ndataset: mine\neval_dataset: held\n"
                                              "dataset_dir: data\ntemplate: default\n")  # fmt: skip
    monkeypatch.chdir(saves)  # not where it ran: found from the config's folders
    art = discover(config=saves / "training_args.yaml")
    assert (art.train_file, art.eval_file) == (data / "mine.json", data / "held.json")
    (saves / "two.yaml").write_text("stage: sft\ndataset: mine,held\ndataset_dir: data\n")
    assert discover(config=saves / "two.yaml").train_file is None  # two datasets: --train names the file
