#!/usr/bin/env bash
# Session 11, final linear-algebra and attention run (H100): kf-bench on vulkan and cuda (the tensor-core
# ceiling of the Vulkan path measured in the same run), then PyTorch eager (cuBLAS), its FFN / conv
# compositions and scaled_dot_product_attention with FlashAttention-2 and cuDNN forced, on the same cases.
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
b=build/tools
OPS='^(linear|linear_dropout|matmul|ffn|ffn_swiglu|conv2d_bn_relu|conv2d_gelu_dropout|depthwise_pointwise|attention)$'
common=(--ops "$OPS" --all-cases --dtypes f16,bf16 --reps 10 --size-mib 128)
date +%T; "$b/kf-bench" --backend vulkan "${common[@]}" --json "$out/kf-vulkan-al.json" > "$out/kf-vulkan-al.txt" 2>&1; echo "vulkan rc=$?"; grep -E 'copy bandwidth|peak' "$out/kf-vulkan-al.txt" | head -6
date +%T; "$b/kf-bench" --backend cuda "${common[@]}" --json "$out/kf-cuda-al.json" > "$out/kf-cuda-al.txt" 2>&1; echo "cuda rc=$?"
date +%T; PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^(linear|matmul)$' --cases-from "$out/kf-cuda-al.json" --reps 20 --out-dir "$out" > "$out/torch-linalg.log" 2>&1; echo "torch linear rc=$?"
PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_linalg.py --cases-from "$out/kf-cuda-al.json" --out-dir "$out" >> "$out/torch-linalg.log" 2>&1; echo "torch linalg rc=$?"
date +%T; PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_attention.py --cases-from "$out/kf-cuda-al.json" --backends flash,cudnn --out-dir "$out" > "$out/torch-attention.log" 2>&1; echo "torch attention rc=$?"
date +%T
(cd "$out" && tar czf al.tgz --remove-files kf-vulkan-al.json kf-cuda-al.json torch-*.json 2>/dev/null)
ls "$out"
