#!/usr/bin/env bash
# Session 6, eighth probe (H100): Vulkan f16 cross_entropy with integer-converted halves; the CUDA
# cross_entropy rewrite (helper's cuda-xent branch) with its tests and conformance on the GPU.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
b=build/tools
bench() { local tag=$1; shift; echo "== $tag"; "$b/kf-bench" --no-unfused --reps 20 "$@" 2>&1 | tee -a "$out/probe.log" | grep -vE '^$|^op '; }
bench xent-vk --backend vulkan --all-cases --dtypes f16 --ops '^cross_entropy'
bench xent-cuda --backend cuda --all-cases --dtypes f32,f16,bf16 --ops '^cross_entropy'
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
"$b/kf-conformance" --backend cuda --filter 'cross_entropy' > "$out/conf-xent.txt" 2>&1; echo "conformance rc=$?"; tail -2 "$out/conf-xent.txt"
KF_BACKEND=cuda timeout 200 build/tests/test_training > "$out/test-training-cuda.txt" 2>&1; echo "test_training rc=$?"; grep -E 'FAILED|PASSED' "$out/test-training-cuda.txt" | head
