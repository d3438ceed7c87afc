#!/usr/bin/env bash
# bench/torch_bench.py times what kf-bench times (CTest torch_bench_plan): its --plan-only cases (no
# PyTorch needed) against a kf-bench run of the same ops on the CPU backend at the same size, every case,
# three dtypes: the same shapes (kf-bench's scale_shapes), bytes and flops (the registry's cost model).
# Usage: bench_plan_test.sh KF_BENCH SOURCE_DIR WORK_DIR
set -euo pipefail
bench=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
# linear_cross_entropy is left out: its bench case keeps the weight [131072, 4096] whatever --size-mib, too
# large for the CPU backend's float64 reference here (its plan is checked against a kf-bench run on a GPU).
ops=$(python3 "$src/bench/torch_bench.py" --list-ops | grep -v '^linear_cross_entropy' | paste -sd '|')
"$bench" --backend cpu --ops "^($ops)\$" --primitives --size-mib 1 --reps 1 --warmup 0 --warmup-ms 0 --no-unfused \
  --all-cases --dtypes f32,f16,bf16 --json "$work/kf.json" > "$work/kf-bench.txt" 2>&1 || { cat "$work/kf-bench.txt"; exit 1; }
python3 "$src/bench/torch_bench.py" --plan-only --primitives --size-mib 1 --all-cases --dtypes f32,f16,bf16 \
  --ops "^($ops)\$" > "$work/plan.json"
python3 "$src/tests/bench_checks.py" plan "$work/plan.json" "$work/kf.json"
