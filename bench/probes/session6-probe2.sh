#!/usr/bin/env bash
# Session 6, second probe (H100): is the Vulkan decode over 128k keys slow because its key splits start
# at power-of-two strides (CUDA's splits, 12 x 10944 and 33 x 4000 keys, read the same bytes at full
# speed)? And is add_relu at 2 GiB per input slow because its three buffers sit at 2 GiB strides
# (KF_VK_STAGGER_KIB shifted each dedicated allocation by k * that; the knob was removed after this
# probe refuted the idea, so this script needs commit 5b3780a to run as it did)?
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
b=build/tools
bench() { local tag=$1; shift; echo "== $tag"; "$b/kf-bench" --no-unfused --reps 20 "$@" 2>&1 | tee -a "$out/probe.log" | grep -vE '^$|^op |copy bandwidth'; }
for s in 12 13 17 33; do KF_TUNE=attn_decode=2,attn_split=$s bench dec-vk-split$s --backend vulkan --ops '^attention$' --cases 128k --dtypes f16; done
for st in 4 64 1028; do KF_VK_STAGGER_KIB=$st bench dec-vk-stagger$st --backend vulkan --ops '^attention$' --cases 128k --dtypes f16; done
for st in 4 64 1028; do KF_VK_STAGGER_KIB=$st bench addrelu-2g-stagger$st --backend vulkan --ops '^add_relu$' --dtypes f16 --size-mib 2048; done
