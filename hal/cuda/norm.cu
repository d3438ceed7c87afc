// Normalizations (KERNELS.md section 3) in CUDA/HIP: layer_norm, rms_norm and their fusions,
// add_layer_norm / add_rms_norm, group_norm, batch_norm_relu, and the backward kernels softmax_backward,
// layer_norm_backward and rms_norm_backward. The counterpart of shaders/norm.comp, norm_bwd.comp and
// batchnorm.comp, with one regime: one block per row, the row read from memory once per pass (the
// statistics' passes, then the output's), block sums in a fixed order (common.cuh), so that the same
// input gives the same bits every run. Accumulation in float (double for f64).
// The mean is carried as hi + lo (the corrected two-pass algorithm of Chan, Golub and LeVeque, as
// norm.comp): hi = sum / L, lo = sum(x - hi) / L, and x - mean computed as (x - hi) - lo, so that rows
// whose spread is small next to their mean keep their precision.
#include "hal/cuda/common.cuh"

namespace kf::hal::cuda {
namespace {

template <NormOp OP> constexpr bool kAdd = OP == NormOp::add_layer || OP == NormOp::add_rms;
template <NormOp OP>
constexpr bool kRms = OP == NormOp::rms || OP == NormOp::rms_gelu || OP == NormOp::rms_silu || OP == NormOp::add_rms;

template <NormOp OP, class M, class C> KF_DEV C norm_act(C v) {
  if constexpr (OP == NormOp::layer_relu) return relu_f<M>(v);
  else if constexpr (OP == NormOp::layer_gelu || OP == NormOp::rms_gelu) return gelu_f<M>(v);
  else if constexpr (OP == NormOp::layer_silu || OP == NormOp::rms_silu) return silu_f<M>(v);
  else return v;
}

template <class T> KF_DEV typename T::C centered(typename T::C v, typename T::C hi, typename T::C lo) {
  return (v - hi) - lo;
}

// The second pass of the corrected two-pass algorithm, over the block: c and d2 are this thread's sums
// of (x - hi) and (x - hi)^2; lo = sum(x - hi) / L and m2 = sum((x - hi)^2) - c lo (never below 0).
template <class C> KF_DEV void corrected_moments(C c, C d2, int64_t L, C* sm, C& lo, C& m2) {
  c = block_sum(c, sm);
  m2 = block_sum(d2, sm);
  lo = c / C(L);
  m2 = m2 - c * lo;
  if (m2 < C(0)) m2 = C(0);
}

// The row's value j: x, or x + r for the add forms (recomputed in each pass: the same value every time).
template <NormOp OP, class T> KF_DEV typename T::C row_value(const NormParams& p, int64_t i) {
  typename T::C v = T::load(p.x, i);
  if constexpr (kAdd<OP>) v += T::load(p.r, i);
  return v;
}

template <NormOp OP, class T>
__global__ void __launch_bounds__(1024) norm_kernel(const NormParams p) {
  using C = typename T::C;
  using M = Math<C, false>;
  __shared__ C sm[32];
  const int64_t L = p.feat;
  const C eps = static_cast<C>(p.eps);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * L;
    C hi = C(0), lo = C(0), m2 = C(0);
    if constexpr (kRms<OP>) {
      C ss = C(0);
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        const C v = row_value<OP, T>(p, base + j);
        if constexpr (kAdd<OP>) T::store(p.s, base + j, v);
        ss += v * v;
      }
      m2 = block_sum(ss, sm);
    } else {
      C s = C(0);
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        const C v = row_value<OP, T>(p, base + j);
        if constexpr (kAdd<OP>) T::store(p.s, base + j, v);
        s += v;
      }
      hi = block_sum(s, sm) / C(L);
      C c = C(0), d2 = C(0);
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        const C d = row_value<OP, T>(p, base + j) - hi;
        c += d, d2 += d * d;
      }
      corrected_moments(c, d2, L, sm, lo, m2);
    }
    const C rstd = C(1) / m_sqrt(m2 / C(L) + eps);
    const int64_t g0 = p.groups == 1 ? 0 : (row % p.groups) * p.cpg;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const int64_t ch = g0 + (p.inner == 1 ? j : j / p.inner);
      C o = centered<T>(row_value<OP, T>(p, base + j), hi, lo) * rstd;
      if (p.w) o *= T::load(p.w, ch);
      if (p.b) o += T::load(p.b, ch);
      T::store(p.y, base + j, norm_act<OP, M>(o));
    }
  }
}

// The register-cached form of norm_kernel for rows that fit (layer and rms norm and their fusions, not
// group_norm; the row a multiple of the 16-byte pack, every pointer 16-byte aligned): each thread loads
// up to CACHE packs of the row once, with all its loads issued before any arithmetic, and the
// statistics and the output come from the registers: the row is read from memory once (norm_kernel
// reads it in every pass, element by element: 0.2-0.5 of copy on an H100 where Vulkan's cached kernel
// reached 0.9-1.0). Same formulas (hi + lo, fixed-order block sums).
template <NormOp OP, class T, int CACHE>
__global__ void __launch_bounds__(1024) norm_cached_kernel(const NormParams p) {
  using C = typename T::C;
  using M = Math<C, false>;
  constexpr int VW = T::VW;
  __shared__ C sm[32];
  const int64_t L = p.feat;
  const int npk = static_cast<int>(L / VW);
  const C eps = static_cast<C>(p.eps);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * L;  // elements; base / VW packs
    C x[CACHE][VW];
    uint4 raw[CACHE], rawr[CACHE];
#pragma unroll
    for (int u = 0; u < CACHE; ++u) {
      const int j = threadIdx.x + u * blockDim.x;
      if (j < npk) {
        raw[u] = load_pack(p.x, base / VW + j);
        if constexpr (kAdd<OP>) rawr[u] = load_pack(p.r, base / VW + j);
      }
    }
#pragma unroll
    for (int u = 0; u < CACHE; ++u) {
      const int j = threadIdx.x + u * blockDim.x;
      if (j < npk) {
        T::unpack(raw[u], x[u]);
        if constexpr (kAdd<OP>) {
          C r[VW];
          T::unpack(rawr[u], r);
#pragma unroll
          for (int k = 0; k < VW; ++k) x[u][k] += r[k];
          store_pack(p.s, base / VW + j, T::pack(x[u]));  // (the statistics use the unrounded sum, as norm_kernel)
        }
      } else {
#pragma unroll
        for (int k = 0; k < VW; ++k) x[u][k] = C(0);
      }
    }
    C hi = C(0), lo = C(0), m2 = C(0);
    if constexpr (kRms<OP>) {
      C ss = C(0);
#pragma unroll
      for (int u = 0; u < CACHE; ++u)
#pragma unroll
        for (int k = 0; k < VW; ++k) ss += x[u][k] * x[u][k];
      m2 = block_sum(ss, sm);
    } else {
      C sum = C(0);
#pragma unroll
      for (int u = 0; u < CACHE; ++u)
#pragma unroll
        for (int k = 0; k < VW; ++k) sum += x[u][k];
      hi = block_sum(sum, sm) / C(L);
      C c = C(0), d2 = C(0);
#pragma unroll
      for (int u = 0; u < CACHE; ++u)
        if (threadIdx.x + u * blockDim.x < npk)
#pragma unroll
          for (int k = 0; k < VW; ++k) {
            const C d = x[u][k] - hi;
            c += d, d2 += d * d;
          }
      corrected_moments(c, d2, L, sm, lo, m2);
    }
    const C rstd = C(1) / m_sqrt(m2 / C(L) + eps);
#pragma unroll
    for (int u = 0; u < CACHE; ++u) {
      const int j = threadIdx.x + u * blockDim.x;
      if (j >= npk) continue;
      C w[VW], b[VW], o[VW];
      if (p.w) T::unpack(load_pack(p.w, j), w);
      if (p.b) T::unpack(load_pack(p.b, j), b);
#pragma unroll
      for (int k = 0; k < VW; ++k) {
        C v = centered<T>(x[u][k], hi, lo) * rstd;
        if (p.w) v *= w[k];
        if (p.b) v += b[k];
        o[k] = norm_act<OP, M>(v);
      }
      store_pack(p.y, base / VW + j, T::pack(o));
    }
  }
}

// g = dy w rounded before it is used: contracted into sum(g) or into g - mean(g) (nvcc fuses a * b + c
// by default), the product would keep digits the other side lacks; on an H100 that left 2.8e-5 where a
// one-element row's gradient is exactly 0 (as norm_bwd.comp's `precise`).
KF_DEV float mul_rounded(float a, float b) { return __fmul_rn(a, b); }
KF_DEV double mul_rounded(double a, double b) { return __dmul_rn(a, b); }

// layer_norm_backward / rms_norm_backward, the row pass: dx = rstd (g - sum(g) / L - xhat sum(g xhat) / L)
// with g = dy w (rms: without the sum(g) term); the row's (hi, lo, rstd) to ws for the column pass.
template <class T>
__global__ void __launch_bounds__(1024) norm_bwd_rows(const NormBwdParams p) {
  using C = typename T::C;
  __shared__ C sm[32];
  const int64_t L = p.feat;
  C* ws = static_cast<C*>(p.ws);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * L;
    C hi = C(0), lo = C(0), m2 = C(0);
    if (p.layer) {
      C s = C(0);
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) s += T::load(p.x, base + j);
      hi = block_sum(s, sm) / C(L);
      C c = C(0), d2 = C(0);
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        const C d = T::load(p.x, base + j) - hi;
        c += d, d2 += d * d;
      }
      corrected_moments(c, d2, L, sm, lo, m2);
    } else {
      C ss = C(0);
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        const C v = T::load(p.x, base + j);
        ss += v * v;
      }
      m2 = block_sum(ss, sm);
    }
    const C rs = C(1) / m_sqrt(m2 / C(L) + static_cast<C>(p.eps));
    C sg = C(0), sgx = C(0);
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const C g = mul_rounded(T::load(p.dy, base + j), p.w ? T::load(p.w, j) : C(1));
      sg += g, sgx += g * (centered<T>(T::load(p.x, base + j), hi, lo) * rs);
    }
    sg = p.layer ? block_sum(sg, sm) : C(0);
    sgx = block_sum(sgx, sm);
    const C mg = sg / C(L), mgx = sgx / C(L);
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const C g = mul_rounded(T::load(p.dy, base + j), p.w ? T::load(p.w, j) : C(1));
      const C xhat = centered<T>(T::load(p.x, base + j), hi, lo) * rs;
      T::store(p.dx, base + j, rs * (g - mg - xhat * mgx));
    }
    if (threadIdx.x == 0) ws[3 * row] = hi, ws[3 * row + 1] = lo, ws[3 * row + 2] = rs;
  }
}

// Kahan-compensated running sum.
template <class C> struct Kahan {
  C s = C(0), c = C(0);
  KF_DEV void add(C v) {
    const C y = v - c;
    const C t = s + y;
    c = (t - s) - y;
    s = t;
  }
};

// The column pass: thread (column f, chunk k) sums dy xhat and dy over the chunk's rows, in row order.
template <class T>
__global__ void __launch_bounds__(256) norm_bwd_cols(const NormBwdParams p) {
  using C = typename T::C;
  const int64_t L = p.feat;
  const int64_t f = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t k = blockIdx.y;
  if (f >= L) return;
  const C* st = static_cast<const C*>(p.ws);
  C* part = static_cast<C*>(p.ws) + 3 * p.rows;
  Kahan<C> dw, db;
  const int64_t r1 = (k + 1) * p.chunk_rows < p.rows ? (k + 1) * p.chunk_rows : p.rows;
  for (int64_t r = k * p.chunk_rows; r < r1; ++r) {
    const C dy = T::load(p.dy, r * L + f);
    dw.add(dy * (centered<T>(T::load(p.x, r * L + f), st[3 * r], st[3 * r + 1]) * st[3 * r + 2]));
    db.add(dy);
  }
  part[2 * (k * L + f)] = dw.s;
  part[2 * (k * L + f) + 1] = db.s;
}

// The combine pass: the chunks of each column in chunk order.
template <class T>
__global__ void __launch_bounds__(256) norm_bwd_combine(const NormBwdParams p) {
  using C = typename T::C;
  const int64_t L = p.feat;
  const int64_t f = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (f >= L) return;
  const C* part = static_cast<const C*>(p.ws) + 3 * p.rows;
  Kahan<C> dw, db;
  for (int64_t k = 0; k < p.nchunks; ++k) dw.add(part[2 * (k * L + f)]), db.add(part[2 * (k * L + f) + 1]);
  T::store(p.dw, f, dw.s);
  if (p.db) T::store(p.db, f, db.s);
}

// softmax_backward: dx = s y (dy - sum(dy y)).
template <class T>
__global__ void __launch_bounds__(1024) softmax_bwd_kernel(const SoftmaxBwdParams p) {
  using C = typename T::C;
  __shared__ C sm[32];
  const int64_t L = p.feat;
  const C scale = static_cast<C>(p.scale);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * L;
    C s = C(0);
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) s += T::load(p.dy, base + j) * T::load(p.y, base + j);
    s = block_sum(s, sm);
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const C y = T::load(p.y, base + j);
      T::store(p.dx, base + j, scale * y * (T::load(p.dy, base + j) - s));
    }
  }
}

// batch_norm_relu (inference, NCHW): y = relu((x - mean[c]) * (w[c] / m_sqrt(var[c] + eps)) + b[c]).
template <class T>
__global__ void __launch_bounds__(256) batch_norm_relu_kernel(const BatchNormParams p) {
  using C = typename T::C;
  using M = Math<C, false>;
  const C eps = static_cast<C>(p.eps);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (i / p.inner) % p.channels;
    const C scale = T::load(p.w, c) * (C(1) / m_sqrt(T::load(p.var, c) + eps));
    T::store(p.y, i, relu_f<M>((T::load(p.x, i) - T::load(p.mean, c)) * scale + T::load(p.b, c)));
  }
}


uint32_t row_blocks(int64_t rows) { return static_cast<uint32_t>(rows < 1 ? 1 : rows > (int64_t(1) << 30) ? int64_t(1) << 30 : rows); }

constexpr int kNormCache = 4;  // packs per thread of the cached kernel

// The block of the cached kernel for these parameters (a power of two from 32 to 1024 threads holding
// the row in kNormCache packs each), or 0 when the row does not qualify.
template <class T> int cached_block(const NormParams& p) {
  const auto misaligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) != 0; };
  if (p.groups != 1 || p.inner != 1 || p.feat % T::VW != 0 || misaligned(p.x) || misaligned(p.r) ||
      misaligned(p.w) || misaligned(p.b) || misaligned(p.y) || misaligned(p.s))
    return 0;
  const int64_t npk = p.feat / T::VW;
  int block = 32;
  while (int64_t(block) * kNormCache < npk && block < 1024) block *= 2;
  return int64_t(block) * kNormCache >= npk ? block : 0;
}

template <NormOp OP, class T> int norm_launch(const NormParams& p, int block, gpuStream_t s, int* used) {
  if (const int cb = cached_block<T>(p)) {
    norm_cached_kernel<OP, T, kNormCache><<<row_blocks(p.rows), cb, 0, s>>>(p);
    if (used) *used = cb;
    return static_cast<int>(gpuGetLastError());
  }
  norm_kernel<OP, T><<<row_blocks(p.rows), block, 0, s>>>(p);
  if (used) *used = 0;
  return static_cast<int>(gpuGetLastError());
}

template <NormOp OP> int norm_op(Dt dt, const NormParams& p, int block, gpuStream_t s, int* used) {
  switch (dt) {
    case Dt::f32: return norm_launch<OP, F32>(p, block, s, used);
    case Dt::f16: return norm_launch<OP, F16>(p, block, s, used);
    case Dt::bf16: return norm_launch<OP, BF16>(p, block, s, used);
    case Dt::f64: return norm_launch<OP, F64>(p, block, s, used);
  }
  return -1;
}

template <class T> int norm_bwd_launch(const NormBwdParams& p, int block, gpuStream_t s) {
  norm_bwd_rows<T><<<row_blocks(p.rows), block, 0, s>>>(p);
  int e = static_cast<int>(gpuGetLastError());
  if (e) return e;
  const uint32_t cols = static_cast<uint32_t>((p.feat + 255) / 256);
  norm_bwd_cols<T><<<dim3(cols, static_cast<uint32_t>(p.nchunks)), 256, 0, s>>>(p);
  e = static_cast<int>(gpuGetLastError());
  if (e) return e;
  norm_bwd_combine<T><<<cols, 256, 0, s>>>(p);
  return static_cast<int>(gpuGetLastError());
}

}  // namespace

int launch_norm(NormOp op, Dt dt, const NormParams& p, int block, void* stream, int* cached_block) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (op) {
    case NormOp::layer: return norm_op<NormOp::layer>(dt, p, block, s, cached_block);
    case NormOp::rms: return norm_op<NormOp::rms>(dt, p, block, s, cached_block);
    case NormOp::layer_relu: return norm_op<NormOp::layer_relu>(dt, p, block, s, cached_block);
    case NormOp::layer_gelu: return norm_op<NormOp::layer_gelu>(dt, p, block, s, cached_block);
    case NormOp::layer_silu: return norm_op<NormOp::layer_silu>(dt, p, block, s, cached_block);
    case NormOp::rms_gelu: return norm_op<NormOp::rms_gelu>(dt, p, block, s, cached_block);
    case NormOp::rms_silu: return norm_op<NormOp::rms_silu>(dt, p, block, s, cached_block);
    case NormOp::add_layer: return norm_op<NormOp::add_layer>(dt, p, block, s, cached_block);
    case NormOp::add_rms: return norm_op<NormOp::add_rms>(dt, p, block, s, cached_block);
  }
  return -1;
}

int launch_norm_backward(Dt dt, const NormBwdParams& p, int block, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (dt) {
    case Dt::f32: return norm_bwd_launch<F32>(p, block, s);
    case Dt::f16: return norm_bwd_launch<F16>(p, block, s);
    case Dt::bf16: return norm_bwd_launch<BF16>(p, block, s);
    case Dt::f64: return norm_bwd_launch<F64>(p, block, s);
  }
  return -1;
}

int launch_softmax_backward(Dt dt, const SoftmaxBwdParams& p, int block, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  const uint32_t g = row_blocks(p.rows);
  switch (dt) {
    case Dt::f32: softmax_bwd_kernel<F32><<<g, block, 0, s>>>(p); break;
    case Dt::f16: softmax_bwd_kernel<F16><<<g, block, 0, s>>>(p); break;
    case Dt::bf16: softmax_bwd_kernel<BF16><<<g, block, 0, s>>>(p); break;
    case Dt::f64: softmax_bwd_kernel<F64><<<g, block, 0, s>>>(p); break;
  }
  return static_cast<int>(gpuGetLastError());
}

int launch_batch_norm_relu(Dt dt, const BatchNormParams& p, uint32_t blocks, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (dt) {
    case Dt::f32: batch_norm_relu_kernel<F32><<<blocks, 256, 0, s>>>(p); break;
    case Dt::f16: batch_norm_relu_kernel<F16><<<blocks, 256, 0, s>>>(p); break;
    case Dt::bf16: batch_norm_relu_kernel<BF16><<<blocks, 256, 0, s>>>(p); break;
    case Dt::f64: batch_norm_relu_kernel<F64><<<blocks, 256, 0, s>>>(p); break;
  }
  return static_cast<int>(gpuGetLastError());
}

}  // namespace kf::hal::cuda
