#!/usr/bin/env python3
"""Checks of kf-bench's outputs, run by CTest through tests/bench_report_test.sh and bench_plan_test.sh.

  bench_checks.py dom DOM.html KF.json [OTHER.json ...]
      The DOM that a browser built from the HTML report (chromium --dump-dom) holds the four charts, each
      with one mark per result it draws: a roofline point per op and dtype, a fraction bar per timed
      result, a fusion bar per result with a chain time, a comparison bar per result that another file
      also timed. The report is self-contained: no script, nothing loaded from elsewhere.
  bench_checks.py plan PLAN.json KF.json
      bench/torch_bench.py --plan-only times the shapes kf-bench times, with the same bytes and flops.
"""
import json
import sys
from html.parser import HTMLParser


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


class Dom(HTMLParser):
    """Counts marks per chart: circles in #roofline, bars (rect.bar) in the others; and remote loads."""

    def __init__(self):
        super().__init__()
        self.stack = []  # (tag, chart id of the enclosing svg or None)
        self.marks = {}
        self.charts = []
        self.remote = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        chart = self.stack[-1][1] if self.stack else None
        if tag == "svg" and a.get("id"):
            chart = a["id"]
            self.charts.append(chart)
            self.marks.setdefault(chart, 0)
        if tag == "script":
            self.scripts += 1
        for k in ("src", "href", "xlink:href"):
            v = a.get(k, "")
            if "://" in v or v.startswith("//"):
                self.remote.append(f"<{tag} {k}={v}>")
        if chart and ((chart == "roofline" and tag == "circle" and a.get("r") == "4.5") or
                      (chart != "roofline" and tag == "rect" and a.get("class") == "bar")):
            self.marks[chart] += 1
        if tag not in ("br", "meta", "link", "img", "input", "hr"):
            self.stack.append((tag, chart))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break


def timed(doc):
    return [r for r in doc["results"] if r.get("op") != "copy" and isinstance(r.get("ms"), (int, float))]


def check_dom(dom_path, kf_path, others):
    with open(dom_path) as f:
        text = f.read()
    kf = json.load(open(kf_path))
    other_docs = [json.load(open(p)) for p in others]
    d = Dom()
    d.feed(text)
    want = ["roofline", "fraction-bars", "fusion-bars"] + (["compare-bars"] if others else [])
    for chart in want:
        if chart not in d.charts:
            fail(f"the DOM has no <svg id=\"{chart}\"> (charts found: {d.charts})")
    if d.scripts:
        fail(f"the report has {d.scripts} <script> element(s); it must need no JavaScript")
    if d.remote:
        fail("the report loads from elsewhere: " + ", ".join(d.remote[:5]))
    rows = timed(kf)
    expect = {
        "roofline": len({(r["op"], r["dtype"]) for r in rows if r.get("flops", 0) > 0 and r.get("bytes", 0) > 0}),
        "fraction-bars": sum(1 for r in rows if isinstance(r.get("fraction_of_copy"), (int, float))),
        "fusion-bars": sum(1 for r in rows if isinstance(r.get("fusion_speedup"), (int, float))),
    }
    if others:
        keys = {(r["op"], r["case"], r["dtype"]) for r in rows}
        n = 0
        for doc in other_docs:
            seen = set()
            fw = doc.get("framework", "other")
            for r in timed(doc):
                k = (r["op"], r["case"], r["dtype"])
                if k in keys and (r.get("framework", fw), k) not in seen:
                    seen.add((r.get("framework", fw), k))
                    n += 1
        expect["compare-bars"] = n
    for chart, n in expect.items():
        if n == 0:
            fail(f"{chart}: the results give nothing to draw (is the run empty?)")
        if d.marks.get(chart, 0) != n:
            fail(f"{chart}: {d.marks.get(chart, 0)} marks in the DOM, {n} expected from the JSON")
    print("DOM ok: " + ", ".join(f"{c} {d.marks[c]} marks" for c in want))


def check_plan(plan_path, kf_path):
    plan = json.load(open(plan_path))
    kf = json.load(open(kf_path))
    mine = {(p["op"], p["case"], p["dtype"]): p for p in plan}
    compared, missing = 0, set()
    for r in timed(kf):
        key = (r["op"], r["case"], r["dtype"])
        p = mine.get(key)
        if p is None:
            missing.add(r["op"])
            continue
        compared += 1
        if p["shapes"] != r["shapes"]:
            fail(f"{key}: torch_bench.py times shapes {p['shapes']}, kf-bench {r['shapes']}")
        nbytes, flops = p["cost"]
        if abs(nbytes - r["bytes"]) > 1e-9 * r["bytes"] or abs(flops - r["flops"]) > 1e-9 * max(r["flops"], 1):
            fail(f"{key}: torch_bench.py counts {nbytes} bytes {flops} flops, kf-bench {r['bytes']} {r['flops']}")
        if p["attrs"].get("p", 0) != r.get("attrs", {}).get("p", 0):
            fail(f"{key}: dropout p {p['attrs'].get('p')} in torch_bench.py, {r['attrs'].get('p')} in kf-bench")
    kf_keys = {(r["op"], r["case"], r["dtype"]) for r in timed(kf)}
    extra = [k for k in mine if k not in kf_keys]
    if extra:
        fail(f"torch_bench.py times cases kf-bench does not: {extra[:5]}")
    if compared < 20:
        fail(f"only {compared} cases in common")
    if missing:
        fail("kf-bench timed ops of torch_bench.py's list that its plan lacks: " + ", ".join(sorted(missing)))
    print(f"plan ok: {compared} cases with the same shapes, bytes and flops")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "dom":
        check_dom(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 4 and sys.argv[1] == "plan":
        check_plan(sys.argv[2], sys.argv[3])
    else:
        print(__doc__)
        sys.exit(2)
