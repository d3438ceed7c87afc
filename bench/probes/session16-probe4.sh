#!/usr/bin/env bash
# Session 16, fourth probe (H100): probe 3's dQ kept 256 bytes of local memory (255 registers) whatever its
# tile; the cause taken to be the epilogue's accumulator elements indexed by the layout (dq[n][pair(i)]:
# 8 x 8 floats = 256 bytes, the whole accumulator array demoted to local memory). Both passes now write
# through a 16 x 16 shared-memory staging area, and dQ's row statistics are scalars chosen by H(i).
# Predicted: dQ without local memory, dQ alone 17.6 -> 11-12 ms at S 4096, the whole 32.2 -> 26 ms.
# dQ variants (KF_PROBE_BWD='dq=V;', probe only): nopf (no register prefetch), bk16, bk16nopf, bk64nopf.
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
for p in "" "dq=nopf;" "dq=bk16;" "dq=bk16nopf;" "dq=bk64nopf;"; do
  KF_PIPELINE_STATS=1 KF_PROBE_BWD=$p timeout 60 build/tools/kf-bench --backend vulkan --no-unfused --reps 1 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s1024_d128_causal$' 2>&1 | grep -E "pipeline-stats.*attn_bwd_cmq" | sed 's/:0:128:16:16:1:[0-9:]*//' | sort -u
done
date +%T
for p in "" "dq=bk16nopf;"; do
  KF_PROBE_BWD=$p timeout 200 build/tests/test_attention --gtest_filter='AttentionPaths.Backward*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max" | head -30
done
date +%T
for i in 1 2; do run base$i ""; for v in nopf bk16 bk16nopf bk64nopf; do run $v$i "dq=$v;"; done; done
run dkv-only skipdq; run dq-only skipdkv
run cuda "" cuda
date +%T
} > "$out/probe.log" 2>&1
rm -f $out/*.json
cat "$out/probe.log"
