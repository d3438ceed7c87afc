#!/usr/bin/env bash
# Session 12, final memory-bound run (H100): the CUDA backend on every memory-bound op, case and dtype of
# session 11's final run (`session11/final/mb`), after this session's elementwise bias change, to count
# the timings at 0.92 of copy or more.
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
OPS='^(adamw_step|add|add_dropout_residual|add_layer_norm|add_relu|add_rms_norm|add_sigmoid|batch_norm_relu|bias_gelu|bias_gelu_dropout|bias_gelu_tanh|bias_relu|bias_silu|cross_entropy|cross_entropy_backward|dropout|dropout_backward|geglu|gelu|gelu_backward|gelu_dropout|gelu_tanh|gelu_tanh_backward|group_norm|layer_norm|layer_norm_backward|layer_norm_gelu|layer_norm_relu|layer_norm_silu|log_softmax|mean_abs|mish|mish_backward|mish_scale|mse|mse_backward|mul|mul_relu|mul_tanh|prelu|prelu_bias|relu|relu_backward|rms_norm|rms_norm_backward|rms_norm_gelu|rms_norm_silu|sgd_step|sigmoid|sigmoid_backward|silu|silu_backward|softmax|softmax_backward|sum_squared|swiglu|tanh|tanh_backward)$'
date +%T
build/tools/kf-bench --backend cuda --ops "$OPS" --all-cases --primitives --dtypes f32,f16,bf16 --reps 15 --no-unfused --json "$out/kf-cuda-mb.json" > "$out/kf-cuda-mb.txt" 2>&1; echo "cuda rc=$?"
gzip -f "$out/kf-cuda-mb.json"
awk '/^\[/{dt=$1} NF>=8 && $6+0>0 && $1!="op" {n++; if ($6+0>=0.92) k++} END {print k" of "n" timings at >= 0.92 of copy"}' "$out/kf-cuda-mb.txt"
date +%T
