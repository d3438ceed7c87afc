#!/usr/bin/env bash
# Session 13, third probe (H100): the norms' output pass with one fma for the centering of 16-bit rows and
# one for the affine (hal/cuda/norm.cu norm_store, shaders/norm.comp normalize_store), against the code
# before it in the same call: base/ is the previous build (bench/probes: the ring build, run with
# KF_TUNE=rows_ring=1, whose norm paths are the earlier code's), build/ this one; alternated twice, both
# backends, every norm op over rows of 4096 and 65536. Then conformance of the norms on both backends with
# the validation layer, and test_norm on the GPU.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
NORMS='^(layer_norm|layer_norm_relu|layer_norm_gelu|layer_norm_silu|rms_norm|rms_norm_gelu|rms_norm_silu|add_layer_norm|add_rms_norm)$'
run() {  # $1: label, $2: build dir, $3: KF_TUNE, $4: backend, $5: dtypes
  echo "== $1 $4"
  LD_LIBRARY_PATH=$PWD/$2 KF_TUNE=$3 $2/tools/kf-bench --backend $4 --no-unfused --reps 15 --dtypes $5 --ops "$NORMS" --cases '^rows(4096|65536)$' 2>&1 | grep -E '^[a-z_]+ +rows|copy bandwidth \('
}
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for i in 1 2; do
  run "base($i)" base rows_ring=1 cuda f32,f16,bf16
  run "new($i)" build "" cuda f32,f16,bf16
done
for i in 1 2; do
  run "base($i)" base "" vulkan f16,bf16
  run "new($i)" build "" vulkan f16,bf16
done
date +%T
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
build/tools/kf-conformance --backend cuda,vulkan --validation --filter "$NORMS|group_norm" 2>&1 | tail -3
build/tests/test_norm 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *FAILED|Failure" | head -20
date +%T
} > "$out/probe.log" 2>&1
tail -12 "$out/probe.log"
