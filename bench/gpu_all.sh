#!/usr/bin/env bash
# Every benchmark behind docs/benchmarks.md on one CUDA GPU, sized to finish in under 8 minutes (H100/H200 class).
# Not yet run: no GPU was available when these benchmarks were written. Needs kronfluence (bench only):
#   pip install --no-deps kronfluence==1.0.1 einops einconv opt-einsum
# Results: bench/results/gpu_*.txt and *.json.
set -uo pipefail
cd "$(dirname "$0")/.."
export GRADIAN_BENCH_DEVICE=cuda
mkdir -p bench/results
py() { timeout "$1" python -u "${@:2}" 2>&1 | grep -v -i -E "warn|Loading weights|GradScaler"; }
start=$SECONDS
py 90 bench/bench_speed.py --model stories --rows 1000 --repeats 3 --kronfluence | tee bench/results/gpu_speed_stories.txt
py 90 bench/bench_speed.py --model wide --rows 256 --repeats 3 --kronfluence | tee bench/results/gpu_speed_wide256.txt
py 90 bench/bench_speed.py --model wide --rows 1024 --repeats 3 --kronfluence | tee bench/results/gpu_speed_wide1024.txt
py 60 bench/bench_speed.py --model wide --rows 256 --queries 1 16 256 --repeats 3 | tee bench/results/gpu_speed_wide_q.txt
py 60 bench/bench_agreement.py --rows 402 --queries 20 | tee bench/results/gpu_agreement.txt
# quality and LDS: the retrains use gradian.train (CPU-sized model; the GPU helps little), 8 subsets
py 150 bench/bench_quality.py planted | tee bench/results/gpu_quality.txt
py 150 bench/bench_quality.py mislabeled | tee -a bench/results/gpu_quality.txt
echo "total $((SECONDS - start)) s"
