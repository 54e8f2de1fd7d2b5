#!/usr/bin/env bash
# The CPU benchmark runs behind docs/benchmarks.md (one torch thread per process, one process at a time: a second
# benchmark on the other core slows gradian's memory-bound scoring more than the floor and skews b/a).
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
export OMP_NUM_THREADS=1
py() { python -u "$@" 2>&1 | grep -v -i -E "warn|Loading weights|GradScaler"; }
py bench/bench_speed.py --model stories --rows 1000 --repeats 3 --threads 1 --kronfluence | tee bench/results/speed_stories.txt
py bench/bench_speed.py --model wide --rows 256 --repeats 3 --threads 1 --kronfluence | tee bench/results/speed_wide256.txt
py bench/bench_speed.py --model wide --rows 1024 --repeats 1 --threads 1 --kronfluence | tee bench/results/speed_wide1024.txt
py bench/bench_speed.py --model wide --rows 256 --queries 1 256 --repeats 1 --threads 1 | tee bench/results/speed_wide_q.txt
py bench/bench_agreement.py --rows 128 --queries 8 --threads 1 | tee bench/results/agreement.txt
