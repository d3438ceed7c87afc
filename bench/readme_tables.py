#!/usr/bin/env python3
"""Markdown tables for docs/performance.md, from kf-bench and torch_bench JSON (bench/SCHEMA.md).

The memory-bound table: for each selected op, case and dtype, kf's Vulkan GB/s and fraction of its copy
bandwidth, the fusion speed-up over the unfused kf chain, PyTorch's time over kf's (eager, compile: above
1 means kf is faster) and kf's CUDA backend time over its Vulkan time. Every figure comes from the files
given; a missing one prints "-". Also counts the timings at or above a fraction of copy.

    python3 bench/readme_tables.py --vulkan kf-vulkan.json [--cuda kf-cuda.json] [--eager torch-eager.json]
        [--compile torch-compile.json] [--ops add_relu,softmax,...] [--min-copy 0.9]
"""
import argparse
import json


def load(path):
    if not path:
        return {}
    with open(path) as f:
        doc = json.load(f)
    return {(r["op"], r.get("case", ""), r["dtype"]): r for r in doc["results"] if "ms" in r}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vulkan", required=True)
    ap.add_argument("--cuda")
    ap.add_argument("--eager")
    ap.add_argument("--compile")
    ap.add_argument("--ops", default="", help="comma-separated op names, in table order (default: all)")
    ap.add_argument("--dtypes", default="f32,f16,bf16")
    ap.add_argument("--min-copy", type=float, default=0.9, help="count timings at or above this fraction of copy")
    a = ap.parse_args()
    vk, cu, eager, comp = load(a.vulkan), load(a.cuda), load(a.eager), load(a.compile)
    ops = [o for o in a.ops.split(",") if o]
    dtypes = a.dtypes.split(",")

    def ratio(other, key, r):
        o = other.get(key)
        return f"{o['ms'] / r['ms']:.2f}x" if o else "-"

    print("| op | case | dtype | GB/s | of copy | fusion speed-up | vs torch eager | vs torch.compile | CUDA / Vulkan time |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    keys = [k for k in vk if k[2] in dtypes and (not ops or k[0] in ops)]
    keys.sort(key=lambda k: (dtypes.index(k[2]), ops.index(k[0]) if ops else 0))
    for key in keys:
        r = vk[key]
        if r.get("fraction_of_copy") is None or r["op"] == "copy":
            continue
        fus = r.get("fusion_speedup")
        fus = f"{fus:.2f}x" if fus else "-"
        cuda = cu.get(key)
        cuda = f"{cuda['ms'] / r['ms']:.2f}x" if cuda else "-"
        print(f"| {key[0]} | {key[1]} | {key[2]} | {r['gbs']:.0f} | {r['fraction_of_copy']:.2f} | {fus} | "
              f"{ratio(eager, key, r)} | {ratio(comp, key, r)} | {cuda} |")
    memory = [r for r in vk.values() if r.get("fraction_of_copy") is not None and r["op"] != "copy"
              and r.get("flops", 0) <= 8 * r.get("bytes", 1)]
    good = [r for r in memory if r["fraction_of_copy"] >= a.min_copy]
    print(f"\n{len(good)} of {len(memory)} memory-bound Vulkan timings at {a.min_copy} of copy or more.")
    if cu:
        cmem = [r for r in cu.values() if r.get("fraction_of_copy") is not None and r["op"] != "copy"
                and r.get("flops", 0) <= 8 * r.get("bytes", 1)]
        cgood = [r for r in cmem if r["fraction_of_copy"] >= 0.92]
        print(f"{len(cgood)} of {len(cmem)} memory-bound CUDA timings at 0.92 of copy or more.")


if __name__ == "__main__":
    main()
