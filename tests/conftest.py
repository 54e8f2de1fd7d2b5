"""Shared fixtures: the bundled real model, and ../shared when it is there (CI has it beside the clone)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BASE_DIR = REPO / "examples" / "stories260k" / "base"
SHARED = REPO.parent / "shared"


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
