#!/usr/bin/env bash
# Session 13, final checks (H100) of the merged code: kf-conformance on vulkan and cuda with the validation
# layer; the GPU test suites of what this session touched (training: the CUDA cross-entropy backward's
# shared gradient code, XentGrad; attention: the knobs-replace-KF_TUNE test; norm, errors); and the CUDA
# cross_entropy_backward timings against the previous build (base/, same call, alternated twice: the
# refactor is meant to change nothing, its PTX being the same but for register names).
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
b=build/tools
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for i in 1 2; do
  for d in base build; do
    echo "== $d ($i)"
    LD_LIBRARY_PATH=$PWD/$d $d/tools/kf-bench --backend cuda --no-unfused --reps 15 --dtypes f32,f16,bf16 --ops '^cross_entropy(_backward)?$' 2>&1 | grep -E '^cross|copy bandwidth \('
  done
done > "$out/xent.txt" 2>&1
export LD_LIBRARY_PATH=$PWD/build
date +%T; "$b/kf-conformance" --backend vulkan,cuda --validation --json "$out/conf.json" > "$out/conf.txt" 2>&1; echo "conformance rc=$?"; tail -1 "$out/conf.txt"; grep -E ' fail ' "$out/conf.txt" | head
gzip -f "$out/conf.json"
date +%T
for t in test_training test_attention test_norm test_errors; do timeout 240 build/tests/$t --gtest_brief=1 > "$out/t.txt" 2>&1; rc=$?; echo "$t rc=$rc $(grep -E 'PASSED|FAILED' "$out/t.txt" | head -3 | tr '\n' ' ')"; cat "$out/t.txt" >> "$out/gpu-tests.txt"; done
rm -f "$out/t.txt"
date +%T
