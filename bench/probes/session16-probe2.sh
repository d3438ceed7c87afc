#!/usr/bin/env bash
# Session 16, second probe (H100): where the QUAD backward's time goes and two variants (a probe-only switch,
# KF_PROBE_BWD): kreg = the dK/dV pass with the subgroup's K and V fragments in registers (1.0 fragment
# loads a product instead of 1.5; predicted dK/dV -15-25 % if the driver keeps it without spills), w8 = the
# dQ pass with 8 subgroups (128 rows a workgroup: half the key-tile loads a product, half the prefetch
# registers; predicted dQ -15-25 %); skipdq / skipdkv time one pass alone (wrong results, timing only).
# Pipeline statistics (registers, spills) first; the variants' correctness through the backward test.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
cases='^b4_h32_s(1024_d128_causal|4096_d128|4096_d128_causal)$'
run() {  # $1: label, $2: KF_PROBE_BWD
  echo "== $1"
  KF_PROBE_BWD=$2 timeout 150 build/tools/kf-bench --backend vulkan --no-unfused --reps 5 --dtypes f16 --ops '^attention_backward$' --cases "$cases" --json "$out/kf-$1.json" 2>&1 | grep -E '^attention'
}
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for p in "" "kreg,w8"; do
  KF_PIPELINE_STATS=1 KF_PROBE_BWD=$p timeout 60 build/tools/kf-bench --backend vulkan --no-unfused --reps 1 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s1024_d128_causal$' 2>&1 | grep -E "pipeline-stats.*(attn_bwd|attn_cmq_f16_d128)" | sort -u
done
date +%T
KF_PROBE_BWD=kreg,w8 timeout 200 build/tests/test_attention --gtest_filter='AttentionPaths.Backward*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max" | head -40
date +%T
for i in 1 2; do run base$i ""; run kreg$i kreg; run w8$i w8; run both$i kreg,w8; done
run dkv-only skipdq; run dq-only skipdkv; run dkv-only-kreg skipdq,kreg; run dq-only-w8 skipdkv,w8
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
