// kf-bench: times every registered op on a device with device timestamps (median of many runs after
// warm-up) and reports GB/s, TFLOP/s from the registry's cost model, and the fraction of the device's
// copy bandwidth measured in the same run (the roofline of memory-bound kernels).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "kf/kf.hpp"
#include "ops/parallel.hpp"
#include "ops/registry.hpp"

using namespace kf;
using json = nlohmann::json;

namespace {

struct Options {
  std::string backend, device, ops = ".*", json_path;
  std::vector<std::string> dtypes = {"f32", "f16"};
  double size_mib = 256;
  int reps = 30, warmup = 5;
  bool primitives = false, all_cases = false;
};

// The bench shapes are given for f32 at 256 MiB per input; scale the leading dimension so that each
// input keeps `mib` MiB in `dtype`.
std::vector<Shape> scale_shapes(const std::vector<Shape>& shapes, DType dtype, double mib) {
  std::vector<Shape> out = shapes;
  const Shape& main = shapes[0];
  const double factor = (mib / 256.0) * (4.0 / static_cast<double>(dtype_size(dtype)));
  const int64_t rows = main.size() > 1 ? main[0] : 1;
  const int64_t new_rows = std::max<int64_t>(1, std::llround(static_cast<double>(rows) * factor));
  for (auto& s : out) {
    if (s.size() > 1 && s[0] == rows) s[0] = new_rows;
    else if (main.size() == 1 && s == main) s[0] = std::max<int64_t>(1, std::llround(static_cast<double>(s[0]) * factor));
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median device time (ms) of one op call.
double time_op(Context& ctx, const std::string& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
               const Attrs& attrs, const Options& o) {
  for (int i = 0; i < o.warmup; ++i) ctx.run(op, in, out, attrs);
  ctx.synchronize();
  ctx.reset_timestamps();
  std::vector<std::pair<uint32_t, uint32_t>> q;
  for (int i = 0; i < o.reps; ++i) {
    const uint32_t a = ctx.timestamp();
    ctx.run(op, in, out, attrs);
    q.emplace_back(a, ctx.timestamp());
  }
  ctx.synchronize();
  std::vector<double> ms;
  for (auto [a, b] : q) ms.push_back(ctx.elapsed_ms(a, b));
  return median(ms);
}

// Inputs: uniform in [-1, 1] from a counter-based hash (fast and parallel: the benchmark moves GiBs),
// cached by shape and slot so that ops of the same shapes share their inputs.
std::vector<Tensor> random_inputs(Context& ctx, const std::vector<Shape>& shapes, DType dtype) {
  static std::map<std::string, Tensor> cache;
  std::vector<Tensor> in;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const Shape& s = shapes[k];
    if (s.empty()) {
      in.emplace_back();
      continue;
    }
    const std::string key = to_string(s) + to_string(dtype) + "#" + std::to_string(k);
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
        store_element(dtype, raw.data() + i * es, static_cast<double>(z >> 11) * 0x1p-52 - 1.0);
      }
    });
    t.upload(raw.data(), raw.size());
    cache.emplace(key, t);
    in.push_back(t);
  }
  return in;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"kf-bench: times the registry's ops on a device against its measured copy bandwidth"};
  app.add_option("--backend", o.backend, "backend (vulkan, cpu); default: the best device");
  app.add_option("--device", o.device, "device index or name substring");
  app.add_option("--ops", o.ops, "regular expression selecting op names");
  app.add_option("--dtypes", o.dtypes, "dtypes to time")->delimiter(',');
  app.add_option("--size-mib", o.size_mib, "MiB per input tensor");
  app.add_option("--reps", o.reps, "timed runs per measurement (the median is reported)");
  app.add_option("--warmup", o.warmup, "untimed runs before timing");
  app.add_flag("--primitives", o.primitives, "also time the unfused building blocks (add, relu, ...)");
  app.add_flag("--all-cases", o.all_cases, "time every bench case of an op, not only the first");
  app.add_option("--json", o.json_path, "write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);

  try {
    ContextOptions co;
    co.backend = o.backend;
    co.device = o.device;
    Context ctx = Context::create(co);
    const auto& dev = ctx.device();
    std::printf("kf-bench on %s (%s, %s), %g MiB per input, median of %d runs\n", dev.name.c_str(),
                ctx.backend().c_str(), dev.driver.c_str(), o.size_mib, o.reps);
    const std::regex filter(o.ops);
    json results = json::array();

    for (const auto& dname : o.dtypes) {
      const DType dtype = dtype_from_string(dname);
      // The roofline: a 16-byte-per-invocation copy of the same size, measured now.
      const Shape copy_shape = scale_shapes({{16384, 4096}}, dtype, o.size_mib)[0];
      auto cin = random_inputs(ctx, {copy_shape}, dtype);
      Tensor cout = ctx.empty(copy_shape, dtype);
      const double copy_ms = time_op(ctx, "copy", cin, {cout}, {}, o);
      const double copy_gbs = 2.0 * static_cast<double>(cin[0].nbytes()) / (copy_ms * 1e6);
      std::printf("\n[%s] copy bandwidth (read + write): %.1f GB/s\n", dname.c_str(), copy_gbs);
      std::printf("%-22s %-16s %10s %10s %9s %8s  %s\n", "op", "case", "time ms", "GB/s", "TFLOP/s", "of copy",
                  "variant");
      results.push_back({{"op", "copy"}, {"case", "roofline"}, {"dtype", dname}, {"ms", copy_ms}, {"gbs", copy_gbs},
                         {"fraction_of_copy", 1.0}, {"device", dev.name}, {"backend", ctx.backend()}});
      for (const auto& op : registry()) {
        if (op.name == "copy" || (op.primitive && !o.primitives) || !std::regex_search(op.name, filter)) continue;
        if (std::find(op.dtypes.begin(), op.dtypes.end(), dtype) == op.dtypes.end()) continue;
        std::string why;
        if (!ctx.supports(op.name, dtype, &why)) {
          std::printf("%-22s %-16s unsupported: %s\n", op.name.c_str(), "", why.c_str());
          results.push_back({{"op", op.name}, {"dtype", dname}, {"unsupported", why}});
          continue;
        }
        for (size_t c = 0; c < op.bench.size() && (c == 0 || o.all_cases); ++c) {
          const TestCase& bc = op.bench[c];
          const auto shapes = scale_shapes(bc.inputs, dtype, o.size_mib);
          auto in = random_inputs(ctx, shapes, dtype);
          std::vector<Tensor> out;
          std::vector<Shape> all = shapes;
          all.resize(op.inputs.size());
          for (const auto& s : op.infer(op, all, bc.attrs)) out.push_back(ctx.empty(s, dtype));
          const double ms = time_op(ctx, op.name, in, out, bc.attrs, o);
          const Cost cost = op_cost(op, dtype, all);
          const double gbs = cost.bytes / (ms * 1e6), tflops = cost.flops / (ms * 1e9);
          std::printf("%-22s %-16s %10.4f %10.1f %9.3f %8.3f  %s\n", op.name.c_str(), bc.label.c_str(), ms, gbs, tflops,
                      gbs / copy_gbs, ctx.last_variant().c_str());
          json shp = json::array();
          for (const auto& s : shapes) shp.push_back(s);
          results.push_back({{"op", op.name}, {"case", bc.label}, {"dtype", dname}, {"shapes", shp}, {"ms", ms},
                             {"bytes", cost.bytes}, {"flops", cost.flops}, {"gbs", gbs}, {"tflops", tflops},
                             {"fraction_of_copy", gbs / copy_gbs}, {"variant", ctx.last_variant()},
                             {"device", dev.name}, {"backend", ctx.backend()}});
        }
      }
    }
    if (!o.json_path.empty()) {
      json doc = {{"tool", "kf-bench"},
                  {"device", {{"name", dev.name}, {"vendor", dev.vendor}, {"driver", dev.driver},
                              {"api", dev.api_version}, {"backend", ctx.backend()}}},
                  {"size_mib", o.size_mib}, {"reps", o.reps}, {"results", results}};
      std::ofstream(o.json_path) << doc.dump(2) << "\n";
      std::printf("\nwrote %s\n", o.json_path.c_str());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "kf-bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
