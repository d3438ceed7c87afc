#!/usr/bin/env bash
# Session 22, probe 5: the workgroup of rows split over workgroups (norm.comp PASS 3, rows.comp COOP; new
# KF_TUNE rows_wg, default 512) against the rows of 65536 that stay below 0.85 of copy on Vulkan (issue 4).
# Session 20 found them latency-bound (more rows in flight was faster at every step). A 256-invocation
# workgroup halves each part (P doubles: more exchange) but shortens its reductions (8 subgroups) and lets
# parts finish and start independently at a finer grain; 1024 caps an invocation at 64 registers.
# Predicted: rows_wg=256 +0.02-0.05 of copy, 1024 slower (spills), the same part size as the default from
# 256 invocations x 64 values within +-0.02 of the default. Alternated twice.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
b=build/tools
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for rep in 1 2; do
  for t in default rows_wg=256 rows_wg=1024 rows_wg=256,rows_values=64 rows_values=16; do
    echo "== $t (rep $rep)"
    if [ $t = default ]; then unset KF_TUNE; else export KF_TUNE=$t; fi
    timeout 100 $b/kf-bench --backend vulkan --no-unfused --reps 10 --dtypes f32,f16,bf16 --cases '^rows65536$' \
      --ops '^(softmax|layer_norm|rms_norm|add_rms_norm)$' --json "$out/rows-$rep-${t//[=,]/_}.json" 2>&1 | grep -E '^(softmax|layer|rms|add)'
  done
done
unset KF_TUNE
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
