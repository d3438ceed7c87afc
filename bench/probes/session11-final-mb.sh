#!/usr/bin/env bash
# Session 11, final memory-bound run (H100): kf's Vulkan backend (with the unfused chains) and CUDA backend on
# every memory-bound op, case and dtype of session 9's final run; PyTorch now warmed up as kf-bench (bench/cuda_events.py), then PyTorch eager on the same cases and
# torch.compile on issue 4's ops (layer_norm, rms_norm, add_rms_norm, softmax, cross_entropy, adamw_step).
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
b=build/tools
OPS='^(adamw_step|add|add_dropout_residual|add_layer_norm|add_relu|add_rms_norm|add_sigmoid|batch_norm_relu|bias_gelu|bias_gelu_dropout|bias_gelu_tanh|bias_relu|bias_silu|cross_entropy|cross_entropy_backward|dropout|dropout_backward|geglu|gelu|gelu_backward|gelu_dropout|gelu_tanh|gelu_tanh_backward|group_norm|layer_norm|layer_norm_backward|layer_norm_gelu|layer_norm_relu|layer_norm_silu|log_softmax|mean_abs|mish|mish_backward|mish_scale|mse|mse_backward|mul|mul_relu|mul_tanh|prelu|prelu_bias|relu|relu_backward|rms_norm|rms_norm_backward|rms_norm_gelu|rms_norm_silu|sgd_step|sigmoid|sigmoid_backward|silu|silu_backward|softmax|softmax_backward|sum_squared|swiglu|tanh|tanh_backward)$'
common=(--ops "$OPS" --all-cases --primitives --dtypes f32,f16,bf16 --reps 15)
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T; "$b/kf-bench" --backend vulkan "${common[@]}" --json "$out/kf-vulkan-mb.json" > "$out/kf-vulkan-mb.txt" 2>&1; echo "vulkan rc=$?"; grep -E 'copy bandwidth' "$out/kf-vulkan-mb.txt"
date +%T; "$b/kf-bench" --backend cuda "${common[@]}" --no-unfused --json "$out/kf-cuda-mb.json" > "$out/kf-cuda-mb.txt" 2>&1; echo "cuda rc=$?"; grep -E 'copy bandwidth' "$out/kf-cuda-mb.txt"
date +%T; PYTHONUNBUFFERED=1 python3 bench/torch_bench.py --modes eager --dtypes f32,f16,bf16 --cases-from "$out/kf-vulkan-mb.json" --reps 15 --out-dir "$out" > "$out/torch-eager-mb.log" 2>&1; echo "torch eager rc=$?"; tail -2 "$out/torch-eager-mb.log"
date +%T
PYTHONUNBUFFERED=1 timeout 240 python3 bench/torch_bench.py --modes compile --dtypes f32,f16,bf16 --ops '^(layer_norm|rms_norm|add_rms_norm|softmax|cross_entropy|adamw_step)$' --cases-from "$out/kf-vulkan-mb.json" --reps 15 --out-dir "$out" > "$out/torch-compile-mb.log" 2>&1; echo "torch compile rc=$?"; tail -2 "$out/torch-compile-mb.log"
date +%T
(cd "$out" && tar czf mb.tgz --remove-files kf-vulkan-mb.json kf-cuda-mb.json torch-eager.json torch-compile.json 2>/dev/null)
ls "$out"
