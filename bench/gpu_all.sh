#!/usr/bin/env bash
# Every benchmark behind docs/benchmarks.md on one CUDA GPU, sized to finish in under 8 minutes (H100/H200 class).
# Not yet run: no GPU was available when these benchmarks were written. Needs kronfluence (bench only):
#   pip install --no-deps kronfluence==1.0.1 einops einconv opt-einsum
# Results: bench/results/gpu_*.txt and gpu_*.json (bench/common.write_json prefixes them; the CPU figures stay).
set -uo pipefail
cd "$(dirname "$0")/.."
export GRADIAN_BENCH_DEVICE=cuda
mkdir -p bench/results
py() { timeout "$1" python -u "${@:2}" 2>&1 | grep -v -i -E "warn|Loading weights|GradScaler"; }
start=$SECONDS
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
