// Part of tools/cuda-emu (see run.sh): the memory-bound kernels of hal/cuda/norm.cu (the norms, group_norm,
// batch_norm_relu, softmax_backward), rows.cu (sum_squared, mean_abs, softmax, log_softmax), eltwise.cu and
// train.cu's optimizers and mse under the host emulation, against the op's float64 reference (on the inputs
// rounded to the dtype) with check::compare, every dtype. The parameters are built as hal/cuda/kernels.cpp
// builds them (CudaDevice::dispatch and dispatch_training; keep the two in step), with the device limits
// varied so that each layout runs: the norms' cached kernel with its rows in registers, in shared memory
// (the H100's 227 KiB, and a small limit) and streamed, on grids smaller than the rows (as a small L2
// cache gives); the row kernels with both cache sizes; the elementwise kernels on 1 to 3 blocks.
//   run.sh BUILD mem[:NAME]   (NAME: only the ops whose name contains it; EMU_VERBOSE=1 prints every case)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "hal/cuda/gpu_compat.hpp"
#include "hal/cuda/kernels.hpp"
#include "check/conformance.hpp"
#include "kf/kf.hpp"
#include "ops/reference_math.hpp"
#include "ops/registry.hpp"

using namespace kf;
namespace hc = kf::hal::emucuda;

namespace {

int fails = 0, runs = 0;

// A device buffer: 64-byte aligned host memory (as the allocator's 256-byte chunks are 16-byte aligned).
struct Buf {
  std::shared_ptr<unsigned char[]> mem;
  size_t bytes = 0;
  unsigned char* data() const { return mem.get(); }
};
Buf alloc(size_t bytes, unsigned char fill) {
  Buf b;
  b.bytes = bytes;
  b.mem.reset(new (std::align_val_t(64)) unsigned char[bytes + 64], [](unsigned char* p) { ::operator delete[](p, std::align_val_t(64)); });
  std::memset(b.mem.get(), fill, bytes + 64);
  return b;
}

void store(unsigned char* b, size_t i, DType t, double v) {
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
double load(const unsigned char* b, size_t i, DType t) {
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
hc::Dt dt_of(DType t) {
  return t == DType::f32 ? hc::Dt::f32 : t == DType::f16 ? hc::Dt::f16 : t == DType::bf16 ? hc::Dt::bf16 : hc::Dt::f64;
}

// One case: inputs (optional ones left out as empty shapes), the reference, the kernels through `launch`
// (given the device buffers of the inputs, or null, and of the outputs), every output compared.
using Launch = std::function<std::string(const std::vector<Buf>& in, const std::vector<Shape>& shapes,
                                         std::vector<Buf>& out, const std::vector<Shape>& out_shapes)>;
using Prep = std::function<void(std::vector<std::vector<double>>&)>;
void run(const std::string& name, const std::string& label, std::vector<Shape> shapes, const Attrs& attrs, DType dt,
         double range, const Launch& launch, uint64_t seed = 1234, const Prep& prep = {}) {
  const OpDef& op = get_op(name);
  shapes.resize(op.inputs.size());
  auto v = check::random_inputs(shapes, range, seed);
  if (op.prepare_inputs) op.prepare_inputs(shapes, attrs, v);
  if (prep) prep(v);
  std::vector<HostTensor> host(shapes.size());
  std::vector<Buf> in(shapes.size());
  for (size_t k = 0; k < shapes.size(); ++k) {
    if (shapes[k].empty()) continue;
    host[k].shape = shapes[k];
    const size_t n = v[k].size();
    in[k] = alloc(n * dtype_size(dt), 0);
    for (size_t i = 0; i < n; ++i) {
      host[k].data.push_back(check::round_to(dt, v[k][i]));
      store(in[k].data(), i, dt, host[k].data.back());
    }
  }
  const auto out_shapes = op.infer(op, shapes, attrs);
  std::vector<HostTensor> ref(out_shapes.size());
  std::vector<Buf> out(out_shapes.size());
  for (size_t k = 0; k < out_shapes.size(); ++k) {
    ref[k].shape = out_shapes[k];
    ref[k].data.assign(size_t(numel(out_shapes[k])), 0.0);
    out[k] = alloc(size_t(numel(out_shapes[k])) * dtype_size(dt), 0xff);  // poisoned: NaN
  }
  op.reference(host, ref, attrs);
  const std::string variant = launch(in, shapes, out, out_shapes);
  const double terms = op.terms(shapes);
  for (size_t k = 0; k < out.size(); ++k) {
    std::vector<double> o(ref[k].data.size());
    for (size_t i = 0; i < o.size(); ++i) o[i] = load(out[k].data(), i, dt);
    const check::Comparison c = check::compare(o, ref[k].data, dt, terms);
    ++runs;
    fails += !c.pass;
    if (!c.pass || std::getenv("EMU_VERBOSE"))
      std::printf("%s %-18s %-28s %-4s %-6s %-44s err %.3g (limit %.3g) worst %.3g at %lld (got %g want %g)\n",
                  c.pass ? "ok  " : "FAIL", name.c_str(), label.c_str(), to_string(dt), op.outputs[k].c_str(),
                  variant.c_str(), c.err, c.err_limit, c.worst, (long long)c.worst_index, c.worst_out, c.worst_ref);
  }
  std::fflush(stdout);
}

const void* ptr(const std::vector<Buf>& in, size_t k) { return k < in.size() && in[k].bytes ? in[k].data() : nullptr; }

// ---- Sections 3 (norm.cu), as CudaDevice::dispatch_training's Kern::Norm / GroupNorm.
struct NormKnobs {
  int64_t smem_limit = 227 * 1024, l2_bytes = 50 << 20;
};
Launch norm_launch(const std::string& name, DType dt, const Attrs& attrs, NormKnobs knobs) {
  return [=](const std::vector<Buf>& in, const std::vector<Shape>& shapes, std::vector<Buf>& out,
             const std::vector<Shape>&) -> std::string {
    static const std::vector<std::string> names = {"layer_norm", "rms_norm", "layer_norm_relu", "layer_norm_gelu",
                                                   "layer_norm_silu", "rms_norm_gelu", "rms_norm_silu",
                                                   "add_layer_norm", "add_rms_norm"};
    const bool group = name == "group_norm";
    int id = 0;
    while (!group && names[size_t(id)] != name) ++id;
    hc::NormParams p;
    p.x = ptr(in, 0);
    const bool add = name.rfind("add_", 0) == 0;
    const size_t k0 = add ? 2 : 1;
    if (add) p.r = ptr(in, 1);
    p.w = ptr(in, k0);
    const bool layer = group || name.find("layer") != std::string::npos;
    if (layer) p.b = ptr(in, k0 + 1);
    p.y = out.back().data();
    if (add) p.s = out[0].data();
    p.eps = get_op(name).eps_of(attrs);
    const Shape& x = shapes[0];
    if (group) {
      const int64_t N = x[0], C = x[1], inner = numel(x) / (N * C), G = attrs.groups;
      p.rows = N * G, p.feat = C / G * inner, p.groups = G, p.cpg = C / G, p.inner = inner;
    } else {
      p.feat = x.back(), p.rows = numel(x) / p.feat;
    }
    p.smem_limit = knobs.smem_limit, p.l2_bytes = knobs.l2_bytes;
    int block = 32;
    while (block < 1024 && int64_t(block) * 4 < p.feat) block *= 2;
    hc::NormLaunch l;
    hc::launch_norm(group ? hc::NormOp::layer : static_cast<hc::NormOp>(id), dt_of(dt), p, block, nullptr, &l);
    if (!l.block) return "block-per-row," + std::to_string(block);
    return "cached,block=" + std::to_string(l.block) + ",regs=" + std::to_string(l.cache) + ",smem=" +
           std::to_string(l.smem_packs) + ",streamed=" + std::to_string(l.streamed) + ",grid=" + std::to_string(l.grid);
  };
}

void norms(const std::string& only) {
  const std::vector<std::string> names = {"layer_norm", "rms_norm", "layer_norm_relu", "layer_norm_gelu", "layer_norm_silu",
                                          "rms_norm_gelu", "rms_norm_silu", "add_layer_norm", "add_rms_norm"};
  for (const std::string& name : names) {
    if (name.find(only) == std::string::npos) continue;
    const bool add = name.rfind("add_", 0) == 0;
    const int n_affine = name.find("layer") != std::string::npos ? 2 : 1;
    // (rows, features, affine given); the long rows take the LONG layouts, 4104 and 33 are short rows
    // with a partial last round of packs, 1003 and 65537 not whole packs (norm_kernel).
    struct S { int64_t rows, feat; int affine; };
    std::vector<S> shapes = {{3, 4104, 2}, {2, 33 * 8, 1}, {5, 8, 2}, {1, 16, 0}, {2, 1003, 2}, {1, 1, 2},
                             {3, 65536, 2}, {1, 65536 + 1024 + 8, 0}, {2, 65537, 1}};
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      for (const S& s : shapes) {
        if (s.feat == 65537 && dt != DType::f32) continue;  // (norm_kernel, unchanged: one dtype)
        std::vector<Shape> in = {{s.rows, s.feat}};
        if (add) in.push_back({s.rows, s.feat});
        const int given = std::min(s.affine, n_affine);
        for (int j = 0; j < n_affine; ++j) in.push_back(j < given ? Shape{s.feat} : Shape{});
        const std::string label = "[" + std::to_string(s.rows) + "," + std::to_string(s.feat) + "]a" + std::to_string(given);
        Attrs a;
        run(name, label, in, a, dt, 2, norm_launch(name, dt, a, {}));
        if (s.feat >= 65536) {
          // Little shared memory: rows streamed (read twice), on a grid of one and two blocks.
          run(name, label + "_smem40k_l2", in, a, dt, 2, norm_launch(name, dt, a, {40 * 1024, 1}));
          run(name, label + "_nosmem", in, a, dt, 2, norm_launch(name, dt, a, {0, 3 << 20}));
        }
      }
      // A row whose spread is small next to its mean (the corrected two-pass): long and short.
      for (int64_t feat : {int64_t(4096), int64_t(70000)}) {
        // f32 only: the f64 reference's own x - mean (naive mean) is 1e-11 off here, and the add forms
        // normalize the float sum x + r, rounded by 2^-24 x: both beyond the tolerances whatever the kernel.
        if (dt != DType::f32 || add) continue;
        std::vector<Shape> in = {{2, feat}};
        if (add) in.push_back({2, feat});
        for (int j = 0; j < n_affine; ++j) in.push_back({feat});
        Attrs a;
        // x = 100 + 0.01 u: the mean is 10^4 standard deviations away from 0; the long row streamed.
        const Prep shift = [](std::vector<std::vector<double>>& v) {
          for (double& e : v[0]) e = 100 + 0.01 * e;
        };
        run(name, "[2," + std::to_string(feat) + "]_mean100_sd0.006", in, a, dt, 1,
            norm_launch(name, dt, a, {16 * 1024, 1}), 99, shift);
      }
    }
  }
  if (std::string("group_norm").find(only) != std::string::npos) {
    struct G { Shape x; int64_t groups; };
    const std::vector<G> gs = {{{2, 8, 4, 4}, 4}, {{2, 6, 3, 5}, 3}, {{3, 64, 32, 32}, 4}, {{1, 64, 32, 32}, 2},
                               {{2, 32, 8, 8}, 32}, {{2, 4, 8, 1}, 1}};
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
      for (const G& g : gs)
        for (int affine : {1, 0}) {
          Attrs a;
          a.groups = g.groups;
          std::vector<Shape> in = {g.x, affine ? Shape{g.x[1]} : Shape{}, affine ? Shape{g.x[1]} : Shape{}};
          run("group_norm", to_string(g.x) + "_g" + std::to_string(g.groups) + (affine ? "" : "_noaffine"), in, a, dt,
              2, norm_launch("group_norm", dt, a, {}));
          if (g.x[1] * g.x[2] / g.groups >= 1024)
            run("group_norm", to_string(g.x) + "_g" + std::to_string(g.groups) + "_smem16k", in, a, dt, 2,
                norm_launch("group_norm", dt, a, {16 * 1024, 1}));
        }
  }
}

// ---- batch_norm_relu (norm.cu), as Kern::BatchNorm: elt_blocks = clamp(ceil(n / 256), 1, blocks).
void batch_norms(const std::string& only) {
  if (std::string("batch_norm_relu").find(only) == std::string::npos) return;
  const OpDef& op = get_op("batch_norm_relu");
  std::vector<TestCase> cases = op.tests;
  for (const Shape& x : {Shape{2, 3, 8, 8}, Shape{3, 5, 4, 2}, Shape{1, 3, 2, 4}, Shape{2, 2, 16}})
    cases.push_back({"x" + to_string(x), {x, {x[1]}, {x[1]}, {x[1]}, {x[1]}}, {}, 2});
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
    for (const TestCase& tc : cases)
      for (uint32_t max_blocks : {2u, 64u}) {
        const Launch l = [&](const std::vector<Buf>& in, const std::vector<Shape>& shapes, std::vector<Buf>& out,
                             const std::vector<Shape>&) -> std::string {
          hc::BatchNormParams p;
          p.x = ptr(in, 0), p.w = ptr(in, 1), p.b = ptr(in, 2), p.mean = ptr(in, 3), p.var = ptr(in, 4);
          p.y = out[0].data();
          p.n = numel(shapes[0]), p.channels = shapes[0][1], p.inner = p.n / (shapes[0][0] * shapes[0][1]);
          p.eps = op.eps_of(tc.attrs);
          const uint32_t blocks = uint32_t(std::clamp<int64_t>((p.n + 255) / 256, 1, max_blocks));
          hc::launch_batch_norm_relu(dt_of(dt), p, blocks, nullptr);
          return "blocks<=" + std::to_string(max_blocks);
        };
        run(op.name, tc.label, tc.inputs, tc.attrs, dt, tc.range, l);
      }
}

// ---- adamw_step, sgd_step (train.cu), as Kern::Optim; in place (outputs over the inputs) and not.
void optimizers(const std::string& only) {
  for (const char* name : {"adamw_step", "sgd_step"}) {
    if (std::string(name).find(only) == std::string::npos) continue;
    const OpDef& op = get_op(name);
    const bool adam = std::string(name) == "adamw_step";
    std::vector<TestCase> cases = op.tests;
    for (int64_t n : {int64_t(1), int64_t(9), int64_t(4099), int64_t(70001)}) {
      TestCase tc = op.tests[std::min<size_t>(op.tests.size() - 1, 1)];
      tc.label = "n" + std::to_string(n) + "_" + tc.label;
      for (Shape& sh : tc.inputs) sh = {n};
      cases.push_back(tc);
    }
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
      for (const TestCase& tc : cases)
        for (bool inplace : {false, true}) {
          const Launch l = [&](const std::vector<Buf>& in, const std::vector<Shape>& shapes, std::vector<Buf>& out,
                               const std::vector<Shape>&) -> std::string {
            const Attrs& a = tc.attrs;
            hc::OptimParams p;
            p.n = numel(shapes[0]);
            const size_t bytes = size_t(p.n) * dtype_size(dt);
            // In place: the outputs hold the inputs' values and serve as both.
            const size_t nout = adam ? 3 : 2;
            const size_t src[3] = {0, 2, 3};
            if (inplace)
              for (size_t k = 0; k < nout; ++k) std::memcpy(out[k].data(), in[src[k]].data(), bytes);
            p.p = inplace ? out[0].data() : ptr(in, 0), p.g = ptr(in, 1), p.m = inplace ? out[1].data() : ptr(in, 2);
            p.p_out = out[0].data(), p.m_out = out[1].data();
            if (adam) {
              p.v = inplace ? out[2].data() : ptr(in, 3), p.v_out = out[2].data();
              const double bc1 = 1 - std::pow(a.beta1, double(a.step)), bc2 = 1 - std::pow(a.beta2, double(a.step));
              p.decay = 1 - a.lr * a.weight_decay;
              p.step_size = a.lr * std::sqrt(bc2) / bc1;
              p.beta1 = a.beta1, p.one_minus_beta1 = 1 - a.beta1, p.beta2 = a.beta2, p.one_minus_beta2 = 1 - a.beta2;
              p.eps_hat = op.eps_of(a) * std::sqrt(bc2);
            } else {
              p.lr = a.lr, p.weight_decay = a.weight_decay, p.momentum = a.momentum, p.one_minus_dampening = 1 - a.dampening;
              p.momentum_on = a.momentum != 0, p.nesterov = a.nesterov, p.first_step = a.step == 1;
            }
            const uint32_t blocks = uint32_t(std::clamp<int64_t>((p.n + 255) / 256, 1, 3));
            hc::launch_optim(adam ? hc::OptimOp::adamw : hc::OptimOp::sgd, dt_of(dt), p, blocks, nullptr);
            return inplace ? "in-place" : "separate";
          };
          run(name, tc.label, tc.inputs, tc.attrs, dt, tc.range, l);
        }
  }
}

// ---- Section 2 (rows.cu), as CudaDevice::dispatch's row kernels, with rows_values 16 and 32.
void rows(const std::string& only) {
  const char* names[] = {"sum_squared", "mean_abs", "softmax", "log_softmax"};
  for (int id = 0; id < 4; ++id) {
    const std::string name = names[id];
    if (name.find(only) == std::string::npos) continue;
    const OpDef& op = get_op(name);
    std::vector<TestCase> cases;
    for (const TestCase& tc : op.tests)
      if (numel(tc.inputs[0]) <= (int64_t(1) << 20)) cases.push_back(tc);
    for (const Shape& x : {Shape{3, 4096}, Shape{2, 4104}, Shape{5, 1003}, Shape{1, 1}, Shape{4, 17}, Shape{9, 64},
                           Shape{2, 65536}, Shape{1, 65536 + 8}, Shape{2, 20000}}) {
      TestCase tc{"x" + to_string(x), {x}, {}, id == 0 ? 1.0 : 3.0};  // (sum_squared of 65544 values of up to 3: past f16's range)
      if (id >= 2) tc.attrs.scale = 0.7;
      cases.push_back(tc);
    }
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
      for (const TestCase& tc : cases)
        for (int cache : {16, 32}) {
          if (cache == 32 && numel(tc.inputs[0]) > 300000) continue;
          const Launch l = [&](const std::vector<Buf>& in, const std::vector<Shape>& shapes, std::vector<Buf>& out,
                               const std::vector<Shape>&) -> std::string {
            hc::RowsParams p;
            const int64_t vw = 16 / int64_t(dtype_size(dt));
            p.feat = std::max<int64_t>(1, shapes[0].empty() ? 1 : shapes[0].back());
            p.rows = numel(shapes[0]) / p.feat;
            p.in = ptr(in, 0), p.out = out[0].data();
            p.wide = p.feat % vw == 0;
            p.scale = float(tc.attrs.scale), p.scale_d = tc.attrs.scale;
            const bool sums = id < 2;
            const int64_t units = p.wide ? p.feat / vw : p.feat;
            const int64_t per_value = dt == DType::f64 ? 2 : 1;
            auto per_thread = [&](int cv) -> int64_t {
              if (sums) return 8;
              if (p.wide) return cv / 4;
              return std::max<int64_t>(1, cv / per_value);
            };
            int block = 256, tpr = 32;
            while (int64_t(tpr) * per_thread(cache) < units && tpr < 256) tpr *= 2;
            if (int64_t(tpr) * per_thread(cache) < units) block = tpr = 1024;
            p.tpr = tpr;
            const int64_t rpb = block / tpr;
            const uint32_t blocks = uint32_t(std::clamp<int64_t>((p.rows + rpb - 1) / rpb, 1, 2));  // blocks stride
            hc::launch_rows(static_cast<hc::RowOp>(id), dt_of(dt), p, block, cache, blocks, nullptr);
            return "tpr=" + std::to_string(tpr) + ",block=" + std::to_string(block) + ",cache=" + std::to_string(cache) +
                   (p.wide ? ",wide" : "");
          };
          run(name, tc.label, tc.inputs, tc.attrs, dt, tc.range, l);
        }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  norms(only);
  batch_norms(only);
  optimizers(only);
  rows(only);
  std::printf("mem: %d comparisons, fails: %d\n", runs, fails);
  return fails != 0;
}
