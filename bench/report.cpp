// The HTML report of kf-bench (bench/report.hpp): a device card, a roofline plot, bars of the fraction of
// the copy roofline, bars of the speed-up of fusion over the unfused chain, and bars of kf's speed-up over
// other frameworks. Plain SVG drawn here: no script, no font or style sheet from the network.
#include "bench/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace kf::bench {
namespace {

using json = nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string fmt(double v, const char* f = "%.3g") {
  if (!std::isfinite(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string px(double v) { return fmt(v, "%.1f"); }

double num(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_number() ? it->get<double>() : kNaN;
}
std::string str(const json& j, const char* k, const std::string& dflt = "") {
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? it->get<std::string>() : dflt;
}

struct Row {
  std::string op, kase, dtype, framework, variant, shapes, unsupported;
  double ms = kNaN, bytes = kNaN, flops = kNaN, gbs = kNaN, frac = kNaN, unfused_ms = kNaN, speedup = kNaN;
  std::string key() const { return op + " · " + kase + " · " + dtype; }
};

std::string shapes_text(const json& j) {
  if (!j.is_array()) return "";
  std::string s;
  for (const auto& shape : j) {
    if (!s.empty()) s += ", ";
    if (!shape.is_array() || shape.empty()) {
      s += "-";
      continue;
    }
    s += "[";
    for (size_t k = 0; k < shape.size(); ++k) s += (k ? "," : "") + shape[k].dump();
    s += "]";
  }
  return s;
}

std::vector<Row> rows_of(const json& doc) {
  if (!doc.is_object() || !doc.contains("results") || !doc["results"].is_array())
    throw std::runtime_error("not a kf-bench document: no \"results\" array (see bench/SCHEMA.md)");
  const std::string fw = str(doc, "framework", "kf");
  std::vector<Row> rows;
  for (const auto& r : doc["results"]) {
    Row w;
    w.op = str(r, "op");
    w.kase = str(r, "case");
    w.dtype = str(r, "dtype");
    w.framework = str(r, "framework", fw);
    w.variant = str(r, "variant");
    w.unsupported = str(r, "unsupported");
    w.shapes = shapes_text(r.value("shapes", json()));
    w.ms = num(r, "ms");
    w.bytes = num(r, "bytes");
    w.flops = num(r, "flops");
    w.gbs = num(r, "gbs");
    w.frac = num(r, "fraction_of_copy");
    w.unfused_ms = num(r, "unfused_ms");
    w.speedup = num(r, "fusion_speedup");
    rows.push_back(w);
  }
  return rows;
}

const char* dtype_color(const std::string& d) {
  if (d == "f32") return "#1f77b4";
  if (d == "f16") return "#ff7f0e";
  if (d == "bf16") return "#2ca02c";
  if (d == "f64") return "#9467bd";
  return "#7f7f7f";
}
const char* framework_color(size_t k) {
  static const char* c[] = {"#d62728", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
  return c[k % 6];
}

// One horizontal bar. Bars of one group share a label (the first bar shows it).
struct Bar {
  std::string group, label, color, tip;
  double value;
};

constexpr double kLabelW = 300, kPlotW = 520, kRowH = 18, kBarH = 13, kTop = 34;

std::string svg_open(const std::string& id, const std::string& title, double h) {
  std::ostringstream s;
  s << "<svg id=\"" << id << "\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\""
    << px(kLabelW + kPlotW + 70) << "\" height=\"" << px(h) << "\" viewBox=\"0 0 " << px(kLabelW + kPlotW + 70)
    << " " << px(h) << "\" role=\"img\" aria-label=\"" << esc(title) << "\">\n<title>" << esc(title) << "</title>\n";
  return s.str();
}

// Rows of bars: y positions with a gap between groups; returns the chart's height.
double layout(const std::vector<Bar>& bars, std::vector<double>& y) {
  double at = kTop;
  for (size_t i = 0; i < bars.size(); ++i) {
    if (i > 0 && bars[i].group != bars[i - 1].group) at += 6;
    y.push_back(at);
    at += kRowH;
  }
  return at + 28;
}

void bar_labels(std::ostringstream& s, const std::vector<Bar>& bars, const std::vector<double>& y) {
  for (size_t i = 0; i < bars.size(); ++i) {
    const bool first = i == 0 || bars[i].group != bars[i - 1].group;
    const std::string text = first ? bars[i].group + (bars[i].label.empty() ? "" : "  " + bars[i].label)
                                   : bars[i].label;
    s << "<text class=\"lbl\" x=\"" << px(kLabelW - 8) << "\" y=\"" << px(y[i] + kBarH - 2)
      << "\" text-anchor=\"end\">" << esc(text) << "</text>\n";
  }
}

// Linear bars from 0 with a reference line at `ref` (the copy roofline: 1.0).
std::string linear_bars(const std::string& id, const std::string& title, const std::vector<Bar>& bars, double ref,
                        const std::string& ref_label) {
  std::vector<double> y;
  const double h = layout(bars, y);
  double vmax = ref;
  for (const auto& b : bars)
    if (std::isfinite(b.value)) vmax = std::max(vmax, b.value);
  vmax *= 1.08;
  const auto X = [&](double v) { return kLabelW + kPlotW * std::clamp(v, 0.0, vmax) / vmax; };
  std::ostringstream s;
  s << svg_open(id, title, h);
  const double step = vmax > 4 ? 1 : (vmax > 2 ? 0.5 : 0.25);
  for (double t = 0; t <= vmax + 1e-9; t += step) {
    s << "<line class=\"grid\" x1=\"" << px(X(t)) << "\" y1=\"" << px(kTop - 6) << "\" x2=\"" << px(X(t))
      << "\" y2=\"" << px(h - 24) << "\"/><text class=\"tick\" x=\"" << px(X(t)) << "\" y=\"" << px(h - 10)
      << "\" text-anchor=\"middle\">" << fmt(t, "%g") << "</text>\n";
  }
  bar_labels(s, bars, y);
  for (size_t i = 0; i < bars.size(); ++i) {
    const double v = bars[i].value;
    s << "<rect class=\"bar\" x=\"" << px(X(0)) << "\" y=\"" << px(y[i]) << "\" width=\"" << px(X(v) - X(0))
      << "\" height=\"" << px(kBarH) << "\" fill=\"" << bars[i].color << "\"><title>" << esc(bars[i].tip)
      << "</title></rect><text class=\"val\" x=\"" << px(X(v) + 4) << "\" y=\"" << px(y[i] + kBarH - 2) << "\">"
      << fmt(v) << "</text>\n";
  }
  s << "<line class=\"ref\" x1=\"" << px(X(ref)) << "\" y1=\"" << px(kTop - 12) << "\" x2=\"" << px(X(ref))
    << "\" y2=\"" << px(h - 24) << "\"/><text class=\"reflbl\" x=\"" << px(X(ref)) << "\" y=\"" << px(kTop - 16)
    << "\" text-anchor=\"middle\">" << esc(ref_label) << "</text>\n</svg>\n";
  return s.str();
}

// Speed-ups on a log2 axis centred on 1x: a bar goes right when the first is faster, left when slower.
std::string ratio_bars(const std::string& id, const std::string& title, const std::vector<Bar>& bars) {
  std::vector<double> y;
  const double h = layout(bars, y);
  double lo = 0.5, hi = 2;
  for (const auto& b : bars)
    if (std::isfinite(b.value) && b.value > 0) lo = std::min(lo, b.value), hi = std::max(hi, b.value);
  const double l0 = std::floor(std::log2(lo)), l1 = std::ceil(std::log2(hi) + 0.15);
  const auto X = [&](double v) {
    const double l = std::clamp(std::log2(std::max(v, 1e-30)), l0, l1);
    return kLabelW + kPlotW * (l - l0) / (l1 - l0);
  };
  std::ostringstream s;
  s << svg_open(id, title, h);
  const int every = l1 - l0 > 8 ? 2 : 1;
  for (int e = int(l0); e <= int(l1); e += every) {
    const double t = std::ldexp(1.0, e);
    s << "<line class=\"grid\" x1=\"" << px(X(t)) << "\" y1=\"" << px(kTop - 6) << "\" x2=\"" << px(X(t))
      << "\" y2=\"" << px(h - 24) << "\"/><text class=\"tick\" x=\"" << px(X(t)) << "\" y=\"" << px(h - 10)
      << "\" text-anchor=\"middle\">" << fmt(t, "%g") << "×</text>\n";
  }
  bar_labels(s, bars, y);
  for (size_t i = 0; i < bars.size(); ++i) {
    const double v = bars[i].value;
    const double a = std::min(X(1), X(v)), b = std::max(X(1), X(v));
    s << "<rect class=\"bar\" x=\"" << px(a) << "\" y=\"" << px(y[i]) << "\" width=\"" << px(std::max(b - a, 1.0))
      << "\" height=\"" << px(kBarH) << "\" fill=\"" << bars[i].color << "\"><title>" << esc(bars[i].tip)
      << "</title></rect><text class=\"val\" x=\"" << px(b + 4) << "\" y=\"" << px(y[i] + kBarH - 2) << "\">"
      << fmt(v) << "×</text>\n";
  }
  s << "<line class=\"ref\" x1=\"" << px(X(1)) << "\" y1=\"" << px(kTop - 12) << "\" x2=\"" << px(X(1))
    << "\" y2=\"" << px(h - 24) << "\"/><text class=\"reflbl\" x=\"" << px(X(1)) << "\" y=\"" << px(kTop - 16)
    << "\" text-anchor=\"middle\">1× (as fast)</text>\n</svg>\n";
  return s.str();
}

// Arithmetic intensity (FLOP/byte) against achieved GFLOP/s, log-log, with each dtype's copy bandwidth as
// the memory roof (GFLOP/s = GB/s x FLOP/byte). One point per op and dtype: the first case timed.
std::string roofline(const std::vector<Row>& rows, const std::map<std::string, double>& copy_gbs) {
  struct Pt {
    std::string op, dtype, tip;
    double ai, gflops;
  };
  std::vector<Pt> pts;
  std::set<std::string> seen;
  for (const auto& r : rows) {
    if (r.op == "copy" || !(r.ms > 0) || !(r.flops > 0) || !(r.bytes > 0)) continue;
    if (!seen.insert(r.op + "/" + r.dtype).second) continue;
    const double gf = r.flops / (r.ms * 1e6);
    pts.push_back({r.op, r.dtype,
                   r.key() + ": " + fmt(r.flops / r.bytes) + " FLOP/byte, " + fmt(gf) + " GFLOP/s, " +
                       fmt(r.gbs) + " GB/s (" + fmt(100 * r.frac) + "% of copy)",
                   r.flops / r.bytes, gf});
  }
  const double W = 860, H = 500, L = 80, R = 190, T = 20, B = 56;
  double xlo = 1e300, xhi = 0, ylo = 1e300, yhi = 0;
  for (const auto& p : pts) xlo = std::min(xlo, p.ai), xhi = std::max(xhi, p.ai);
  if (pts.empty()) xlo = 0.1, xhi = 10;
  xlo = std::pow(10, std::floor(std::log10(xlo))), xhi = std::pow(10, std::ceil(std::log10(xhi)));
  if (xhi / xlo < 100) xhi = xlo * 100;
  for (const auto& p : pts) ylo = std::min(ylo, p.gflops), yhi = std::max(yhi, p.gflops);
  for (const auto& [d, bw] : copy_gbs)
    if (bw > 0) ylo = std::min(ylo, bw * xlo), yhi = std::max(yhi, bw * xhi);
  if (!(yhi > 0)) ylo = 1, yhi = 1000;
  ylo = std::pow(10, std::floor(std::log10(ylo))), yhi = std::pow(10, std::ceil(std::log10(yhi)));
  if (yhi / ylo < 100) yhi = ylo * 100;
  const auto X = [&](double v) { return L + (W - L - R) * std::log10(v / xlo) / std::log10(xhi / xlo); };
  const auto Y = [&](double v) { return H - B - (H - T - B) * std::log10(v / ylo) / std::log10(yhi / ylo); };
  std::ostringstream s;
  s << "<svg id=\"roofline\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\" role=\"img\" aria-label=\"Roofline\">\n"
    << "<title>Roofline: arithmetic intensity against achieved GFLOP/s, log-log</title>\n";
  s << "<clipPath id=\"roofline-clip\"><rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << (W - L - R)
    << "\" height=\"" << (H - T - B) << "\"/></clipPath>\n";
  for (double t = xlo; t <= xhi * 1.0001; t *= 10)
    s << "<line class=\"grid\" x1=\"" << px(X(t)) << "\" y1=\"" << T << "\" x2=\"" << px(X(t)) << "\" y2=\"" << (H - B)
      << "\"/><text class=\"tick\" x=\"" << px(X(t)) << "\" y=\"" << (H - B + 16) << "\" text-anchor=\"middle\">"
      << fmt(t, "%g") << "</text>\n";
  for (double t = ylo; t <= yhi * 1.0001; t *= 10)
    s << "<line class=\"grid\" x1=\"" << L << "\" y1=\"" << px(Y(t)) << "\" x2=\"" << (W - R) << "\" y2=\"" << px(Y(t))
      << "\"/><text class=\"tick\" x=\"" << (L - 6) << "\" y=\"" << px(Y(t) + 4) << "\" text-anchor=\"end\">"
      << fmt(t, "%g") << "</text>\n";
  s << "<rect class=\"frame\" x=\"" << L << "\" y=\"" << T << "\" width=\"" << (W - L - R) << "\" height=\""
    << (H - T - B) << "\"/>\n"
    << "<text class=\"axis\" x=\"" << px((L + W - R) / 2) << "\" y=\"" << (H - 14)
    << "\" text-anchor=\"middle\">arithmetic intensity (FLOP / byte)</text>\n"
    << "<text class=\"axis\" transform=\"translate(18," << px((T + H - B) / 2)
    << ") rotate(-90)\" text-anchor=\"middle\">achieved GFLOP/s</text>\n";
  double ly = T + 10;
  for (const auto& [d, bw] : copy_gbs) {
    if (!(bw > 0)) continue;
    s << "<line class=\"roof\" clip-path=\"url(#roofline-clip)\" stroke=\"" << dtype_color(d) << "\" x1=\"" << px(X(xlo))
      << "\" y1=\"" << px(Y(bw * xlo)) << "\" x2=\"" << px(X(xhi)) << "\" y2=\"" << px(Y(bw * xhi)) << "\"><title>copy "
      << esc(d) << ": " << fmt(bw) << " GB/s</title></line>\n";
    s << "<line class=\"roof\" stroke=\"" << dtype_color(d) << "\" x1=\"" << (W - R + 12) << "\" y1=\"" << px(ly)
      << "\" x2=\"" << (W - R + 34) << "\" y2=\"" << px(ly) << "\"/><text class=\"legend\" x=\"" << (W - R + 40)
      << "\" y=\"" << px(ly + 4) << "\">copy " << esc(d) << " " << fmt(bw) << " GB/s</text>\n";
    ly += 18;
  }
  std::set<std::string> dts;
  for (const auto& p : pts) dts.insert(p.dtype);
  for (const auto& d : dts) {
    s << "<circle cx=\"" << (W - R + 23) << "\" cy=\"" << px(ly) << "\" r=\"4\" fill=\"" << dtype_color(d)
      << "\"/><text class=\"legend\" x=\"" << (W - R + 40) << "\" y=\"" << px(ly + 4) << "\">" << esc(d)
      << " ops</text>\n";
    ly += 18;
  }
  for (const auto& p : pts) {
    s << "<g class=\"pt\"><circle cx=\"" << px(X(p.ai)) << "\" cy=\"" << px(Y(p.gflops)) << "\" r=\"4.5\" fill=\""
      << dtype_color(p.dtype) << "\"><title>" << esc(p.tip) << "</title></circle><text class=\"ptlbl\" x=\""
      << px(X(p.ai) + 6) << "\" y=\"" << px(Y(p.gflops) - 5) << "\">" << esc(p.op) << "</text></g>\n";
  }
  s << "</svg>\n";
  return s.str();
}

const char* kStyle = R"(
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 24px auto;
       max-width: 1000px; color: #222; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 34px; border-bottom: 1px solid #ddd; }
.card { display: inline-block; vertical-align: top; border: 1px solid #ccc; border-radius: 8px; padding: 10px 16px;
        margin: 6px 12px 6px 0; background: #fafafa; }
.card h3 { margin: 0 0 6px; font-size: 15px; }
.card table td { padding: 1px 10px 1px 0; } .card table td:first-child { color: #666; }
.note { color: #555; font-size: 13px; max-width: 900px; }
svg.chart { display: block; margin: 8px 0; font-family: inherit; }
.grid { stroke: #e5e5e5; stroke-width: 1; } .frame { fill: none; stroke: #999; }
.tick { font-size: 11px; fill: #555; } .axis { font-size: 12px; fill: #333; }
.lbl { font-size: 11px; fill: #333; } .val { font-size: 10px; fill: #444; }
.ref { stroke: #333; stroke-width: 1.2; stroke-dasharray: 4 3; } .reflbl { font-size: 11px; fill: #333; }
.roof { stroke-width: 1.6; stroke-dasharray: 6 3; } .legend { font-size: 11px; fill: #333; }
.ptlbl { font-size: 9px; fill: #444; }
table.results { border-collapse: collapse; font-size: 12px; margin-top: 8px; }
table.results th, table.results td { border: 1px solid #ddd; padding: 2px 6px; text-align: right; }
table.results th { background: #f0f0f0; } table.results td.l { text-align: left; white-space: nowrap; }
)";

std::string device_card(const json& doc, const std::string& heading) {
  std::ostringstream s;
  const json dev = doc.value("device", json::object());
  s << "<div class=\"card\"><h3>" << esc(heading) << "</h3><table>";
  const auto row = [&](const std::string& k, const std::string& v) {
    if (!v.empty()) s << "<tr><td>" << esc(k) << "</td><td>" << esc(v) << "</td></tr>";
  };
  row("device", str(dev, "name"));
  row("vendor", str(dev, "vendor"));
  row("type", str(dev, "type"));
  row("backend", str(dev, "backend"));
  row("driver", str(dev, "driver"));
  row("API", str(dev, "api"));
  row("framework", str(doc, "framework", "kf"));
  row("tool", str(doc, "tool"));
  row("created", str(doc, "created"));
  row("MiB per input", fmt(num(doc, "size_mib"), "%g"));
  row("timed runs (median)", fmt(num(doc, "reps"), "%g"));
  if (dev.contains("copy_gbs") && dev["copy_gbs"].is_object())
    for (const auto& [d, v] : dev["copy_gbs"].items())
      if (v.is_number()) row("copy bandwidth " + d, fmt(v.get<double>(), "%.1f") + " GB/s");
  s << "</table></div>\n";
  return s.str();
}

}  // namespace

std::string render_report(const json& kf, const std::vector<json>& others) {
  const std::vector<Row> rows = rows_of(kf);
  std::map<std::string, double> copy_gbs;
  for (const auto& r : rows)
    if (r.op == "copy" && r.gbs > 0) copy_gbs[r.dtype] = r.gbs;
  std::vector<Row> timed;
  for (const auto& r : rows)
    if (r.op != "copy" && r.ms > 0) timed.push_back(r);

  std::ostringstream h;
  const json dev = kf.value("device", json::object());
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>kf-bench report: "
    << esc(str(dev, "name", "unknown device")) << "</title>\n<style>" << kStyle << "</style></head><body>\n"
    << "<h1>kf-bench report</h1>\n<p class=\"note\">Each time is the median of device-timestamp intervals "
    << "after warm-up runs; GB/s and GFLOP/s follow the op registry's cost model (the bytes an ideal kernel "
    << "reads and writes once). The copy roofline is a copy of the same size measured in the same run.</p>\n";
  h << device_card(kf, "kf");
  for (const auto& o : others) h << device_card(o, str(o, "framework", "other"));

  h << "<h2>Roofline</h2>\n" << roofline(timed, copy_gbs)
    << "<p class=\"note\">Dashed: the measured copy bandwidth of each dtype (a memory-bound kernel cannot "
    << "rise above it). No compute roof is drawn: kf-bench does not measure peak FLOP/s. One point per op "
    << "and dtype; hover a point for its numbers.</p>\n";

  std::vector<Bar> frac;
  for (const auto& r : timed)
    if (std::isfinite(r.frac))
      frac.push_back({r.op, r.kase + " · " + r.dtype, dtype_color(r.dtype),
                      r.key() + ": " + fmt(r.gbs) + " GB/s, " + fmt(r.ms, "%.4g") + " ms, variant " + r.variant,
                      r.frac});
  h << "<h2>Fraction of the copy roofline</h2>\n"
    << linear_bars("fraction-bars", "Achieved GB/s as a fraction of the measured copy bandwidth", frac, 1.0,
                   "copy bandwidth")
    << "<p class=\"note\">1.0 means the op moves its bytes as fast as a plain copy of the same size.</p>\n";

  std::vector<Bar> fusion;
  for (const auto& r : timed)
    if (std::isfinite(r.speedup))
      fusion.push_back({r.op, r.kase + " · " + r.dtype, dtype_color(r.dtype),
                        r.key() + ": fused " + fmt(r.ms, "%.4g") + " ms, unfused chain " + fmt(r.unfused_ms, "%.4g") +
                            " ms",
                        r.speedup});
  h << "<h2>Speed-up of fusion over the unfused chain</h2>\n"
    << ratio_bars("fusion-bars", "Unfused chain time / fused time", fusion)
    << "<p class=\"note\">The chain runs the same function as separate registered primitives (add, then gelu; "
    << "silu, then mul; ...), each reading and writing memory, timed between two timestamps in the same "
    << "way." << (fusion.empty() ? " No op of this run has a chain." : "") << "</p>\n";

  h << "<h2>kf against other frameworks</h2>\n";
  std::vector<std::string> names;
  std::map<std::string, std::map<std::string, Row>> by_fw;  // framework -> key -> row
  for (const auto& o : others) {
    for (const auto& r : rows_of(o)) {
      if (!(r.ms > 0)) continue;
      if (!by_fw.count(r.framework)) names.push_back(r.framework);
      by_fw[r.framework].emplace(r.key(), r);
    }
  }
  if (others.empty()) {
    h << "<p class=\"note\">No other framework's results were given (kf-bench --compare FILE, from "
      << "bench/torch_bench.py).</p>\n";
  } else {
    std::vector<Bar> cmp;
    for (const auto& r : timed)
      for (size_t k = 0; k < names.size(); ++k) {
        auto it = by_fw[names[k]].find(r.key());
        if (it == by_fw[names[k]].end()) continue;
        const Row& o = it->second;
        const std::string same = o.shapes == r.shapes ? "" : " (other shapes: " + o.shapes + ")";
        cmp.push_back({r.key(), names[k], framework_color(k),
                       r.key() + ": kf " + fmt(r.ms, "%.4g") + " ms, " + names[k] + " " + fmt(o.ms, "%.4g") + " ms" + same,
                       o.ms / r.ms});
      }
    h << ratio_bars("compare-bars", "kf's speed-up over each framework: their time / kf's time", cmp);
    h << "<p class=\"note\">Right of 1×: kf is faster. Matched by op, case and dtype. Frameworks: ";
    for (size_t k = 0; k < names.size(); ++k)
      h << (k ? ", " : "") << "<span style=\"color:" << framework_color(k) << "\">&#9632;</span> " << esc(names[k]);
    h << (cmp.empty() ? ". No op, case and dtype is common to kf and these files." : ".") << "</p>\n";
  }

  h << "<h2>All results</h2>\n<table class=\"results\"><tr><th>op</th><th>case</th><th>dtype</th><th>shapes</th>"
    << "<th>ms</th><th>GB/s</th><th>GFLOP/s</th><th>of copy</th><th>unfused ms</th><th>fusion</th>";
  for (const auto& n : names) h << "<th>" << esc(n) << " ms</th><th>kf speed-up</th>";
  h << "<th>variant</th></tr>\n";
  for (const auto& r : rows) {
    h << "<tr><td class=\"l\">" << esc(r.op) << "</td><td class=\"l\">" << esc(r.kase) << "</td><td class=\"l\">"
      << esc(r.dtype) << "</td>";
    if (!r.unsupported.empty()) {
      h << "<td class=\"l\" colspan=\"" << (8 + 2 * names.size()) << "\">unsupported: " << esc(r.unsupported)
        << "</td></tr>\n";
      continue;
    }
    h << "<td class=\"l\">" << esc(r.shapes) << "</td><td>" << fmt(r.ms, "%.4g") << "</td><td>" << fmt(r.gbs, "%.1f")
      << "</td><td>" << fmt(r.flops / (r.ms * 1e6), "%.4g") << "</td><td>" << fmt(r.frac) << "</td><td>"
      << fmt(r.unfused_ms, "%.4g") << "</td><td>" << (std::isfinite(r.speedup) ? fmt(r.speedup) + "×" : "-")
      << "</td>";
    for (const auto& n : names) {
      auto it = by_fw[n].find(r.key());
      const double o = it == by_fw[n].end() ? kNaN : it->second.ms;
      h << "<td>" << fmt(o, "%.4g") << "</td><td>" << (std::isfinite(o) ? fmt(o / r.ms) + "×" : "-") << "</td>";
    }
    h << "<td class=\"l\">" << esc(r.variant) << "</td></tr>\n";
  }
  h << "</table>\n</body></html>\n";
  return h.str();
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot read " + path);
  try {
    return json::parse(f);
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": not valid JSON: " + e.what());
  }
}

void write_report(const std::string& path, const json& kf, const std::vector<json>& others) {
  const std::string html = render_report(kf, others);
  std::ofstream f(path);
  if (!(f << html)) throw std::runtime_error("cannot write " + path);
}

}  // namespace kf::bench
