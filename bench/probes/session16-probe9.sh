#!/usr/bin/env bash
# Session 16, ninth probe (H100): norm_bwd.comp's Kahan sums with a 1 the compiler cannot see (and the
# column pass's chunk sums with their low parts; the fused-rows combine too). Expected on the GPU: the same
# results within rounding, times within 2 % (one multiply a compensated step; the partials are small).
# The norm backward conformance with the validation layer, then layer_norm_backward / rms_norm_backward at
# rows of 4096 on Vulkan (session 11: 0.86-0.91 of copy).
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
timeout 100 build/tools/kf-conformance --backend vulkan --validation --filter 'norm_backward' 2>&1 | tail -1
timeout 100 build/tools/kf-bench --backend vulkan --no-unfused --reps 10 --dtypes f32,f16,bf16 --ops '^(layer|rms)_norm_backward$' 2>&1 | grep -E '^(layer|rms)|copy'
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
