#!/usr/bin/env python3
"""F.linear(x [M, K], W [N, K]) a few times in one dtype, for Nsight Compute to name PyTorch's kernel.

    ncu --metrics gpu__time_duration.sum --csv python3 bench/probes/torch_linear_once.py 16384 8192 8192 bf16
"""
import sys

import torch
import torch.nn.functional as F

m, n, k = (int(v) for v in sys.argv[1:4])
dt = {"f16": torch.float16, "bf16": torch.bfloat16}[sys.argv[4]]
x = torch.randn(m, k, device="cuda", dtype=dt)
w = torch.randn(n, k, device="cuda", dtype=dt)
for _ in range(3):
    y = F.linear(x, w)
torch.cuda.synchronize()
print("reduced-precision reduction allowed:", torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
      torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)
