#!/usr/bin/env bash
# Session 10, first probe (H100): (1) the CUDA flash-mma forward's default form (32 rows a warp) after
# session 9's softmax changes: its SASS and Nsight Compute's instruction mix, stalls and source counters;
# (2) the cuBLASLt gap (kf 0.86-0.92x PyTorch on the large f16 linears): which libcublasLt each process
# loads, and kf-bench / PyTorch eager alternated twice on the same cases, to separate the library and the
# algorithm from the between-process drift.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
CU=/usr/local/cuda/bin
{
date +%T
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
echo "== libcublasLt"
LD_DEBUG=libs $B --backend cuda --no-unfused --reps 1 --warmup 0 --dtypes f16 --ops '^linear$' --cases '4096_bare' 2>&1 | grep -E "calling init:.*cublas" | head -3
python3 - <<'P'
import torch
a=torch.randn(256,256,device='cuda',dtype=torch.half); (a@a).sum().item()
print('torch', torch.__version__, torch.version.cuda)
print([l.split()[-1] for l in open('/proc/self/maps') if 'cublas' in l and l.split()[-1].endswith(tuple('0123456789'))][:4])
P
ls /usr/local/cuda/lib64/ | grep -i cublas | head
echo "== linears, alternated"
for i in 1 2; do
  $B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16 --ops '^(linear|matmul)$' --cases '^(4096_bare|8192_bare|4096_gelu|8192_gelu|4096)$' --json "$out/kf-lin$i.json" 2>&1 | grep -E '^(linear|matmul)'
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^(linear|matmul)$' --cases-from "$out/kf-lin$i.json" --reps 20 --out-dir /tmp/t$i 2>&1 | grep -E '^(linear|matmul)' | head -12
done
date +%T
echo "== attention"
$CU/cuobjdump -sass build/libkf.so 2>/dev/null | awk '/Function : .*attn_mma.*Half16.*HalfConv.*Li128ELi32E/{p=1} p&&/Function : /&&!/attn_mma.*Half16.*HalfConv.*Li128ELi32E/{p=0} p' > "$out/attn_mma32_sass.txt"
wc -l "$out/attn_mma32_sass.txt"
args=(--backend cuda --no-unfused --reps 3 --warmup 1 --warmup-ms 0 --dtypes f16 --ops '^attention$' --cases 's4096_d128$')
timeout 200 $CU/ncu --kernel-name regex:attn_mma --launch-skip 3 --launch-count 1 --section InstructionStats --section WarpStateStats \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --print-details all $B "${args[@]}" > "$out/ncu-mix.txt" 2>&1; echo "ncu mix rc=$?"
timeout 200 $CU/ncu --kernel-name regex:attn_mma --launch-skip 3 --launch-count 1 --section SourceCounters --section WarpStateStats \
  --page source --print-source sass --csv $B "${args[@]}" 2>&1 | gzip > "$out/ncu-source.csv.gz"; echo "ncu source rc=$?"
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
