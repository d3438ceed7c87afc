#!/usr/bin/env bash
# Session 22, probe 6 (not run: the session's device time ran out; for the next session, after
# `git apply bench/probes/session22-gemv-wu4.patch` and a build): mm_gemv.comp keeps 4 packs of W in flight per
# invocation (was 2; the same k order per lane, so the same sums; lavapipe: test_linalg, test_matmul_paths and the
# linear / linear_dropout / ffn / ffn_swiglu conformance pass with it). Measured just before
# (`session22/decode`, this session's previous call): linear decode_8192 (N = K = 8192) on Vulkan at 0.80-0.82 of
# copy with M = 1 (kf-bench --size-mib 128) and 0.57-0.59 with M = 2 (the default size doubles A's rows;
# cuBLASLt 0.92-0.94 at both). Predicted: M = 1 0.85-0.90, M = 2 about 0.70.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
b=build/tools
{
for s in 128 256; do
  echo "== size-mib $s"
  $b/kf-bench --backend vulkan --no-unfused --reps 15 --size-mib $s --dtypes f16,bf16 --ops '^linear$' --cases '^decode_8192$' \
    --json "$out/decode-$s.json" 2>&1 | grep -E '^linear'
done
timeout 100 $b/kf-conformance --backend vulkan --validation --filter '^(linear|linear_dropout|ffn)$' > "$out/conf.txt" 2>&1
echo "conformance rc=$?"; grep -E '^  result| fail ' "$out/conf.txt" | head
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
