#!/usr/bin/env bash
# Session 6, twelfth probe (H100): pipeline statistics (registers, shared memory) of the fused norm
# backward, layer against rms, f32 against f16: why 16-bit layer_norm_backward stays at 0.35 of copy.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
KF_PIPELINE_STATS=1 build/tools/kf-bench --no-unfused --reps 10 --backend vulkan --dtypes f32,f16 --ops '^(layer_norm_backward|rms_norm_backward)$' 2>&1 | grep -E 'normbwd|rows4096' | tee "$out/probe.log"
