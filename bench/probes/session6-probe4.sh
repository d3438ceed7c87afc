#!/usr/bin/env bash
# Session 6, fourth probe (H100): the slow Vulkan decode over 128k keys (and add_relu at 2 GiB) read at
# about 1600-1750 GB/s, the rate the copy itself fell to after some blocks (kf-bench's re-measured
# roofline): a clock or power state? nvidia-smi samples every 50 ms; then the same runs while another
# process holds a CUDA context.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
b=build/tools
nvidia-smi --query-gpu=timestamp,pstate,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 50 > "$out/smi.csv" &
smi=$!
bench() { local tag=$1; shift; echo "== $tag $(date +%T.%N)"; "$b/kf-bench" --no-unfused --reps 20 "$@" 2>&1 | tee -a "$out/probe.log" | grep -vE '^$|^op '; echo "== end $(date +%T.%N)"; }
bench dec-vk --backend vulkan --ops '^attention$' --cases decode --dtypes f16
bench addrelu-2g --backend vulkan --ops '^add_relu$' --dtypes f16 --size-mib 2048
python3 -c "import torch,time; x=torch.ones(1,device='cuda'); torch.cuda.synchronize(); print('cuda context held', flush=True); time.sleep(45)" &
hold=$!
sleep 8
bench dec-vk-cudaheld --backend vulkan --ops '^attention$' --cases decode --dtypes f16
bench addrelu-2g-cudaheld --backend vulkan --ops '^add_relu$' --dtypes f16 --size-mib 2048
kill $hold 2>/dev/null
timeout 200 build/tests/test_attention --gtest_filter='AttentionPaths.*Decode*' > "$out/test-decode.txt" 2>&1; echo "decode tests rc=$?"; grep -E 'FAILED|OK|Failure' "$out/test-decode.txt" | head -20
kill $smi
awk -F', ' 'NR>1{print $2, $3, $4, $7}' "$out/smi.csv" | sort | uniq -c | sort -rn | head -20
