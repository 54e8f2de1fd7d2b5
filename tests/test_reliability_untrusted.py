"""Untrusted inputs never run code: planted pickles and remote-code bases, through the real CLI.

Each bait would create a marker file if it were executed. A positive control proves each bait is live (unpickling
it does create its marker), so a passing test means Gradian did not execute it, not that the bait was a dud.
"""

from __future__ import annotations

import json
import os
import pickle
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import BASE_DIR, make_lora_adapter

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "200", "TOKENIZERS_PARALLELISM": "false"}


def gradian(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gradian", *map(str, args)],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=cwd,
        timeout=120,
    )


def _unicode_arg(s: str) -> bytes:
    assert "\n" not in s and "\\" not in s
    return b"V" + s.encode("raw_unicode_escape") + b"\n"


def evil_pickle(kind: str, marker: Path) -> bytes:
    """A protocol-0 pickle whose only effect is a REDUCE of ``os.system`` or ``builtins.open`` creating ``marker``."""
    if kind == "os_system":
        return b"cos\nsystem\n(" + _unicode_arg(f"touch {shlex.quote(str(marker))}") + b"tR."
    if kind == "builtins_open":
        return b"cbuiltins\nopen\n(" + _unicode_arg(str(marker)) + _unicode_arg("w") + b"tR."
    raise ValueError(kind)


def evil_torch_zip(kind: str, marker: Path, path: Path) -> Path:
    """The layout torch.save writes (``<name>/data.pkl``, ``version``, ``byteorder``), with a hostile data.pkl."""
    name = path.stem
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/data.pkl", evil_pickle(kind, marker))
        z.writestr(f"{name}/byteorder", "little")
        z.writestr(f"{name}/version", "3\n")
        z.writestr(f"{name}/.data/serialization_id", "0123456789")
    return path


def assert_clean(res: subprocess.CompletedProcess) -> None:
    out = res.stdout + res.stderr
    assert "Traceback" not in out, out
    if res.returncode == 2:  # a refusal is fine, but then as one line
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Fix:" in lines[0], res.stderr
    else:
        assert res.returncode in (0, 1), f"rc={res.returncode}\n{out}"


@pytest.fixture(scope="module")
def adapter(tmp_path_factory) -> Path:
    return make_lora_adapter(BASE_DIR, tmp_path_factory.mktemp("adapter") / "adapter")


@pytest.mark.parametrize("kind", ["os_system", "builtins_open"])
def test_bait_is_live(tmp_path, kind):
    """Positive control: plain unpickling of the planted data.pkl does create the marker."""
    marker = tmp_path / "PWNED"
    bait = evil_torch_zip(kind, marker, tmp_path / "training_args.bin")
    with zipfile.ZipFile(bait) as z:
        result = pickle.loads(z.read("training_args/data.pkl"))  # noqa: S301 - the point of the control
    if hasattr(result, "close"):
        result.close()
    assert marker.exists()


# --------------------------------------------------------------------------------------------------------------
# (1) a malicious training_args.bin in a run dir


@pytest.mark.parametrize("cmd", ["doctor", "diagnose"])
@pytest.mark.parametrize("kind", ["os_system", "builtins_open"])
def test_malicious_training_args_bin_never_runs(tmp_path, cmd, kind):
    marker = tmp_path / "PWNED"
    run = tmp_path / "run"
    run.mkdir()
    evil_torch_zip(kind, marker, run / "training_args.bin")
    (run / "trainer_state.json").write_text(
        json.dumps({"global_step": 2, "log_history": [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.9}]})
    )
    res = gradian(cmd, "--run", run, cwd=tmp_path)
    assert_clean(res)
    assert not marker.exists(), f"`gradian {cmd}` executed the planted training_args.bin"
    assert res.returncode in (0, 1), res.stderr  # a discovered bad pickle is skipped with a note; the run completes


@pytest.mark.parametrize("kind", ["os_system", "builtins_open"])
def test_malicious_training_args_bin_given_as_config_is_refused(tmp_path, kind):
    """Passed explicitly with --config it is the config asked for: refused in one line, still never executed."""
    marker = tmp_path / "PWNED"
    bait = evil_torch_zip(kind, marker, tmp_path / "training_args.bin")
    res = gradian("diagnose", "--config", bait, cwd=tmp_path)
    assert_clean(res)
    assert not marker.exists()
    assert res.returncode == 2
    assert "training_args.bin" in res.stderr and "no TrainingArguments object inside" in res.stderr


# --------------------------------------------------------------------------------------------------------------
# (2) a malicious adapter_model.bin next to adapter_config.json


def _evil_adapter(adapter: Path, tmp_path: Path, marker: Path) -> Path:
    a = tmp_path / "evil_adapter"
    a.mkdir()
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = "org/not-a-local-model"  # diagnose then skips the tokenizer: fast
    (a / "adapter_config.json").write_text(json.dumps(cfg))
    (a / "adapter_model.bin").write_bytes(evil_pickle("os_system", marker))
    return a


def test_malicious_adapter_model_bin_doctor(tmp_path, adapter):
    marker = tmp_path / "PWNED"
    a = _evil_adapter(adapter, tmp_path, marker)
    res = gradian("doctor", "--adapter", a, "--base", BASE_DIR, "--format", "json")
    assert_clean(res)
    assert not marker.exists()
    assert res.returncode == 1  # no usable weights: a blocking problem
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    assert checks["adapter weights"]["status"] == "error"
    assert "is a pickle, which gradian never loads" in res.stdout
    assert "safe_serialization=True" in res.stdout


def test_malicious_adapter_model_bin_diagnose(tmp_path, adapter):
    marker = tmp_path / "PWNED"
    a = _evil_adapter(adapter, tmp_path, marker)
    res = gradian("diagnose", "--adapter", a)
    assert_clean(res)
    assert not marker.exists()


def test_diagnose_says_why_adapter_model_bin_was_not_loaded(tmp_path, adapter):
    a = _evil_adapter(adapter, tmp_path, tmp_path / "PWNED")
    res = gradian("diagnose", "--adapter", a)
    assert "adapter_model.bin" in res.stdout + res.stderr


def test_diagnose_says_why_training_args_bin_was_skipped(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    evil_torch_zip("os_system", tmp_path / "PWNED", run / "training_args.bin")
    res = gradian("diagnose", "--run", run)
    assert "training_args.bin" in res.stdout + res.stderr


def test_malicious_adapter_model_bin_in_run_dir(tmp_path, adapter):
    """Same bait found by --run discovery rather than --adapter."""
    marker = tmp_path / "PWNED"
    a = _evil_adapter(adapter, tmp_path, marker)
    res = gradian("diagnose", "--run", a)
    assert_clean(res)
    assert not marker.exists()


# --------------------------------------------------------------------------------------------------------------
# (3) remote code is off by default


@pytest.fixture
def remote_code_base(tmp_path) -> tuple[Path, Path]:
    """A base whose config.json and tokenizer_config.json auto_map to modules that create a marker on import."""
    marker = tmp_path / "PWNED"
    base = tmp_path / "remote_base"
    shutil.copytree(BASE_DIR, base, ignore=shutil.ignore_patterns("*.safetensors"))
    payload = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
    (base / "configuration_evil.py").write_text(
        payload + "from transformers import LlamaConfig\n\nclass EvilConfig(LlamaConfig):\n    model_type = 'evil'\n"
    )
    (base / "modeling_evil.py").write_text(
        payload
        + "from transformers import LlamaForCausalLM\n"
        + "from .configuration_evil import EvilConfig\n\n"
        + "class EvilForCausalLM(LlamaForCausalLM):\n    config_class = EvilConfig\n"
    )
    cfg = json.loads((base / "config.json").read_text())
    cfg["model_type"] = "evil"
    cfg["architectures"] = ["EvilForCausalLM"]
    cfg["auto_map"] = {
        "AutoConfig": "configuration_evil.EvilConfig",
        "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM",
    }
    (base / "config.json").write_text(json.dumps(cfg))
    tok_cfg = json.loads((base / "tokenizer_config.json").read_text())
    (base / "tokenization_evil.py").write_text(
        payload + "from transformers import PreTrainedTokenizerFast as EvilTokenizer\n"
    )
    tok_cfg["auto_map"] = {"AutoTokenizer": [None, "tokenization_evil.EvilTokenizer"]}
    (base / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    return base, marker


def test_remote_code_off_by_default_doctor(adapter, remote_code_base):
    base, marker = remote_code_base
    res = gradian("doctor", "--adapter", adapter, "--base", base, "--format", "json")
    assert_clean(res)
    assert not marker.exists(), "doctor imported the base's custom code without --trust-remote-code"
    assert res.returncode == 1
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    assert checks["base model"]["status"] == "error", checks["base model"]
    assert "custom code" in checks["base model"]["detail"], checks["base model"]


def test_remote_code_off_by_default_diagnose(adapter, remote_code_base):
    base, marker = remote_code_base
    res = gradian("diagnose", "--adapter", adapter, "--base", base)
    assert_clean(res)
    assert not marker.exists(), "diagnose imported the base's custom code"
