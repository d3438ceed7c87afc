// Part of tools/cuda-emu (see run.sh): linear_cross_entropy(_backward) as hal/cuda/lce.cpp runs it, with
// train.cu's kernels under the host emulation and cuBLASLt replaced by a plain column-major product of the
// same arguments (lt_product's: transposes, leading dimensions, beta = 1 accumulation, float output of
// 16-bit inputs; float accumulation in index order, double for f64). It checks the chunk loop, the
// products' layouts and the row pass (soft-capping, z-loss, in-place gradient, ignored rows) against the
// CPU backend by check::compare; it cannot check cuBLASLt itself. The loop mirrors
// CudaDevice::dispatch_linear_cross_entropy: keep the two in step.
#include <cmath>
#include <cstdio>
#include <cstring>
#include "hal/cuda/gpu_compat.hpp"
#include <numeric>
#include <string>
#include "hal/cuda/kernels.hpp"
#include "kf/kf.hpp"
#include "ops/registry.hpp"
#include "check/conformance.hpp"

using namespace kf;
namespace hc = kf::hal::emucuda;

std::vector<unsigned char> to_dev(const std::vector<double>& v, DType t);
double from_dev(const std::vector<unsigned char>& b, size_t i, DType t);
hc::Dt dt_of(DType t);

namespace {

int lce_fails = 0;

double ld(const void* p, int64_t i, DType t) {
  const auto* b = static_cast<const unsigned char*>(p);
  if (t == DType::f32) { float f; std::memcpy(&f, b + i * 4, 4); return f; }
  if (t == DType::f64) { double d; std::memcpy(&d, b + i * 8, 8); return d; }
  unsigned short h;
  std::memcpy(&h, b + i * 2, 2);
  if (t == DType::f16) return kf_half_to_float(h);
  const unsigned u = unsigned(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void st(void* p, int64_t i, DType t, double v) {
  auto* b = static_cast<unsigned char*>(p);
  if (t == DType::f32) { const float f = float(v); std::memcpy(b + i * 4, &f, 4); return; }
  if (t == DType::f64) { std::memcpy(b + i * 8, &v, 8); return; }
  unsigned short h;
  if (t == DType::f16) {
    h = kf_float_to_half(float(v));
  } else {
    const float f = float(v);
    unsigned u;
    std::memcpy(&u, &f, 4);
    h = static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  std::memcpy(b + i * 2, &h, 2);
}

// lt_product's contract: D (m x n, ld ldd) = op(A) op(B) (+ D); A stored k x m (ta) or m x k, B n x k (tb)
// or k x n; column-major.
void product(DType in, DType out, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda,
             const void* B, int64_t ldb, void* D, int64_t ldd, bool accumulate) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double s = 0;
      float sf = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double a = ta ? ld(A, l + i * lda, in) : ld(A, i + l * lda, in);
        const double b = tb ? ld(B, j + l * ldb, in) : ld(B, l + j * ldb, in);
        if (in == DType::f64) s += a * b;
        else sf += float(a) * float(b);
      }
      double v = in == DType::f64 ? s : double(sf);
      if (accumulate) v += ld(D, i + j * ldd, out);
      st(D, i + j * ldd, out, v);
    }
}

void run_lce(const TestCase& tc, bool grad, DType dt, uint64_t lce_rows, bool dw_fallback = false) {
  const OpDef& op = get_op(grad ? "linear_cross_entropy_backward" : "linear_cross_entropy");
  Context cpu = Context::create(ContextOptions{.backend = "cpu"});
  std::vector<Shape> shapes = tc.inputs;
  auto v = check::random_inputs(shapes, tc.range, 777);
  if (op.prepare_inputs) op.prepare_inputs(shapes, tc.attrs, v);
  std::vector<Tensor> rin64;
  std::vector<std::vector<double>> vals(3);
  std::vector<std::vector<unsigned char>> dev(3);
  for (size_t k = 0; k < 3; ++k) {
    const DType t = op.input_dtype(k, dt, Attrs{});
    vals[k] = cpu.from_host(shapes[k], t, v[k]).to_double();
    rin64.push_back(cpu.from_host(shapes[k], t == DType::i32 ? t : DType::f64, vals[k]));
    dev[k] = to_dev(vals[k], t);
  }
  const auto ref = cpu.call(op.name, rin64, tc.attrs);

  // As CudaDevice::dispatch_linear_cross_entropy.
  const uint64_t N = shapes[0][0], D = shapes[0][1], C = shapes[1][0];
  const uint64_t es = dtype_size(dt), cs = dt == DType::f64 ? 8 : 4;
  const bool half = dt == DType::f16 || dt == DType::bf16;
  const uint64_t granule = 256 / std::gcd<uint64_t>(256, D * es);
  uint64_t rows = lce_rows ? (lce_rows + granule - 1) / granule * granule
                           : std::max<uint64_t>(granule, (256ull << 20) / (C * es) / granule * granule);
  rows = std::max<uint64_t>(1, std::min<uint64_t>(rows, N));
  std::vector<unsigned char> z(rows * C * es + 16, 0xcd), stats((1 + N) * cs + 16, 0xcd), acc(C * D * 4 + 16, 0xcd);
  std::vector<std::vector<unsigned char>> outs(grad ? 3 : 1);
  for (size_t k = 0; k < outs.size(); ++k) outs[k].assign(std::max<int64_t>(1, numel(ref[k].shape())) * es + 16, 0xff);
  hc::XentParams xp;
  xp.logits = z.data();
  xp.target = (const int32_t*)dev[2].data();
  xp.loss = outs[0].data();
  xp.grad = grad ? z.data() : nullptr;
  xp.ws = stats.data();
  xp.classes = C;
  xp.ignore_index = int32_t(tc.attrs.ignore_index);
  xp.smoothing = tc.attrs.label_smoothing;
  xp.softcap = tc.attrs.softcap;
  xp.z_loss = tc.attrs.z_loss;
  const int64_t smem_limit = 227 * 1024;
  xp.rows = N;
  hc::launch_lce_pass(dt_of(dt), xp, 0, smem_limit, nullptr);
  for (uint64_t r0 = 0; r0 < N; r0 += rows) {
    const uint64_t n = std::min(rows, N - r0);
    const unsigned char* hcp = dev[0].data() + r0 * D * es;
    product(dt, dt, true, false, C, n, D, dev[1].data(), D, hcp, D, z.data(), C, false);
    xp.rows = n;
    xp.row_base = r0;
    hc::launch_lce_pass(dt_of(dt), xp, 1, smem_limit, nullptr);
    if (!grad) continue;
    product(dt, dt, false, false, D, n, C, dev[1].data(), D, z.data(), C, outs[1].data() + r0 * D * es, D, false);
    if (!half) product(dt, dt, false, true, D, C, n, hcp, D, z.data(), C, outs[2].data(), D, r0 > 0);
    else if (!dw_fallback) product(dt, DType::f32, false, true, D, C, n, hcp, D, z.data(), C, acc.data(), D, r0 > 0);
    else {  // lce.cpp's fallback: the chunk's product in the dtype, added to the float accumulator by the kernel
      std::vector<unsigned char> tmp(C * D * es + 16);
      product(dt, dt, false, true, D, C, n, hcp, D, z.data(), C, tmp.data(), D, false);
      hc::LceDwParams dp;
      dp.src = tmp.data();
      dp.acc = (float*)acc.data();
      dp.n = C * D;
      dp.mode = 0;
      dp.first = r0 == 0;
      hc::launch_lce_dw(dt_of(dt), dp, 3, nullptr);
    }
  }
  xp.rows = N;
  xp.row_base = 0;
  hc::launch_lce_pass(dt_of(dt), xp, 2, smem_limit, nullptr);
  if (grad && half) {
    hc::LceDwParams dp;
    dp.acc = (float*)acc.data();
    dp.out = outs[2].data();
    dp.n = C * D;
    dp.mode = 1;
    hc::launch_lce_dw(dt_of(dt), dp, 4, nullptr);
  }
  const double terms = op.terms(shapes);
  const char* names[3] = {"loss", "d_h", "d_W"};
  for (size_t k = 0; k < outs.size(); ++k) {
    const std::vector<double> r = ref[k].to_double();
    std::vector<double> o(r.size());
    for (size_t i = 0; i < r.size(); ++i) o[i] = from_dev(outs[k], i, dt);
    const check::Comparison c = check::compare(o, r, dt, terms, C > 4096 && dt == DType::f32 && grad ? 4 : 1);
    lce_fails += !c.pass;
    std::printf("%s %-40s %-5s %-4s rows=%llu%s: err %.3g (limit %.3g) worst %.3g at %lld (got %g want %g)\n",
                c.pass ? "ok  " : "FAIL", tc.label.c_str(), to_string(dt), names[k], (unsigned long long)rows,
                dw_fallback ? " (d_W fallback)" : "", c.err,
                c.err_limit, c.worst, (long long)c.worst_index, c.worst_out, c.worst_ref);
  }
}

}  // namespace

int lce_main(const std::string& only) {
  std::vector<TestCase> cases;
  for (const TestCase& tc : get_op("linear_cross_entropy").tests)
    if (only.empty() ? tc.inputs[1][0] < 5000 : tc.label.find(only) != std::string::npos) cases.push_back(tc);
  TestCase odd{"n61_d40_c1001_all", {{61, 40}, {1001, 40}, {61}}, {}, 1};
  odd.attrs.label_smoothing = 0.1, odd.attrs.z_loss = 1e-2, odd.attrs.softcap = 4;
  TestCase ign{"n30_d7_c33_ignore3", {{30, 7}, {33, 7}, {30}}, {}, 1};
  ign.attrs.ignore_index = 3;
  if (only.empty()) cases.push_back(odd), cases.push_back(ign);
  for (const TestCase& tc : cases)
    for (bool grad : {false, true}) {
      run_lce(tc, grad, DType::f32, 0);
      run_lce(tc, grad, DType::f32, 7);
      run_lce(tc, grad, DType::f16, 5);
      run_lce(tc, grad, DType::bf16, 0);
      run_lce(tc, grad, DType::f64, 3);
      if (grad) run_lce(tc, grad, DType::bf16, 5, true);
    }
  std::printf("fails: %d\n", lce_fails);
  return lce_fails != 0;
}
