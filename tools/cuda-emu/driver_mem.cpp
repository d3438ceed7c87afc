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
#include <limits>
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
bool g_mask_check = false;  // run(): also compare the zero pattern (the dropout mask) exactly

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
    const bool i32 = op.input_dtype(k, dt, Attrs{}) == DType::i32;  // (cross_entropy's targets: stored as int32)
    in[k] = alloc(n * (i32 ? 4 : dtype_size(dt)), 0);
    for (size_t i = 0; i < n; ++i) {
      if (i32) {
        host[k].data.push_back(v[k][i]);
        const int32_t iv = static_cast<int32_t>(v[k][i]);
        std::memcpy(in[k].data() + i * 4, &iv, 4);
        continue;
      }
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
    if (g_mask_check) {  // the dropout mask bit for bit: an element is zero exactly where the reference's is
      int64_t bad = 0, first = -1;
      for (size_t i = 0; i < o.size(); ++i)
        if ((o[i] == 0) != (ref[k].data[i] == 0) && std::max(std::fabs(o[i]), std::fabs(ref[k].data[i])) > 1e-5)
          bad += 1, first = first < 0 ? int64_t(i) : first;
      ++runs;
      fails += bad != 0;
      if (bad || std::getenv("EMU_VERBOSE"))
        std::printf("%s %-18s %-28s %-4s mask: %lld elements kept or dropped otherwise than the reference (first %lld)\n",
                    bad ? "FAIL" : "ok  ", name.c_str(), label.c_str(), to_string(dt), (long long)bad, (long long)first);
    }
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
  int cc = 0, cluster = 0;  // compute capability x 10 (90: the cluster kernel), KF_TUNE rows_cluster
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
    p.cc = knobs.cc, p.cluster = knobs.cluster;
    int block = 32;
    while (block < 1024 && int64_t(block) * 4 < p.feat) block *= 2;
    hc::NormLaunch l;
    hc::launch_norm(group ? hc::NormOp::layer : static_cast<hc::NormOp>(id), dt_of(dt), p, block, nullptr, &l);
    if (!l.block) return "block-per-row," + std::to_string(block);
    if (l.cluster)
      return "cluster=" + std::to_string(l.cluster) + ",block=" + std::to_string(l.block) + ",regs=" +
             std::to_string(l.cache) + ",smem=" + std::to_string(l.smem_packs) + ",grid=" + std::to_string(l.grid);
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
    // (16384 and 32768: norm.cu's 512-thread layout with 4 packs in shared memory, f32 and 16-bit.)
    // (20008 and 40024: cluster parts not multiples of anything, the last one shorter.)
    std::vector<S> shapes = {{3, 4104, 2}, {2, 33 * 8, 1}, {5, 8, 2}, {1, 16, 0}, {2, 1003, 2}, {1, 1, 2},
                             {2, 16384, 2}, {1, 32768, 1}, {3, 65536, 2}, {1, 65536 + 1024 + 8, 0}, {2, 65537, 1},
                             {3, 20008, 2}, {2, 40024, 1}};
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
        // The cluster kernel (sm_90): automatic (the rows past 1024 x 4 packs), and forced to P blocks on
        // short rows (parts of a pack or two, blocks left empty) and long ones (shared memory).
        if (dt != DType::f64 && s.feat % (16 / int64_t(dtype_size(dt))) == 0) {
          NormKnobs k;
          k.cc = 90;
          if (s.feat > 16384) run(name, label + "_cluster", in, a, dt, 2, norm_launch(name, dt, a, k));
          for (int P : {2, 3, 8}) {
            if (s.feat >= 65536 && P != 3) continue;  // (emulated threads: one forced P on the longest rows)
            k.cluster = P;
            run(name, label + "_cluster" + std::to_string(P), in, a, dt, 2, norm_launch(name, dt, a, k));
          }
          if (s.feat >= 65536) {  // parts that do not fit 40 KiB: the other kernels
            k.cluster = 2, k.smem_limit = 40 * 1024;
            run(name, label + "_cluster2_smem40k", in, a, dt, 2, norm_launch(name, dt, a, k));
          }
        }
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
        NormKnobs k;  // the cluster kernel: parts' statistics combined about the first part's mean
        k.cc = 90, k.cluster = feat > 16384 ? 0 : 3;
        run(name, "[2," + std::to_string(feat) + "]_mean100_sd0.006_cluster", in, a, dt, 1, norm_launch(name, dt, a, k),
            99, shift);
      }
    }
  }
  if (std::string("group_norm").find(only) != std::string::npos) {
    struct G { Shape x; int64_t groups; };
    const std::vector<G> gs = {{{2, 8, 4, 4}, 4}, {{2, 6, 3, 5}, 3}, {{3, 64, 32, 32}, 4}, {{1, 64, 32, 32}, 2},
                               {{2, 32, 8, 8}, 32}, {{2, 4, 8, 1}, 1},
                               // channels per group past what norm.cu stages in shared memory (128 of a
                               // 32-bit type, 64 of f64): w and b read from memory; and 128 exactly
                               {{2, 512, 4, 4}, 2}, {{2, 256, 2, 2}, 2}};
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
        for (int form = 0; form < 4; ++form) {  // separate, in place; in place with 1 and 4 packs a thread
          const bool inplace = form > 0;
          const Launch l = [&](const std::vector<Buf>& in, const std::vector<Shape>& shapes, std::vector<Buf>& out,
                               const std::vector<Shape>&) -> std::string {
            const Attrs& a = tc.attrs;
            hc::OptimParams p;
            p.n = numel(shapes[0]);
            p.items = form == 2 ? 1 : form == 3 ? 4 : 0;
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
            return std::string(inplace ? "in-place" : "separate") + (p.items ? ",items=" + std::to_string(p.items) : "");
          };
          run(name, tc.label, tc.inputs, tc.attrs, dt, tc.range, l);
        }
  }
}

// ---- mse (train.cu), as Kern::Mse: the partial sums on the grid kernels.cpp picks (at most 3 blocks for
// the larger cases: blocks stride), 16-byte packs (a and b aligned) or element by element (a misaligned).
void mse(const std::string& only) {
  if (std::string("mse").find(only) == std::string::npos) return;
  const OpDef& op = get_op("mse");
  std::vector<TestCase> cases = op.tests;
  for (int64_t n : {int64_t(8), int64_t(9), int64_t(4099), int64_t(70001), int64_t(262151)})
    cases.push_back({"n" + std::to_string(n), {{n}, {n}}});
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
    for (const TestCase& tc : cases)
      for (int variant : {0, 1, 2}) {  // 0: kernels.cpp's grid; 1: at most 3 blocks; 2: a misaligned
        const Launch l = [&](const std::vector<Buf>& in, const std::vector<Shape>& shapes, std::vector<Buf>& out,
                             const std::vector<Shape>&) -> std::string {
          hc::MseParams p;
          p.n = numel(shapes[0]);
          const size_t es = dtype_size(dt);
          Buf shifted;
          p.a = ptr(in, 0), p.b = ptr(in, 1), p.loss = out[0].data();
          if (variant == 2) {  // a at 2 bytes (16-bit) or one element past 16-byte alignment
            shifted = alloc(size_t(p.n) * es + 16, 0);
            std::memcpy(shifted.data() + es, in[0].data(), size_t(p.n) * es);
            p.a = shifted.data() + es;
          }
          p.blocks = static_cast<int>(std::clamp<int64_t>((p.n + 2047) / 2048, 1, variant == 1 ? 3 : 1024));
          Buf ws = alloc(size_t(p.blocks) * 8, 0xff);
          p.ws = ws.data();
          hc::launch_mse(dt_of(dt), p, nullptr);
          return "blocks=" + std::to_string(p.blocks) + (hc::mse_packs(p) ? ",packs" : ",elements");
        };
        if (variant == 0 && numel(tc.inputs[0]) > 300000) continue;  // (489 emulated blocks: slow)
        run("mse", tc.label, tc.inputs, tc.attrs, dt, 2.0, l);
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
                           Shape{2, 65536}, Shape{1, 65536 + 8}, Shape{2, 20000}, Shape{5, 8}, Shape{3, 24}}) {
      TestCase tc{"x" + to_string(x), {x}, {}, id == 0 ? 1.0 : 3.0};  // (sum_squared of 65544 values of up to 3: past f16's range)
      if (id >= 2) tc.attrs.scale = 0.7;
      cases.push_back(tc);
    }
    // softmax's special rows for the cluster kernel: all -inf (zeros; log_softmax NaN, as the reference),
    // the first parts -inf, a NaN in the last part.
    const Prep special_prep = [](std::vector<std::vector<double>>& v) {
      const double inf = std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < 20000; ++j) v[0][size_t(j)] = -inf;
      for (int64_t j = 0; j < 12000; ++j) v[0][size_t(20000 + j)] = -inf;
      v[0][size_t(2 * 20000 + 15000)] = std::numeric_limits<double>::quiet_NaN();
    };
    if (id >= 2) cases.push_back({"x[3,20000]_special", {{3, 20000}}, {}, 3.0});
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
      for (const TestCase& tc : cases)
        // cache 16, 32; 0: the cluster kernel (sm_90) where it applies; 2, 3, 8: forced to P blocks
        for (int cache : {16, 32, 0, 2, 3, 8}) {
          if (cache == 32 && numel(tc.inputs[0]) > 300000) continue;
          const int64_t feat = tc.inputs[0].empty() ? 1 : tc.inputs[0].back();
          const bool special = tc.label.find("_special") != std::string::npos;
          if (special && cache != 0) continue;
          if (cache < 16 && (id < 2 || dt == DType::f64 || feat % (16 / int64_t(dtype_size(dt))) != 0)) continue;
          if (cache > 0 && cache < 16 && cache != 3 && feat >= 65536) continue;  // (emulated threads: one forced P on the longest)
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
            const int values = cache < 16 ? 16 : cache;
            int block = 256, tpr = 32;
            while (int64_t(tpr) * per_thread(values) < units && tpr < 256) tpr *= 2;
            if (int64_t(tpr) * per_thread(values) < units) block = tpr = 1024;
            p.tpr = tpr;
            if (cache < 16) p.cc = 90, p.cluster = cache == 0 ? 0 : cache, p.smem_limit = 227 * 1024;
            const int64_t rpb = block / tpr;
            const uint32_t blocks = uint32_t(std::clamp<int64_t>((p.rows + rpb - 1) / rpb, 1, 2));  // blocks stride
            hc::ClusterPlan c;
            hc::launch_rows(static_cast<hc::RowOp>(id), dt_of(dt), p, block, values, blocks, nullptr, &c);
            if (c.P)
              return "cluster=" + std::to_string(c.P) + ",block=" + std::to_string(c.block) + ",part=" +
                     std::to_string(c.part) + ",smem=" + std::to_string(c.smem);
            return "tpr=" + std::to_string(tpr) + ",block=" + std::to_string(block) + ",cache=" + std::to_string(values) +
                   (p.wide ? ",wide" : "");
          };
          run(name, tc.label + (cache < 16 ? "_cluster" + std::to_string(cache) : ""), tc.inputs, tc.attrs, dt, tc.range,
              l, 1234, special ? special_prep : Prep{});
        }
  }
}

// ---- Section 1 and the activations' backward (eltwise.cu), as CudaDevice::dispatch's Kern::Eltwise, on
// 1 to 3 blocks (blocks stride over the tiles); the registry's cases and awkward ones (1, 3, 4099, 65537
// elements: not whole packs; rows of 4099 features: gathered broadcasts), offsets and seeds past 32
// bits, in place (the output over input 0 or 1) and not. Dropout masks checked element by element.
const std::vector<std::string>& eltwise_names() {
  static const std::vector<std::string> v = {
#define KF_EMU_NAME(name) #name,
      KF_CUDA_ELTWISE_OPS(KF_EMU_NAME)
#undef KF_EMU_NAME
  };
  return v;
}
Launch eltwise_launch(int id, DType dt, const Attrs& a, uint32_t max_blocks, int inplace) {
  return [=](const std::vector<Buf>& in, const std::vector<Shape>& shapes, std::vector<Buf>& out,
             const std::vector<Shape>& out_shapes) -> std::string {
    const OpDef& op = get_op(eltwise_names()[size_t(id)]);
    hc::EltwiseParams p;
    const int64_t vw = 16 / int64_t(dtype_size(dt));
    const Shape& os = out_shapes[0];
    p.n = numel(os);
    p.feat = os.empty() ? 1 : std::max<int64_t>(1, os.back());
    auto mode_of = [&](size_t k) -> uint32_t {
      if (k >= shapes.size() || shapes[k].empty()) return hc::kAbsent;
      const int64_t n = numel(shapes[k]);
      return n == p.n ? hc::kFull : n == 1 ? hc::kScalar : hc::kFeatures;
    };
    const bool packed = shapes.size() > 1 && shapes[1].empty() && op.required_inputs == 1 && op.inputs.size() == 2 &&
                        op.inputs[1] == "gate";
    p.mode1 = packed ? hc::kAbsent : mode_of(1);
    p.mode2 = mode_of(2);
    p.packed = packed;
    p.gather = (packed || p.mode1 == hc::kFeatures || p.mode2 == hc::kFeatures) && p.feat % vw != 0;
    p.in0 = ptr(in, 0), p.in1 = ptr(in, 1), p.in2 = ptr(in, 2);
    p.out = out[0].data();
    // In place: the output holds input `inplace - 1` and serves as it.
    if (inplace) {
      const size_t k = size_t(inplace - 1);
      std::memcpy(out[0].data(), in[k].data(), size_t(p.n) * dtype_size(dt));
      (k == 0 ? p.in0 : p.in1) = out[0].data();
    }
    if (op.random) {
      p.seed_lo = uint32_t(a.seed), p.seed_hi = uint32_t(a.seed >> 32);
      p.off_lo = uint32_t(a.offset), p.off_hi = uint32_t(a.offset >> 32);
      p.thr = ref::dropout_threshold(a.p);
      p.keep_d = 1.0 / (1.0 - a.p);
      p.keep_f = float(p.keep_d);
    }
    p.n_d = double(p.n), p.n_f = float(p.n);
    const int64_t packs = (p.n + vw - 1) / vw;
    const int64_t tiles = (packs + int64_t(hc::kEltwiseThreads) * hc::kEltwiseItems - 1) / (int64_t(hc::kEltwiseThreads) * hc::kEltwiseItems);
    const uint32_t blocks = uint32_t(std::clamp<int64_t>(tiles, 1, max_blocks));
    hc::launch_eltwise(static_cast<hc::EltOp>(id), dt_of(dt), p, blocks, nullptr);
    return std::string(p.gather ? "gather" : "packs") + ",blocks=" + std::to_string(blocks) +
           (inplace ? ",in-place" + std::to_string(inplace - 1) : "");
  };
}

void eltwise(const std::string& only) {
  const auto& names = eltwise_names();
  for (size_t id = 0; id < names.size(); ++id) {
    const std::string& name = names[id];
    if (name.find(only) == std::string::npos || !find_op(name)) continue;
    const OpDef& op = get_op(name);
    std::vector<TestCase> cases;
    for (const TestCase& tc : op.tests)
      if (numel(tc.inputs[0]) <= (int64_t(1) << 21)) cases.push_back(tc);
    const bool bias = op.inputs.size() > 1 && (op.inputs[1] == "bias");
    const bool two = op.required_inputs >= 2 && !bias;  // (dy, x), (a, b), (x, r): full-size operands
    for (const Shape& x : {Shape{1}, Shape{3}, Shape{4099}, Shape{65537}, Shape{2, 4096}, Shape{3, 4099}, Shape{5, 8}}) {
      if (op.required_inputs > 2 || (bias && x.size() < 2)) continue;
      // (the gated ops' packed form [.., 2F] takes an even last dimension)
      if (op.inputs.size() == 2 && op.inputs[1] == "gate" && op.required_inputs == 1 && x.back() % 2 != 0) continue;
      // (range 2 for the forward ops: f32 gelu's 1 + erff(x) loses ~|x| 2^-24 absolute for x << 0, which
      // a 3-element tensor of range 3 shows past the L2 limit: 1.2e-6 against 1e-6, as it did before)
      TestCase tc{"x" + to_string(x), {x}, {}, name.find("_backward") != std::string::npos ? 3.0 : 2.0};
      if (two) tc.inputs.push_back(x);
      if (bias) tc.inputs.push_back({x.back()});
      if (op.random) {  // seed and offset past 32 bits; offsets that are not multiples of 4
        tc.attrs.p = x.size() == 1 ? 0.3 : 0.1;
        tc.attrs.seed = 0x9e3779b97f4a7c15ull;
        tc.attrs.offset = (uint64_t(5) << 32) + 3;
      }
      cases.push_back(tc);
    }
    g_mask_check = op.random;
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
      for (const TestCase& tc : cases)
        for (int inplace : {0, 1, 2}) {
          if (inplace == 2 && !(two && numel(tc.inputs[1]) == numel(tc.inputs[0]))) continue;
          // (the packed form's input 0 is twice the output: not an in-place pair)
          const bool packed = op.inputs.size() == 2 && op.inputs[1] == "gate" &&
                              (tc.inputs.size() < 2 || tc.inputs[1].empty());
          if (inplace == 1 && packed) continue;
          const uint32_t max_blocks = inplace ? 2 : numel(tc.inputs[0]) > 100000 ? 3 : 1;
          run(name, tc.label, tc.inputs, tc.attrs, dt, tc.range, eltwise_launch(int(id), dt, tc.attrs, max_blocks, inplace));
        }
    g_mask_check = false;
  }
}

// ---- softmax_backward (norm.cu), as Kern::SoftmaxBwd: the 16-byte-pack kernel for rows of whole
// packs (short rows held by the block, long ones re-read past 4 packs a thread; grids smaller than
// the rows: the emulation runs row_blocks(rows) blocks, so rows stride only where forced below), the
// element kernel for the others and for misaligned tensors; in place (dx over dy, and over y).
void softmax_backward(const std::string& only) {
  if (std::string("softmax_backward").find(only) == std::string::npos) return;
  const OpDef& op = get_op("softmax_backward");
  std::vector<TestCase> cases;
  for (const TestCase& tc : op.tests)
    if (numel(tc.inputs[0]) <= (int64_t(1) << 21)) cases.push_back(tc);
  for (const Shape& x : {Shape{3, 4096}, Shape{2, 4104}, Shape{1, 1}, Shape{4, 3}, Shape{2, 4099}, Shape{5, 8},
                         Shape{1, 16}, Shape{2, 65536}, Shape{1, 65537}, Shape{3, 40000}, Shape{7, 264}}) {
    TestCase tc{"x" + to_string(x), {x, x}, {}, 1.0};
    tc.attrs.scale = 0.7;
    cases.push_back(tc);
  }
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
    for (const TestCase& tc : cases)
      for (int variant : {0, 1, 2, 3}) {  // 0 plain, 1 dx over dy, 2 dx over y, 3 misaligned (element kernel)
        if (variant && numel(tc.inputs[0]) > 300000) continue;
        const Launch l = [&](const std::vector<Buf>& in, const std::vector<Shape>& shapes, std::vector<Buf>& out,
                             const std::vector<Shape>&) -> std::string {
          hc::SoftmaxBwdParams p;
          p.feat = std::max<int64_t>(1, shapes[0].back()), p.rows = numel(shapes[0]) / p.feat;
          p.scale = tc.attrs.scale;
          const size_t bytes = size_t(numel(shapes[0])) * dtype_size(dt);
          p.dy = ptr(in, 0), p.y = ptr(in, 1), p.dx = out[0].data();
          Buf shifted;
          if (variant == 1 || variant == 2) {
            std::memcpy(out[0].data(), in[size_t(variant - 1)].data(), bytes);
            (variant == 1 ? p.dy : p.y) = out[0].data();
          } else if (variant == 3) {  // y at an address 2 bytes past 16-byte alignment
            shifted = alloc(bytes + 16, 0);
            std::memcpy(shifted.data() + 2, in[1].data(), bytes);
            p.y = shifted.data() + 2;
          }
          int block = 32;
          while (block < 1024 && int64_t(block) * 4 < p.feat) block *= 2;
          int packs_block = 0;
          hc::launch_softmax_backward(dt_of(dt), p, block, nullptr, &packs_block);
          return (packs_block ? "packs,block=" + std::to_string(packs_block) : "elements,block=" + std::to_string(block)) +
                 (variant == 1 ? ",dx=dy" : variant == 2 ? ",dx=y" : variant == 3 ? ",y-misaligned" : "");
        };
        run("softmax_backward", tc.label, tc.inputs, tc.attrs, dt, tc.range, l);
      }
}


// ---- cross_entropy(_backward) (train.cu), as Kern::Xent: the registry's cases and awkward ones (classes
// 1, 3, 17, 1000, 4104, 32768, 131072 + 5; ignore_index rows, label smoothing, targets equal to
// ignore_index 0), every dtype, with the device's shared memory at 227 KiB, 40 KiB and none (the backward's
// rows streamed past their registers), the logits 1 element past 16-byte alignment (every row's head and
// tail) and the gradient misaligned against them. The backward's cluster kernel (sm_90: cc 90) in f32,
// f16 and bf16: automatic (the rows xent_plan gives 1024 threads), forced to 2, 3 and 8 blocks (every row
// with a pack), and both on misaligned rows; those runs set row 0's target to the last class and make it
// the row's largest logit, row 1 ignored, row 2's target class 0, and fail when the kernel that ran is
// not the one expected (xent_cluster_expect).
struct XentVariant {
  int64_t smem = 227 * 1024;
  bool misaligned = false;
  int cc = 0, cluster = 0;  // cc 90: clusters; cluster: KF_TUNE rows_cluster
  const char* tag = "";
};
// The blocks per cluster the backward should take (0: xent_rows), as train.cu's choice: automatic where
// xent_plan gives 1024 threads, forced P wherever a part fits the shared memory (kernels.hpp cluster_plan:
// 4 packs a thread in registers, the rest in shared memory).
int xent_cluster_expect(DType dt, int64_t C, const XentVariant& v) {
  const int64_t vw = 16 / int64_t(dtype_size(dt)), npk = C / vw;
  if (v.cc < 90 || v.cluster == 1 || dt == DType::f64 || npk < 1) return 0;
  const int64_t s512 = std::min<int64_t>(13, v.smem / (512 * 16));
  if (v.cluster == 0 && npk <= 512 * (6 + s512)) return 0;
  int64_t P = v.cluster >= 2 ? v.cluster : (npk + 4095) / 4096;
  P = std::clamp<int64_t>(P, 2, 8);
  const int64_t part = (npk + P - 1) / P;
  int64_t block = 32;
  while (block < 256 && block * 4 < part) block *= 2;
  const int64_t per = (part + block - 1) / block;
  return 512 + std::max<int64_t>(0, per - 4) * block * 16 <= v.smem ? int(P) : 0;
}
// One backward / forward launch as kernels.cpp's Kern::Xent (softcap, z_loss: as lce.cpp sets them).
std::string xent_launch(DType dt, bool grad, const XentVariant& v, const std::vector<Buf>& in, const std::vector<Shape>& shapes,
                        std::vector<Buf>& out, const Attrs& attrs, double softcap = 0, double z_loss = 0) {
  hc::XentParams p;
  const size_t es = dtype_size(dt);
  p.rows = shapes[0][0], p.classes = shapes[0][1];
  Buf shifted, gshift;
  p.logits = ptr(in, 0);
  if (v.misaligned) {  // logits one element past 16-byte alignment; the gradient 2 elements
    shifted = alloc(size_t(p.rows * p.classes) * es + 32, 0);
    std::memcpy(shifted.data() + es, in[0].data(), size_t(p.rows * p.classes) * es);
    p.logits = shifted.data() + es;
  }
  p.target = static_cast<const int32_t*>(ptr(in, 1));
  p.loss = out[0].data();
  if (grad) {
    p.grad = out[1].data();
    if (v.misaligned) {
      gshift = alloc(size_t(p.rows * p.classes) * es + 32, 0xff);
      p.grad = gshift.data() + 2 * es;
    }
  }
  p.ignore_index = int32_t(attrs.ignore_index);
  p.smoothing = attrs.label_smoothing;
  p.softcap = softcap, p.z_loss = z_loss;
  p.cc = v.cc, p.cluster = v.cluster;
  const hc::Dt d = dt_of(dt);
  std::vector<double> ws(size_t(hc::xent_ws_values(d, p.rows, p.classes, grad)) + 2, std::nan(""));
  p.ws = ws.data();
  hc::XentLaunch x;
  hc::launch_cross_entropy(d, p, v.smem, nullptr, &x);
  if (v.misaligned && grad) std::memcpy(out[1].data(), gshift.data() + 2 * es, size_t(p.rows * p.classes) * es);
  if (grad) {  // the kernel that ran must be the one expected
    const int want = xent_cluster_expect(dt, p.classes, v);
    ++runs;
    if (x.cluster != want) {
      ++fails;
      std::printf("FAIL cross_entropy_backward %s C=%lld%s: cluster=%d ran, %d expected\n", to_string(dt),
                  (long long)p.classes, v.tag, x.cluster, want);
    }
  }
  return (x.cluster ? "cluster=" + std::to_string(x.cluster) + "," : std::string()) + "block=" + std::to_string(x.block) +
         ",regs=" + std::to_string(x.regs) + ",smem=" + std::to_string(x.smem_packs) + ",splits=" + std::to_string(x.splits) +
         (v.misaligned ? ",misaligned" : "");
}

void cross_entropy(const std::string& only) {
  for (const char* name : {"cross_entropy", "cross_entropy_backward"}) {
    if (std::string(name).find(only) == std::string::npos) continue;
    const bool grad = std::string(name) == "cross_entropy_backward";
    const OpDef& op = get_op(name);
    std::vector<TestCase> cases;
    for (const TestCase& tc : op.tests)
      if (numel(tc.inputs[0]) <= (int64_t(1) << 19)) cases.push_back(tc);
    struct X { int64_t n, c; double smoothing; int64_t ignore; };
    for (const X& x : {X{3, 1, 0, -100}, X{5, 3, 0.1, -100}, X{9, 17, 0, -100}, X{7, 1000, 0.2, 0}, X{4, 4104, 0, -100},
                       X{3, 32768, 0.1, -100}, X{2, 32768, 0, 5}, X{2, 131072 + 5, 0.1, -100}, X{2, 65536, 0, -100},
                       X{3, 40003, 0.1, 7}}) {
      TestCase tc{"n" + std::to_string(x.n) + "_c" + std::to_string(x.c), {{x.n, x.c}, {x.n}}, {}, 4};
      tc.attrs.label_smoothing = x.smoothing;
      tc.attrs.ignore_index = x.ignore;
      if (x.smoothing > 0) tc.label += "_ls";
      if (x.ignore != -100) tc.label += "_ign" + std::to_string(x.ignore);
      cases.push_back(tc);
    }
    std::vector<XentVariant> variants = {{}, {40 * 1024}, {0}, {227 * 1024, true}};
    if (grad)
      for (const XentVariant& v : {XentVariant{227 * 1024, false, 90, 0, "_cluster"}, XentVariant{227 * 1024, false, 90, 2, "_cluster2"},
                                   XentVariant{227 * 1024, false, 90, 3, "_cluster3"}, XentVariant{227 * 1024, false, 90, 8, "_cluster8"},
                                   XentVariant{227 * 1024, true, 90, 0, "_cluster_misaligned"},
                                   XentVariant{227 * 1024, true, 90, 3, "_cluster3_misaligned"},
                                   XentVariant{40 * 1024, false, 90, 0, "_cluster_smem40k"}})
        variants.push_back(v);
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
      for (const TestCase& tc : cases)
        for (size_t vi = 0; vi < variants.size(); ++vi) {
          const XentVariant& v = variants[vi];
          const int64_t C = tc.inputs[0][1], n = numel(tc.inputs[0]);
          if (vi >= 4) {  // the cluster kernel
            if (dt == DType::f64 || C < 8) continue;
            if (v.cluster >= 2 && n > 300000 && v.cluster != 8) continue;  // (emulated threads: one forced P on the longest)
            // (automatic: only rows that would take the 1024-thread block; smem40k: where the parts do not fit)
            if (v.cluster == 0 && xent_cluster_expect(dt, C, XentVariant{227 * 1024, false, 90, 0}) == 0) continue;
          } else {
            if (vi && C < 1000) continue;
            if (vi && n > 300000 && dt != DType::f32 && vi != 3) continue;
          }
          const Prep prep = vi < 4 ? Prep{} : Prep([&](std::vector<std::vector<double>>& in) {
            const int64_t rows = tc.inputs[0][0];
            in[1][0] = double(C - 1);  // row 0: the last class, the row's largest logit
            in[0][size_t(C - 1)] = 2 * tc.range;
            if (rows > 1) in[1][1] = double(tc.attrs.ignore_index);
            if (rows > 2) in[1][2] = 0;
          });
          const Launch l = [&](const std::vector<Buf>& in, const std::vector<Shape>& shapes, std::vector<Buf>& out,
                               const std::vector<Shape>&) -> std::string {
            return xent_launch(dt, grad, v, in, shapes, out, tc.attrs);
          };
          run(name, tc.label + v.tag, tc.inputs, tc.attrs, dt, tc.range, l, 1234, prep);
        }
  }
}

// cross_entropy_backward with soft-capping and z-loss (linear_cross_entropy's row pass: docs/ops.md section
// 6; the registry's cross_entropy has neither), against a float64 reference computed here: z' = c tanh(z /
// c), lse over z', loss = lse - (1 - eps) z'_t - eps / C sum z' + zl lse^2, d z = (exp(z' - lse)(1 + 2 zl
// lse) - eps / C - [j = t](1 - eps)) sech^2(z / c) / count. The block-per-row kernel and the cluster
// kernel (automatic, forced 3, misaligned), f32 / f16 / bf16.
void cross_entropy_capped(const std::string& only) {
  if (std::string("cross_entropy_backward").find(only) == std::string::npos) return;
  struct X { int64_t n, c; double smoothing, cap, zl; };
  const std::vector<XentVariant> variants = {{227 * 1024, false, 0, 0, "_softcap"},
                                             {227 * 1024, false, 90, 0, "_softcap_cluster"},
                                             {227 * 1024, false, 90, 3, "_softcap_cluster3"},
                                             {227 * 1024, true, 90, 0, "_softcap_cluster_misaligned"}};
  for (const X& x : {X{3, 131072 + 5, 0.1, 3.0, 1e-3}, X{4, 40003, 0, 2.5, 0}, X{3, 4104, 0.2, 3.0, 1e-4}})
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (const XentVariant& v : variants) {
        const int64_t N = x.n, C = x.c;
        if (v.cc && v.cluster == 0 && xent_cluster_expect(dt, C, v) == 0) continue;
        const double ign = -100;
        std::vector<double> z(static_cast<size_t>(N * C)), tg(static_cast<size_t>(N));
        uint64_t st = 0x9e3779b97f4a7c15ull * uint64_t(C + N);
        for (double& e : z) {
          st = st * 6364136223846793005ull + 1442695040888963407ull;
          e = check::round_to(dt, (double((st >> 11) & ((1ull << 53) - 1)) / double(1ull << 53) * 2 - 1) * 8);
        }
        for (int64_t r = 0; r < N; ++r) tg[size_t(r)] = double((r * 7919 + 13) % C);
        tg[0] = double(C - 1);
        z[size_t(C - 1)] = check::round_to(dt, 12);  // past the cap: z' near c
        if (N > 1) tg[1] = ign;
        // The reference.
        std::vector<double> gref(size_t(N * C), 0.0);
        double total = 0, count = 0;
        for (int64_t r = 0; r < N; ++r) count += tg[size_t(r)] != ign;
        for (int64_t r = 0; r < N; ++r) {
          const double* zr = &z[size_t(r * C)];
          std::vector<double> zc(static_cast<size_t>(C));
          double m = -INFINITY, s = 0, sx = 0;
          for (int64_t j = 0; j < C; ++j) zc[size_t(j)] = x.cap * std::tanh(zr[j] / x.cap), m = std::max(m, zc[size_t(j)]);
          for (int64_t j = 0; j < C; ++j) s += std::exp(zc[size_t(j)] - m), sx += zc[size_t(j)];
          const double lse = m + std::log(s);
          if (tg[size_t(r)] == ign) continue;
          const int64_t t = int64_t(tg[size_t(r)]);
          total += lse - (1 - x.smoothing) * zc[size_t(t)] - x.smoothing / double(C) * sx + x.zl * lse * lse;
          for (int64_t j = 0; j < C; ++j) {
            const double ch = std::cosh(zr[j] / x.cap);
            gref[size_t(r * C + j)] = (std::exp(zc[size_t(j)] - lse) * (1 + 2 * x.zl * lse) - x.smoothing / double(C) -
                                       (j == t ? 1 - x.smoothing : 0.0)) / (ch * ch) / count;
          }
        }
        const std::vector<double> lref = {total / count};
        // The kernels.
        std::vector<Buf> in = {alloc(size_t(N * C) * dtype_size(dt), 0), alloc(size_t(N) * 4, 0)};
        for (size_t i = 0; i < z.size(); ++i) store(in[0].data(), i, dt, z[i]);
        for (int64_t r = 0; r < N; ++r) {
          const int32_t iv = int32_t(tg[size_t(r)]);
          std::memcpy(in[1].data() + r * 4, &iv, 4);
        }
        std::vector<Buf> out = {alloc(dtype_size(dt), 0xff), alloc(size_t(N * C) * dtype_size(dt), 0xff)};
        Attrs a;
        a.label_smoothing = x.smoothing;
        a.ignore_index = int64_t(ign);
        const std::string variant = xent_launch(dt, true, v, in, {{N, C}, {N}}, out, a, x.cap, x.zl);
        const std::string label = "n" + std::to_string(N) + "_c" + std::to_string(C) + v.tag;
        for (int k = 0; k < 2; ++k) {
          const std::vector<double>& ref = k ? gref : lref;
          std::vector<double> o(ref.size());
          for (size_t i = 0; i < o.size(); ++i) o[i] = load(out[size_t(k)].data(), i, dt);
          const check::Comparison c = check::compare(o, ref, dt, double(C));
          ++runs;
          fails += !c.pass;
          if (!c.pass || std::getenv("EMU_VERBOSE"))
            std::printf("%s %-18s %-28s %-4s %-6s %-44s err %.3g (limit %.3g) worst %.3g at %lld (got %g want %g)\n",
                        c.pass ? "ok  " : "FAIL", "cross_entropy_backward", label.c_str(), to_string(dt),
                        k ? "d_logits" : "loss", variant.c_str(), c.err, c.err_limit, c.worst, (long long)c.worst_index,
                        c.worst_out, c.worst_ref);
        }
        std::fflush(stdout);
      }
}

// ---- layer_norm_backward / rms_norm_backward (norm.cu), as Kern::NormBwd: the fused plan (rows of whole
// packs, aligned; grids smaller than the rows: `sms` multiprocessors at the emulation's 4 blocks each,
// and at most 64 rows a block) and the separate one (rows not whole packs, longer than 4 packs x 1024
// threads or than the shared memory, a misaligned tensor); with and without w.
struct NormBwdKnobs {
  int sms = 1;
  int64_t smem_limit = 227 * 1024;
  bool misalign = false;  // x at an address 2 bytes past 16-byte alignment: the separate plan
};
Launch norm_bwd_launch(const std::string& name, DType dt, const Attrs& attrs, NormBwdKnobs knobs) {
  return [=](const std::vector<Buf>& in, const std::vector<Shape>& shapes, std::vector<Buf>& out,
             const std::vector<Shape>&) -> std::string {
    const bool layer = name == "layer_norm_backward";
    hc::NormBwdParams p;
    p.dy = ptr(in, 0), p.x = ptr(in, 1), p.w = ptr(in, 2);
    p.dx = out[0].data(), p.dw = out[1].data(), p.db = layer ? out[2].data() : nullptr;
    p.feat = std::max<int64_t>(1, shapes[0].back()), p.rows = numel(shapes[0]) / p.feat;
    p.eps = get_op(name).eps_of(attrs), p.layer = layer;
    Buf shifted;
    if (knobs.misalign) {
      const size_t bytes = size_t(numel(shapes[0])) * dtype_size(dt);
      shifted = alloc(bytes + 16, 0);
      std::memcpy(shifted.data() + 2, in[1].data(), bytes);
      p.x = shifted.data() + 2;
    }
    p.chunk_rows = 64;
    p.nchunks = (p.rows + p.chunk_rows - 1) / p.chunk_rows;
    if (p.nchunks > 65535) {
      p.chunk_rows = (p.rows + 65534) / 65535;
      p.nchunks = (p.rows + p.chunk_rows - 1) / p.chunk_rows;
    }
    p.sms = knobs.sms, p.smem_limit = knobs.smem_limit;
    int block = 32;
    while (block < 1024 && int64_t(block) * 4 < p.feat) block *= 2;
    hc::NormBwdLaunch l;
    hc::plan_norm_backward(dt_of(dt), p, block, l);
    Buf ws = alloc(size_t(l.ws_elems) * (dt == DType::f64 ? 8 : 4), 0xff);  // poisoned
    p.ws = ws.data();
    hc::launch_norm_backward(dt_of(dt), p, l, nullptr);
    if (l.fused)
      return "fused,block=" + std::to_string(l.block) + ",partials=" + std::to_string(l.grid) + ",smem=" +
             std::to_string(l.smem);
    return "separate,block=" + std::to_string(block) + ",chunks=" + std::to_string(p.nchunks) +
           (knobs.misalign ? ",x-misaligned" : "");
  };
}

void norm_backwards(const std::string& only) {
  for (const std::string name : {"layer_norm_backward", "rms_norm_backward"}) {
    if (name.find(only) == std::string::npos) continue;
    const OpDef& op = get_op(name);
    const bool layer = name == "layer_norm_backward";
    std::vector<TestCase> cases;
    for (const TestCase& tc : op.tests)
      if (numel(tc.inputs[0]) <= (int64_t(1) << 20)) cases.push_back(tc);
    // (rows, features): rows of 1, 3, 17 (not whole packs), 24, 1000 and 4096 (whole packs), 1003, 4104
    // (a partial last round of packs), 16384 (1024 threads; f16 / bf16: 512), 65536 (the separate plan
    // but for 16-bit rms), 300 rows of 17 and 24 (many rows per block).
    struct S { int64_t rows, feat; };
    const std::vector<S> shapes = {{3, 1}, {5, 3}, {4, 17}, {300, 17}, {300, 24}, {3, 1000}, {2, 1003}, {130, 64},
                                   {3, 4096}, {2, 4104}, {2, 16384}, {2, 65536}};
    for (const S& sh : shapes)
      for (int with_w : {1, 0}) {
        if (!layer && sh.feat == 1) continue;  // (degenerate for rms: see the registry's cases)
        TestCase tc{"x[" + std::to_string(sh.rows) + "," + std::to_string(sh.feat) + "]" + (with_w ? "" : "_no_w"),
                    {{sh.rows, sh.feat}, {sh.rows, sh.feat}}, {}, 2};
        if (with_w) tc.inputs.push_back({sh.feat});
        cases.push_back(tc);
      }
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
      for (const TestCase& tc : cases) {
        const int64_t n = numel(tc.inputs[0]);
        run(name, tc.label, tc.inputs, tc.attrs, dt, tc.range, norm_bwd_launch(name, dt, tc.attrs, {}));
        if (n > 300000) continue;
        // One block per row (132 multiprocessors: rows <= 528), and a misaligned x (the separate plan).
        run(name, tc.label + "_sms132", tc.inputs, tc.attrs, dt, tc.range, norm_bwd_launch(name, dt, tc.attrs, {132}));
        run(name, tc.label + "_misaligned", tc.inputs, tc.attrs, dt, tc.range,
            norm_bwd_launch(name, dt, tc.attrs, {1, 227 * 1024, true}));
        // Little shared memory: the fused plan only for short rows.
        run(name, tc.label + "_smem40k", tc.inputs, tc.attrs, dt, tc.range,
            norm_bwd_launch(name, dt, tc.attrs, {1, 40 * 1024}));
      }
    // A row whose spread is small next to its mean (the corrected two-pass), f32: x = 100 + 0.01 u.
    if (layer)
      for (int64_t feat : {int64_t(4096), int64_t(1003)}) {
        const std::vector<Shape> in = {{70, feat}, {70, feat}, {feat}};
        const Prep shift = [](std::vector<std::vector<double>>& v) {
          for (double& e : v[1]) e = 100 + 0.01 * e;
        };
        run(name, "[70," + std::to_string(feat) + "]_mean100_sd0.006", in, {}, DType::f32, 1,
            norm_bwd_launch(name, DType::f32, {}, {}), 99, shift);
      }
  }
}

}  // namespace

// ---- Attrs::out_dtype of the matrix products (matmul.cpp dispatch_matmul_out_dtype, mirrored: keep the two in
// step): the product in f32 (cuBLASLt's part: a plain product here, accumulated in double and rounded to
// f32), the bias converted to f32 (launch_convert), train.cu's epilogue in f32 (with the residual when the
// output is f32), then launch_convert to a 16-bit output adding the residual; on the registry's *_out_*
// cases of linear, linear_dropout and matmul, every input dtype.
void out_dtype_products(const std::string& only) {
  if (std::string("linear matmul out_dtype").find(only) == std::string::npos) return;
  for (const std::string name : {"linear", "linear_dropout", "matmul"}) {
    const OpDef& op = get_op(name);
    for (const TestCase& tc : op.tests) {
      if (!tc.attrs.out_dtype) continue;
      for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
        const Attrs& a = tc.attrs;
        const DType odt = *a.out_dtype;
        std::vector<Shape> shapes = tc.inputs;
        shapes.resize(op.inputs.size());
        auto v = check::random_inputs(shapes, tc.range, 99);
        std::vector<HostTensor> host(shapes.size());
        std::vector<Buf> in(shapes.size());
        for (size_t k = 0; k < shapes.size(); ++k) {
          if (shapes[k].empty()) continue;
          const DType t = op.input_dtype(k, dt, a);
          host[k].shape = shapes[k];
          in[k] = alloc(v[k].size() * dtype_size(t), 0);
          for (size_t i = 0; i < v[k].size(); ++i) {
            host[k].data.push_back(check::round_to(t, v[k][i]));
            store(in[k].data(), i, t, host[k].data.back());
          }
        }
        const Shape ys = op.infer(op, shapes, a)[0];
        std::vector<HostTensor> ref(1);
        ref[0].shape = ys;
        ref[0].data.assign(size_t(numel(ys)), 0.0);
        op.reference(host, ref, a);
        // The product (row-major): linear y = x W^T, matmul y[b] = a[b] b[b] (b shared or batched).
        const bool lin = name != "matmul";
        const int64_t K = shapes[0].back(), N = lin ? shapes[1][0] : shapes[1].back();
        const int64_t rows = numel(shapes[0]) / K, n_out = rows * N;
        const int64_t M = lin ? rows : shapes[0][shapes[0].size() - 2];
        const bool b_batched = !lin && shapes[1].size() > 2;
        Buf acc = alloc(size_t(n_out) * 4, 0xff);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            const int64_t bi = r / M;
            for (int64_t k = 0; k < K; ++k)
              s += host[0].data[size_t(r * K + k)] *
                   (lin ? host[1].data[size_t(n * K + k)] : host[1].data[size_t((b_batched ? bi * K * N : 0) + k * N + n)]);
            store(acc.data(), size_t(r * N + n), DType::f32, s);
          }
        Buf bias32, y = alloc(size_t(n_out) * dtype_size(odt), 0xff);
        if (!shapes[2].empty()) {
          bias32 = alloc(size_t(N) * 4, 0xff);
          hc::ConvertParams cb;
          cb.src = in[2].data(), cb.dst = bias32.data(), cb.n = N;
          hc::launch_convert(dt_of(dt), hc::Dt::f32, cb, 2, nullptr);
        }
        const bool direct = odt == DType::f32;
        void* acc_p = direct ? y.data() : acc.data();
        if (direct) std::memcpy(y.data(), acc.data(), size_t(n_out) * 4);
        hc::EpilogueParams ep;
        ep.y = acc_p;
        ep.bias = bias32.bytes ? bias32.data() : nullptr;
        ep.res = direct ? ptr(in, 3) : nullptr;
        ep.act = static_cast<int>(a.act);
        ep.total = n_out, ep.n = N;
        if (name == "linear_dropout" && a.p > 0) {
          ep.seed_lo = uint32_t(a.seed), ep.seed_hi = uint32_t(a.seed >> 32);
          ep.off_lo = uint32_t(a.offset), ep.off_hi = uint32_t(a.offset >> 32);
          ep.thr = ref::dropout_threshold(a.p), ep.keep_scale = 1.0 / (1.0 - a.p);
        }
        if (ep.bias || ep.res || ep.act != 0 || ep.thr != 0u) hc::launch_epilogue(hc::Dt::f32, ep, 3, nullptr);
        if (!direct) {
          hc::ConvertParams cv;
          cv.src = acc_p, cv.add = ptr(in, 3), cv.dst = y.data(), cv.n = n_out;
          hc::launch_convert(hc::Dt::f32, dt_of(odt), cv, 3, nullptr);
        }
        std::vector<double> o(static_cast<size_t>(n_out));
        for (size_t i = 0; i < o.size(); ++i) o[i] = load(y.data(), i, odt);
        const check::Comparison c = check::compare(o, ref[0].data, odt, op.terms(shapes));
        ++runs;
        fails += !c.pass;
        if (!c.pass || std::getenv("EMU_VERBOSE"))
          std::printf("%s %-18s %-28s %-4s -> %-4s err %.3g (limit %.3g) worst %.3g at %lld (got %g want %g)\n",
                      c.pass ? "ok  " : "FAIL", name.c_str(), tc.label.c_str(), to_string(dt), to_string(odt), c.err,
                      c.err_limit, c.worst, (long long)c.worst_index, c.worst_out, c.worst_ref);
      }
    }
  }
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  out_dtype_products(only);
  norms(only);
  batch_norms(only);
  optimizers(only);
  mse(only);
  rows(only);
  eltwise(only);
  softmax_backward(only);
  cross_entropy(only);
  cross_entropy_capped(only);
  norm_backwards(only);
  std::printf("mem: %d comparisons, fails: %d\n", runs, fails);
  return fails != 0;
}
