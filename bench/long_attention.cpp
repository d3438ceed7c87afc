// kf-long-attention: causal attention over a very long sequence on one device (issue 6: 1,000,000 tokens,
// one head group, D = 128, f16), checked against the float64 reference on sampled rows, with its device
// time and peak memory. Not part of CI (a million tokens is hours on lavapipe); run on a GPU:
//   kf-long-attention [--tokens 1000000] [--heads 1] [--kv-heads 1] [--dim 128] [--samples 16] [--json F]
// Inputs are uniform in [-1, 1) with the scores' scale 1 (not 1/sqrt(D)): the scores spread over about
// +-4, so each row's output is dominated by a few hundred keys rather than the near-zero mean of a
// million (which would check little). Exit status 1 when a sampled row misses the f16 tolerance
// (docs/ops.md: relative L2 error 1e-3).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "kf/kf.hpp"
#include "ops/parallel.hpp"
#include "random_tensor.hpp"

int main(int argc, char** argv) {
  CLI::App app{"kf-long-attention: causal attention over a very long sequence, checked on sampled rows"};
  int64_t tokens = 1000000, heads = 1, kv_heads = 1, dim = 128;
  int samples = 16, reps = 3;
  std::string json_path, dtype_name = "f16";
  app.add_option("--tokens", tokens, "sequence length (queries = keys)");
  app.add_option("--heads", heads, "query heads");
  app.add_option("--kv-heads", kv_heads, "key/value heads (one group: heads / kv-heads query heads share them)");
  app.add_option("--dim", dim, "head dimension");
  app.add_option("--dtype", dtype_name, "f16, bf16 or f32");
  app.add_option("--samples", samples, "rows checked against the float64 reference");
  app.add_option("--reps", reps, "timed runs (the median is reported)");
  app.add_option("--json", json_path, "write the result as JSON");
  CLI11_PARSE(app, argc, argv);

  try {
    kf::Context ctx = kf::Context::create();
    const kf::DType dtype = kf::dtype_from_string(dtype_name);
    std::printf("kf-long-attention on %s (%s): %lld tokens, %lld query heads, %lld kv heads, D = %lld, %s, causal\n",
                ctx.device().name.c_str(), ctx.backend().c_str(), static_cast<long long>(tokens),
                static_cast<long long>(heads), static_cast<long long>(kv_heads), static_cast<long long>(dim),
                dtype_name.c_str());
    const kf::Shape qs{1, heads, tokens, dim}, ks{1, kv_heads, tokens, dim};
    kf::Tensor q = kf::bench::random_tensor(ctx, qs, dtype, 1), k = kf::bench::random_tensor(ctx, ks, dtype, 2),
               v = kf::bench::random_tensor(ctx, ks, dtype, 3);
    kf::Tensor o = ctx.empty(qs, dtype);
    kf::Attrs a;
    a.causal = true;
    a.attn_scale = 1.0;
    ctx.synchronize();
    const uint64_t before = ctx.memory_usage().current;
    ctx.reset_peak_memory();
    ctx.run("attention", {q, k, v}, {o}, a);  // warm-up, and the memory high-water mark
    ctx.synchronize();
    const uint64_t extra = ctx.memory_usage().peak - before;
    const std::string variant = ctx.last_variant();
    std::vector<double> times;
    for (int r = 0; r < reps; ++r) {
      const uint32_t t0 = ctx.timestamp();
      ctx.run("attention", {q, k, v}, {o}, a);
      const uint32_t t1 = ctx.timestamp();
      ctx.synchronize();
      times.push_back(ctx.elapsed_ms(t0, t1));
    }
    std::sort(times.begin(), times.end());
    const double ms = times[times.size() / 2];
    const double flops = 4.0 * double(heads) * double(dim) * (double(tokens) * double(tokens + 1) / 2);

    // The reference on sampled rows (the first, the last, the rest spread at random), in float64.
    const size_t es = kf::dtype_size(dtype);
    std::vector<unsigned char> hq(q.nbytes()), hk(k.nbytes()), hv(v.nbytes()), ho(o.nbytes());
    q.download(hq.data(), hq.size());
    k.download(hk.data(), hk.size());
    v.download(hv.data(), hv.size());
    o.download(ho.data(), ho.size());
    const auto at = [&](const std::vector<unsigned char>& b, int64_t i) { return kf::load_element(dtype, b.data() + i * es); };
    std::mt19937_64 rng(12345);
    std::vector<std::pair<int64_t, int64_t>> rows = {{0, 0}, {heads - 1, tokens - 1}};  // (head, query)
    while (static_cast<int>(rows.size()) < samples)
      rows.push_back({static_cast<int64_t>(rng() % uint64_t(heads)), static_cast<int64_t>(rng() % uint64_t(tokens))});
    double worst = 0;
    nlohmann::json checked = nlohmann::json::array();
    for (const auto& [h, i] : rows) {
      const int64_t kvh = h / (heads / kv_heads);
      const int64_t qb = (h * tokens + i) * dim, kb = kvh * tokens * dim;
      std::vector<double> s(static_cast<size_t>(i + 1));
      kf::parallel_for(i + 1, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) {
          double d = 0;
          for (int64_t c = 0; c < dim; ++c) d += at(hq, qb + c) * at(hk, kb + j * dim + c);
          s[size_t(j)] = d;
        }
      });
      const double m = *std::max_element(s.begin(), s.end());
      double l = 0;
      std::vector<double> ref(static_cast<size_t>(dim), 0.0);
      for (int64_t j = 0; j <= i; ++j) {
        const double p = std::exp(s[size_t(j)] - m);
        l += p;
        for (int64_t c = 0; c < dim; ++c) ref[size_t(c)] += p * at(hv, kb + j * dim + c);
      }
      double num = 0, den = 0;
      for (int64_t c = 0; c < dim; ++c) {
        const double r = ref[size_t(c)] / l, x = at(ho, qb + c);
        num += (x - r) * (x - r);
        den += r * r;
      }
      const double err = std::sqrt(num / std::max(den, 1e-300));
      worst = std::max(worst, err);
      checked.push_back({{"head", h}, {"query", i}, {"rel_l2", err}});
    }
    const double tol = dtype == kf::DType::f32 ? 1e-6 : dtype == kf::DType::bf16 ? 8e-3 : 1e-3;
    const bool pass = worst <= tol;
    std::printf("time %.1f ms (median of %d), %.1f TFLOP/s, variant %s\n", ms, reps, flops / (ms * 1e9), variant.c_str());
    std::printf("memory: inputs and output %.1f MiB, peak above them during the call %.1f MiB\n",
                double(before) / (1 << 20), double(extra) / (1 << 20));
    std::printf("%zu sampled rows against float64: worst relative L2 error %.3g (tolerance %.0e): %s\n", rows.size(),
                worst, tol, pass ? "pass" : "FAIL");
    if (!json_path.empty()) {
      nlohmann::json j = {{"device", ctx.device().name}, {"driver", ctx.device().driver}, {"backend", ctx.backend()},
                          {"tokens", tokens}, {"heads", heads}, {"kv_heads", kv_heads}, {"dim", dim},
                          {"dtype", dtype_name}, {"causal", true}, {"ms", ms}, {"times_ms", times},
                          {"tflops", flops / (ms * 1e9)}, {"variant", variant}, {"io_bytes", before},
                          {"peak_extra_bytes", extra}, {"worst_rel_l2", worst}, {"tolerance", tol},
                          {"pass", pass}, {"rows", checked}};
      std::ofstream(json_path) << j.dump(2) << "\n";
    }
    return pass ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kf-long-attention: %s\n", e.what());
    return 2;
  }
}
