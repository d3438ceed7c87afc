#!/usr/bin/env bash
# Session 19, probe 3 (H100): attention's keep bits with fewer instructions: each Philox round's key from the
# parameter bank (AttnParams::rk, set on the host) instead of two adds per call, keep_bits32's 8 calls unrolled
# and each flag shifted in with one funnel shift. SASS of keep_bits32 in a test kernel before / after, then the
# backward (kept bits) and forward with dropout against probe 2's build (old/), alternated twice, then the
# CUDA attention and dropout tests. Predicted: backward S 4096 causal p 0.1 7.0 -> 6.3-6.6 ms; plain cases
# unchanged.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
mkdir -p old && xz -dc .gpu/old/libkf.so.0.xz > old/libkf.so.0
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
for v in old new; do
  cuobjdump -sass .gpu/sass/kb_$v.cubin > "$out/kb_$v.sass" 2>&1
  echo "keep_bits32 test kernel, $v: $(grep -cE '^\s+/\*[0-9a-f]+\*/' "$out/kb_$v.sass") SASS instructions;" \
       "$(grep -oE '(IMAD\.WIDE\.U32|IMAD\.HI\.U32|IMAD\.WIDE|LOP3\.LUT|SHF\.[A-Z.]+|LEA\.HI[A-Z.]*|IADD3|ISETP[A-Z.]*|SEL|BRA)' "$out/kb_$v.sass" | sort | uniq -c | tr '\n' ' ')"
done
date +%T
for rep in 1 2; do
  for lib in build old; do
    echo "== $lib (round $rep)"
    LD_LIBRARY_PATH=$PWD/$lib timeout 150 build/tools/kf-bench --backend cuda --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention(_backward)?$' --cases '^b4_h32_s(1024_d128_causal|4096_d128_causal|4096_d128_causal_dropout)$' --json "$out/attn-$lib-$rep.json" 2>&1 | grep -E '^attention'
  done
done
date +%T
export LD_LIBRARY_PATH=$PWD/build
timeout 300 build/tests/test_attention --gtest_filter='AttentionCuda.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|differ" | head -40
timeout 200 build/tests/test_dropout 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED)|Failure|Expected|Which|differ" | head -20
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
