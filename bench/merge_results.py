#!/usr/bin/env python3
"""Merges kf-bench JSON files (bench/SCHEMA.md) of one device into one: later files replace the results
of earlier ones with the same (op, case, dtype, backend) and add the rest. Each result keeps the
fractions of its own run; the device block (copy bandwidths, matrix ceiling) is the first file's, later
files only adding what it lacks (a short re-run can measure a roofline badly: one taken before the
clocks rose read bf16 copy at 1212 GB/s). For a report that combines a full run with later re-runs:

    python3 bench/merge_results.py full.json rerun.json ... > merged.json
"""
import json
import sys


def main(paths):
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    merged, order, rows = None, [], {}
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        if merged is None:
            merged = doc
        else:
            dev = merged["device"]
            for k, v in doc.get("device", {}).items():
                if isinstance(v, dict) and isinstance(dev.get(k), dict):
                    for kk, vv in v.items():
                        dev[k].setdefault(kk, vv)
                elif k not in dev or not dev[k]:
                    dev[k] = v
            for k in ("created", "reps", "warmup", "warmup_ms"):
                if k in doc:
                    merged[k] = doc[k]
        for r in doc["results"]:
            key = (r.get("op"), r.get("case"), r.get("dtype"), r.get("backend"))
            if key not in rows:
                order.append(key)
            rows[key] = r
    merged["results"] = [rows[k] for k in order]
    merged["merged_from"] = paths
    json.dump(merged, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
