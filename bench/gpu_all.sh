#!/usr/bin/env bash
# Every benchmark behind docs/benchmarks.md on one CUDA GPU, sized to finish in under 8 minutes (H100/H200 class).
# Not yet run to the end (session 14's H200 run printed nothing after the start and hit its limit; the preflight and
# offline settings below are the fix). Needs gradian importable (pip install -e ., or PYTHONPATH=src) and kronfluence:
#   pip install --no-deps kronfluence==1.0.1 einops einconv opt-einsum
# Results: bench/results/gpu_*.txt and gpu_*.json (bench/common.write_json prefixes them; the CPU figures stay).
set -uo pipefail
cd "$(dirname "$0")/.."
export GRADIAN_BENCH_DEVICE=cuda
# Nothing may reach a model hub (a machine without network can hang on it), and every line shows as it is printed.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
mkdir -p bench/results
py() { timeout "$1" "$PYTHON" -u "${@:2}" 2>&1 | grep --line-buffered -v -i -E "warn|Loading weights|GradScaler"; }
start=$SECONDS
# Fail in a minute, not eight, when the packages or the GPU are not there.
timeout 90 "$PYTHON" -c "import torch, transformers, peft, gradian; assert torch.cuda.is_available(), 'no CUDA device'
print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__,
      torch.cuda.get_device_name(0))" || { echo "preflight failed after $((SECONDS - start)) s"; exit 1; }
# Per-step timeouts sum to 480 s, so the script ends inside 8 minutes even when a step hangs.
py 60 bench/bench_speed.py --model stories --rows 1000 --repeats 3 --kronfluence | tee bench/results/gpu_speed_stories.txt
py 60 bench/bench_speed.py --model wide --rows 256 --repeats 3 --kronfluence | tee bench/results/gpu_speed_wide256.txt
py 60 bench/bench_speed.py --model wide --rows 1024 --repeats 3 --kronfluence | tee bench/results/gpu_speed_wide1024.txt
py 45 bench/bench_speed.py --model wide --rows 256 --queries 1 16 256 --repeats 3 | tee bench/results/gpu_speed_wide_q.txt
py 30 bench/bench_agreement.py --rows 402 --queries 20 | tee bench/results/gpu_agreement.txt
# memory: peak RSS and store bytes per row of a 10k-row attribution on the GPU (streamed store)
py 60 bench/bench_scale.py --rows 10000 --what attribute --results gpu_scale.json | tee bench/results/gpu_scale.txt
# quality: planted faults for every method (the retrains use gradian.train on a CPU-sized model). LDS (100 retrains)
# is CPU work not repeated here (bench_quality.py lds); diagnose needs no GPU: its 10k-row throughput on this host.
py 75 bench/bench_quality.py planted | tee bench/results/gpu_quality.txt
py 75 bench/bench_quality.py mislabeled | tee -a bench/results/gpu_quality.txt
py 15 bench/bench_diagnose.py 10000 | tee bench/results/gpu_diagnose.txt
echo "total $((SECONDS - start)) s"
