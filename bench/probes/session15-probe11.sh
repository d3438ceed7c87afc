#!/usr/bin/env bash
# Session 15, eleventh probe (H100): the Vulkan backward with each A fragment loaded once a k step for both
# 16-row blocks (predicted about -10 %): its tests, the attention conformance with the validation layer, the
# f32 refusal, and the timings (probe 10: S 1024 causal 5.55 ms, S 4096 causal 76 ms).
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
timeout 120 build/tests/test_attention --gtest_filter='AttentionPaths.Backward*:AttentionErrors.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure" | head
timeout 100 build/tools/kf-conformance --backend vulkan --validation --filter '^attention' 2>&1 | tail -1
KF_TUNE=attn_path=2 timeout 60 build/tools/kf-conformance --backend vulkan --filter '^attention_backward$' --dtypes f32 2>&1 | grep -E "unsupported|forced|PASS|FAIL" | head -3
timeout 100 build/tools/kf-bench --backend vulkan --no-unfused --reps 5 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s(1024|4096)_d128_causal$' 2>&1 | grep -E '^attention'
