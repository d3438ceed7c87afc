#!/usr/bin/env bash
# Session 6, fifth probe (H100): the Vulkan device now holds the GPU's CUDA context (cuda_context.cpp);
# the large-stream cases with it (default) and without (KF_VK_CUDA_CONTEXT=0), and the decode tests.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
b=build/tools
bench() { local tag=$1; shift; echo "== $tag"; "$b/kf-bench" --no-unfused --reps 20 "$@" 2>&1 | tee -a "$out/probe.log" | grep -vE '^$|^op '; }
"$b/kf-info" | grep -E 'cuda_context|== vulkan'
bench dec-vk --backend vulkan --ops '^attention$' --cases decode --dtypes f16,bf16
bench addrelu-2g --backend vulkan --ops '^add_relu$' --dtypes f16 --size-mib 2048
KF_VK_CUDA_CONTEXT=0 bench dec-vk-nohold --backend vulkan --ops '^attention$' --cases 128k --dtypes f16
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
timeout 250 build/tests/test_attention --gtest_filter='AttentionPaths.*Decode*' > "$out/test-decode.txt" 2>&1; echo "decode tests rc=$?"; grep -E 'FAILED|OK \]|Failure' "$out/test-decode.txt" | head -20
