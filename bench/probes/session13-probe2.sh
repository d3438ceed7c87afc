#!/usr/bin/env bash
# Session 13, second probe (H100): the CUDA norms' ring form (norm.cu norm_ring_kernel: persistent clusters,
# the next row's part copied while the current one reduces) against the one-row cluster kernel (KF_TUNE
# rows_ring=1), over rows of 65536, alternated twice; 16-bit also with 8 packs a thread (rows_ring=8).
# Then CUDA conformance of the norms and test_norm on the GPU.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
NORMS='^(layer_norm|layer_norm_relu|layer_norm_gelu|layer_norm_silu|rms_norm|rms_norm_gelu|rms_norm_silu)$'
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for i in 1 2; do
  for t in "rows_ring=1" "" "rows_ring=8"; do
    echo "== KF_TUNE='$t' ($i)"
    KF_TUNE=$t $B --backend cuda --no-unfused --reps 15 --dtypes f32,f16,bf16 --ops "$NORMS" --cases '^rows65536$' 2>&1 | grep -E '^[a-z_]+ +rows|copy bandwidth \('
  done
done
date +%T
build/tools/kf-conformance --backend cuda --filter "$NORMS" 2>&1 | tail -5
build/tests/test_norm --gtest_filter="*CudaClusterRows*" 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(OK|FAILED) .*Cluster|Failure|variant" | head -40
KF_TUNE=rows_ring=8 build/tools/kf-conformance --backend cuda --filter "$NORMS" 2>&1 | tail -3
date +%T
} > "$out/probe.log" 2>&1
tail -30 "$out/probe.log"
