#!/usr/bin/env bash
# Session 12, second probe (H100): (1) the CUDA products' epilogue kernel rewritten as eltwise.cu's (tiles of
# 4 packs a thread, all loads before any store; the activation a template argument): linear / linear_dropout
# / ffn / conv timings against PyTorch in the same call, and the products' CUDA conformance and test_linalg;
# (2) the decode kernel's 4-head instance capped at 128 registers (KF_TUNE attn_decode_minb=4: 4 blocks an
# SM instead of 3) against the default, alternated, and the attention conformance with it; (3) the SASS of
# eltwise bias_gelu_dropout / gelu_dropout bf16 (0.69 / 0.87 of copy) and of the decode kernel.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
LIN='^(linear|linear_dropout|ffn|ffn_swiglu|conv2d_bn_relu|conv2d_gelu_dropout)$'
$B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16 --ops "$LIN" --json "$out/kf-lin.json" > "$out/kf-lin.txt" 2>&1; echo "kf lin rc=$?"
grep -E '^(linear|ffn|conv)' "$out/kf-lin.txt"
PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^linear$' --cases-from "$out/kf-lin.json" --reps 20 --out-dir /tmp/tw 2>&1 | grep -E '^linear'
PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_linalg.py --cases-from "$out/kf-lin.json" --out-dir /tmp/tw 2>&1 | grep -vE '^\s*$' | tail -30
echo "== kf again"
$B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16 --ops '^linear$' 2>&1 | grep -E '^linear'
date +%T
timeout 200 build/tools/kf-conformance --backend cuda --filter '^(linear|linear_dropout|matmul|ffn|ffn_swiglu|conv2d|conv2d_bn_relu|conv2d_gelu_dropout|depthwise_pointwise)$' --progress none 2>&1 | tail -4
timeout 240 build/tests/test_linalg 2>&1 | tail -4
date +%T
for i in 1 2; do
  for t in "" "attn_decode_minb=4"; do
    echo "== KF_TUNE='$t'"
    KF_TUNE=$t $B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16 --ops '^attention$' --cases '^decode_' 2>&1 | grep -E '^attention'
  done
done
KF_TUNE=attn_decode_minb=4 timeout 200 build/tools/kf-conformance --backend cuda --filter '^attention$' --progress none 2>&1 | tail -3
KF_TUNE=attn_decode_minb=4,attn_decode=2 timeout 200 build/tests/test_attention --gtest_filter='*ecode*' 2>&1 | tail -3
date +%T
CO=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
$CO -sass build/libkf.so > /tmp/all.sass 2>/dev/null; echo "cuobjdump rc=$? $(wc -l < /tmp/all.sass) lines"
python3 - "$out" <<'PY'
import re, sys, os
txt = open('/tmp/all.sass').read()
parts = re.split(r'(?m)^\s*Function : ', txt)
want = [r'eltwise_kernelILNS\w*EltOpE13ENS\w*Bf16Conv', r'eltwise_kernelILNS\w*EltOpE14ENS\w*Bf16Conv',
        r'eltwise_kernelILNS\w*EltOpE5ENS\w*Bf16Conv', r'attn_decodeINS\w*Bf16ConvEEELi1ELi4ELi1E']
os.makedirs('/tmp/sass', exist_ok=True)
for w in want:
    hits = [p for p in parts if re.match(w, p.split('\n', 1)[0].split('.')[-1]) or re.search(w, p.split('\n', 1)[0])]
    for k, p in enumerate(hits[:2]):
        name = re.sub(r'\W', '_', w)[:40] + f'_{k}.sass'
        open('/tmp/sass/' + name, 'w').write(p)
        print(name, len(p.splitlines()), 'lines')
PY
tar czf "$out/sass.tgz" -C /tmp sass
date +%T
} > "$out/probe.log" 2>&1
tail -40 "$out/probe.log"
