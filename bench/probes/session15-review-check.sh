#!/usr/bin/env bash
# Session 15, after the review (H100): the CUDA backward's shared score-product helper and row range
# (dkv_rows), and the Vulkan backward's one launch setup: timings against probe 7, the backward tests of
# both backends, the attention conformance with the validation layer.
set -u
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
timeout 120 build/tools/kf-bench --backend cuda --no-unfused --reps 10 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s(1024|4096)_d128(_causal)?(_dropout)?$' 2>&1 | grep -E '^attention'
timeout 150 build/tests/test_attention --gtest_filter='AttentionCuda.Backward*:AttentionPaths.Backward*:AttentionErrors.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure" | head
timeout 150 build/tools/kf-conformance --backend vulkan,cuda --validation --filter '^attention' 2>&1 | tail -1
