"""The CLI as a user runs it: a real subprocess, real exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import BASE_DIR, make_lora_adapter


def gradian(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradian", *args], capture_output=True, text=True, cwd=cwd)


def test_help_lists_every_command():
    res = gradian("--help")
    assert res.returncode == 0
    for cmd in ("diagnose", "attribute", "doctor", "train", "report", "demo"):
        assert cmd in res.stdout


def test_version():
    res = gradian("--version")
    assert res.returncode == 0 and res.stdout.startswith("gradian ")


def test_doctor_environment_json():
    res = gradian("doctor", "--format", "json")
    assert res.returncode == 0, res.stderr
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    assert checks["torch"]["status"] == "ok"
    assert checks["python"]["status"] == "ok"
    assert "device" in checks and checks["disk"]["status"] == "ok"


def test_doctor_bad_format_is_one_line():
    res = gradian("doctor", "--format", "yaml")
    assert res.returncode == 2
    assert res.stderr.strip() == "error: --format: unknown --format 'yaml'. Fix: use table or json."


def test_doctor_adapter_fits_base(tmp_path):
    adapter = make_lora_adapter(BASE_DIR, tmp_path / "adapter")
    res = gradian("doctor", "--adapter", str(adapter), "--base", str(BASE_DIR), "--format", "json")
    assert res.returncode == 0, res.stdout + res.stderr
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    assert checks["adapter ↔ base"]["status"] == "ok"
    assert "20 LoRA tensors" in checks["adapter ↔ base"]["detail"]  # 5 layers × (q, v) × (A, B)


def test_doctor_adapter_for_another_base_is_an_error(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    other = tmp_path / "other-base"
    cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
    )
    LlamaForCausalLM(cfg).save_pretrained(other)
    adapter = make_lora_adapter(other, tmp_path / "adapter")
    res = gradian("doctor", "--adapter", str(adapter), "--base", str(BASE_DIR), "--format", "json")
    assert res.returncode == 1
    check = {c["name"]: c for c in json.loads(res.stdout)}["adapter ↔ base"]
    assert check["status"] == "error"
    assert "do not fit" in check["detail"] and "shape [4, 32]" in check["detail"]
    assert "base_model_name_or_path" in check["fix"]


def test_attribute_bad_option_values_are_one_line_before_loading():
    e = "examples/stories260k"
    common = ["attribute", "--run", f"{e}/run", "--train", f"{e}/data/train.jsonl", "--eval", f"{e}/data/eval.jsonl",
              "--out", "/tmp/gradian-never-written", "--no-progress"]  # fmt: skip
    for flag, value, want in (
        ("--store-dtype", "fp16", "error: unknown --store-dtype 'fp16'. Fix: use auto, fp32 or bf16."),
        ("--method", "tracin", "error: unknown --method 'tracin'. Fix: use one of ekfac, kfac, datainf, exact,"),
        ("--weighting", "loss", "error: unknown --weighting 'loss'. Fix: use uniform or regression."),
    ):
        res = gradian(*common, flag, value, cwd=BASE_DIR.parents[2])
        assert res.returncode == 2
        assert res.stderr.strip().startswith(want), res.stderr  # one line: nothing loaded, no warnings first
