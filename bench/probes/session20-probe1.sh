#!/usr/bin/env bash
# Session 20, probe 1 (H100): custom score functions (Attrs::score_mod) compiled into the Vulkan kernels at run
# time. (1) The GPU tests of the new paths: AttentionScoreMod.* (the tensor-core forward and backward take the
# function on this GPU), the tensor-core tests with the registry's score_mod cases, and the CUDA tests whose
# registry loops now expect its refusal. (2) kf-conformance of attention / attention_backward on vulkan and cuda
# with the validation layer. (3) The cost of the general form: causal attention with ALiBi built in against
# the same bias as a score function, forward and backward, f16 / bf16, B 4, H 32, S 4096, D 128.
# Predicted: the function adds one pow and a few integer ops per score where ALiBi's slope is per row, so
# the forward (bound by its fragment loads on Vulkan) within 0-10 % of the ALiBi case, the backward within 0-15 %.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
b=build/tools
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
echo "== tests (Vulkan and CUDA on the GPU, validation on)"
KF_VALIDATION=1 timeout 200 build/tests/test_attention --gtest_brief=1 \
  --gtest_filter='AttentionScoreMod.*:AttentionPaths.CooperativeMatrixF16:AttentionPaths.BackwardCooperativeMatrix' \
  > "$out/test-attention.txt" 2>&1; echo "test_attention rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK) |tests? ran" "$out/test-attention.txt"
grep -B2 -A12 "Failure" "$out/test-attention.txt" | head -60
date +%T
echo "== kf-bench: ALiBi built in against the same bias as a score function"
for be in vulkan cuda; do
  timeout 150 $b/kf-bench --backend $be --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention(_backward)?$' \
    --cases '^b4_h32_s4096_d128_causal(_alibi|_score_mod_alibi)?$' --json "$out/bench-$be.json" 2>&1 | grep -E '^attention|unsupported'
done
date +%T
echo "== kf-conformance attention on vulkan and cuda"
timeout 100 $b/kf-conformance --backend vulkan --validation --filter '^attention' --json "$out/conf-attn.json" > "$out/conf-attn.txt" 2>&1
echo "conformance rc=$?"; grep -E 'result|fail' "$out/conf-attn.txt" | head -20
gzip -f "$out/conf-attn.json"
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
