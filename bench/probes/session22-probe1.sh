#!/usr/bin/env bash
# Session 22, probe 1: the tensor-core epilogue stores (and reads the residual) as 16-byte packs
# (shaders/out_dtype.glsl LOAD_OUT8 / STORE_OUT8). Session 22's first call measured an f32 output of
# linear 4096_gelu at 1.116x (f16) / 1.061x (bf16) the time of the 16-bit output, predicted 1.03.
# Predicted now: f32 output within 1.04x; the 16-bit outputs themselves no slower (+-2 %) and faster
# where the epilogue is a larger share (4096 shapes more than 8192).
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
b=build/tools
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
KF_VALIDATION=1 timeout 200 build/tests/test_linalg --gtest_brief=1 \
  --gtest_filter='LinalgPaths.*:*OutputDtype*' > "$out/test-linalg.txt" 2>&1; echo "test_linalg rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK) |tests? ran" "$out/test-linalg.txt"
grep -B2 -A12 "Failure" "$out/test-linalg.txt" | head -60
date +%T
timeout 200 $b/kf-conformance --backend vulkan --validation \
  --filter '^(linear|linear_dropout|matmul|ffn|ffn_swiglu|conv2d|conv2d_bn_relu|linear_cross_entropy)$' \
  --json "$out/conf-vulkan.json" > "$out/conf-vulkan.txt" 2>&1
echo "vulkan conformance rc=$?"; grep -E 'result|FAIL' "$out/conf-vulkan.txt" | head -20
gzip -f "$out/conf-vulkan.json"
date +%T
for r in 1 2; do
timeout 200 $b/kf-bench --backend vulkan --no-unfused --reps 7 --dtypes f16,bf16 --ops '^(linear|matmul|linear_dropout|ffn)$' \
  --json "$out/bench-mm-$r.json" 2>&1 | grep -E '^(linear|matmul|ffn)|unsupported'
done
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
