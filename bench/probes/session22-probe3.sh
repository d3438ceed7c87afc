#!/usr/bin/env bash
# Session 22, probe 3: the tensor-core epilogue walks its accumulators column block by column block
# (rows inner), so that a column's bias and bf16 scale factor die after the FM accumulators of its block.
# Probe 2: the bf16 fused epilogue costs 1.12-1.16x the bare product (linear 4096_gelu 1.921 ms against
# 4096_bare 1.660-1.692; 8192: 14.19 / 12.63), f16 1.01-1.03x. Hypothesis: with rows outer, the 32 column
# scale factors and 16 bias words of a subgroup's four column blocks stay live across the row blocks, and
# the registers spill. Predicted: bf16 4096_gelu 1.92 -> about 1.72 ms (within 4 % of bare), f16 unchanged.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
b=build/tools
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 200 $b/kf-conformance --backend vulkan --validation --filter '^(linear|linear_dropout|matmul)$' \
  --json "$out/conf-vulkan.json" > "$out/conf-vulkan.txt" 2>&1
echo "vulkan conformance rc=$?"; grep -E 'result|FAIL' "$out/conf-vulkan.txt" | head -20
gzip -f "$out/conf-vulkan.json"
date +%T
for r in 1 2; do
timeout 200 $b/kf-bench --backend vulkan --no-unfused --reps 7 --dtypes f16,bf16 --ops '^(linear|matmul|linear_dropout)$' --all-cases \
  --json "$out/bench-mm-$r.json" 2>&1 | grep -E '^(linear|matmul)|unsupported'
done
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
