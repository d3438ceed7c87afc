// kf-bench: times every registered op on a device with device timestamps (median of many runs after
// warm-up) and reports GB/s, TFLOP/s from the registry's cost model, the fraction of the device's copy
// bandwidth measured in the same run (the roofline of memory-bound kernels), and the speed-up of fusion
// over the op's unfused chain of primitives (OpDef::unfused). Writes JSON (bench/SCHEMA.md) and an HTML
// report (bench/report.cpp), which --render-only redraws from saved JSON.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "bench/report.hpp"
#include "core/internal.hpp"
#include "kf/kf.hpp"
#include "ops/parallel.hpp"
#include "ops/registry.hpp"

using namespace kf;
using json = nlohmann::json;

namespace {

struct Options {
  std::string backend, device, ops = ".*", cases, json_path, html_path, input_path, chain;
  std::vector<std::string> dtypes = {"f32", "f16"}, compare;
  double size_mib = 256, warmup_ms = 50, max_gflop = 0;
  int reps = 30, warmup = 5;
  int chain_len = 2000;
  int64_t chain_numel = 1024;
  bool primitives = false, all_cases = false, no_unfused = false, render_only = false;
};

// The bench shapes are given for f32 at 256 MiB per input; scale the leading dimension so that each
// input keeps `mib` MiB in `dtype` (bench/torch_bench.py's scale_shapes follows the same rule). A matrix
// product keeps its weights: only the rows of its first input and of its residual scale.
std::vector<Shape> scale_shapes(const std::vector<Shape>& shapes, DType dtype, double mib, const OpDef* op = nullptr) {
  std::vector<Shape> out = shapes;
  const Shape& main = shapes[0];
  const double factor = (mib / 256.0) * (4.0 / static_cast<double>(dtype_size(dtype)));
  const int64_t rows = main.size() > 1 ? main[0] : 1;
  const int64_t new_rows = std::max<int64_t>(1, std::llround(static_cast<double>(rows) * factor));
  if (op != nullptr && op->family == Family::Attention) return out;  // shapes as declared (B, H, S, D)
  if (op != nullptr && op->family == Family::Matmul) {
    for (size_t k = 0; k < out.size(); ++k)
      if ((k == 0 || op->inputs[k] == "residual") && out[k].size() > 1 && out[k][0] == rows) out[k][0] = new_rows;
    return out;
  }
  for (auto& s : out) {
    // A per-row input ([rows], cross_entropy's targets) scales too, unless it could be a per-feature one.
    if (!s.empty() && s[0] == rows && (s.size() > 1 || main.back() != rows)) s[0] = new_rows;
    else if (main.size() == 1 && s == main) s[0] = std::max<int64_t>(1, std::llround(static_cast<double>(s[0]) * factor));
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median device time (ms) of fn(), each run between two timestamps, after warm-up runs. The runs are
// recorded back to back and submitted together (an unfused chain's temporaries come from the
// UnfusedScratch of main(), so its runs reuse them as the fused op's runs reuse their output).
template <class Fn>
double time_runs(Context& ctx, const Options& o, Fn&& fn) {
  // Warm-up: at least `warmup` runs and `warmup_ms` of device time, doubling the runs until then (a GPU
  // that was idle, while kf-bench made inputs on the host, runs its first milliseconds at low clocks).
  for (int n = std::max(1, o.warmup), round = 0; round < 16; ++round, n = std::min(2 * n, 1024)) {
    ctx.reset_timestamps();
    const uint32_t a = ctx.timestamp();
    for (int i = 0; i < n; ++i) fn();
    const uint32_t b = ctx.timestamp();
    ctx.synchronize();
    if (ctx.elapsed_ms(a, b) >= o.warmup_ms) break;
  }
  ctx.reset_timestamps();
  std::vector<std::pair<uint32_t, uint32_t>> q;
  for (int i = 0; i < o.reps; ++i) {
    const uint32_t a = ctx.timestamp();
    fn();
    q.emplace_back(a, ctx.timestamp());
  }
  ctx.synchronize();
  std::vector<double> ms;
  for (auto [a, b] : q) ms.push_back(ctx.elapsed_ms(a, b));
  return median(ms);
}

json shapes_json(const std::vector<Shape>& shapes) {
  json a = json::array();
  for (const auto& s : shapes) a.push_back(s);
  return a;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return b;
}

// Inputs: uniform in [-1, 1] from a counter-based hash (fast and parallel: the benchmark moves GiBs),
// cached by shape and slot so that ops of the same shapes share their inputs. An input pinned to i32
// (OpDef::input_dtypes: cross_entropy's targets) holds indices into the last dimension of the first input;
// one of OpDef::nonneg_inputs (adamw's second moment) the squares of those values.
// The caches belong to main() and go before the context (a static one would free device memory after the
// driver has unloaded).
using TensorCache = std::map<std::string, Tensor>;
std::vector<Tensor> random_inputs(Context& ctx, TensorCache& cache, const std::vector<Shape>& shapes, DType op_dtype,
                                  const OpDef* op = nullptr, const Attrs& attrs = {}) {
  std::vector<Tensor> in;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const Shape& s = shapes[k];
    if (s.empty()) {
      in.emplace_back();
      continue;
    }
    const DType dtype = op ? op->input_dtype(k, op_dtype, attrs) : op_dtype;
    const bool index = dtype == DType::i32;
    const bool nonneg = op && std::find(op->nonneg_inputs.begin(), op->nonneg_inputs.end(), int(k)) != op->nonneg_inputs.end();
    const double classes = static_cast<double>(shapes[0].back());
    const std::string key = to_string(s) + to_string(dtype) + "#" + std::to_string(k) +
                            (index ? "<" + std::to_string(shapes[0].back()) : "") + (nonneg ? "+" : "");
    if (auto it = cache.find(key); it != cache.end()) {
      in.push_back(it->second);
      continue;
    }
    Tensor t = ctx.empty(s, dtype);
    std::vector<unsigned char> raw(t.nbytes());
    const size_t es = dtype_size(dtype);
    const uint64_t salt = 0x9E3779B97F4A7C15ull * (cache.size() + 1);
    kf::parallel_for(t.numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        uint64_t z = static_cast<uint64_t>(i) + salt;  // splitmix64
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const double u = static_cast<double>(z >> 11) * 0x1p-53;  // [0, 1)
        const double x = 2 * u - 1;
        store_element(dtype, raw.data() + i * es, index ? std::floor(u * classes) : nonneg ? x * x : x);
      }
    });
    t.upload(raw.data(), raw.size());
    cache.emplace(key, t);
    in.push_back(t);
  }
  return in;
}

// An output tensor, shared by every op that writes this shape and dtype in this slot.
Tensor output(Context& ctx, TensorCache& cache, const Shape& shape, DType dtype, size_t slot) {
  const std::string key = to_string(shape) + to_string(dtype) + "#" + std::to_string(slot);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, ctx.empty(shape, dtype)).first;
  return it->second;
}

}  // namespace

// --chain OP: the host cost of a dispatch. Records chain_len dependent calls of an elementwise op of
// two inputs (y = op(y, b), alternating between two buffers) on chain_numel f32 elements, then
// synchronizes; the wall clock of the recording per call is the host cost (what a small op pays
// whatever the device), the wall clock to the end of synchronize per call the end-to-end cost; then the
// same chain captured into a Graph and replayed. Medians over the repetitions.
int run_chain(Context& ctx, const Options& o) {
  const OpDef* op = find_op(o.chain);
  if (op == nullptr || op->inputs.size() < 2 || op->family != Family::Elementwise)
    throw Error(ErrorCode::InvalidArgument, "kf-bench: --chain takes an elementwise op of two inputs (add_relu, "
                                            "mul_relu, add, ...), got '" + o.chain + "'");
  if (o.chain_len < 1 || o.chain_numel < 1)
    throw Error(ErrorCode::InvalidArgument, "kf-bench: --chain-len and --chain-numel must be positive");
  const Shape shape{o.chain_numel};
  std::vector<double> host(static_cast<size_t>(o.chain_numel));
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.001 * double(i % 97) - 0.04;
  Tensor a = ctx.from_host(shape, DType::f32, host), b = ctx.from_host(shape, DType::f32, host);
  Tensor c = ctx.empty(shape, DType::f32);
  const std::vector<Tensor> in_ab{a, b}, in_cb{c, b}, out_a{a}, out_c{c};
  const auto chain = [&] {
    for (int k = 0; k < o.chain_len; ++k) ctx.run(op->name, k % 2 ? in_cb : in_ab, k % 2 ? out_a : out_c);
  };
  using clock = std::chrono::steady_clock;
  for (int w = 0; w < std::max(1, o.warmup); ++w) {  // pipelines created, memory touched
    chain();
    ctx.synchronize();
  }
  std::vector<double> record_us, total_us;
  for (int r = 0; r < std::max(1, o.reps); ++r) {
    const auto t0 = clock::now();
    chain();
    const auto t1 = clock::now();
    ctx.synchronize();
    const auto t2 = clock::now();
    record_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / o.chain_len);
    total_us.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count() / o.chain_len);
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double rec = median(record_us), tot = median(total_us);
  const std::string variant = ctx.last_variant();
  // The same chain captured once into a graph (include/kf/graph.hpp) and replayed: the wall clock from
  // the replay to the end of synchronize per call, and the device's own time per call between timestamps.
  Graph graph = ctx.capture(chain);
  graph.replay();
  ctx.synchronize();
  std::vector<double> replay_us, replay_device_us;
  for (int r = 0; r < std::max(1, o.reps); ++r) {
    bool stamps = true;
    uint32_t b = 0, e = 0;
    try {
      ctx.reset_timestamps();
      b = ctx.timestamp();
    } catch (const Error&) {
      stamps = false;  // a device without timestamps: the wall clock only
    }
    const auto t0 = clock::now();
    graph.replay();
    if (stamps) e = ctx.timestamp();
    ctx.synchronize();
    const auto t1 = clock::now();
    replay_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / o.chain_len);
    if (stamps) replay_device_us.push_back(ctx.elapsed_ms(b, e) * 1e3 / o.chain_len);
  }
  const double rep = median(replay_us), rep_dev = replay_device_us.empty() ? 0 : median(replay_device_us);
  std::printf("chain %s: %d dependent calls on %lld f32 elements, median of %d runs: %.3f us recorded per op, "
              "%.3f us end to end per op (%s); captured and replayed: %.3f us end to end per op (%.3f on the "
              "device; graph %s)\n",
              op->name.c_str(), o.chain_len, static_cast<long long>(o.chain_numel), std::max(1, o.reps), rec, tot,
              variant.c_str(), rep, rep_dev, graph.native() ? "native" : "replayed call by call");
  if (!o.json_path.empty()) {
    json j = {{"chain", op->name},          {"chain_len", o.chain_len}, {"numel", o.chain_numel},
              {"dtype", "f32"},             {"reps", std::max(1, o.reps)}, {"record_us_per_op", rec},
              {"end_to_end_us_per_op", tot}, {"replay_us_per_op", rep}, {"replay_device_us_per_op", rep_dev},
              {"graph_native", graph.native()}, {"device", ctx.device().name}, {"backend", ctx.backend()}};
    std::ofstream(o.json_path) << j.dump(2) << "\n";
  }
  return 0;
}

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"kf-bench: times the registry's ops on a device against its measured copy bandwidth"};
  app.add_option("--backend", o.backend, "backend (vulkan, cpu); default: the best device");
  app.add_option("--device", o.device, "device index or name substring");
  app.add_option("--ops", o.ops, "regular expression selecting op names");
  app.add_option("--dtypes", o.dtypes, "dtypes to time")->delimiter(',');
  app.add_option("--size-mib", o.size_mib, "MiB per input tensor");
  app.add_option("--reps", o.reps, "timed runs per measurement (the median is reported)");
  app.add_option("--warmup", o.warmup, "untimed runs before timing (at least)");
  app.add_option("--warmup-ms", o.warmup_ms, "device milliseconds of untimed runs before timing (at least)");
  app.add_flag("--primitives", o.primitives, "also time the unfused building blocks (add, relu, ...)");
  app.add_flag("--all-cases", o.all_cases, "time every bench case of an op, not only the first");
  app.add_option("--cases", o.cases, "regular expression selecting bench cases by label (implies --all-cases)");
  app.add_option("--max-gflop", o.max_gflop, "skip cases costing more GFLOP than this (0: none skipped)");
  app.add_flag("--no-unfused", o.no_unfused, "do not time the unfused chains (no fusion speed-up)");
  app.add_option("--json", o.json_path, "write the results as JSON to this file (bench/SCHEMA.md)");
  app.add_option("--html", o.html_path, "write a self-contained HTML report to this file");
  app.add_option("--compare", o.compare, "another framework's results (same schema) for the report; repeatable")
      ->check(CLI::ExistingFile);
  app.add_flag("--render-only", o.render_only, "time nothing: draw the report of --input (and --compare) to --html");
  app.add_option("--input", o.input_path, "kf-bench JSON that --render-only draws")->check(CLI::ExistingFile);
  app.add_option("--chain", o.chain, "time the host cost of a dispatch instead: CHAIN-LEN dependent calls of this "
                                     "elementwise op (add_relu, ...) by wall clock, recorded and end to end per op");
  app.add_option("--chain-len", o.chain_len, "--chain: dependent calls per run");
  app.add_option("--chain-numel", o.chain_numel, "--chain: f32 elements per tensor");
  CLI11_PARSE(app, argc, argv);

  try {
    std::vector<json> others;  // read first: a bad file fails before minutes of timing
    for (const auto& c : o.compare) others.push_back(bench::read_json(c));
    if (o.render_only) {
      if (o.input_path.empty() || o.html_path.empty()) {
        std::fprintf(stderr, "kf-bench: --render-only needs --input FILE and --html FILE\n");
        return 2;
      }
      bench::write_report(o.html_path, bench::read_json(o.input_path), others);
      std::printf("wrote %s\n", o.html_path.c_str());
      return 0;
    }
    ContextOptions co;
    co.backend = o.backend;
    co.device = o.device;
    Context ctx = Context::create(co);
    if (!o.chain.empty()) return run_chain(ctx, o);
    // Device memory is allocated once and reused (inputs and outputs by shape, the chains' temporaries
    // through the scratch): allocating and freeing large buffers between timings fragments device memory,
    // and on some drivers later allocations then move data more slowly.
    TensorCache inputs, outputs;
    UnfusedScratch scratch;
    const auto& dev = ctx.device();
    std::printf("kf-bench on %s (%s, %s), %g MiB per input, median of %d runs\n", dev.name.c_str(),
                ctx.backend().c_str(), dev.driver.c_str(), o.size_mib, o.reps);
    const std::regex filter(o.ops), case_filter(o.cases.empty() ? ".*" : o.cases);
    if (!o.cases.empty()) o.all_cases = true;
    json results = json::array(), copy_bw = json::object(), copy_after = json::object(), matrix_peak = json::object();
    int failures = 0;
    // Fields every row of this run carries (bench/SCHEMA.md).
    const json common = {{"device", dev.name}, {"backend", ctx.backend()}, {"framework", "kf"}};

    for (const auto& dname : o.dtypes) {
      const DType dtype = dtype_from_string(dname);
      // The roofline: a 16-byte-per-invocation copy of the same size, measured now.
      const Shape copy_shape = scale_shapes({{16384, 4096}}, dtype, o.size_mib)[0];
      auto cin = random_inputs(ctx, inputs, {copy_shape}, dtype);
      Tensor cout = output(ctx, outputs, copy_shape, dtype, 0);
      const double copy_ms = time_runs(ctx, o, [&] { ctx.run("copy", cin, {cout}); });
      const double copy_bytes = 2.0 * static_cast<double>(cin[0].nbytes());
      const double copy_gbs = copy_bytes / (copy_ms * 1e6);
      copy_bw[dname] = copy_gbs;
      std::printf("\n[%s] copy bandwidth (read + write): %.1f GB/s\n", dname.c_str(), copy_gbs);
      std::printf("%-22s %-16s %10s %10s %9s %8s %10s %7s  %s\n", "op", "case", "time ms", "GB/s", "TFLOP/s",
                  "of copy", "chain ms", "fusion", "variant");
      json copy_row = {{"op", "copy"}, {"case", "roofline"}, {"dtype", dname}, {"shapes", shapes_json({copy_shape})},
                       {"ms", copy_ms}, {"bytes", copy_bytes}, {"flops", 0.0}, {"gbs", copy_gbs}, {"tflops", 0.0},
                       {"fraction_of_copy", 1.0}, {"variant", ctx.last_variant()}};
      copy_row.update(common);
      results.push_back(copy_row);
      // The matrix roofline: the backend's in-register multiply-add kernel, when a matrix op is timed.
      double peak_tflops = 0;
      const bool any_matmul = std::any_of(registry().begin(), registry().end(), [&](const OpDef& op) {
        return op.family == Family::Matmul && std::regex_search(op.name, filter);
      });
      if (any_matmul && dtype == DType::f16) {
        std::string what;
        double flops = 0;
        const double peak_ms = time_runs(ctx, o, [&] { flops = kf::detail::record_matrix_peak(ctx, &what); });
        if (flops > 0) {
          peak_tflops = flops / (peak_ms * 1e9);
          matrix_peak[dname] = {{"tflops", peak_tflops}, {"what", what}};
          std::printf("[%s] matrix multiply-add ceiling: %.1f TFLOP/s (%s)\n", dname.c_str(), peak_tflops, what.c_str());
        }
      }
      for (const auto& op : registry()) {
        if (op.name == "copy" || (op.primitive && !o.primitives) || !std::regex_search(op.name, filter)) continue;
        if (std::find(op.dtypes.begin(), op.dtypes.end(), dtype) == op.dtypes.end()) continue;
        std::string why;
        if (!ctx.supports(op.name, dtype, &why)) {
          std::printf("%-22s %-16s unsupported: %s\n", op.name.c_str(), "", why.c_str());
          json r = {{"op", op.name}, {"dtype", dname}, {"unsupported", why}};
          r.update(common);
          results.push_back(r);
          continue;
        }
        for (size_t c = 0; c < op.bench.size() && (c == 0 || o.all_cases); ++c) {
          const TestCase& bc = op.bench[c];
          if (!std::regex_search(bc.label, case_filter)) continue;
          try {
            const auto shapes = scale_shapes(bc.inputs, dtype, o.size_mib, &op);
            std::vector<Shape> all = shapes;
            all.resize(op.inputs.size());
            // Skipped before its inputs are made (an ffn's weights are 256 MiB each whatever --size-mib).
            if (o.max_gflop > 0 && op_cost(op, dtype, all, &bc.attrs).flops > o.max_gflop * 1e9) {
              std::printf("%-22s %-16s skipped: %.3g GFLOP > --max-gflop\n", op.name.c_str(), bc.label.c_str(),
                          op_cost(op, dtype, all, &bc.attrs).flops * 1e-9);
              continue;
            }
            auto in = random_inputs(ctx, inputs, shapes, dtype, &op, bc.attrs);
            std::vector<Tensor> out;
            const auto out_shapes = op.infer(op, all, bc.attrs);
            for (size_t k = 0; k < out_shapes.size(); ++k) out.push_back(output(ctx, outputs, out_shapes[k], op.output_dtype(dtype, bc.attrs), k));
            // In-place ops (the optimizers, OpDef::in_place) are timed as they are used: each such output is
            // its input (given separate outputs, a backend copies the inputs first).
            for (const auto& [ok, ik] : op.in_place) out[static_cast<size_t>(ok)] = in[static_cast<size_t>(ik)];
            const double ms = time_runs(ctx, o, [&] { ctx.run(op.name, in, out, bc.attrs); });
            const std::string variant = ctx.last_variant();
            const Cost cost = op_cost(op, dtype, all, &bc.attrs);  // (the output's bytes in out_dtype)
            const double gbs = cost.bytes / (ms * 1e6), tflops = cost.flops / (ms * 1e9);
            json r = {{"op", op.name}, {"case", bc.label}, {"dtype", dname}, {"shapes", shapes_json(shapes)},
                      {"attrs", {{"p", bc.attrs.p}, {"seed", bc.attrs.seed}, {"offset", bc.attrs.offset},
                                 {"scale", bc.attrs.scale}, {"act", bc.attrs.act}, {"causal", bc.attrs.causal},
                                 {"stride", bc.attrs.stride}, {"padding", bc.attrs.padding},
                                 {"dilation", bc.attrs.dilation}, {"groups", bc.attrs.groups}, {"window", bc.attrs.window},
                                 {"alibi", bc.attrs.alibi}, {"softcap", bc.attrs.softcap}, {"score_mod", bc.attrs.score_mod},
                                 {"out_dtype", bc.attrs.out_dtype ? json(to_string(*bc.attrs.out_dtype)) : json(nullptr)}}},
                      {"ms", ms}, {"bytes", cost.bytes}, {"flops", cost.flops}, {"gbs", gbs}, {"tflops", tflops},
                      {"fraction_of_copy", gbs / copy_gbs}, {"variant", variant}};
            if (op.family == Family::Matmul && peak_tflops > 0) r["fraction_of_matrix_peak"] = tflops / peak_tflops;
            r.update(common);
            char chain[32] = "-", speedup[32] = "-";
            if (op.unfused && !o.no_unfused) {
              try {
                const double ums = time_runs(ctx, o, [&] { op.unfused(ctx, in, out, bc.attrs); });
                r["unfused_ms"] = ums;
                r["fusion_speedup"] = ums / ms;
                std::snprintf(chain, sizeof chain, "%.4f", ums);
                std::snprintf(speedup, sizeof speedup, "%.2fx", ums / ms);
              } catch (const Error& e) {  // no chain for this form (packed), or a primitive the device lacks
                r["unfused_error"] = e.what();
              }
            }
            std::printf("%-22s %-16s %10.4f %10.1f %9.3f %8.3f %10s %7s  %s\n", op.name.c_str(), bc.label.c_str(), ms,
                        gbs, tflops, gbs / copy_gbs, chain, speedup, variant.c_str());
  results.push_back(r);
          } catch (const Error& e) {  // one op that fails must not end the run: it is reported and counted
            const bool unsupported = e.code() == ErrorCode::Unsupported;  // a device limit (a binding's size)
            std::printf("%-22s %-16s %s: %s\n", op.name.c_str(), bc.label.c_str(),
                        unsupported ? "unsupported" : "error", e.what());
            json r = {{"op", op.name}, {"case", bc.label}, {"dtype", dname}, {unsupported ? "unsupported" : "error", e.what()}};
            r.update(common);
            results.push_back(r);
            if (!unsupported) ++failures;
          }
        }
      }
      // The roofline again at the end of the block: long tensor-core runs can leave the GPU slower for a
      // while (seen on an H100: the next block's copy read 1134 GB/s instead of 2950), which would inflate
      // every fraction of copy measured against it. Both are recorded; a gap over 10 % is flagged.
      const double after_ms = time_runs(ctx, o, [&] { ctx.run("copy", cin, {cout}); });
      const double after_gbs = copy_bytes / (after_ms * 1e6);
      copy_after[dname] = after_gbs;
      const bool drift = std::abs(after_gbs - copy_gbs) > 0.1 * copy_gbs;
      std::printf("[%s] copy bandwidth after the block: %.1f GB/s%s\n", dname.c_str(), after_gbs,
                  drift ? "  (differs from the block's start by over 10%: its fractions of copy are uncertain)" : "");
    }
    const json doc = {{"tool", "kf-bench"},
                      {"framework", "kf"},
                      {"created", utc_now()},
                      {"device", {{"name", dev.name}, {"vendor", dev.vendor}, {"type", dev.type},
                                  {"driver", dev.driver}, {"api", dev.api_version}, {"backend", ctx.backend()},
                                  {"copy_gbs", copy_bw}, {"copy_gbs_after", copy_after}, {"matrix_peak", matrix_peak}}},
                      {"size_mib", o.size_mib},
                      {"reps", o.reps},
                      {"warmup", o.warmup},
                      {"warmup_ms", o.warmup_ms},
                      {"results", results}};
    if (!o.json_path.empty()) {
      std::ofstream(o.json_path) << doc.dump(2) << "\n";
      std::printf("\nwrote %s\n", o.json_path.c_str());
    }
    if (!o.html_path.empty()) {
      bench::write_report(o.html_path, doc, others);
      std::printf("wrote %s\n", o.html_path.c_str());
    }
    if (failures) {
      std::fprintf(stderr, "kf-bench: %d case(s) failed (\"error\" in the results)\n", failures);
      return 1;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "kf-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // a report input that cannot be read or does not follow the schema
    std::fprintf(stderr, "kf-bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
