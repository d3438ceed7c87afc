#!/usr/bin/env bash
# Session 16, fifth probe (H100): dQ now over 16-key tiles (probe 4: 4 % faster under a causal mask, 236
# registers). dK/dV alone went 14.9 -> 15.9 ms at S 4096 when its epilogue moved to the staging area; dK/dV
# variants (KF_PROBE_BWD='dkv=V;', probe only): direct (the old register epilogue, pairs (i, i + 1) of
# NVIDIA's layout; predicted -1 ms if that was the cause), nopf32 / nopf64 (no register prefetch, 32- or
# 64-row tiles: 4x fewer barriers a row at 64; predicted within 5 %). Also: are the forward's QUAD kernels
# (attention_coopmat.comp, arrays indexed by H(i)) holding local memory, as dQ was?
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
cases='^b4_h32_s(1024_d128_causal|4096_d128|4096_d128_causal)$'
run() {  # $1: label, $2: KF_PROBE_BWD, $3: backend
  echo "== $1"
  KF_PROBE_BWD=$2 timeout 150 build/tools/kf-bench --backend ${3:-vulkan} --no-unfused --reps 5 --dtypes f16 --ops '^attention_backward$' --cases "$cases" --json "$out/kf-$1.json" 2>&1 | grep -E '^attention'
}
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for p in "" "dkv=direct;" "dkv=nopf32;" "dkv=nopf64;"; do
  KF_PIPELINE_STATS=1 KF_PROBE_BWD=$p timeout 60 build/tools/kf-bench --backend vulkan --no-unfused --reps 1 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s1024_d128_causal$' 2>&1 | grep -E "pipeline-stats.*attn_bwd_cmq" | sed 's/:0:128:16:16:1:[0-9:]*//' | sort -u
done
KF_PIPELINE_STATS=1 timeout 60 build/tools/kf-bench --backend vulkan --no-unfused --reps 3 --dtypes f16,bf16 --ops '^attention$' --cases '^b4_h32_s4096_d128(_causal)?$' 2>&1 | grep -E "pipeline-stats.*attn_cm|^attention" | sed 's/:[0-9:]*:/ /' | sort -u
date +%T
for p in "" "dkv=direct;" "dkv=nopf64;"; do
  KF_PROBE_BWD=$p timeout 200 build/tests/test_attention --gtest_filter='AttentionPaths.Backward*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max" | head -30
done
date +%T
for i in 1 2; do run base$i ""; for v in direct nopf32 nopf64; do run $v$i "dkv=$v;"; done; done
run dkv-only skipdq; run dq-only skipdkv; run dkv-only-direct "skipdq,dkv=direct;"; run dkv-only-nopf64 "skipdq,dkv=nopf64;"
date +%T
} > "$out/probe.log" 2>&1
rm -f $out/*.json
cat "$out/probe.log"
