#!/usr/bin/env bash
# Session 17, second probe (H100). Probe 1 refuted B fragments built from 32-bit words (the forward 1.3x
# slower): mma.sync takes B with its pairs along the reduction, so a B fragment built in the quad (A)
# layout is converted in registers. Two experiments that follow from that:
# 1. attention_coopmat.comp VT (_w8t, KF_TUNE attn_cm=5): V staged transposed (pairs of keys in a word)
#    so that P V's B fragments are column-major loads, as K^T's are. Predicted: -5 to -10 % at S >= 4096,
#    if coopMatLoadNV's row-major B load is the transposing one.
# 2. mm_coopmat.comp AW (mm_cfg 15-17: c1, c13 and c5 with A's fragments from 32-bit words; A is
#    mma.sync's row operand, so no conversion). Predicted: +10-20 % where A's loads are most of them (c1,
#    c5: 4 A + 2 or 4 B a k step), +5 % for c13 (2 A + 4 B).
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
acases='^b4_h32_s(1024|4096|16384)_d128(_causal)?$'
att() {  # $1: label, $2: KF_TUNE
  echo "== attention $1"
  KF_TUNE=$2 timeout 200 build/tools/kf-bench --backend vulkan --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention$' --cases "$acases" --json "$out/attn-$1.json" 2>&1 | grep -E '^attention'
}
mm() {  # $1: mm_cfg
  echo "== linear mm_cfg=$1"
  KF_TUNE=mm_cfg=$1 timeout 100 build/tools/kf-bench --backend vulkan --no-unfused --reps 7 --size-mib 128 --dtypes f16 --ops '^linear$' --cases '^(4096|8192)_(bare|gelu)$' --json "$out/mm-$1.json" 2>&1 | grep -E '^linear'
}
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
KF_TUNE=attn_cm=5 KF_PIPELINE_STATS=1 timeout 60 build/tools/kf-bench --backend vulkan --no-unfused --reps 2 --dtypes f16 --ops '^attention$' --cases '^b4_h32_s1024_d128$' 2>&1 | grep -E "attn_cmq|^attention" | head -5
for c in 1 13 15 16 17; do KF_TUNE=mm_cfg=$c KF_PIPELINE_STATS=1 timeout 60 build/tools/kf-bench --backend vulkan --no-unfused --reps 2 --size-mib 128 --dtypes f16 --ops '^linear$' --cases '^4096_bare$' 2>&1 | grep -E "mm_coopmat" | head -2; done
date +%T
for i in 1 2; do for c in 1 15 13 16 17; do mm $c; done; done
date +%T
for i in 1 2; do att w8t$i attn_cm=5; att w8$i attn_cm=2; done
date +%T
timeout 200 build/tests/test_matmul_paths --gtest_filter='MatmulPaths.CooperativeMatrixF16AllTiles' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max" | head -40
date +%T
timeout 250 build/tests/test_attention --gtest_filter='AttentionPaths.CooperativeMatrixF16' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max" | head -40
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
