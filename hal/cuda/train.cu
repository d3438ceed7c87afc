// Training kernels (KERNELS.md section 6) in CUDA/HIP: cross_entropy (+ its gradient in the same pass),
// mse, adamw_step and sgd_step; and the matrix products' own epilogue (matmul.cpp). Counterparts of
// shaders/loss.comp and optim.comp. Sums in a fixed order (block sums of common.cuh, then partial sums
// added in index order by one block): the same bits every run. Accumulation in float (double for f64).
#include "hal/cuda/common.cuh"

namespace kf::hal::cuda {
namespace {

template <class C> KF_DEV C nan_of() {
  if constexpr (sizeof(C) == 8) return __longlong_as_double(0x7ff8000000000000ll);
  else return __int_as_float(0x7fc00000);
}
KF_DEV float m_log(float x) { return logf(x); }
KF_DEV double m_log(double x) { return ::log(x); }
KF_DEV float m_exp(float x) { return expf(x); }
KF_DEV double m_exp(double x) { return ::exp(x); }
KF_DEV float m_cosh(float x) { return coshf(x); }
KF_DEV double m_cosh(double x) { return ::cosh(x); }

// ---- cross_entropy. ws (compute type C): [0] the count of targets not ignored, [1 + r] row r's loss.
// A target outside [0, C) that is not ignore_index is data on the device: its row's loss is NaN (so is
// the mean) and its gradient row is NaN (as loss.comp); the CPU backend raises kf::Error for it.
template <class C>
__global__ void __launch_bounds__(1024) xent_count(const XentParams p) {
  __shared__ C sm[32];
  int64_t n = 0;
  for (int64_t r = threadIdx.x; r < p.rows; r += blockDim.x) n += p.target[r] != p.ignore_index;
  // Integer counts below 2^53 (2^24 for float: the rows of any real batch) are exact in C.
  const C total = block_sum(C(n), sm);
  if (threadIdx.x == 0) static_cast<C*>(p.ws)[0] = total;
}

// One block per row. linear_cross_entropy (lce.cpp) runs it on chunks of rows: row_base offsets the
// targets and the losses (the logits are the chunk's), the logits may be soft-capped (taken when each
// value is used, so the memory holds the raw ones) and z_loss lse^2 joins each kept row's loss; its
// gradient may be written in place over the logits (grad == logits): every thread reads x_t before the
// first barrier, and each gradient element is written by the thread that read it, after the barriers.
// The row's statistics in one read: a running (max, sum of exp(x - max)) per thread, combined across the
// block in a fixed order (a warp butterfly, whose combine is commutative bit for bit, then the warps in
// index order). -inf logits add nothing. (Two reads, max then sum of exp, element by element, ran the
// 16-bit rows at a third of Vulkan's rate on an H100.)
template <class C> KF_DEV void lse_add(C& m, C& s, C v) {
  if (v == -C(INFINITY)) return;
  if (v > m) {
    s = s * m_exp(m - v) + C(1);
    m = v;
  } else {
    s += m_exp(v - m);
  }
}
template <class C> KF_DEV void lse_combine(C& m, C& s, C m2, C s2) {
  const C M = m > m2 ? m : m2;
  if (M == -C(INFINITY)) return;  // both empty: s and s2 are 0
  s = s * m_exp(m - M) + s2 * m_exp(m2 - M);
  m = M;
}
template <class C> KF_DEV void block_lse(C& m, C& s, C* sm_m, C* sm_s) {
#pragma unroll
  for (int o = KF_WARP / 2; o > 0; o >>= 1) lse_combine(m, s, KF_SHFL_XOR(m, o), KF_SHFL_XOR(s, o));
  const int nw = blockDim.x / KF_WARP;
  __syncthreads();
  if (threadIdx.x % KF_WARP == 0) sm_m[threadIdx.x / KF_WARP] = m, sm_s[threadIdx.x / KF_WARP] = s;
  __syncthreads();
  m = sm_m[0], s = sm_s[0];
  for (int k = 1; k < nw; ++k) lse_combine(m, s, sm_m[k], sm_s[k]);
}

template <class T>
__global__ void __launch_bounds__(1024) xent_rows(const XentParams p) {
  using C = typename T::C;
  __shared__ C sm[32], sm2[32];
  const int64_t N = p.classes;
  // 16-byte packs when every row starts on one (the logits' rows a multiple of the pack).
  const bool packs = N % T::VW == 0 && (reinterpret_cast<uintptr_t>(p.logits) & 15) == 0;
  C* ws = static_cast<C*>(p.ws);
  const C eps = static_cast<C>(p.smoothing), eps_c = static_cast<C>(p.smoothing / double(p.classes));
  const C cap = static_cast<C>(p.softcap), zl = static_cast<C>(p.z_loss);
  const auto capped = [&](C z) { return p.softcap > 0 ? cap * Math<C, false>::tanh(z / cap) : z; };
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * N;
    const int32_t t = p.target[p.row_base + row];
    const bool ignored = t == p.ignore_index, bad = !ignored && (t < 0 || int64_t(t) >= N);
    const C xt = ignored || bad ? C(0) : capped(T::load(p.logits, base + t));
    C m = -C(INFINITY), se = C(0), sx = C(0);
    if (packs) {
      const int64_t npk = N / T::VW;
      for (int64_t j = threadIdx.x; j < npk; j += blockDim.x) {
        C x[T::VW];
        T::unpack(load_pack(p.logits, base / T::VW + j), x);
        // The pack's max first, then one rescale and independent exps (a chain of lse_add per value
        // left the 16-bit rows latency-bound: 0.25 of copy).
        C pm = -C(INFINITY), ps = C(0);
#pragma unroll
        for (int k = 0; k < T::VW; ++k) {
          x[k] = capped(x[k]);
          pm = x[k] > pm ? x[k] : pm;
          sx += x[k];
        }
        if (pm != -C(INFINITY)) {
#pragma unroll
          for (int k = 0; k < T::VW; ++k) ps += m_exp(x[k] - pm);
        }
        lse_combine(m, se, pm, ps);
      }
    } else {
      for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
        const C v = capped(T::load(p.logits, base + j));
        lse_add(m, se, v);
        sx += v;
      }
    }
    block_lse(m, se, sm, sm2);
    sx = block_sum(sx, sm);
    const C lse = m + m_log(se);
    if (threadIdx.x == 0) {
      C loss = C(0);
      if (bad) loss = nan_of<C>();
      else if (!ignored) loss = lse - (C(1) - eps) * xt - eps_c * sx + zl * lse * lse;
      ws[1 + p.row_base + row] = loss;
    }
    if (p.grad) {
      const C count = ws[0];
      const C pscale = C(1) + C(2) * zl * lse;
      const auto grad_of = [&](C z, int64_t j) {
        if (bad) return nan_of<C>();
        if (ignored) return C(0);
        C g = m_exp(capped(z) - lse) * pscale - eps_c - (j == t ? C(1) - eps : C(0));
        if (p.softcap > 0) {  // d (c tanh(z / c)) / dz = sech^2(z / c), from the raw logit (cosh: +inf far out, 0)
          const C ch = m_cosh(z / cap);
          g = g / (ch * ch);
        }
        return g / count;
      };
      // 16-byte packs as the statistics' read (each pack written by the thread that read it: in place,
      // grad == logits, is safe); element by element otherwise.
      if (packs && (reinterpret_cast<uintptr_t>(p.grad) & 15) == 0) {
        const int64_t npk = N / T::VW;
        for (int64_t j = threadIdx.x; j < npk; j += blockDim.x) {
          C x[T::VW];
          T::unpack(load_pack(p.logits, base / T::VW + j), x);
#pragma unroll
          for (int k = 0; k < T::VW; ++k) x[k] = grad_of(x[k], j * T::VW + k);
          store_pack(p.grad, base / T::VW + j, T::pack(x));
        }
      } else {
        for (int64_t j = threadIdx.x; j < N; j += blockDim.x) T::store(p.grad, base + j, grad_of(T::load(p.logits, base + j), j));
      }
    }
  }
}

// The mean: row losses added in row order (each thread a strided run, then the block sum), NaN when
// every target is ignored (as torch).
template <class T>
__global__ void __launch_bounds__(1024) xent_final(const XentParams p) {
  using C = typename T::C;
  __shared__ C sm[32];
  const C* ws = static_cast<const C*>(p.ws);
  C s = C(0);
  for (int64_t r = threadIdx.x; r < p.rows; r += blockDim.x) s += ws[1 + r];
  s = block_sum(s, sm);
  if (threadIdx.x == 0) T::store(p.loss, 0, ws[0] == C(0) ? nan_of<C>() : s / ws[0]);
}

// ---- mse: p.blocks partial sums of (a - b)^2 (grid-stride, fixed grid), then one block adds them.
template <class T>
__global__ void __launch_bounds__(256) mse_partial(const MseParams p) {
  using C = typename T::C;
  __shared__ C sm[32];
  C s = C(0);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x) {
    const C d = T::load(p.a, i) - T::load(p.b, i);
    s += d * d;
  }
  s = block_sum(s, sm);
  if (threadIdx.x == 0) static_cast<C*>(p.ws)[blockIdx.x] = s;
}

template <class T>
__global__ void __launch_bounds__(256) mse_final(const MseParams p) {
  using C = typename T::C;
  __shared__ C sm[32];
  const C* ws = static_cast<const C*>(p.ws);
  C s = C(0);
  for (int k = threadIdx.x; k < p.blocks; k += blockDim.x) s += ws[k];
  s = block_sum(s, sm);
  if (threadIdx.x == 0) T::store(p.loss, 0, s / C(p.n));
}

// ---- Optimizers: element i read from the inputs, written to the outputs (in place when they are the
// same tensors: each element is read before it is written, by the same thread). Scalars from the host,
// derived in double (as optim.comp).
template <OptimOp OP, class C> KF_DEV void optim_update(const OptimParams& p, C& pv, C& m, C& v, C g) {
  if constexpr (OP == OptimOp::adamw) {
    m = C(p.beta1) * m + C(p.one_minus_beta1) * g;
    v = C(p.beta2) * v + C(p.one_minus_beta2) * g * g;
    pv = pv * C(p.decay) - C(p.step_size) * m / (m_sqrt(v) + C(p.eps_hat));
  } else {
    C gr = g + C(p.weight_decay) * pv;
    if (p.momentum_on) {
      m = p.first_step ? gr : C(p.momentum) * m + C(p.one_minus_dampening) * gr;
      gr = p.nesterov ? gr + C(p.momentum) * m : m;
    }
    pv = pv - C(p.lr) * gr;
    (void)v;
  }
}

template <OptimOp OP, class T>
__global__ void __launch_bounds__(256) optim_kernel(const OptimParams p) {
  using C = typename T::C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x) {
    C pv = T::load(p.p, i), m = T::load(p.m, i), v = C(0);
    const C g = T::load(p.g, i);
    if constexpr (OP == OptimOp::adamw) v = T::load(p.v, i);
    optim_update<OP>(p, pv, m, v, g);
    if constexpr (OP == OptimOp::adamw) T::store(p.v_out, i, v);
    T::store(p.p_out, i, pv);
    T::store(p.m_out, i, m);
  }
}

// The same in 16-byte packs (every pointer 16-byte aligned): kOptimItems packs of each tensor a thread,
// all loaded before any is computed; the last partial pack element by element. (Element by element,
// adamw's 7 streams of 16-bit values ran at 0.49-0.55 of copy on an H100, sgd's at 0.57.)
constexpr int kOptimItems = 2;
template <OptimOp OP, class T>
__global__ void __launch_bounds__(256) optim_packs(const OptimParams p) {
  using C = typename T::C;
  constexpr int VW = T::VW, IT = kOptimItems;
  constexpr bool ADAM = OP == OptimOp::adamw;
  const int64_t npk = p.n / VW;
  const int64_t tile = int64_t(blockDim.x) * IT;
  const int64_t ntiles = (npk + tile - 1) / tile;
  for (int64_t tl = blockIdx.x; tl < ntiles; tl += gridDim.x) {
    const int64_t t0 = tl * tile + threadIdx.x;
    uint4 rp[IT], rg[IT], rm[IT], rv[IT];
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int64_t pk = t0 + int64_t(it) * blockDim.x;
      if (pk < npk) {
        rp[it] = load_pack(p.p, pk), rg[it] = load_pack(p.g, pk), rm[it] = load_pack(p.m, pk);
        rv[it] = ADAM ? load_pack(p.v, pk) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int64_t pk = t0 + int64_t(it) * blockDim.x;
      if (pk >= npk) continue;
      C pv[VW], g[VW], m[VW], v[VW];
      T::unpack(rp[it], pv), T::unpack(rg[it], g), T::unpack(rm[it], m), T::unpack(rv[it], v);
#pragma unroll
      for (int k = 0; k < VW; ++k) optim_update<OP>(p, pv[k], m[k], v[k], g[k]);
      if constexpr (ADAM) store_pack(p.v_out, pk, T::pack(v));
      store_pack(p.p_out, pk, T::pack(pv));
      store_pack(p.m_out, pk, T::pack(m));
    }
  }
  // The last partial pack: its elements by the first threads of block 0.
  if (blockIdx.x == 0 && threadIdx.x < p.n - npk * VW) {
    const int64_t i = npk * VW + threadIdx.x;
    C pv = T::load(p.p, i), m = T::load(p.m, i), v = C(0);
    const C g = T::load(p.g, i);
    if constexpr (ADAM) v = T::load(p.v, i);
    optim_update<OP>(p, pv, m, v, g);
    if constexpr (ADAM) T::store(p.v_out, i, v);
    T::store(p.p_out, i, pv);
    T::store(p.m_out, i, m);
  }
}

// ---- The matrix products' own epilogue, in place: y = dropout(act(y + bias)) + residual (KERNELS.md
// section 4; the dropout for linear_dropout only).
// The convolutions' too (conv2d's bias and activation, conv2d_bn_relu's batch norm, conv2d_gelu_dropout's
// gelu and dropout; channel (i / inner) % n of the NCHW output): common.cuh's epilogue_value.
template <class T>
__global__ void __launch_bounds__(256) epilogue_kernel(const EpilogueParams p) {
  using C = typename T::C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ch = p.inner == 1 ? i % p.n : (i / p.inner) % p.n;
    C v = epilogue_value<T>(T::load(p.y, i), i, ch, p);
    if (p.res) v += T::load(p.res, i);
    T::store(p.y, i, v);
  }
}

template <class T> int xent_launch(const XentParams& p, int block, gpuStream_t s) {
  using C = typename T::C;
  xent_count<C><<<1, 1024, 0, s>>>(p);
  int e = static_cast<int>(gpuGetLastError());
  if (e) return e;
  const uint32_t g = static_cast<uint32_t>(p.rows < (int64_t(1) << 30) ? p.rows : int64_t(1) << 30);
  xent_rows<T><<<g, block, 0, s>>>(p);
  e = static_cast<int>(gpuGetLastError());
  if (e) return e;
  xent_final<T><<<1, 1024, 0, s>>>(p);
  return static_cast<int>(gpuGetLastError());
}

template <class T> int mse_launch(const MseParams& p, gpuStream_t s) {
  mse_partial<T><<<p.blocks, 256, 0, s>>>(p);
  const int e = static_cast<int>(gpuGetLastError());
  if (e) return e;
  mse_final<T><<<1, 256, 0, s>>>(p);
  return static_cast<int>(gpuGetLastError());
}

template <OptimOp OP, class T> void optim_launch_t(const OptimParams& p, uint32_t blocks, gpuStream_t s) {
  const auto aligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
  const bool adam = OP == OptimOp::adamw;
  if (aligned(p.p) && aligned(p.g) && aligned(p.m) && aligned(p.p_out) && aligned(p.m_out) &&
      (!adam || (aligned(p.v) && aligned(p.v_out)))) {
    const int64_t tiles = (p.n / T::VW + 256 * kOptimItems - 1) / (256 * kOptimItems);
    const uint32_t g = static_cast<uint32_t>(tiles < 1 ? 1 : tiles < int64_t(blocks) ? tiles : int64_t(blocks));
    optim_packs<OP, T><<<g, 256, 0, s>>>(p);
  } else {
    optim_kernel<OP, T><<<blocks, 256, 0, s>>>(p);
  }
}

template <OptimOp OP> int optim_launch(Dt dt, const OptimParams& p, uint32_t blocks, gpuStream_t s) {
  switch (dt) {
    case Dt::f32: optim_launch_t<OP, F32>(p, blocks, s); break;
    case Dt::f16: optim_launch_t<OP, F16>(p, blocks, s); break;
    case Dt::bf16: optim_launch_t<OP, BF16>(p, blocks, s); break;
    case Dt::f64: optim_launch_t<OP, F64>(p, blocks, s); break;
  }
  return static_cast<int>(gpuGetLastError());
}

// linear_cross_entropy's d_W for 16-bit outputs: a float accumulator (acc += src in the dtype, the
// fallback where cuBLASLt cannot write a float product of 16-bit inputs), then out = acc in the dtype.
template <class T>
__global__ void __launch_bounds__(256) lce_dw_kernel(const LceDwParams p) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x) {
    if (p.mode == 0) p.acc[i] = (p.first ? 0.0f : p.acc[i]) + T::load(p.src, i);
    else T::store(p.out, i, p.acc[i]);
  }
}

}  // namespace

int launch_lce_pass(Dt dt, const XentParams& p, int pass, int block, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  const uint32_t g = static_cast<uint32_t>(p.rows < (int64_t(1) << 30) ? p.rows : int64_t(1) << 30);
  switch (dt) {
    case Dt::f32:
      if (pass == 0) xent_count<float><<<1, 1024, 0, s>>>(p);
      else if (pass == 1) xent_rows<F32><<<g, block, 0, s>>>(p);
      else xent_final<F32><<<1, 1024, 0, s>>>(p);
      break;
    case Dt::f16:
      if (pass == 0) xent_count<float><<<1, 1024, 0, s>>>(p);
      else if (pass == 1) xent_rows<F16><<<g, block, 0, s>>>(p);
      else xent_final<F16><<<1, 1024, 0, s>>>(p);
      break;
    case Dt::bf16:
      if (pass == 0) xent_count<float><<<1, 1024, 0, s>>>(p);
      else if (pass == 1) xent_rows<BF16><<<g, block, 0, s>>>(p);
      else xent_final<BF16><<<1, 1024, 0, s>>>(p);
      break;
    case Dt::f64:
      if (pass == 0) xent_count<double><<<1, 1024, 0, s>>>(p);
      else if (pass == 1) xent_rows<F64><<<g, block, 0, s>>>(p);
      else xent_final<F64><<<1, 1024, 0, s>>>(p);
      break;
  }
  return static_cast<int>(gpuGetLastError());
}

int launch_lce_dw(Dt dt, const LceDwParams& p, uint32_t blocks, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (dt) {
    case Dt::f16: lce_dw_kernel<F16><<<blocks, 256, 0, s>>>(p); break;
    case Dt::bf16: lce_dw_kernel<BF16><<<blocks, 256, 0, s>>>(p); break;
    default: return -1;
  }
  return static_cast<int>(gpuGetLastError());
}

int launch_cross_entropy(Dt dt, const XentParams& p, int block, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (dt) {
    case Dt::f32: return xent_launch<F32>(p, block, s);
    case Dt::f16: return xent_launch<F16>(p, block, s);
    case Dt::bf16: return xent_launch<BF16>(p, block, s);
    case Dt::f64: return xent_launch<F64>(p, block, s);
  }
  return -1;
}

int launch_mse(Dt dt, const MseParams& p, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (dt) {
    case Dt::f32: return mse_launch<F32>(p, s);
    case Dt::f16: return mse_launch<F16>(p, s);
    case Dt::bf16: return mse_launch<BF16>(p, s);
    case Dt::f64: return mse_launch<F64>(p, s);
  }
  return -1;
}

int launch_optim(OptimOp op, Dt dt, const OptimParams& p, uint32_t blocks, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  return op == OptimOp::adamw ? optim_launch<OptimOp::adamw>(dt, p, blocks, s)
                              : optim_launch<OptimOp::sgd>(dt, p, blocks, s);
}

int launch_epilogue(Dt dt, const EpilogueParams& p, uint32_t blocks, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (dt) {
    case Dt::f32: epilogue_kernel<F32><<<blocks, 256, 0, s>>>(p); break;
    case Dt::f16: epilogue_kernel<F16><<<blocks, 256, 0, s>>>(p); break;
    case Dt::bf16: epilogue_kernel<BF16><<<blocks, 256, 0, s>>>(p); break;
    case Dt::f64: epilogue_kernel<F64><<<blocks, 256, 0, s>>>(p); break;
  }
  return static_cast<int>(gpuGetLastError());
}

}  // namespace kf::hal::cuda
