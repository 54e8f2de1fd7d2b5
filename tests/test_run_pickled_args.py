"""training_args.bin is read without unpickling: real TrainingArguments in, hostile pickles harmless."""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

import pytest

from gradian.errors import GradianError
from gradian.run import read_training_args_bin

FIXTURE = Path(__file__).parent / "fixtures" / "runs" / "trl_run" / "checkpoint-20" / "training_args.bin"


def test_real_torch_saved_training_arguments(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from transformers import TrainingArguments

    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        learning_rate=3e-4,
        num_train_epochs=2,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=8,
        lr_scheduler_type="cosine",
        eval_strategy="epoch",
        seed=7,
        report_to=[],
    )
    path = tmp_path / "training_args.bin"
    torch.save(args, path)
    read = read_training_args_bin(path)
    assert read.class_path == "transformers.training_args.TrainingArguments"
    assert read.fields["learning_rate"] == 3e-4
    assert read.fields["num_train_epochs"] == 2
    assert read.fields["gradient_accumulation_steps"] == 8
    assert read.fields["lr_scheduler_type"] == "cosine"  # an enum member becomes its value
    assert read.fields["eval_strategy"] == "epoch"
    assert read.fields["seed"] == 7
    assert isinstance(read.fields["accelerator_config"], dict)  # a dataclass becomes a dict

    legacy = tmp_path / "legacy.bin"
    torch.save(args, legacy, _use_new_zipfile_serialization=False)
    assert read_training_args_bin(legacy).fields["learning_rate"] == 3e-4


def test_fixture_sft_config() -> None:
    read = read_training_args_bin(FIXTURE)
    assert read.class_name == "SFTConfig"
    assert read.fields["max_length"] == 256
    assert read.fields["gradient_checkpointing_kwargs"] == {"use_reentrant": False}


def _reduce_pickle(module: str, name: str, arg: str) -> bytes:
    return (
        b"\x80\x02c" + module.encode() + b"\n" + name.encode() + b"\n" + pickle.dumps((arg,), protocol=2)[2:-1] + b"R."
    )


@pytest.mark.parametrize(
    "module,name",
    [("os", "system"), ("posix", "system"), ("subprocess", "check_call"), ("builtins", "exec"), ("builtins", "eval")],
)
def test_hostile_pickle_runs_nothing(module: str, name: str, tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    if name == "system":
        arg = f"touch {target}"
    elif name in ("exec", "eval"):
        arg = f"open({str(target)!r}, 'w').write('x')"
    else:
        arg = f"touch {target}"
    path = tmp_path / "training_args.bin"
    path.write_bytes(_reduce_pickle(module, name, arg))
    with pytest.raises(GradianError):
        read_training_args_bin(path)
    assert not target.exists()


def test_hostile_open_inside_a_torch_zip(tmp_path: Path) -> None:
    """builtins.open(path, 'w') as a field value, wrapped the way torch.save wraps data.pkl."""
    target = tmp_path / "created_by_open"
    payload = (
        b"\x80\x02ctransformers.training_args\nTrainingArguments\n)\x81}(X\r\x00\x00\x00learning_rate"
        b"G?\x1a6\xe2\xeb\x1cC-X\x04\x00\x00\x00evil"
        + b"cbuiltins\nopen\n"
        + pickle.dumps((str(target), "w"), protocol=2)[2:-1]
        + b"Rub."
    )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("training_args/data.pkl", payload)
        zf.writestr("training_args/version", "3\n")
    path = tmp_path / "training_args.bin"
    path.write_bytes(buf.getvalue())
    read = read_training_args_bin(path)
    assert not target.exists()
    assert read.fields["learning_rate"] == pytest.approx(1e-4)
    assert read.fields["evil"] == [str(target), "w"]  # recorded as inert data


def test_not_a_pickle(tmp_path: Path) -> None:
    path = tmp_path / "training_args.bin"
    path.write_bytes(b"hello, not a pickle")
    with pytest.raises(GradianError) as info:
        read_training_args_bin(path)
    assert str(info.value).startswith(f"{path}: not a readable pickle (")
