#!/usr/bin/env bash
# Session 21, probe 1 (written without GPU time; for the next session's first call on the H100): what session 21
# built on lavapipe only. (1) Attrs::out_dtype on the tensor-core path: LinalgPaths.OutputDtypeOnEachMatrixPath
# forces each matrix path (mm_path=2 compiles mm_coopmat.comp with ODT_<dtype> at run time) and the registry's
# *_out_* cases through kf-conformance. (2) The cost of an f32 output: linear 4096_gelu_out_f32 against 4096_gelu,
# f16 / bf16. Predicted within 3 % (32 MiB more of stores, about 10 us at copy speed, against about 0.8 ms).
# (3) The portable attention backward's eight partial sums: attention_backward conformance on vulkan and cuda, and
# its time on a case the portable kernel serves (f32, B 4, H 32, S 1024, D 128, causal): predicted no slower.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
b=build/tools
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
echo "== tests (validation on)"
KF_VALIDATION=1 timeout 200 build/tests/test_linalg --gtest_brief=1 \
  --gtest_filter='LinalgPaths.*OnEachMatrixPath:*OutputDtypeErrors*' > "$out/test-linalg.txt" 2>&1; echo "test_linalg rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK) |tests? ran" "$out/test-linalg.txt"
grep -B2 -A12 "Failure" "$out/test-linalg.txt" | head -60
date +%T
echo "== kf-conformance: linear, linear_dropout, matmul, attention_backward"
for be in vulkan cuda; do
  timeout 150 $b/kf-conformance --backend $be --validation --filter '^(linear|linear_dropout|matmul|attention_backward)$' \
    --json "$out/conf-$be.json" > "$out/conf-$be.txt" 2>&1
  echo "$be conformance rc=$?"; grep -E 'result|fail|PASS|FAIL' "$out/conf-$be.txt" | head -20
  gzip -f "$out/conf-$be.json"
done
date +%T
echo "== kf-bench: an f32 output against the inputs' dtype"
timeout 150 $b/kf-bench --backend vulkan --no-unfused --reps 7 --dtypes f16,bf16 --ops '^linear$' \
  --cases '^4096_gelu(_out_f32)?$' --json "$out/bench-out-dtype.json" 2>&1 | grep -E '^linear|unsupported'
echo "== kf-bench: the portable attention backward (f32)"
timeout 150 $b/kf-bench --backend vulkan --no-unfused --reps 5 --dtypes f32 --ops '^attention_backward$' \
  --cases '^b4_h32_s1024_d128_causal$' --json "$out/bench-bwd-f32.json" 2>&1 | grep -E '^attention|unsupported'
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
