#!/usr/bin/env bash
# The two venvs bench/frameworks/make_golden_*.py ran in (CPU only, no GPU, no model hub). Each framework gets its
# own venv with its own pins for torch / transformers / datasets / trl / peft; the framework itself goes in with
# --no-deps, then the packages its import chain needs. See docs/how-to/trainers.md for what was
# left out and why.
#   bash bench/frameworks/make_venvs.sh /work/venv-axo /work/venv-lf /work/venv-axo21
set -euo pipefail
AXO=${1:-venv-axo}
LF=${2:-venv-lf}
AXO21=${3:-venv-axo21}

python3.11 -m venv "$AXO"
"$AXO/bin/pip" install -q torch==2.13.0
"$AXO/bin/pip" install -q packaging==26.0 huggingface_hub==1.17.0 peft==0.20.0 tokenizers==0.23.1 \
  transformers==5.16.1 accelerate==1.13.0 datasets==4.8.4 trl==1.9.0 typing-extensions==4.15.0 sentencepiece \
  pydantic==2.12.5 addict fire PyYAML==6.0.3 requests einops colorama "numpy<3.0,>=2.1" scipy fastcore \
  zstandard==0.22.0 python-dotenv==1.0.1 mistral-common==1.11.5 axolotl-contribs-lgpl==0.0.7 \
  axolotl-contribs-mit==0.0.6 posthog==6.7.11
# Axolotl's GPU-side pins install and import on CPU (torch stays 2.13.0+cpu); xformers and liger-kernel without
# their deps, which would pull a CUDA torch.
"$AXO/bin/pip" install -q "numba<1.0,>=0.63.1" bitsandbytes==0.50.2 "triton>=3.4.0" torchao==0.17.0 optimum==1.16.2 \
  evaluate==0.4.1 immutabledict==4.2.0 langdetect==1.0.9 schedulefree==1.4.1 "kernels<0.17.0,>=0.16.0" art \
  hf_transfer nvidia-ml-py==12.560.30 tensorboard wandb torch==2.13.0  # wandb: `axolotl train` imports it
"$AXO/bin/pip" install -q --no-deps liger-kernel==0.8.1 "xformers>=0.0.33.post2" axolotl==0.19.0

python3.11 -m venv "$LF"
"$LF/bin/pip" install -q torch==2.13.0
"$LF/bin/pip" install -q transformers==5.6.0 datasets==4.0.0 trl==0.24.0 peft==0.18.1 accelerate==1.11.0 \
  torchdata==0.11.0 "tyro<0.9.0" omegaconf fire pyyaml pandas numpy scipy sentencepiece tiktoken protobuf \
  safetensors einops packaging pydantic matplotlib torch==2.13.0
# No torchvision: PyPI's 0.28.0 is built for CUDA torch ("operator torchvision::nms does not exist" under CPU torch,
# after which transformers cannot import PreTrainedModel). No torchaudio: its newest wheel (2.11.0) is built for torch
# 2.11 and fails to load under 2.13; bench/frameworks/stubs/torchaudio stands in (PYTHONPATH).
"$LF/bin/pip" install -q --no-deps llamafactory==0.9.5

# Axolotl 0.21.0 (the current release) needs Python >= 3.12, for which no CPU torch wheel lies on this machine: torch
# 2.13.0 comes from PyPI as its CUDA build (about 4.5 GB with the nvidia-* wheels) and runs on the CPU.
PY312=${PY312:-python3.12}
"$PY312" -m venv "$AXO21"
"$AXO21/bin/pip" install -q torch==2.13.0
"$AXO21/bin/pip" install -q peft==0.21.2 transformers==5.20.1 datasets==5.0.1 trl==1.14.1 sentencepiece addict fire \
  PyYAML requests einops colorama "numpy<3.0,>=2.1" scipy fastcore python-dotenv==1.0.1 antlr4-python3-runtime==4.13.2 \
  torchao==0.18.0 numba bitsandbytes triton posthog pydantic mistral-common zstandard torch==2.13.0
"$AXO21/bin/pip" install -q --no-deps axolotl==0.21.0 liger-kernel xformers
