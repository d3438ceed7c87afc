#!/usr/bin/env bash
# Session 11, fifth probe (H100; a helper's branch xent-cluster, merged): cross_entropy_backward's cluster kernel (train.cu
# xent_cluster_kernel), never run on a GPU when written. (1) Training.CudaCrossEntropyClusterRows and the
# cross_entropy tests, kf-conformance for cross_entropy(_backward) on cuda; (2) kf-bench of both bench
# cases, f32 / f16 / bf16, automatic and rows_cluster = 1 (the block-per-row kernel), 2, 4, 8, twice each in
# alternation (before: n1024_c131072 f32 0.77 of copy, 16-bit 0.96; n4096_c32768 0.98).
# Usage (device machine, bundle from tools/gpu-bundle.sh carried in .gpu): tar xf .gpu/kf.tar.xz; bash bench/probes/session11-probe5-xent.sh
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out/j"
export LD_LIBRARY_PATH=$PWD/build
B=build/tools/kf-bench
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 240 build/tests/test_training --gtest_filter='*CrossEntropy*' --gtest_brief=1 2>&1 | tail -8
timeout 120 build/tools/kf-conformance --backend cuda --filter '^cross_entropy(_backward)?$' --progress none 2>&1 | tail -4
date +%T
for rep in 1 2; do
for c in 0 1 2 4 8; do
  echo "== cuda rows_cluster=$c rep $rep"
  KF_TUNE=$([ $c = 0 ] && echo "" || echo "rows_cluster=$c") timeout 120 $B --backend cuda --no-unfused --reps 15 --all-cases \
    --dtypes f32,f16,bf16 --ops '^cross_entropy_backward$' --json "$out/j/xb-c$c-r$rep.json" 2>&1 | grep -E '^cross_entropy|rror'
done
done
date +%T
} > "$out/probe.log" 2>&1
tar czf "$out/j.tgz" -C "$out" j && rm -rf "$out/j"
cat "$out/probe.log"
