// kf-lce-memory: the peak device memory and the device time of linear_cross_entropy (chunked: the N x C
// logits never exist whole) against the unfused way, the logits in memory then cross_entropy:
//   fused:    linear_cross_entropy_backward(h, W, target) -> loss, d_h, d_W
//   unfused:  logits = linear(h, W); (loss, d_logits) = cross_entropy_backward(logits, target);
//             d_h = matmul(d_logits, W)   (d_W = d_logits^T h has no kf primitive: left out, so the
//             unfused figures are a lower bound of what the whole backward needs)
// With --forward, linear_cross_entropy against linear then cross_entropy.
// Memory is the Vulkan allocator's high-water mark (Context::memory_usage): the peak while the op runs,
// less what was in use before it (the inputs, outputs and the device's scratch from earlier ops).
// An unfused run whose logits exceed the device's largest storage binding is reported, not run.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>

#include "kf/kf.hpp"
#include "ops/parallel.hpp"
#include "random_tensor.hpp"

namespace {

using json = nlohmann::json;

struct Measure {
  double ms = 0;
  uint64_t peak = 0, extra = 0;
  std::string error;
};

// Runs fn once to warm up, then `reps` times between timestamps; memory from the first run.
Measure measure(kf::Context& ctx, int reps, const std::function<void()>& fn) {
  Measure m;
  try {
    ctx.synchronize();
    const uint64_t before = ctx.memory_usage().current;
    ctx.reset_peak_memory();
    fn();
    ctx.synchronize();
    m.peak = ctx.memory_usage().peak;
    m.extra = m.peak - before;
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      ctx.reset_timestamps();
      const uint32_t b = ctx.timestamp();
      fn();
      const uint32_t e = ctx.timestamp();
      t.push_back(ctx.elapsed_ms(b, e));
    }
    std::sort(t.begin(), t.end());
    m.ms = t.empty() ? 0 : t[t.size() / 2];
  } catch (const kf::Error& e) {
    m.error = e.what();
  }
  return m;
}

double mib(uint64_t b) { return static_cast<double>(b) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kf-lce-memory: peak device memory of linear_cross_entropy against logits then cross_entropy"};
  int64_t N = 8192, D = 4096, C = 131072;
  std::string dtype_name = "f32", json_path, tuning;
  int reps = 3;
  bool forward = false, no_unfused = false;
  double expect_saving = 0;
  app.add_option("--n", N, "rows (tokens)");
  app.add_option("--d", D, "hidden size");
  app.add_option("--c", C, "classes (vocabulary)");
  app.add_option("--dtype", dtype_name, "f32, f16 or bf16");
  app.add_option("--reps", reps, "timed runs (median)");
  app.add_option("--tune", tuning, "KF_TUNE knobs (e.g. lce_rows=1024)");
  app.add_option("--json", json_path, "write the results as JSON to this file");
  app.add_flag("--forward", forward, "the loss only (linear_cross_entropy against linear + cross_entropy)");
  app.add_flag("--no-unfused", no_unfused, "measure the fused op only");
  app.add_option("--expect-saving", expect_saving,
                 "exit 1 unless the fused op's memory above its inputs and outputs is at most 1/x of the unfused one's");
  CLI11_PARSE(app, argc, argv);
  try {
    const kf::DType dtype = kf::dtype_from_string(dtype_name);
    kf::ContextOptions o;
    o.tuning = tuning;
    kf::Context ctx = kf::Context::create(o);
    const size_t es = kf::dtype_size(dtype);
    kf::Tensor h = kf::bench::random_tensor(ctx, {N, D}, dtype, 1);
    kf::Tensor W = kf::bench::random_tensor(ctx, {C, D}, dtype, 2);
    kf::Tensor target = kf::bench::random_tensor(ctx, {N}, kf::DType::i32, 3, static_cast<double>(C));
    kf::Tensor loss = ctx.empty({}, dtype);
    kf::Tensor dh, dW;
    if (!forward) dh = ctx.empty({N, D}, dtype), dW = ctx.empty({C, D}, dtype);
    const std::string fused_op = forward ? "linear_cross_entropy" : "linear_cross_entropy_backward";
    std::string variant;
    const Measure fused = measure(ctx, reps, [&] {
      if (forward) ctx.run(fused_op, {h, W, target}, {loss});
      else ctx.run(fused_op, {h, W, target}, {loss, dh, dW});
      variant = ctx.last_variant();
    });
    Measure unfused;
    const uint64_t logits_bytes = static_cast<uint64_t>(N) * static_cast<uint64_t>(C) * es;
    if (no_unfused) {
      unfused.error = "not measured (--no-unfused)";
    } else {
      unfused = measure(ctx, reps, [&] {
        kf::Tensor logits = ctx.empty({N, C}, dtype);
        ctx.run("linear", {h, W}, {logits});
        if (forward) {
          ctx.run("cross_entropy", {logits, target}, {loss});
        } else {
          kf::Tensor dlogits = ctx.empty({N, C}, dtype);
          ctx.run("cross_entropy_backward", {logits, target}, {loss, dlogits});
          ctx.run("matmul", {dlogits, W}, {dh});
        }
        ctx.synchronize();  // the temporaries are freed after the work that uses them
      });
    }
    std::printf("kf-lce-memory on %s: N=%lld d=%lld C=%lld %s (%s); logits would be %.1f MiB\n",
                ctx.device().name.c_str(), static_cast<long long>(N), static_cast<long long>(D),
                static_cast<long long>(C), dtype_name.c_str(), forward ? "forward" : "forward + backward",
                mib(logits_bytes));
    const auto row = [](const char* what, const Measure& m) {
      if (!m.error.empty()) std::printf("  %-8s %s\n", what, m.error.c_str());
      else std::printf("  %-8s peak %10.1f MiB, above the inputs and outputs %10.1f MiB, %10.3f ms\n", what,
                       mib(m.peak), mib(m.extra), m.ms);
    };
    row("fused", fused);
    row("unfused", unfused);
    if (!unfused.error.empty() && unfused.error.find("largest storage binding") != std::string::npos)
      std::printf("  (the unfused logits do not fit one storage binding of this device: compare at a smaller --n, "
                  "or in f16)\n");
    std::printf("  variant  %s\n", variant.c_str());
    if (!json_path.empty()) {
      const auto js = [](const Measure& m) {
        json j = {{"peak_bytes", m.peak}, {"extra_bytes", m.extra}, {"ms", m.ms}};
        if (!m.error.empty()) j = {{"error", m.error}};
        return j;
      };
      const json doc = {{"tool", "kf-lce-memory"}, {"device", ctx.device().name}, {"dtype", dtype_name},
                        {"n", N}, {"d", D}, {"c", C}, {"forward_only", forward}, {"logits_bytes", logits_bytes},
                        {"variant", variant}, {"fused", js(fused)}, {"unfused", js(unfused)},
                        {"unfused_note", forward ? "linear + cross_entropy"
                                                 : "linear + cross_entropy_backward + matmul for d_h (d_W left out)"}};
      std::ofstream(json_path) << doc.dump(2) << "\n";
    }
    if (!fused.error.empty()) return 1;
    if (expect_saving > 0 && !(unfused.error.empty() && static_cast<double>(fused.extra) * expect_saving <=
                                                            static_cast<double>(unfused.extra))) {
      std::fprintf(stderr, "kf-lce-memory: the fused op does not save %gx memory\n", expect_saving);
      return 1;
    }
    return 0;
  } catch (const kf::Error& e) {
    std::fprintf(stderr, "kf-lce-memory: %s\n", e.what());
    return 1;
  }
}
