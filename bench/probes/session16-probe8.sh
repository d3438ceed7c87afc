#!/usr/bin/env bash
# Session 16, eighth probe (H100): the QUAD backward at head dimensions 32, 80 and 96 too (the same shader;
# the tile loads' last round partly filled where the packs do not divide the workgroup). Its tests with the
# validation layer (new multi-tile cases at D 32, 80 and 96; both dtypes), the attention conformance with
# it, and the pipeline statistics of the new instances (registers, local memory).
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 300 build/tests/test_attention --gtest_filter='AttentionPaths.Backward*:AttentionErrors.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max|vulkan" | head -60
date +%T
timeout 150 build/tools/kf-conformance --backend vulkan --validation --filter '^attention' 2>&1 | tail -1
KF_PIPELINE_STATS=1 timeout 100 build/tests/test_attention --gtest_filter='AttentionPaths.BackwardCooperativeMatrix' 2>&1 | grep -E "pipeline-stats.*attn_bwd_cmq" | sed 's/:0:128:[0-9:]*//' | sort -u
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
