// Custom score functions (Attrs::score_mod, compiled into the kernel at run time): the reference against
// the equivalent built-in options, Vulkan's run-time-compiled kernels, and the errors and refusals.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "attention_common.hpp"

namespace kf::test {
namespace {

// ---- Custom score functions (Attrs::score_mod, compiled into the kernel at run time).

// The reference's semantics against options it must equal: a -0.3 |i - j| bias is ALiBi with slopes
// 0.3, and "j > i ? -inf : score" is the causal mask when Sq == Sk (float64, to 1e-12).
TEST(AttentionScoreMod, ReferenceMatchesEquivalentOptions) {
  Context& c = cpu();
  const auto run = [&](const std::vector<Tensor>& in, const Attrs& a) { return c.call("attention", in, a)[0].to_double(); };
  const auto rand = [&](const Shape& s, uint64_t seed) {
    std::vector<double> v(static_cast<size_t>(numel(s)));
    for (size_t k = 0; k < v.size(); ++k) v[k] = std::sin(1.0 + 0.37 * double(k) + double(seed));
    return c.from_host(s, DType::f64, v);
  };
  Tensor q = rand({1, 2, 9, 16}, 1), k = rand({1, 2, 9, 16}, 2), v = rand({1, 2, 9, 16}, 3);
  Tensor slopes = c.from_host({2}, DType::f64, {0.3, 0.3});
  Attrs fn, causal, fn_mask;
  fn.score_mod = "score - 0.3 * float(abs(i - j))";
  causal.causal = true;
  fn_mask.score_mod = "j > i ? -inf : score";
  const auto a = run({q, k, v}, fn), b = run({q, k, v, slopes}, {});
  const auto m = run({q, k, v}, fn_mask), n = run({q, k, v}, causal);
  for (size_t e = 0; e < a.size(); ++e) {
    EXPECT_NEAR(a[e], b[e], 1e-12) << e;
    EXPECT_NEAR(m[e], n[e], 1e-12) << e;
  }
}

// A Vulkan device runs the registry's score_mod cases on its run-time-compiled kernels (the forward with
// and without key splits, the backward, the decode kernel; the tensor-core ones where the device has
// them, the portable ones elsewhere), so that a missing shader compiler fails here rather than passing
// as "unsupported".
TEST(AttentionScoreMod, VulkanCompilesAndRuns) {
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    ++checked;
    for (const char* tuning : {"", "attn_split=3"}) {
      Context ctx = tuned(d, tuning);
      ValidationCheck vc(ctx);
      for (const auto* op : {&attention_op(), &get_op("attention_backward")})
        for (const TestCase& tc : op->tests) {
          if (tc.attrs.score_mod.empty()) continue;
          for (DType t : {DType::f32, DType::f16}) {
            const uint64_t seed = fresh_seed();
            check::CaseOptions o;
            o.repeat = true;
            const check::CaseResult r = check::run_case(ctx, *op, t, tc, seed, o);
            EXPECT_TRUE(r.pass) << op->name << " " << tuning << " " << to_string(t) << " " << tc.label << " (variant "
                                << r.variant << "), seed " << seed << ":\n" << r.message;
            EXPECT_NE(r.variant.find(",score_mod"), std::string::npos) << tc.label << ": " << r.variant;
          }
        }
    }
    // One query row: the decode kernel with the function (forced, and in both its forms), and the flash
    // kernel with key splits when the decode kernel is turned off.
    TestCase one{"decode_score_mod", qkv(2, 8, 2, 1, 200, 64), {}, 1.5};
    one.attrs.score_mod = "(j + h) % 5 == 0 ? -inf : score + 0.01 * float(j - 3 * h)";
    for (const char* tuning : {"attn_decode=2", "attn_decode=2,attn_decode_rs=1", "attn_decode=1,attn_split=3"}) {
      Context ctx = tuned(d, tuning);
      ValidationCheck vc(ctx);
      const uint64_t seed = fresh_seed();
      const check::CaseResult r = check::run_case(ctx, attention_op(), DType::f16, one, seed, {});
      if (r.unsupported) continue;  // (a device without the decode kernel's subgroup operations)
      EXPECT_TRUE(r.pass) << tuning << " (variant " << r.variant << "), seed " << seed << ":\n" << r.message;
      const bool decode = std::string(tuning).find("attn_decode=2") != std::string::npos;
      EXPECT_NE(r.variant.find(decode ? "attention/decode,score_mod" : "attention/portable,score_mod"), std::string::npos)
          << tuning << ": " << r.variant;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no usable Vulkan device";
}

// A function that does not parse is an InvalidArgument naming the op, 'score_mod' and the column, on
// every device; nothing is written and the context runs the next call. A backend without run-time
// compilation (CUDA) refuses a valid one as Unsupported, and the CPU fallback then serves it.
TEST(AttentionScoreMod, ErrorsAndRefusals) {
  for (const auto& d : devices()) {
    Context& c = context_for(d);
    Tensor q = c.from_host({1, 2, 3, 16}, DType::f32, std::vector<double>(96, 0.5));
    Tensor kv = c.from_host({1, 2, 5, 16}, DType::f32, std::vector<double>(160, 0.25));
    Tensor o = c.empty({1, 2, 3, 16}, DType::f32);
    o.fill_bytes(kPoison);
    for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
             {"score +", "column"}, {"score * k", "'k'"}, {"max(score)", "max"}, {"score && 1", "column"}}) {
      Attrs bad;
      bad.score_mod = text;
      expect_rejected(c, [&] { c.run("attention", {q, kv, kv}, {o}, bad); }, ErrorCode::InvalidArgument,
                      {"attention: argument 'score_mod'", needle}, {o});
      Tensor lse = c.empty({1, 2, 3}, DType::f32), dq = c.empty({1, 2, 3, 16}, DType::f32);
      Tensor dk = c.empty({1, 2, 5, 16}, DType::f32), dv = c.empty({1, 2, 5, 16}, DType::f32);
      for (Tensor* t : {&dq, &dk, &dv}) t->fill_bytes(kPoison);
      expect_rejected(c, [&] { c.run("attention_backward", {q, kv, kv, q, q, lse}, {dq, dk, dv}, bad); },
                      ErrorCode::InvalidArgument, {"attention_backward: argument 'score_mod'"}, {dq, dk, dv});
    }
    Attrs fn;
    fn.score_mod = "i == 0 ? score : score - 0.5";
    if (c.backend() == "vulkan" || c.backend() == "cpu") {
      c.run("attention", {q, kv, kv}, {o}, fn);
      EXPECT_EQ(c.last_variant().find("cpu-fallback"), std::string::npos) << c.last_variant();
      continue;
    }
    expect_rejected(c, [&] { c.run("attention", {q, kv, kv}, {o}, fn); }, ErrorCode::Unsupported,
                    {"custom score function (score_mod)"}, {o});
    ContextOptions fo = options_for(d);
    fo.allow_cpu_fallback = true;
    Context fb = Context::create(fo);
    Tensor qf = fb.from_host({1, 2, 3, 16}, DType::f32, std::vector<double>(96, 0.5));
    Tensor kvf = fb.from_host({1, 2, 5, 16}, DType::f32, std::vector<double>(160, 0.25));
    const auto out = fb.call("attention", {qf, kvf, kvf}, fn);
    EXPECT_NE(fb.last_variant().find("cpu-fallback"), std::string::npos) << fb.last_variant();
    const auto ref = cpu().call("attention", {cpu().from_host({1, 2, 3, 16}, DType::f32, std::vector<double>(96, 0.5)),
                                              cpu().from_host({1, 2, 5, 16}, DType::f32, std::vector<double>(160, 0.25)),
                                              cpu().from_host({1, 2, 5, 16}, DType::f32, std::vector<double>(160, 0.25))}, fn);
    EXPECT_EQ(out[0].to_double(), ref[0].to_double());
  }
}

}  // namespace
}  // namespace kf::test
