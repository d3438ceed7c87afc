// kf-info: every device of every compiled-in backend, what it can do, which one Context::create() picks,
// and (with --ops) which ops and dtypes that device runs and why not. With --ops --markdown it prints the
// README's table of op families, dtypes and backends (and with --per-op docs/ops.md's list of ops) from
// the registry alone: no device is opened, so the output is the same on every machine and build. With
// --options, the options table (the KF_TUNE knobs and the environment variables; --markdown: docs/tuning.md).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.hpp"
#include "core/options.hpp"
#include "kf/kf.hpp"
#include "ops/registry.hpp"

using nlohmann::ordered_json;

namespace {

const kf::DType kDTypes[] = {kf::DType::f32, kf::DType::f16, kf::DType::bf16, kf::DType::f64};

std::string bytes_text(uint64_t b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  std::ostringstream s;
  s.precision(u ? 3 : 0);
  s << std::fixed << v << " " << unit[u];
  return s.str();
}

// Every Caps field, in declaration order (include/kf/device.hpp).
ordered_json caps_json(const kf::Caps& c) {
  ordered_json j;
  j["storage16"] = c.storage16;
  j["float16_arith"] = c.float16_arith;
  j["bfloat16"] = c.bfloat16;
  j["float64"] = c.float64;
  j["int8"] = c.int8;
  j["int_dot"] = c.int_dot;
  j["subgroup_arith"] = c.subgroup_arith;
  j["subgroup_size"] = c.subgroup_size;
  j["subgroup_shuffle"] = c.subgroup_shuffle;
  j["coopmat_nv"] = c.coopmat_nv;
  j["coopmat_khr"] = c.coopmat_khr;
  j["coopmat_khr_shapes"] = ordered_json::array();
  for (const auto& s : c.coopmat_khr_shapes)
    j["coopmat_khr_shapes"].push_back(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " " +
                                      s.a + "*" + s.b + "+" + s.c + "->" + s.result + (s.saturating ? " saturating" : "") +
                                      (s.scope == "subgroup" ? "" : " " + s.scope));
  if (!c.coopmat_products.empty()) j["coopmat_products"] = c.coopmat_products;
  if (!c.coopmat_attention.empty()) j["coopmat_attention"] = c.coopmat_attention;
  if (!c.coopmat_bf16.empty()) j["coopmat_bf16"] = c.coopmat_bf16;
  j["timestamps"] = c.timestamps;
  j["timestamp_period_ns"] = c.timestamp_period_ns;
  j["max_shared_bytes"] = c.max_shared_bytes;
  j["max_workgroup_size"] = c.max_workgroup_size;
  j["max_workgroup_count"] = c.max_workgroup_count;
  j["max_storage_range"] = c.max_storage_range;
  j["max_allocation"] = c.max_allocation;
  return j;
}

ordered_json device_json(const kf::DeviceEntry& e) {
  const kf::DeviceInfo& d = e.info;
  ordered_json j;
  j["backend"] = d.backend;
  j["index"] = d.index;
  j["name"] = d.name;
  j["vendor"] = d.vendor;
  j["type"] = d.type;
  j["driver"] = d.driver;
  j["api_version"] = d.api_version;
  j["usable"] = e.usable;
  if (!e.usable) j["why_not"] = e.why_not;
  j["caps"] = caps_json(d.caps);
  j["memory_heaps"] = ordered_json::array();
  for (const auto& h : d.caps.heaps) j["memory_heaps"].push_back({{"size", h.size}, {"device_local", h.device_local}});
  return j;
}

// Which ops and dtypes a context runs: {op: {dtype: true | "why not"}}.
ordered_json ops_json(const kf::Context& ctx) {
  ordered_json j = ordered_json::object();
  for (const auto& op : kf::registry()) {
    ordered_json o = ordered_json::object();
    for (kf::DType t : kDTypes) {
      std::string why;
      if (ctx.supports(op.name, t, &why)) o[kf::to_string(t)] = true;
      else o[kf::to_string(t)] = why;
    }
    j[op.name] = o;
  }
  return j;
}

void print_device(const ordered_json& d) {
  std::printf("== %s %d: %s ==\n", d["backend"].get<std::string>().c_str(), d["index"].get<int>(),
              d["name"].get<std::string>().c_str());
  std::printf("  usable       %s\n", d["usable"].get<bool>() ? "yes" : ("no: " + d["why_not"].get<std::string>()).c_str());
  for (const char* k : {"vendor", "type", "driver", "api_version"})
    std::printf("  %-12s %s\n", k, d[k].get<std::string>().c_str());
  std::printf("  capabilities\n");
  for (const auto& [k, v] : d["caps"].items()) {
    std::string text;
    if (v.is_boolean()) text = v.get<bool>() ? "yes" : "no";
    else if (v.is_string()) text = v.get<std::string>();
    else if (v.is_array()) {  // the KHR cooperative-matrix shapes, one a line
      text = v.empty() ? "(none)" : "";
      for (size_t i = 0; i < v.size(); ++i) text += (i ? "\n" + std::string(25, ' ') : "") + v[i].get<std::string>();
    }
    else if (k == "max_shared_bytes" || k == "max_storage_range" || k == "max_allocation")
      text = v.dump() + " (" + bytes_text(v.get<uint64_t>()) + ")";
    else text = v.dump();
    std::printf("    %-20s %s\n", k.c_str(), text.c_str());
  }
  std::printf("  memory heaps\n");
  if (d["memory_heaps"].empty()) std::printf("    (none reported)\n");
  int i = 0;
  for (const auto& h : d["memory_heaps"])
    std::printf("    %d: %s%s\n", i++, bytes_text(h["size"].get<uint64_t>()).c_str(),
                h["device_local"].get<bool>() ? ", device-local" : "");
  std::printf("\n");
}

const char* family_name(kf::Family f) {
  switch (f) {
    case kf::Family::Elementwise: return "elementwise";
    case kf::Family::Reduction: return "reduction";
    case kf::Family::Matmul: return "linear algebra";
    case kf::Family::Normalization: return "normalization";
    case kf::Family::Loss: return "loss";
    case kf::Family::Optimizer: return "optimizer";
    case kf::Family::Attention: return "attention";
  }
  return "?";
}

const kf::Family kFamilies[] = {kf::Family::Elementwise, kf::Family::Reduction,     kf::Family::Normalization,
                                kf::Family::Loss,        kf::Family::Optimizer,     kf::Family::Matmul,
                                kf::Family::Attention};

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const auto& p : parts) {
    if (!s.empty()) s += sep;
    s += p;
  }
  return s;
}

bool declares(const kf::OpDef& op, kf::DType t) {
  for (kf::DType d : op.dtypes)
    if (d == t) return true;
  return false;
}

// The backends with a kernel for an op in a dtype, by the registry's declarations: the CPU backend runs
// every declared dtype (in float64), the CUDA backend every op of the registry, and the Vulkan backend
// every op but the f64 forms of those that need exp / tanh / erf (GLSL has no float64 transcendentals).
// A device still needs the capability (16-bit storage, shaderFloat64): kf-info --ops says for yours.
std::string backends_cell(const kf::OpDef& op, kf::DType t) {
  if (!declares(op, t)) return "-";
  if (t == kf::DType::f64 && op.transcendental) return "cpu, cuda";
  return "all";
}

// One row per (family, same coverage in every dtype): the ops of a family that read alike share a row.
void print_markdown_families() {
  std::printf("| family | ops | f32 | f16 | bf16 | f64 |\n| --- | --- | --- | --- | --- | --- |\n");
  for (kf::Family f : kFamilies) {
    std::vector<std::pair<std::string, std::vector<std::string>>> rows;  // coverage key, op names
    for (const auto& op : kf::registry()) {
      if (op.family != f) continue;
      std::string key;
      for (kf::DType t : kDTypes) key += backends_cell(op, t) + "|";
      auto it = std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.first == key; });
      if (it == rows.end()) rows.push_back({key, {op.name}});
      else it->second.push_back(op.name);
    }
    for (const auto& [key, names] : rows) {
      std::printf("| %s | %s |", family_name(f), join(names, ", ").c_str());
      const kf::OpDef& first = kf::get_op(names.front());
      for (kf::DType t : kDTypes) std::printf(" %s |", backends_cell(first, t).c_str());
      std::printf("\n");
    }
  }
}

// One row per op: its arguments as the registry declares them (docs/ops.md).
void print_markdown_ops() {
  std::printf("| op | family | inputs | outputs | dtypes | notes |\n| --- | --- | --- | --- | --- | --- |\n");
  for (kf::Family f : kFamilies) {
    for (const auto& op : kf::registry()) {
      if (op.family != f) continue;
      std::vector<std::string> in, dt;
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        std::string a = op.inputs[k];
        if (k < op.input_dtypes.size() && op.input_dtypes[k]) a += std::string(":") + kf::to_string(*op.input_dtypes[k]);
        if (static_cast<int>(k) >= op.required_inputs) a += "?";
        in.push_back(a);
      }
      for (kf::DType t : op.dtypes)
        dt.push_back(std::string(kf::to_string(t)) + (t == kf::DType::f64 && op.transcendental ? "*" : ""));
      std::vector<std::string> notes;
      if (op.primitive) notes.push_back("unfused primitive");
      if (op.random) notes.push_back("Philox dropout (p, seed, offset)");
      if (op.takes_out_dtype) notes.push_back("out_dtype");
      if (op.default_eps != 0) {
        char e[32];
        std::snprintf(e, sizeof e, "default eps %g", op.default_eps);
        notes.push_back(e);
      }
      for (const auto& [o, i] : op.in_place) notes.push_back("in place: " + op.outputs[o] + " may be " + op.inputs[i]);
      if (!op.composed_of.empty()) notes.push_back("composed of " + join(op.composed_of, ", "));
      std::printf("| %s | %s | %s | %s | %s | %s |\n", op.name.c_str(), family_name(f), join(in, ", ").c_str(),
                  join(op.outputs, ", ").c_str(), join(dt, " ").c_str(), join(notes, "; ").c_str());
    }
  }
}

void print_ops(const ordered_json& ops) {
  std::printf("%-22s", "op");
  for (kf::DType t : kDTypes) std::printf(" %-5s", kf::to_string(t));
  std::printf("\n");
  std::string reasons;
  for (const auto& [name, dts] : ops.items()) {
    std::printf("%-22s", name.c_str());
    for (const auto& [t, v] : dts.items()) {
      std::printf(" %-5s", v.is_boolean() ? "yes" : "no");
      if (!v.is_boolean()) reasons += "  " + name + " " + t + ": " + v.get<std::string>() + "\n";
    }
    std::printf("\n");
  }
  if (!reasons.empty()) std::printf("\nwhy not:\n%s", reasons.c_str());
}

// A markdown table cell: pipes escaped.
std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

// docs/tuning.md: the header, then the knobs and the environment variables of core/options.cpp.
void print_options_markdown() {
  std::printf(
      "# Tuning knobs and environment variables\n\n"
      "<!-- Generated by `kf-info --options --markdown` from src/core/options.cpp; CTest's tuning_doc test fails\n"
      "     when this file differs from it. Regenerate: build/tools/kf-info --options --markdown > docs/tuning.md -->\n\n"
      "Developer knobs choose how a backend runs an op (which kernel, tile or grid) without changing what it\n"
      "computes; kf-bench sweeps them and tests force each path with them. A program gives them as\n"
      "`key=value,...` in `ContextOptions::tuning`, or, where that is empty, in the environment variable\n"
      "`KF_TUNE` (for example `KF_TUNE=mm_path=1,attn_split=4`). They are parsed once, when a context is\n"
      "created: an unknown knob or a value outside the table raises `kf::Error` (InvalidArgument) on every\n"
      "backend alike, naming the knob, the value and the values it takes. A knob of another backend is\n"
      "accepted and ignored. A knob left out takes its default; 0 means automatic wherever the table says so.\n\n"
      "## Knobs\n\n"
      "| knob | backends | values | default | what it sets |\n"
      "|---|---|---|---|---|\n");
  for (const auto& k : kf::knobs())
    std::printf("| `%s` | %s | %s | %s | %s |\n", k.name, kf::to_string(k.backends), cell(kf::knob_values(k)).c_str(),
                cell(kf::knob_default(k)).c_str(), cell(k.doc).c_str());
  std::printf(
      "\n## Environment variables\n\n"
      "Read when a context is created (src/core/context.cpp); the backends read no environment themselves.\n\n"
      "| variable | backends | values | default | what it does |\n"
      "|---|---|---|---|---|\n");
  for (const auto& e : kf::environment_variables())
    std::printf("| `%s` | %s | %s | %s | %s |\n", e.name, kf::to_string(e.backends), cell(e.values).c_str(),
                cell(e.def).c_str(), cell(e.doc).c_str());
}

void print_options_text() {
  std::printf("KF_TUNE / ContextOptions::tuning knobs (key=value,...):\n");
  for (const auto& k : kf::knobs())
    std::printf("  %-19s %-13s %-26s default %-8s %s\n", k.name, kf::to_string(k.backends), kf::knob_values(k).c_str(),
                kf::knob_default(k).c_str(), k.doc);
  std::printf("\nenvironment variables:\n");
  for (const auto& e : kf::environment_variables())
    std::printf("  %-19s %-13s %s (default %s): %s\n", e.name, kf::to_string(e.backends), e.values, e.def, e.doc);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kf-info: the devices KernelFusion sees, their capabilities, and the ops they run"};
  bool ops = false, json = false, markdown = false, per_op = false, options = false;
  app.add_flag("--ops", ops, "also list which ops and dtypes the selected device runs, and why not");
  app.add_flag("--json", json, "print JSON instead of text");
  app.add_flag("--options", options, "print the options table (KF_TUNE knobs, environment variables) and nothing else");
  app.add_flag("--markdown", markdown,
               "with --ops: the registry's op families, dtypes and backends as a markdown table (README.md's), "
               "opening no device; with --options: the options table (docs/tuning.md)");
  app.add_flag("--per-op", per_op, "with --ops --markdown: one row per op, its inputs and outputs (docs/ops.md's)");
  CLI11_PARSE(app, argc, argv);
  if (options) {  // no device is opened: the table is the same everywhere
    if (markdown) print_options_markdown();
    else print_options_text();
    return 0;
  }

  if (markdown || per_op) {
    if (!ops || json) {
      std::fprintf(stderr, "kf-info: --markdown and --per-op go with --ops, not --json\n");
      return 2;
    }
    if (per_op) print_markdown_ops();
    else print_markdown_families();
    return 0;
  }

  try {
    ordered_json out;
    out["backends"] = kf::Context::backends();
    out["devices"] = ordered_json::array();
    for (const auto& e : kf::Context::list_devices()) out["devices"].push_back(device_json(e));
    // The device Context::create() picks (KF_BACKEND and KF_DEVICE apply, as in any program).
    try {
      kf::Context ctx = kf::Context::create();
      out["selected"] = {{"backend", ctx.backend()}, {"index", ctx.device().index}, {"name", ctx.device().name},
                         {"cuda_context", kf::detail::holds_cuda_context(ctx)}};
      // Which tensor-core kernels the matrix products take there (Vulkan: KF_TUNE coopmat), or why none.
      if (!ctx.device().caps.coopmat_products.empty()) {
        out["selected"]["coopmat_products"] = ctx.device().caps.coopmat_products;
        out["selected"]["coopmat_attention"] = ctx.device().caps.coopmat_attention;
        out["selected"]["coopmat_bf16"] = ctx.device().caps.coopmat_bf16;
      }
      if (ops) out["ops"] = ops_json(ctx);
    } catch (const kf::Error& e) {
      out["selected"] = {{"error", e.what()}};
    }

    if (json) {
      std::cout << out.dump(2) << "\n";
      return out["selected"].contains("error") ? 1 : 0;
    }
    std::printf("backends compiled in:");
    for (const auto& b : out["backends"]) std::printf(" %s", b.get<std::string>().c_str());
    std::printf("\n\n");
    for (const auto& d : out["devices"]) print_device(d);
    const auto& sel = out["selected"];
    if (sel.contains("error")) {
      std::printf("Context::create() fails: %s\n", sel["error"].get<std::string>().c_str());
      return 1;
    }
    std::printf("Context::create() picks: %s %d: %s%s\n", sel["backend"].get<std::string>().c_str(),
                sel["index"].get<int>(), sel["name"].get<std::string>().c_str(),
                sel["cuda_context"].get<bool>() ? " (holding the GPU's CUDA context)" : "");
    if (sel.contains("coopmat_products")) {
      std::printf("  tensor cores of the matrix products: %s\n", sel["coopmat_products"].get<std::string>().c_str());
      std::printf("  tensor cores of attention: %s\n", sel["coopmat_attention"].get<std::string>().c_str());
      std::printf("  bf16 products on the tensor cores: %s\n", sel["coopmat_bf16"].get<std::string>().c_str());
    }
    if (ops) {
      std::printf("\nops on that device:\n");
      print_ops(out["ops"]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kf-info: %s\n", e.what());
    return 1;
  }
  return 0;
}
