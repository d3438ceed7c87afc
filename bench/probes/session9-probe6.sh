#!/usr/bin/env bash
# Session 9, sixth probe (H100): (1) the Vulkan tensor-core attention with the base-2 softmax, full-tile
# fast path and rescale skip (a helper's vattn), its GPU tests, against PyTorch's FlashAttention-2;
# (2) the CUDA 16-bit implicit-GEMM convolution on tensor cores (a helper's conv3) against PyTorch eager
# (torch_linalg.py), its GPU tests and conformance.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
log="$out/probe.log"
{
date +%T
echo "== vulkan attention"
$B --backend vulkan --no-unfused --reps 10 --size-mib 128 --dtypes f16,bf16 --ops '^attention$' --cases 'b4_h32_s' --json "$out/attn-vk.json" 2>&1 | grep -E '^attention'
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_attention.py --cases-from "$out/attn-vk.json" --backends flash --out-dir "$out" 2>&1 | grep -vE '^\s*$' | tail -13
date +%T
timeout 300 build/tests/test_attention --gtest_brief=1 --gtest_filter='AttentionPaths.CooperativeMatrix*' 2>&1 | tail -4
timeout 200 build/tools/kf-conformance --backend vulkan --filter '^attention$' --progress none 2>&1 | tail -6
date +%T
echo "== cuda conv"
$B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16,f32 --ops '^(conv2d_bn_relu|conv2d_gelu_dropout|depthwise_pointwise)$' --all-cases --json "$out/conv-cuda.json" 2>&1 | grep -E '^(conv|depth)'
PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_linalg.py --cases-from "$out/conv-cuda.json" --out-dir "$out" > "$out/torch-conv.log" 2>&1; echo "torch rc=$?"; grep -E "conv|depth" "$out/torch-conv.log" | tail -12
KF_BACKEND=cuda timeout 200 build/tests/test_linalg --gtest_brief=1 2>&1 | tail -4
timeout 200 build/tools/kf-conformance --backend cuda --filter '^(conv2d|conv2d_bn_relu|conv2d_gelu_dropout|depthwise_pointwise)$' --progress none 2>&1 | tail -7
date +%T
} > "$log" 2>&1
cat "$log"
