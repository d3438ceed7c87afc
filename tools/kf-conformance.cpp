// kf-conformance: checks every registered op (catalog fusions and primitives), in every dtype it takes,
// on every test case the registry declares, on every usable device of every backend, against the float64
// reference with the tolerances of docs/ops.md (the checks of src/check/conformance.hpp, shared with
// the test suites). It also checks determinism (each case run twice on the same inputs gives the same
// bits) and that the dropout ops apply the CPU backend's mask bit for bit. It prints a report card and a
// table per device, can write the same content as JSON and as JUnit XML, and exits non-zero on any
// failure (an op a device does not support is reported, with the reason, and is not a failure).
#include <sys/ioctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "check/conformance.hpp"
#include "kf/kf.hpp"
#include "ops/registry.hpp"

using json = nlohmann::ordered_json;
using namespace kf;

namespace {

// Every option, read once (command line first, then KF_BACKEND / KF_DEVICE / KF_VALIDATION).
struct Options {
  std::vector<std::string> backends, devices, dtypes;
  std::string filter = ".*", cases = ".*";
  std::string json_path, junit_path, progress = "auto";
  bool validation = false, env_validation = false, env_validation_set = false;
  bool fixed_seed = false, determinism = true, masks = true, list = false;
  uint64_t seed = 0;
  double tolerance_scale = 1;
  std::string values = "uniform";  // the inputs' distribution (check::Values)
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string tag_of(const DeviceInfo& d) { return d.backend + std::to_string(d.index); }

// JSON has no NaN or infinity: those become the strings "nan", "inf", "-inf".
json num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

std::string sci(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_number()) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2e", v.get<double>());
  return b;
}

std::string fixed(double v, int digits) {
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

std::string regex_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (std::string(".^$|()[]{}*+?\\").find(c) != std::string::npos) o += '\\';
    o += c;
  }
  return o;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return b;
}

// ---------------------------------------------------------------------------------------------------
// What runs: the op / dtype pairs and their cases (the same on every device), and the devices.

struct Work {
  const OpDef* op;
  DType dtype;
  std::vector<size_t> cases;  // indices into op->tests
};

std::vector<Work> make_plan(const Options& o) {
  const std::regex ops(o.filter), cases(o.cases);
  std::vector<DType> want;
  for (const auto& name : o.dtypes) want.push_back(dtype_from_string(name));  // throws on a bad name
  std::vector<Work> plan;
  for (const auto& op : registry()) {
    if (!std::regex_search(op.name, ops)) continue;
    for (DType t : op.dtypes) {
      if (!want.empty() && std::find(want.begin(), want.end(), t) == want.end()) continue;
      Work w{&op, t, {}};
      for (size_t c = 0; c < op.tests.size(); ++c)
        if (std::regex_search(op.tests[c].label, cases)) w.cases.push_back(c);
      if (!w.cases.empty()) plan.push_back(w);
    }
  }
  return plan;
}

bool device_matches(const DeviceInfo& d, const std::string& want) {
  if (lower(want) == lower(tag_of(d)) || want == std::to_string(d.index)) return true;
  return lower(d.name).find(lower(want)) != std::string::npos;
}

// The devices to check, and those seen but not usable (reported, not checked). Throws kf::Error when the
// selection names an unknown backend or matches no usable device.
std::vector<DeviceEntry> select_devices(const Options& o, std::vector<DeviceEntry>* unusable) {
  const auto compiled = Context::backends();
  for (const auto& b : o.backends)
    if (std::find(compiled.begin(), compiled.end(), b) == compiled.end()) {
      std::string names;
      for (const auto& n : compiled) names += (names.empty() ? "" : ", ") + n;
      throw Error(ErrorCode::Device, "backend '" + b + "' is not compiled in (available: " + names + ")");
    }
  std::vector<DeviceEntry> picked;
  for (const auto& e : Context::list_devices()) {
    if (!o.backends.empty() && std::find(o.backends.begin(), o.backends.end(), e.info.backend) == o.backends.end())
      continue;
    if (!o.devices.empty() &&
        std::none_of(o.devices.begin(), o.devices.end(), [&](const auto& w) { return device_matches(e.info, w); }))
      continue;
    (e.usable ? picked : *unusable).push_back(e);
  }
  if (picked.empty()) {
    std::string why;
    for (const auto& e : *unusable) why += "\n  " + e.info.backend + " " + e.info.name + ": " + e.why_not;
    throw Error(ErrorCode::Device, "no usable device matches the selection" + why);
  }
  return picked;
}

ContextOptions context_options(const DeviceInfo& d, const Options& o) {
  ContextOptions c;
  c.backend = d.backend;
  // The CPU backend has one device and takes no index (Context::create matches indices on GPUs only).
  if (d.backend != "cpu") c.device = std::to_string(d.index);
  c.validation = o.validation;  // KF_VALIDATION, when set, wins inside Context::create
  return c;
}

bool validation_on(const DeviceInfo& d, const Options& o) {
  if (d.backend != "vulkan") return false;
  return o.env_validation_set ? o.env_validation : o.validation;
}

// ---------------------------------------------------------------------------------------------------
// Progress: a bar redrawn with \r on a terminal, one line per op / dtype otherwise.

class Progress {
 public:
  Progress(const std::string& mode, size_t units, size_t pairs) : units_(units), pairs_(pairs) {
    bar_ = mode == "bar" || (mode == "auto" && isatty(STDOUT_FILENO));
    lines_ = mode == "lines" || (mode == "auto" && !bar_);
    winsize w{};
    if (bar_ && ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col >= 40) width_ = w.ws_col;
  }
  void unit(const std::string& what) {
    ++done_;
    if (!bar_) return;
    const auto now = Clock::now();
    if (done_ < units_ && now - last_ < std::chrono::milliseconds(50)) return;
    last_ = now;
    draw(what);
  }
  void skip_units(size_t n) { done_ += n; }
  // One op / dtype finished: a line in line mode; in bar mode only failures get a line above the bar.
  void pair(const std::string& line, bool failed) {
    ++pairs_done_;
    failures_ += failed;
    if (lines_) {
      std::printf("[%*zu/%zu] %s\n", int(std::to_string(pairs_).size()), pairs_done_, pairs_, line.c_str());
      std::fflush(stdout);
    } else if (bar_ && failed) {
      std::printf("\r\033[K%s\n", line.c_str());
      draw("");
    }
  }
  void note(const std::string& line) {
    if (bar_) std::printf("\r\033[K%s\n", line.c_str());
    else if (lines_) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  void finish() {
    if (bar_) std::printf("\r\033[K");
    std::fflush(stdout);
  }

 private:
  void draw(const std::string& what) {
    const int cells = 28;
    const double f = units_ ? double(done_) / double(units_) : 1.0;
    const int full = int(f * cells);
    std::string line = "[" + std::string(full, '#') + std::string(cells - full, '.') + "] " +
                       std::to_string(int(f * 100)) + "% " + std::to_string(done_) + "/" + std::to_string(units_);
    if (failures_) line += "  " + std::to_string(failures_) + " failing";
    line += "  " + what;
    if (int(line.size()) > width_ - 1) line.resize(width_ - 1);
    std::printf("\r\033[K%s", line.c_str());
    std::fflush(stdout);
  }
  size_t units_, pairs_, done_ = 0, pairs_done_ = 0, failures_ = 0;
  bool bar_ = false, lines_ = false;
  int width_ = 80;
  Clock::time_point last_{};
};

// ---------------------------------------------------------------------------------------------------
// Running the checks of one device.

json caps_json(const Caps& c) {
  return {{"f16_storage", c.storage16},     {"f16_arithmetic", c.float16_arith}, {"bf16_native", c.bfloat16},
          {"f64", c.float64},               {"subgroup_size", c.subgroup_size},  {"subgroup_arithmetic", c.subgroup_arith},
          {"coopmat_nv", c.coopmat_nv},     {"coopmat_khr", c.coopmat_khr},      {"timestamps", c.timestamps},
          {"timestamp_period_ns", c.timestamp_period_ns}, {"shared_memory_bytes", c.max_shared_bytes},
          {"coopmat_products", c.coopmat_products}, {"coopmat_attention", c.coopmat_attention},
          {"coopmat_bf16", c.coopmat_bf16}};
}

json device_json(const DeviceEntry& e) {
  const DeviceInfo& d = e.info;
  json j = {{"tag", tag_of(d)},    {"backend", d.backend}, {"index", d.index},
            {"name", d.name},      {"vendor", d.vendor},   {"type", d.type},
            {"driver", d.driver},  {"api_version", d.api_version}};
  if (!e.usable) j["why_not"] = e.why_not;
  return j;
}

json case_json(const std::string& label, const check::CaseResult& r, bool determinism) {
  json j;
  j["case"] = label;
  j["status"] = r.unsupported ? "unsupported" : r.pass ? "pass" : "fail";
  if (r.unsupported) {
    j["reason"] = r.message;
    return j;
  }
  j["err"] = num(r.err);
  j["err_limit"] = num(r.err_limit);
  if (r.worst_index >= 0)
    j["worst"] = {{"output", r.worst_output}, {"index", r.worst_index},      {"ref", num(r.worst_ref)},
                  {"out", num(r.worst_out)},  {"abs_err", num(r.worst_abs)}, {"of_tolerance", num(r.worst)}};
  else
    j["worst"] = nullptr;
  j["seed"] = r.seed;
  j["variant"] = r.variant;
  j["deterministic"] = determinism ? json(r.deterministic) : json(nullptr);
  j["validation_messages"] = r.validation_messages;
  j["seconds"] = r.seconds;
  j["message"] = r.message;
  return j;
}

double as_double(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) return v.get<std::string>() == "-inf" ? -INFINITY : INFINITY;  // nan / inf rank worst
  return 0;
}

// The CPU backend's masks, computed once per run (op / dtype / case) on a CPU context of its own, that
// every other device must match.
class CpuMasks {
 public:
  explicit CpuMasks(uint64_t data_seed) : seed_(data_seed) {}
  const std::vector<uint8_t>& get(const OpDef& op, DType t, size_t c) {
    const std::string key = op.name + "/" + to_string(t) + "/" + std::to_string(c);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    if (!cpu_) {
      ContextOptions co;
      co.backend = "cpu";
      cpu_ = std::make_unique<Context>(Context::create(co));
    }
    const TestCase& tc = op.tests[c];
    return cache_[key] = check::dropout_mask(*cpu_, op, t, tc.inputs, tc.attrs, seed_);
  }
  uint64_t seed() const { return seed_; }

 private:
  uint64_t seed_;
  std::unique_ptr<Context> cpu_;
  std::map<std::string, std::vector<uint8_t>> cache_;
};

json mask_check(Context& ctx, const OpDef& op, DType t, size_t c, CpuMasks& cpu) {
  const TestCase& tc = op.tests[c];
  const auto start = Clock::now();
  json j = {{"case", tc.label}};
  std::string msg;
  const check::ValidationWatch watch(ctx);
  try {
    const auto mask = check::dropout_mask(ctx, op, t, tc.inputs, tc.attrs, cpu.seed());
    const auto& expected = cpu.get(op, t, c);
    const int64_t i = check::first_difference(mask, expected);
    int64_t differ = 0;
    for (size_t k = 0; k < std::min(mask.size(), expected.size()); ++k) differ += mask[k] != expected[k];
    int64_t kept = 0;
    for (auto m : mask) kept += m;
    j["elements"] = mask.size();
    j["kept"] = kept;
    j["differ"] = differ;
    j["first_difference"] = i;
    if (i >= 0) {
      std::ostringstream s;
      s << "the keep mask differs from the CPU backend's (p " << tc.attrs.p << ", seed " << tc.attrs.seed
        << ", offset " << tc.attrs.offset << "): first at element " << i;
      if (size_t(i) < mask.size() && size_t(i) < expected.size())
        s << " (this device " << (mask[i] ? "keeps" : "drops") << " it, the CPU " << (expected[i] ? "keeps" : "drops")
          << " it)";
      s << ", " << differ << " of " << mask.size() << " elements differ";
      msg = s.str();
    }
  } catch (const std::exception& e) {
    msg = std::string("kf::Error: ") + e.what();
  }
  if (watch.count()) msg += (msg.empty() ? "" : "\n") + watch.report();
  j["status"] = msg.empty() ? "pass" : "fail";
  j["message"] = msg;
  j["seconds"] = since(start);
  return j;
}

// The summary of one op / dtype from its cases and mask checks.
void summarize(json& p) {
  int pass = 0, fail = 0;
  json err_case, worst_case;
  std::vector<std::string> variants;
  bool deterministic = true, determinism_checked = false;
  for (const auto& c : p["cases"]) {
    if (c["status"] == "pass") ++pass;
    else if (c["status"] == "fail") ++fail;
    if (c["status"] == "unsupported") continue;
    if (c["deterministic"].is_boolean()) {
      determinism_checked = true;
      deterministic = deterministic && c["deterministic"].get<bool>();
    }
    const std::string v = c["variant"];
    if (!v.empty() && std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(v);
    if (err_case.is_null() || as_double(c["err"]) > as_double(err_case["err"])) err_case = c;
    if (!c["worst"].is_null() &&
        (worst_case.is_null() || as_double(c["worst"]["of_tolerance"]) > as_double(worst_case["worst"]["of_tolerance"])))
      worst_case = c;
  }
  int mask_fail = 0;
  for (const auto& m : p["masks"]) mask_fail += m["status"] != "pass";
  if (p["status"] != "unsupported") p["status"] = fail || mask_fail ? "fail" : "pass";
  p["cases_pass"] = pass;
  p["cases_fail"] = fail;
  p["err"] = err_case.is_null() ? json(nullptr) : err_case["err"];
  p["err_limit"] = err_case.is_null() ? json(nullptr) : err_case["err_limit"];
  p["err_case"] = err_case.is_null() ? json(nullptr) : err_case["case"];
  if (!worst_case.is_null()) {
    json w = worst_case["worst"];
    w["case"] = worst_case["case"];
    p["worst"] = w;
  } else {
    p["worst"] = nullptr;
  }
  p["variants"] = variants;
  p["deterministic"] = determinism_checked ? json(deterministic) : json(nullptr);
  if (p["op_random"].get<bool>())
    p["mask_matches_cpu"] = p["masks"].empty() ? json(nullptr) : json(mask_fail == 0);
}

json run_device(const DeviceEntry& e, const std::vector<Work>& plan, const Options& o, Progress& progress,
                CpuMasks& masks) {
  const auto start = Clock::now();
  const std::string tag = tag_of(e.info);
  json d = device_json(e);
  d["validation"] = validation_on(e.info, o);
  d["results"] = json::array();
  std::optional<Context> ctx;
  try {
    ctx.emplace(Context::create(context_options(e.info, o)));
  } catch (const std::exception& ex) {
    d["error"] = std::string("cannot open the device: ") + ex.what();
    progress.note("FAIL " + tag + ": " + d["error"].get<std::string>());
    size_t units = 0;
    for (const auto& w : plan) units += w.cases.size() * (w.op->random && e.info.backend != "cpu" && o.masks ? 2 : 1);
    progress.skip_units(units);
    d["seconds"] = since(start);
    return d;
  }
  // A validation message while the device opens belongs to no case: it fails the device.
  if (const uint64_t n = ctx->validation_messages()) {
    std::string msg = std::to_string(n) + " validation message(s) while opening the device:";
    for (const auto& line : ctx->validation_log()) msg += "\n  " + line;
    d["error"] = msg;
    progress.note("FAIL " + tag + ": " + first_line(msg));
  }
  const DeviceInfo& info = ctx->device();  // as opened (the driver may say more than the listing)
  d["name"] = info.name;
  d["vendor"] = info.vendor;
  d["driver"] = info.driver;
  d["api_version"] = info.api_version;
  d["caps"] = caps_json(info.caps);
  const bool is_cpu = ctx->backend() == "cpu";

  check::CaseOptions co;
  co.repeat = o.determinism;
  co.check_validation = true;
  co.tolerance_scale = o.tolerance_scale;
  co.values = check::parse_values(o.values);
  try {
    for (const auto& w : plan) {
      const OpDef& op = *w.op;
      const std::string what = tag + " " + op.name + " " + to_string(w.dtype);
      json p = {{"op", op.name}, {"dtype", to_string(w.dtype)}, {"primitive", op.primitive}, {"op_random", op.random}};
      if (co.values != check::Values::uniform) p["values"] = o.values;
      p["cases"] = json::array();
      p["masks"] = json::array();
      const auto pair_start = Clock::now();
      std::string why = check::values_skip(op, w.dtype, co.values);
      if (!why.empty() || !ctx->supports(op.name, w.dtype, &why)) {
        p["status"] = "unsupported";
        p["reason"] = why.empty() ? "unsupported (no reason given)" : why;
        for (size_t c : w.cases)
          p["cases"].push_back({{"case", op.tests[c].label}, {"status", "unsupported"}, {"reason", p["reason"]}});
        progress.skip_units(w.cases.size() * (op.random && !is_cpu && o.masks ? 2 : 1));
      } else {
        p["status"] = "pass";
        for (size_t c : w.cases) {
          const TestCase& tc = op.tests[c];
          progress.unit(what + " " + tc.label);
          const uint64_t seed = o.fixed_seed ? o.seed : check::fresh_seed();
          p["cases"].push_back(case_json(tc.label, check::run_case(*ctx, op, w.dtype, tc, seed, co), o.determinism));
        }
        if (op.random && !is_cpu && o.masks)
          for (size_t c : w.cases) {
            progress.unit(what + " mask " + op.tests[c].label);
            p["masks"].push_back(mask_check(*ctx, op, w.dtype, c, masks));
          }
      }
      summarize(p);
      p["seconds"] = since(pair_start);
      std::string line = tag + " " + op.name + " " + to_string(w.dtype) + ": " + p["status"].get<std::string>();
      if (p["status"] == "unsupported") line += " (" + p["reason"].get<std::string>() + ")";
      else line += " (" + std::to_string(p["cases"].size()) + " cases, " + fixed(p["seconds"], 2) + " s)";
      progress.pair(line, p["status"] == "fail");
      d["results"].push_back(p);
    }
  } catch (const std::exception& ex) {
    d["error"] = std::string("the run stopped: ") + ex.what();
    progress.note("FAIL " + tag + ": " + d["error"].get<std::string>());
  }
  d["validation_messages"] = ctx->validation_messages();
  d["seconds"] = since(start);
  return d;
}

void count(json& d) {
  int pass = 0, fail = 0, unsupported = 0, cpass = 0, cfail = 0, cuns = 0, mpass = 0, mfail = 0;
  for (const auto& p : d["results"]) {
    const std::string s = p["status"];
    (s == "pass" ? pass : s == "fail" ? fail : unsupported)++;
    for (const auto& c : p["cases"]) {
      const std::string cs = c["status"];
      (cs == "pass" ? cpass : cs == "fail" ? cfail : cuns)++;
    }
    for (const auto& m : p["masks"]) (m["status"] == "pass" ? mpass : mfail)++;
  }
  d["counts"] = {{"pass", pass},       {"fail", fail},       {"unsupported", unsupported},
                 {"cases_pass", cpass}, {"cases_fail", cfail}, {"cases_unsupported", cuns},
                 {"masks_pass", mpass}, {"masks_fail", mfail}};
  d["passed"] = fail == 0 && !d.contains("error");
}

// ---------------------------------------------------------------------------------------------------
// The text report.

std::string yes(const json& v) { return v.get<bool>() ? "yes" : "no"; }

std::string where(const json& p) {
  if (p["worst"].is_null()) return "-";
  const json& w = p["worst"];
  const OpDef* op = find_op(p["op"]);
  std::string s = w["case"].get<std::string>();
  if (op && op->outputs.size() > 1) s += ":" + w["output"].get<std::string>();
  return s + "[" + std::to_string(w["index"].get<int64_t>()) + "]";
}

// The variants that ran for an op / dtype, compacted for the table: "prefix{a | b | c}" with their
// common prefix (up to a separator) taken out, or "prefix... (N variants)" when that is still long.
std::string variants_text(const json& list) {
  std::vector<std::string> v;
  for (const auto& e : list) v.push_back(e.get<std::string>());
  if (v.empty()) return "-";
  if (v.size() == 1) return v[0];
  size_t n = v[0].size();
  for (const auto& s : v) n = std::min(n, size_t(std::mismatch(v[0].begin(), v[0].begin() + std::min(n, s.size()), s.begin()).first - v[0].begin()));
  while (n > 0 && std::string("/,:").find(v[0][n - 1]) == std::string::npos) --n;
  const std::string prefix = v[0].substr(0, n);
  std::string rest;
  for (const auto& s : v) rest += (rest.empty() ? "" : " | ") + s.substr(n);
  if (rest.size() <= 48) return prefix + "{" + rest + "}";
  return prefix + "... (" + std::to_string(v.size()) + " variants)";
}

std::string replay(const json& d, const json& p, const json& c) {
  std::string s = "kf-conformance --device " + d["tag"].get<std::string>() + " --filter '^" +
                  regex_escape(p["op"]) + "$' --dtypes " + p["dtype"].get<std::string>() + " --case '^" +
                  regex_escape(c["case"]) + "$'";
  if (c.contains("seed")) s += " --seed " + std::to_string(c["seed"].get<uint64_t>());
  if (p.contains("values")) s += " --values " + p["values"].get<std::string>();
  return s;
}

void indent_print(const std::string& text, const char* pad) {
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (++n > 40) {
      std::printf("%s...\n", pad);
      break;
    }
    std::printf("%s%s\n", pad, line.c_str());
  }
}

void print_device(const json& d) {
  std::printf("== %s: %s ==\n", d["tag"].get<std::string>().c_str(), d["name"].get<std::string>().c_str());
  std::printf("  %-14s %s\n", "vendor", d["vendor"].get<std::string>().c_str());
  std::printf("  %-14s %s\n", "type", d["type"].get<std::string>().c_str());
  std::printf("  %-14s %s\n", "driver", d["driver"].get<std::string>().c_str());
  std::printf("  %-14s %s\n", "API version", d["api_version"].get<std::string>().c_str());
  if (d.contains("caps")) {
    const json& c = d["caps"];
    std::printf("  %-14s storage %s, arithmetic %s\n", "f16", yes(c["f16_storage"]).c_str(),
                yes(c["f16_arithmetic"]).c_str());
    std::printf("  %-14s %s\n", "bf16", c["bf16_native"].get<bool>() ? "native" : "converted in the shader");
    std::printf("  %-14s %s\n", "f64", yes(c["f64"]).c_str());
    std::printf("  %-14s size %u, arithmetic %s\n", "subgroups", c["subgroup_size"].get<unsigned>(),
                yes(c["subgroup_arithmetic"]).c_str());
    std::printf("  %-14s NV %s, KHR %s\n", "coop. matrix", yes(c["coopmat_nv"]).c_str(), yes(c["coopmat_khr"]).c_str());
    const std::string cm_mm = c.value("coopmat_products", std::string()), cm_attn = c.value("coopmat_attention", std::string());
    if (!cm_mm.empty() && cm_mm == cm_attn) std::printf("  %-14s %s\n", "tensor cores", cm_mm.c_str());
    else if (!cm_mm.empty())
      std::printf("  %-14s products %s; attention %s\n", "tensor cores", cm_mm.c_str(), cm_attn.c_str());
    if (const std::string b = c.value("coopmat_bf16", std::string()); !b.empty())
      std::printf("  %-14s %s\n", "bf16 products", b.c_str());
    std::printf("  %-14s %s (period %g ns)\n", "timestamps", yes(c["timestamps"]).c_str(),
                c["timestamp_period_ns"].get<double>());
    std::printf("  %-14s %u bytes per workgroup\n", "shared memory", c["shared_memory_bytes"].get<unsigned>());
  }
  if (d["backend"] == "vulkan") {
    if (d["validation"].get<bool>())
      std::printf("  %-14s on, %llu message(s)\n", "validation",
                  static_cast<unsigned long long>(d.value("validation_messages", uint64_t(0))));
    else
      std::printf("  %-14s off (--validation or KF_VALIDATION=1 turns it on)\n", "validation");
  }
  const json& n = d["counts"];
  std::printf("  %-14s %s: %d pass, %d fail, %d unsupported op/dtype pairs; cases %d pass, %d fail, %d unsupported; %s s\n",
              "result", d["passed"].get<bool>() ? "PASS" : "FAIL", n["pass"].get<int>(), n["fail"].get<int>(),
              n["unsupported"].get<int>(), n["cases_pass"].get<int>(), n["cases_fail"].get<int>(),
              n["cases_unsupported"].get<int>(), fixed(d["seconds"], 1).c_str());
  if (n["masks_pass"].get<int>() + n["masks_fail"].get<int>())
    std::printf("  %-14s %d of %d dropout masks identical to the CPU backend's\n", "masks",
                n["masks_pass"].get<int>(), n["masks_pass"].get<int>() + n["masks_fail"].get<int>());
  if (d.contains("error")) std::printf("  %-14s %s\n", "ERROR", d["error"].get<std::string>().c_str());
  if (d["results"].empty()) {
    std::printf("\n");
    return;
  }

  std::printf("\n  %-21s %-5s %-10s %9s %9s  %-21s %-26s %-4s %-5s %s\n", "op", "dtype", "result", "max err", "limit",
              "worst elem (of tol)", "at", "det", "mask", "variant");
  for (const auto& p : d["results"]) {
    const std::string op = p["op"], dt = p["dtype"], st = p["status"];
    if (st == "unsupported") {
      std::printf("  %-21s %-5s unsupported: %s\n", op.c_str(), dt.c_str(), p["reason"].get<std::string>().c_str());
      continue;
    }
    std::string result = st;
    if (st == "fail" && p["cases_fail"].get<int>())
      result += " " + std::to_string(p["cases_fail"].get<int>()) + "/" + std::to_string(p["cases"].size());
    std::string worst = "-";
    if (!p["worst"].is_null())
      worst = sci(p["worst"]["abs_err"]) + " (" +
              (p["worst"]["of_tolerance"].is_number() ? fixed(p["worst"]["of_tolerance"], 2)
                                                      : p["worst"]["of_tolerance"].get<std::string>()) + ")";
    std::string det = p["deterministic"].is_null() ? "-" : p["deterministic"].get<bool>() ? "yes" : "NO";
    std::string mask = "-";
    if (p.contains("mask_matches_cpu") && !p["mask_matches_cpu"].is_null())
      mask = p["mask_matches_cpu"].get<bool>() ? "same" : "DIFF";
    const std::string variants = variants_text(p["variants"]);
    std::printf("  %-21s %-5s %-10s %9s %9s  %-21s %-26s %-4s %-5s %s\n", op.c_str(), dt.c_str(), result.c_str(),
                sci(p["err"]).c_str(), sci(p["err_limit"]).c_str(), worst.c_str(), where(p).c_str(), det.c_str(),
                mask.c_str(), variants.c_str());
  }

  bool header = false;
  for (const auto& p : d["results"]) {
    for (const auto* list : {&p["cases"], &p["masks"]})
      for (const auto& c : *list) {
        if (c["status"] != "fail") continue;
        if (!header) std::printf("\n  failures:\n"), header = true;
        const bool is_mask = list == &p["masks"];
        std::printf("  - %s %s case %s%s", p["op"].get<std::string>().c_str(), p["dtype"].get<std::string>().c_str(),
                    c["case"].get<std::string>().c_str(), is_mask ? " (dropout mask vs the CPU backend)" : "");
        if (!is_mask)
          std::printf(" (variant %s, input seed %llu)", c["variant"].get<std::string>().c_str(),
                      static_cast<unsigned long long>(c["seed"].get<uint64_t>()));
        std::printf(":\n");
        indent_print(c["message"], "      ");
        std::printf("      replay: %s\n", replay(d, p, c).c_str());
      }
  }
  std::printf("\n");
}

// ---------------------------------------------------------------------------------------------------
// JUnit XML: one testsuite per device, one testcase per op / dtype / case (and per dropout mask check).

// Valid UTF-8 kept, other bytes and the control characters XML 1.0 forbids replaced, markup escaped.
std::string xml_escape(const std::string& s, bool attribute) {
  std::string o;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len > 1) {
      bool ok = i + len <= s.size();
      for (int k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
      if (ok) {
        o.append(s, i, len);
        i += len;
        continue;
      }
      len = 0;
    }
    if (len == 0) {
      o += '?';
      ++i;
      continue;
    }
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += attribute ? "&quot;" : "\""; break;
      case '\'': o += attribute ? "&apos;" : "'"; break;
      case '\n': o += attribute ? "&#10;" : "\n"; break;
      case '\t': o += attribute ? "&#9;" : "\t"; break;
      case '\r': o += "&#13;"; break;
      default: o += c < 0x20 ? '?' : static_cast<char>(c);
    }
    ++i;
  }
  return o;
}

std::string attr(const std::string& name, const std::string& value) {
  return " " + name + "=\"" + xml_escape(value, true) + "\"";
}

// One line saying why a case failed (the JUnit failure's message attribute).
std::string failure_summary(const json& c) {
  std::vector<std::string> why;
  if (c.contains("worst") && !c["worst"].is_null() && as_double(c["worst"]["of_tolerance"]) > 1) {
    const json& w = c["worst"];
    char b[160];
    std::snprintf(b, sizeof b, "%s[%lld]: out %.9g, ref %.9g (%s x its tolerance)",
                  w["output"].get<std::string>().c_str(), static_cast<long long>(w["index"].get<int64_t>()),
                  as_double(w["out"]), as_double(w["ref"]),
                  w["of_tolerance"].is_number() ? fixed(w["of_tolerance"], 2).c_str() : "inf");
    why.push_back(b);
  }
  if (c.contains("err") && as_double(c["err"]) > as_double(c["err_limit"]))
    why.push_back("relative L2 error " + sci(c["err"]) + " > " + sci(c["err_limit"]));
  if (c.contains("deterministic") && c["deterministic"] == false) why.push_back("not deterministic");
  if (c.value("validation_messages", uint64_t(0)))
    why.push_back(std::to_string(c["validation_messages"].get<uint64_t>()) + " validation message(s)");
  if (why.empty()) return first_line(c["message"]);
  std::string s;
  for (const auto& w : why) s += (s.empty() ? "" : "; ") + w;
  return s;
}

std::string junit(const json& report) {
  std::ostringstream body;
  int all_tests = 0, all_fail = 0, all_err = 0, all_skip = 0;
  for (const auto& d : report["devices"]) {
    std::ostringstream cases;
    int tests = 0, failures = 0, errors = 0, skipped = 0;
    const std::string tag = d["tag"];
    if (d.contains("error")) {
      ++tests, ++errors;
      cases << "    <testcase" << attr("classname", tag) << attr("name", "device") << attr("time", "0") << ">\n"
            << "      <error" << attr("message", first_line(d["error"])) << attr("type", "device") << ">"
            << xml_escape(d["error"], false) << "</error>\n    </testcase>\n";
    }
    for (const auto& p : d["results"]) {
      const std::string cls = tag + "." + p["op"].get<std::string>() + "." + p["dtype"].get<std::string>();
      for (const auto* list : {&p["cases"], &p["masks"]})
        for (const auto& c : *list) {
          ++tests;
          const std::string name = (list == &p["masks"] ? "mask_vs_cpu/" : "") + c["case"].get<std::string>();
          cases << "    <testcase" << attr("classname", cls) << attr("name", name)
                << attr("time", fixed(c.value("seconds", 0.0), 6));
          const std::string st = c["status"];
          if (st == "pass") {
            cases << "/>\n";
            continue;
          }
          cases << ">\n";
          if (st == "unsupported") {
            ++skipped;
            cases << "      <skipped" << attr("message", c["reason"]) << "/>\n";
          } else {
            ++failures;
            std::string text = c["message"];
            if (list == &p["cases"])
              text += "\nvariant " + c["variant"].get<std::string>() + ", input seed " +
                      std::to_string(c["seed"].get<uint64_t>());
            text += "\nreplay: " + replay(d, p, c);
            cases << "      <failure" << attr("message", list == &p["masks"] ? first_line(c["message"]) : failure_summary(c))
                  << attr("type", list == &p["masks"] ? "mask" : "mismatch") << ">" << xml_escape(text, false)
                  << "</failure>\n";
          }
          cases << "    </testcase>\n";
        }
    }
    body << "  <testsuite" << attr("name", tag + ": " + d["name"].get<std::string>()) << attr("tests", std::to_string(tests))
         << attr("failures", std::to_string(failures)) << attr("errors", std::to_string(errors))
         << attr("skipped", std::to_string(skipped)) << attr("time", fixed(d.value("seconds", 0.0), 3))
         << attr("timestamp", report["started"]) << ">\n    <properties>\n";
    for (const char* k : {"backend", "vendor", "type", "driver", "api_version"})
      body << "      <property" << attr("name", k) << attr("value", d[k].get<std::string>()) << "/>\n";
    body << "      <property" << attr("name", "validation") << attr("value", d["validation"].get<bool>() ? "on" : "off")
         << "/>\n    </properties>\n"
         << cases.str() << "  </testsuite>\n";
    all_tests += tests, all_fail += failures, all_err += errors, all_skip += skipped;
  }
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites" << attr("name", "kf-conformance")
    << attr("tests", std::to_string(all_tests)) << attr("failures", std::to_string(all_fail))
    << attr("errors", std::to_string(all_err)) << attr("skipped", std::to_string(all_skip))
    << attr("time", fixed(report["seconds"], 3)) << ">\n"
    << body.str() << "</testsuites>\n";
  return x.str();
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) std::fprintf(stderr, "kf-conformance: cannot write %s\n", path.c_str());
  return bool(f);
}

void list_plan(const std::vector<DeviceEntry>& devs, const std::vector<DeviceEntry>& unusable,
               const std::vector<Work>& plan) {
  std::printf("devices:\n");
  for (const auto& e : devs) std::printf("  %-8s %s (%s)\n", tag_of(e.info).c_str(), e.info.name.c_str(), e.info.driver.c_str());
  for (const auto& e : unusable)
    std::printf("  %-8s %s: not usable: %s\n", tag_of(e.info).c_str(), e.info.name.c_str(), e.why_not.c_str());
  std::printf("checks (the same on every device):\n");
  size_t n = 0;
  for (const auto& w : plan) {
    std::string labels;
    for (size_t c : w.cases) labels += (labels.empty() ? "" : " ") + w.op->tests[c].label;
    std::printf("  %-21s %-5s %s\n", w.op->name.c_str(), to_string(w.dtype), labels.c_str());
    n += w.cases.size();
  }
  std::printf("%zu op/dtype pairs, %zu cases per device\n", plan.size(), n);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "kf-conformance: checks every registered op, in every dtype, on every test case of the registry, on every "
      "usable device, against the float64 reference (docs/ops.md tolerances); also determinism and dropout "
      "masks against the CPU backend. Exit status: 0 all passed (unsupported is not a failure), 1 a check "
      "failed, 2 bad options or no device."};
  app.add_option("--backend", o.backends, "backends to check (vulkan, cpu; comma-separated); default all, or KF_BACKEND")
      ->delimiter(',');
  app.add_option("--device", o.devices,
                 "devices to check: tag (vulkan0), index or name substring (comma-separated); default all, or "
                 "KF_DEVICE")
      ->delimiter(',');
  app.add_option("--filter", o.filter, "regular expression selecting op names (searched, as grep)");
  app.add_option("--case", o.cases, "regular expression selecting test case labels");
  app.add_option("--dtypes", o.dtypes, "dtypes to check (f32,f16,bf16,f64); default every dtype of each op")
      ->delimiter(',');
  app.add_option("--json", o.json_path, "write the report as JSON to this file");
  app.add_option("--junit", o.junit_path, "write the results as JUnit XML to this file");
  app.add_flag("--validation", o.validation, "open Vulkan devices with the Khronos validation layer (KF_VALIDATION=1)");
  auto* seed_opt = app.add_option("--seed", o.seed, "input seed of every case (default: a fresh seed per case)");
  app.add_flag("!--no-determinism", o.determinism, "skip the second run of each case that checks for identical bits");
  app.add_flag("!--no-masks", o.masks, "skip the dropout mask comparison with the CPU backend");
  app.add_option("--tolerance-scale", o.tolerance_scale,
                 "multiply every tolerance of docs/ops.md (below 1: how much margin the kernels have; 0 accepts "
                 "only exactly rounded results)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--progress", o.progress, "progress display: auto (a bar on a terminal, else lines), bar, lines, none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
  app.add_option("--values", o.values,
                 "input distribution of the first input: uniform (default), scale (rows scaled 1e-3 to 1e4), "
                 "outlier (one per row), large (near the dtype's largest value), subnormal, special (NaN and "
                 "infinities); an op that does not define its result for it is reported unsupported, saying why "
                 "(docs/ops.md, special values)")
      ->check(CLI::IsMember({"uniform", "scale", "outlier", "large", "subnormal", "special"}));
  app.add_flag("--list", o.list, "list the devices and checks selected, and run nothing");
  CLI11_PARSE(app, argc, argv);
  o.fixed_seed = seed_opt->count() > 0;

  // The environment, read once; KF_BACKEND / KF_DEVICE then leave the environment so that each context
  // opens exactly the device asked for (Context::create would apply them again).
  if (const char* v = std::getenv("KF_BACKEND"); v && *v && o.backends.empty()) o.backends = {v};
  if (const char* v = std::getenv("KF_DEVICE"); v && *v && o.devices.empty()) o.devices = {v};
  if (const char* v = std::getenv("KF_VALIDATION"); v && *v) o.env_validation_set = true, o.env_validation = std::string(v) != "0";
  unsetenv("KF_BACKEND");
  unsetenv("KF_DEVICE");

  // A report left from an earlier run must not pass for this one's if this run stops early.
  for (const auto* path : {&o.json_path, &o.junit_path})
    if (!path->empty()) std::remove(path->c_str());

  std::vector<Work> plan;
  std::vector<DeviceEntry> devs, unusable;
  try {
    plan = make_plan(o);
    if (plan.empty()) throw Error(ErrorCode::InvalidArgument, "no op / dtype / case matches the selection");
    devs = select_devices(o, &unusable);
  } catch (const std::regex_error& e) {
    std::fprintf(stderr, "kf-conformance: bad regular expression: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kf-conformance: %s\n", e.what());
    return 2;
  }
  if (o.list) {
    list_plan(devs, unusable, plan);
    return 0;
  }

  const auto start = Clock::now();
  json report;
  report["tool"] = "kf-conformance";
  report["started"] = utc_now();
  const uint64_t mask_seed = o.fixed_seed ? o.seed : check::fresh_seed();
  report["options"] = {{"filter", o.filter},
                       {"case", o.cases},
                       {"dtypes", o.dtypes},
                       {"backends", o.backends},
                       {"devices", o.devices},
                       {"seed", o.fixed_seed ? json(o.seed) : json("fresh per case")},
                       {"mask_data_seed", mask_seed},
                       {"determinism", o.determinism},
                       {"masks", o.masks},
                       {"tolerance_scale", o.tolerance_scale},
                       {"values", o.values},
                       {"validation", o.env_validation_set ? o.env_validation : o.validation}};
  report["devices"] = json::array();
  report["unusable_devices"] = json::array();
  for (const auto& e : unusable) report["unusable_devices"].push_back(device_json(e));

  size_t units = 0, pairs = plan.size() * devs.size();
  for (const auto& e : devs)
    for (const auto& w : plan) units += w.cases.size() * (w.op->random && e.info.backend != "cpu" && o.masks ? 2 : 1);
  size_t cases_per_device = 0;
  for (const auto& w : plan) cases_per_device += w.cases.size();
  std::printf("kf-conformance: %zu device(s), %zu op/dtype pairs and %zu cases each; input seed %s", devs.size(),
              plan.size(), cases_per_device, o.fixed_seed ? std::to_string(o.seed).c_str() : "fresh per case");
  if (o.tolerance_scale != 1) std::printf("; tolerances x %g", o.tolerance_scale);
  std::printf("\n");
  std::fflush(stdout);

  Progress progress(o.progress, units, pairs);
  CpuMasks masks(mask_seed);
  for (const auto& e : devs) {
    json d = run_device(e, plan, o, progress, masks);
    count(d);
    report["devices"].push_back(d);
  }
  progress.finish();

  int pass = 0, fail = 0, unsupported = 0;
  bool passed = true;
  for (const auto& d : report["devices"]) {
    pass += d["counts"]["pass"].get<int>();
    fail += d["counts"]["fail"].get<int>();
    unsupported += d["counts"]["unsupported"].get<int>();
    passed = passed && d["passed"].get<bool>();
  }
  report["seconds"] = since(start);
  report["summary"] = {{"passed", passed}, {"devices", devs.size()}, {"pass", pass}, {"fail", fail},
                       {"unsupported", unsupported}};

  std::printf("\n");
  for (const auto& d : report["devices"]) print_device(d);
  for (const auto& e : unusable)
    std::printf("not checked: %s %s: %s\n\n", tag_of(e.info).c_str(), e.info.name.c_str(), e.why_not.c_str());

  bool wrote = true;
  if (!o.json_path.empty()) wrote &= write_file(o.json_path, report.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
  if (!o.junit_path.empty()) wrote &= write_file(o.junit_path, junit(report));
  std::printf("kf-conformance: %s: %d pass, %d fail, %d unsupported op/dtype pairs on %zu device(s) in %s s\n",
              passed ? "PASS" : "FAIL", pass, fail, unsupported, devs.size(), fixed(report["seconds"], 1).c_str());
  if (!o.json_path.empty() || !o.junit_path.empty())
    std::printf("wrote%s%s\n", o.json_path.empty() ? "" : (" " + o.json_path).c_str(),
                o.junit_path.empty() ? "" : (" " + o.junit_path).c_str());
  if (!wrote) return 2;
  return passed ? 0 : 1;
}
