#!/usr/bin/env bash
# Session 16, third probe (H100): after probe 2 (dK/dV with K and V in registers kept: dK/dV alone 20.9 ->
# 14.6 ms at S 4096; dQ alone 17.7 ms at 255 registers with 256 bytes of local memory), both passes now take
# one 16 x 16 score block at a time (fewer live registers). Predicted: dQ without local memory, dQ alone
# -10-20 %. Variants (KF_PROBE_BWD, probe only): dosm = dQ with the dO fragments read from shared memory
# each tile (32 registers fewer, 16 more loads a tile); bq32 = dK/dV over 32-row tiles at D 128 (half the
# barriers a row, 16 more prefetch registers). Statistics, the backward tests with each, then timings.
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
for p in "" "dosm,bq32"; do
  KF_PIPELINE_STATS=1 KF_PROBE_BWD=$p timeout 60 build/tools/kf-bench --backend vulkan --no-unfused --reps 1 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s1024_d128_causal$' 2>&1 | grep -E "pipeline-stats.*attn_bwd_cmq" | sed 's/:0:128:16:16:1:[0-9:]*//' | sort -u
done
date +%T
for p in "" "dosm,bq32"; do
  KF_PROBE_BWD=$p timeout 200 build/tests/test_attention --gtest_filter='AttentionPaths.Backward*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max" | head -30
done
date +%T
for i in 1 2; do run base$i ""; run dosm$i dosm; run bq32$i bq32; done
run dkv-only skipdq; run dq-only skipdkv; run dkv-only-bq32 skipdq,bq32; run dq-only-dosm skipdkv,dosm
date +%T
} > "$out/probe.log" 2>&1
rm -f $out/*.json
cat "$out/probe.log"
