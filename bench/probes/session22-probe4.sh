#!/usr/bin/env bash
# Session 22, probe 4: norm.comp and norm_bwd.comp declare their inputs restrict. Hypothesis: normalize_store
# loads each item's w / b packs (L2 hits) after the previous item's y store, which the compiler must assume may
# alias them, so those loads are serialized: NT load latencies per part on the critical path, which would show
# most where a workgroup's part has no sibling workgroups to hide it (rows of 65536, group_norm's one
# workgroup per row of 16384) and more for layer_norm (w and b) than rms_norm (w) or softmax (neither: the
# control, unchanged). Session 11's figures (fraction of copy, f32 / f16 / bf16): layer_norm rows65536 0.76 /
# 0.80 / 0.74, rms_norm 0.83 / 0.91 / 0.87, add_rms_norm 0.90 / 0.78 / 0.78, group_norm 0.98 / 0.72 / 0.71,
# softmax rows65536 0.84 / 0.80 / 0.83. Predicted: layer_norm and 16-bit group_norm +0.05-0.15, rms_norm and the
# add form +0.03-0.08, softmax unchanged (+-0.02).
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
b=build/tools
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 200 $b/kf-bench --backend vulkan --no-unfused --reps 10 --all-cases \
  --ops '^(copy|softmax|layer_norm|rms_norm|add_rms_norm|add_layer_norm|group_norm|layer_norm_gelu|layer_norm_backward|rms_norm_backward)$' \
  --json "$out/norms.json" 2>&1 | grep -vE '^\s*$' | grep -vE '^(kf-bench|op )'
date +%T
timeout 120 $b/kf-conformance --backend vulkan --validation --filter 'norm' > "$out/conf.txt" 2>&1
echo "conformance rc=$?"; grep -E '^  result| fail ' "$out/conf.txt" | head
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
