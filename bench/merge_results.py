#!/usr/bin/env python3
"""Merges kf-bench JSON files (bench/SCHEMA.md) of one device into one: later files replace the results
of earlier ones with the same (op, case, dtype, backend) and add the rest; the device block, copy
bandwidths and matrix ceiling are the last file's (where it has them). For a report that combines a full
run with later re-runs of some ops:

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
                    dev[k].update(v)
                elif v:
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
