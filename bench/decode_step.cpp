// kf-decode-step: one decoding step of a Llama-style decoder built from kf ops, eager and captured into a
// kf::Graph, in tokens per second (docs/performance.md). bench/torch_decode_step.py times the same step in
// PyTorch, eager and as a CUDA graph.
//   kf-decode-step [--backend vulkan|cuda] [--layers 32] [--dim 4096] [--hidden 11008] [--heads 32]
//                  [--kv-heads 8] [--cache 4096] [--vocab 32000] [--dtype f16] [--steps 20] [--json F] [--profile]
// Per layer: rms_norm; q, k and v projections; attention of the new token against a cache of `cache`
// keys and values, grouped-query, with the rotary embedding applied inside the kernel (the cache holds
// unrotated keys, kf's convention); the output projection with the residual in its epilogue; rms_norm; the
// SwiGLU MLP as a gate/up projection, swiglu and the down projection with the residual. Then the final norm
// and the vocabulary projection. The step reads the cache as it is: appending the new key and value is left
// out on both sides (kf has no strided scatter into the cache; it moves 2 x kv-heads x 128 x 2 bytes).
// Weights are random (uniform, scaled by 1/sqrt(fan-in)), so that the activations stay finite.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "kf/kf.hpp"
#include "random_tensor.hpp"

namespace {

struct Layer {
  kf::Tensor w_in, wq, wk, wv, wo, w_post, w_gate_up, w_down, k_cache, v_cache;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kf-decode-step: one decoding step of a Llama-style decoder, eager and captured"};
  std::string backend, dtype_name = "f16", json_path;
  int64_t layers = 32, dim = 4096, hidden = 11008, heads = 32, kv_heads = 8, cache = 4096, vocab = 32000;
  int steps = 20;
  bool profile = false;
  app.add_option("--backend", backend, "vulkan, cuda or cpu (default: the best device)");
  app.add_option("--layers", layers);
  app.add_option("--dim", dim, "model width");
  app.add_option("--hidden", hidden, "SwiGLU hidden size");
  app.add_option("--heads", heads, "query heads");
  app.add_option("--kv-heads", kv_heads, "key/value heads");
  app.add_option("--cache", cache, "cached tokens the new one attends to");
  app.add_option("--vocab", vocab);
  app.add_option("--dtype", dtype_name, "f16 or bf16");
  app.add_option("--steps", steps, "timed steps (the median is reported)");
  app.add_option("--json", json_path, "write the result as JSON");
  app.add_flag("--profile", profile, "also time each op of one eager step on the device (timestamps around every "
                                     "op) and print the time per kind of op");
  CLI11_PARSE(app, argc, argv);
  try {
    kf::ContextOptions opts;
    opts.backend = backend;
    kf::Context ctx = kf::Context::create(opts);
    const kf::DType dt = kf::dtype_from_string(dtype_name);
    const int64_t D = dim / heads;
    std::printf("kf-decode-step on %s (%s): %lld layers, dim %lld, hidden %lld, heads %lld/%lld, cache %lld, %s\n",
                ctx.device().name.c_str(), ctx.backend().c_str(), (long long)layers, (long long)dim,
                (long long)hidden, (long long)heads, (long long)kv_heads, (long long)cache, dtype_name.c_str());
    const auto weight = [&](int64_t rows, int64_t cols, uint64_t salt) {
      return kf::bench::random_tensor(ctx, {rows, cols}, dt, salt, 0, 1.0 / std::sqrt(double(cols)));
    };
    const auto ones = [&](int64_t n, uint64_t salt) { return kf::bench::random_tensor(ctx, {n}, dt, salt, 0, 0.1, 1.0); };
    std::vector<Layer> L(static_cast<size_t>(layers));
    for (int64_t l = 0; l < layers; ++l) {
      auto& y = L[size_t(l)];
      const uint64_t s = 100 * uint64_t(l);
      y.w_in = ones(dim, s + 1);
      y.wq = weight(dim, dim, s + 2);
      y.wk = weight(kv_heads * D, dim, s + 3);
      y.wv = weight(kv_heads * D, dim, s + 4);
      y.wo = weight(dim, dim, s + 5);
      y.w_post = ones(dim, s + 6);
      y.w_gate_up = weight(2 * hidden, dim, s + 7);
      y.w_down = weight(dim, hidden, s + 8);
      y.k_cache = kf::bench::random_tensor(ctx, {1, kv_heads, cache, D}, dt, s + 9);
      y.v_cache = kf::bench::random_tensor(ctx, {1, kv_heads, cache, D}, dt, s + 10);
    }
    kf::Tensor w_final = ones(dim, 7), w_vocab = weight(vocab, dim, 8);
    kf::Tensor x0 = kf::bench::random_tensor(ctx, {1, dim}, dt, 9);
    // Activations, allocated once: the step writes the same tensors every time.
    kf::Tensor x = ctx.empty({1, dim}, dt), x2 = ctx.empty({1, dim}, dt), h = ctx.empty({1, dim}, dt),
               q = ctx.empty({1, heads, 1, D}, dt), k = ctx.empty({1, kv_heads * D}, dt),
               v = ctx.empty({1, kv_heads * D}, dt), o = ctx.empty({1, heads, 1, D}, dt),
               gu = ctx.empty({1, 2 * hidden}, dt), act = ctx.empty({1, hidden}, dt),
               logits = ctx.empty({1, vocab}, dt);
    kf::Tensor q2 = q.reshape({1, dim}), o2 = o.reshape({1, dim});  // [1, heads, 1, D] as the projections see it
    kf::Attrs none, rope;
    rope.rope = 1;
    rope.rope_base = 10000;
    // One step; with `stamps`, a device timestamp before and after each op, labelled by what the op is.
    std::vector<std::pair<std::string, std::pair<uint32_t, uint32_t>>>* stamps = nullptr;
    const auto run = [&](const char* label, const char* op, const std::vector<kf::Tensor>& in,
                         const std::vector<kf::Tensor>& out, const kf::Attrs& attrs = {}) {
      const uint32_t a = stamps ? ctx.timestamp() : 0;
      ctx.run(op, in, out, attrs);
      if (stamps) stamps->push_back({label, {a, ctx.timestamp()}});
    };
    const auto step = [&] {
      run("copy", "copy", {x0}, {x});
      for (const auto& y : L) {
        run("rms_norm", "rms_norm", {x, y.w_in}, {h});
        run("linear q", "linear", {h, y.wq}, {q2});
        run("linear k", "linear", {h, y.wk}, {k});  // the new token's key and value (appending them is left out)
        run("linear v", "linear", {h, y.wv}, {v});
        run("attention", "attention", {q, y.k_cache, y.v_cache}, {o}, rope);
        run("linear o + residual", "linear", {o2, y.wo, {}, x}, {x2});
        run("rms_norm", "rms_norm", {x2, y.w_post}, {h});
        run("linear gate/up", "linear", {h, y.w_gate_up}, {gu});
        run("swiglu", "swiglu", {gu}, {act});
        run("linear down + residual", "linear", {act, y.w_down, {}, x2}, {x});
      }
      run("rms_norm", "rms_norm", {x, w_final}, {h});
      run("linear vocab", "linear", {h, w_vocab}, {logits});
    };
    const auto timed = [&](const std::function<void()>& f) {
      for (int i = 0; i < 3; ++i) f();
      ctx.synchronize();
      std::vector<double> ms;
      for (int i = 0; i < steps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        ctx.synchronize();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      return median(ms);
    };
    const double eager = timed(step);
    std::vector<double> first = logits.to_double();
    kf::Graph g = ctx.capture(step);
    const double captured = timed([&] { g.replay(); });
    std::vector<double> again = logits.to_double();
    bool same = first == again, finite = true;
    for (double z : again) finite = finite && std::isfinite(z);
    const size_t ops = g.ops();
    if (profile) {
      // Device time per kind of op over one eager step, in the order the kinds first appear.
      std::vector<std::pair<std::string, std::pair<uint32_t, uint32_t>>> list;
      step();
      ctx.synchronize();
      ctx.reset_timestamps();
      stamps = &list;
      step();
      stamps = nullptr;
      std::vector<std::string> order;
      std::map<std::string, std::pair<double, int>> sum;
      for (const auto& [label, ab] : list) {
        if (!sum.count(label)) order.push_back(label);
        auto& s = sum[label];
        s.first += ctx.elapsed_ms(ab.first, ab.second);
        s.second += 1;
      }
      double total = 0;
      for (const auto& [label, s] : sum) total += s.first;
      std::printf("%-24s %6s %10s %10s %7s\n", "op", "calls", "ms", "us/call", "share");
      for (const auto& label : order)
        std::printf("%-24s %6d %10.3f %10.2f %6.1f%%\n", label.c_str(), sum[label].second, sum[label].first,
                    1e3 * sum[label].first / sum[label].second, 100 * sum[label].first / total);
      std::printf("%-24s %6zu %10.3f (the ops' device times, each timed alone)\n", "total", list.size(), total);
    }
    std::printf("eager    %8.3f ms/step  %8.1f tokens/s\ncaptured %8.3f ms/step  %8.1f tokens/s  (%zu ops, %s)\n"
                "captured logits equal eager's: %s; finite: %s\n",
                eager, 1000 / eager, captured, 1000 / captured, ops, g.native() ? "one submission" : "call by call",
                same ? "yes" : "NO", finite ? "yes" : "NO");
    if (!json_path.empty()) {
      nlohmann::json j = {{"device", ctx.device().name}, {"backend", ctx.backend()}, {"dtype", dtype_name},
                          {"layers", layers}, {"dim", dim}, {"hidden", hidden}, {"heads", heads},
                          {"kv_heads", kv_heads}, {"cache", cache}, {"vocab", vocab}, {"eager_ms", eager},
                          {"captured_ms", captured}, {"ops", ops}, {"same", same}, {"finite", finite}};
      std::ofstream(json_path) << j.dump(1) << "\n";
    }
    return same && finite ? 0 : 1;
  } catch (const kf::Error& e) {
    std::fprintf(stderr, "kf-decode-step: %s\n", e.what());
    return 2;
  }
}
