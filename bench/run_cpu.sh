#!/usr/bin/env bash
# The CPU benchmark runs behind docs/benchmarks.md (2 shared cores; one torch thread per process for stable timings).
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
py() { python -u "$@" 2>&1 | grep -v -i -E "warn|Loading weights|GradScaler"; }
py bench/bench_speed.py --model stories --rows 1000 --repeats 3 --threads 1 | tee bench/results/speed_stories.txt
py bench/bench_speed.py --model wide --rows 256 --repeats 2 --threads 1 --kronfluence | tee bench/results/speed_wide256.txt
py bench/bench_agreement.py --rows 128 --queries 8 --threads 1 | tee bench/results/agreement.txt
py bench/bench_speed.py --model wide --rows 256 --queries 1 256 --repeats 1 --threads 1 | tee bench/results/speed_wide_q.txt
py bench/bench_speed.py --model wide --rows 1024 --repeats 1 --threads 1 | tee bench/results/speed_wide1024.txt
