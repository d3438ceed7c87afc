// Training kernels (docs/ops.md section 6) in CUDA/HIP: cross_entropy (+ its gradient in the same pass),
// mse, adamw_step and sgd_step; and the matrix products' own epilogue (matmul.cpp). Counterparts of
// shaders/loss.comp and optim.comp. Sums in a fixed order (block sums of common.cuh, then partial sums
// added in index order by one block): the same bits every run. Accumulation in float (double for f64).
#include <algorithm>

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

// ---- cross_entropy. ws (compute type C): [0] the count of targets not ignored, [1 + r] row r's loss, then
// the forward's split partials. A target outside [0, C) that is not ignore_index is data on the device:
// its row's loss is NaN (so is the mean) and its gradient row is NaN (as loss.comp); the CPU backend
// raises kf::Error for it.
template <class C>
__global__ void __launch_bounds__(1024) xent_count(const XentParams p) {
  __shared__ C sm[32];
  int64_t n = 0;
  for (int64_t r = threadIdx.x; r < p.rows; r += blockDim.x) n += p.target[r] != p.ignore_index;
  // Integer counts below 2^53 (2^24 for float: the rows of any real batch) are exact in C.
  const C total = block_sum(C(n), sm);
  if (threadIdx.x == 0) static_cast<C*>(p.ws)[0] = total;
}

// The row pass. One block per row (the forward: per range of split_packs packs of a long row). A row is
// its head (the elements before the first 16-byte boundary), whole 16-byte packs, and its tail (fewer
// than a pack): every row of every size takes the packs. The statistics in one read: per thread a running
// (max, sum of exp(x - max), sum of x) updated once per batch of 16 values (the batch's max first, then
// independent exps), combined across the block in a fixed order: a warp butterfly (whose combine is
// commutative bit for bit, so every lane ends with the same bits), the warps' results through shared
// memory, and the same butterfly over them in every warp. The 16-bit dtypes take exp as ex2.approx of one
// fma (x log2 e - max log2 e); f32 and f64 the accurate exp. -inf logits add nothing.
// The backward (GRAD) holds its packs in registers (P a thread) and shared memory (p.smem_packs a thread,
// cp.async): the row read once where it fits; the rest is streamed and read again for the gradient.
// linear_cross_entropy (lce.cpp) runs it on chunks of rows: row_base offsets the targets and the losses
// (the logits are the chunk's), the logits may be soft-capped (CAP: taken when each value is used, so
// the memory holds the raw ones) and z_loss lse^2 joins each kept row's loss; its gradient may be written
// in place over the logits (grad == logits): thread 0 reads x_t before the first barrier, and each
// gradient element is written by the thread that read it, after the barriers.
constexpr float kLog2e = 1.44269504088896341f;
template <class C> struct XSt {
  C m, s, x;  // max, sum of exp(v - m), sum of v
};
template <class T> struct XentMath {
  using C = typename T::C;
  // exp(x - M) with x - M taken first, exact wherever the term matters: x log2 e - M log2 e rounded M's
  // product at the logits' magnitude (3e-3 relative error at f16's 65504; docs/ops.md, special values).
  static KF_DEV C exp_shift(C x, C M) {
    if constexpr (T::FAST) return ex2_ftz((x - M) * kLog2e);
    else return m_exp(x - M);
  }
  static KF_DEV C exp_diff(C d) {  // exp(d)
    if constexpr (T::FAST) return ex2_ftz(d * kLog2e);
    else return m_exp(d);
  }
  static KF_DEV void combine(XSt<C>& a, C m2, C s2, C x2) {
    a.x += x2;
    const C M = a.m > m2 ? a.m : m2;
    if (M == -C(INFINITY)) return;  // both empty: s and s2 are 0
    a.s = a.s * exp_diff(a.m - M) + s2 * exp_diff(m2 - M);
    a.m = M;
  }
  // G packs of values (the first nv of them real, the rest -inf) into the running statistics.
  template <int G> static KF_DEV void add(XSt<C>& a, const C (&v)[G][T::VW], int nv, bool smooth) {
    C cm = v[0][0];
#pragma unroll
    for (int u = 0; u < G; ++u)
#pragma unroll
      for (int k = 0; k < T::VW; ++k) cm = v[u][k] > cm ? v[u][k] : cm;
    if (smooth) {
#pragma unroll
      for (int u = 0; u < G; ++u) {
        C ps = C(0);
#pragma unroll
        for (int k = 0; k < T::VW; ++k) ps += v[u][k];
        if (u < nv) a.x += ps;
      }
    }
    const C M = a.m > cm ? a.m : cm;
    if (M == -C(INFINITY)) return;
    C acc = C(0);
#pragma unroll
    for (int u = 0; u < G; ++u)
#pragma unroll
      for (int k = 0; k < T::VW; ++k) acc += exp_shift(v[u][k], M);
    a.s = a.s * exp_diff(a.m - M) + acc;
    a.m = M;
  }
  static KF_DEV void add1(XSt<C>& a, C v) {  // one value (a row's head or tail)
    a.x += v;
    if (v == -C(INFINITY)) return;
    if (v > a.m) {
      a.s = a.s * exp_diff(a.m - v) + C(1);
      a.m = v;
    } else {
      a.s += exp_diff(v - a.m);
    }
  }
  static KF_DEV void warp_reduce(XSt<C>& a) {
#pragma unroll
    for (int o = KF_WARP / 2; o > 0; o >>= 1) {
      const C m2 = KF_SHFL_XOR(a.m, o), s2 = KF_SHFL_XOR(a.s, o), x2 = KF_SHFL_XOR(a.x, o);
      combine(a, m2, s2, x2);
    }
  }
  static KF_DEV void block_reduce(XSt<C>& a, C* red) {  // red: 96 values
    warp_reduce(a);
    const int nw = blockDim.x / KF_WARP, lane = threadIdx.x % KF_WARP;
    __syncthreads();  // red is free (the previous row's values have been read)
    if (lane == 0) {
      const int w = threadIdx.x / KF_WARP;
      red[w] = a.m, red[32 + w] = a.s, red[64 + w] = a.x;
    }
    __syncthreads();
    a.m = lane < nw ? red[lane] : -C(INFINITY);
    a.s = lane < nw ? red[32 + lane] : C(0);
    a.x = lane < nw ? red[64 + lane] : C(0);
    warp_reduce(a);
  }
};

// A pack of -inf (a compile-time constant: no registers held for it).
template <class T> struct NinfPack;
template <> struct NinfPack<F32> {
  static KF_DEV uint4 get() { return make_uint4(0xff800000u, 0xff800000u, 0xff800000u, 0xff800000u); }
};
template <> struct NinfPack<F64> {
  static KF_DEV uint4 get() { return make_uint4(0u, 0xfff00000u, 0u, 0xfff00000u); }
};
template <> struct NinfPack<F16> {
  static KF_DEV uint4 get() { return make_uint4(0xfc00fc00u, 0xfc00fc00u, 0xfc00fc00u, 0xfc00fc00u); }
};
template <> struct NinfPack<BF16> {
  static KF_DEV uint4 get() { return make_uint4(0xff80ff80u, 0xff80ff80u, 0xff80ff80u, 0xff80ff80u); }
};

// Packs a batch: 2 of 16-bit values and of f64, 4 of f32 (16, 4 and 16 values); the forward streams 8
// packs a step of 16-bit values, 4 of the others (all loaded before any is used: 128 and 64 bytes a
// thread in flight), the backward (short of registers) a batch.
template <class T> constexpr int kXentG = T::VW == 4 ? 4 : 2;
template <class T> constexpr int kXentU = T::VW == 8 ? 8 : 4;

// The backward's gradient of one row, written by xent_rows and xent_cluster_kernel alike (one copy of
// the arithmetic: the same operations in the same order, the same bits from either kernel): d loss / d x
// of each logit from the row's lse (label smoothing, soft-capping from the raw logit, z-loss), the
// target's term subtracted where the pack holds it; an ignored row zero, a target out of range a NaN row.
// row: the row of p.grad (N values); head: its elements before its first whole pack; count: ws[0].
template <class T, bool CAP> struct XentGrad {
  using C = typename T::C;
  static constexpr int VW = T::VW;
  // m and ls: the row's max and log-sum, kept apart: exp(z - lse) is taken as exp((z - m) - ls), since
  // lse = m + ls is rounded at the logits' magnitude (5e-4 absolute at 1e4: the probabilities' error).
  C eps, eps_c, cap, m, ls, lse, count, pscale, ga, gb, gt, fill;  // (initialized in the kernels' former order)
  int t, head;
  bool plain;
  unsigned char* grow;
  unsigned char* gbody;
  bool galigned;

  KF_DEV XentGrad(const XentParams& p, int64_t row, int64_t N, int head_, int32_t t_, bool bad, bool ignored, C m_,
                  C ls_, C count_, C eps_, C eps_c_, C cap_, C zl)
      : eps(eps_), eps_c(eps_c_), cap(cap_), m(m_), ls(ls_), lse(m_ + ls_), count(count_), pscale(C(1) + C(2) * zl * lse),
        ga(pscale / count_), gb(eps_c_ / count_), gt((C(1) - eps_) / count_),
        fill(bad ? nan_of<C>() : C(0)), t(t_), head(head_), plain(!bad && !ignored),
        grow(static_cast<unsigned char*>(p.grad) + row * N * T::ES), gbody(grow + head_ * T::ES),
        galigned((reinterpret_cast<uintptr_t>(gbody) & 15) == 0) {}

  // d loss / d x of the raw logit z, is_t: z is the target's. (Not soft-capped, put passes false and
  // subtracts the target's term, (1 - eps) / count, once per pack: only where the pack holds the target.)
  KF_DEV C of(C z, bool is_t) const {
    if constexpr (CAP) {
      C g = m_exp((cap * Math<C, false>::tanh(z / cap) - m) - ls) * pscale - eps_c - (is_t ? C(1) - eps : C(0));
      const C ch = m_cosh(z / cap);  // d (c tanh(z / c)) / dz = sech^2(z / c), from the raw logit
      return g / (ch * ch) / count;
    } else {
      const C g = XentMath<T>::exp_diff((z - m) - ls) * ga - gb;
      return is_t ? g - gt : g;
    }
  }
  // Whole pack j of the row (raw: its logits as read).
  KF_DEV void put(int j, const uint4& raw) const {
    C v[VW];
    if (plain) {
      const int rel = t - (head + j * VW);  // the target's place in the pack
      const bool has_t = static_cast<unsigned>(rel) < static_cast<unsigned>(VW);
      if constexpr (CAP) {
        C x[VW];
        T::unpack(raw, x);
#pragma unroll
        for (int k = 0; k < VW; ++k) v[k] = of(x[k], has_t && k == rel);
      } else {
        T::unpack(raw, v);
#pragma unroll
        for (int k = 0; k < VW; ++k) v[k] = of(v[k], false);
        if (has_t) {
#pragma unroll
          for (int k = 0; k < VW; ++k)
            if (k == rel) v[k] -= gt;
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < VW; ++k) v[k] = fill;
    }
    if (galigned) {
      store_pack(gbody, j, T::pack(v));
    } else {
#pragma unroll
      for (int k = 0; k < VW; ++k) T::store(gbody, int64_t(j) * VW + k, v[k]);
    }
  }
  // Element i of the row (its head or tail, fewer than a pack each), read again from the logits' row.
  KF_DEV void put1(const unsigned char* xrow, int i) const {
    T::store(grow, i, plain ? of(T::load(xrow, i), i == t) : fill);
  }
};

template <class T, int P, bool CAP>
__global__ void __launch_bounds__(1024) xent_rows(const XentParams p) {
  using C = typename T::C;
  using XM = XentMath<T>;
  constexpr bool GRAD = P > 0;
  constexpr int VW = T::VW, G = kXentG<T>, U = GRAD ? G : kXentU<T>;
  extern __shared__ __align__(16) unsigned char xent_smem[];
  __shared__ C red[96];
  uint4* const sp = reinterpret_cast<uint4*>(xent_smem);  // slot v * B + tid
  const int B = blockDim.x, tid = threadIdx.x, S = p.smem_packs;
  const int64_t N = p.classes;
  C* ws = static_cast<C*>(p.ws);
  const C eps = static_cast<C>(p.smoothing), eps_c = static_cast<C>(p.smoothing / double(p.classes));
  const C cap = static_cast<C>(p.softcap), zl = static_cast<C>(p.z_loss);
  const bool smooth = p.smoothing != 0;
  const auto capped = [&](C z) {
    if constexpr (CAP) return cap * Math<C, false>::tanh(z / cap);
    else return z;
  };
  // The values of a pack (-inf where not valid: soft-capping would make -inf finite).
  const auto values = [&](const uint4& r, C(&v)[VW], bool valid) {
    T::unpack(r, v);
    if constexpr (CAP) {
#pragma unroll
      for (int k = 0; k < VW; ++k) v[k] = valid ? capped(v[k]) : -C(INFINITY);
    }
  };
  const int64_t items = p.rows * p.splits;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t row = item / p.splits;
    const int split = static_cast<int>(item - row * p.splits);
    const bool first = split == 0, last = split == p.splits - 1;
    const unsigned char* xrow = static_cast<const unsigned char*>(p.logits) + row * N * T::ES;
    // Pack indices within a row in 32 bits (targets are int32: fewer than 2^31 classes).
    const int head = static_cast<int>(min(N, static_cast<int64_t>(((16 - (reinterpret_cast<uintptr_t>(xrow) & 15)) & 15) / T::ES)));
    const int npk = static_cast<int>((N - head) / VW), tail0 = head + npk * VW;
    const int ntail = static_cast<int>(N - tail0);
    const uint4* xp = reinterpret_cast<const uint4*>(xrow + head * T::ES);
    const int j0 = p.splits == 1 ? 0 : split * static_cast<int>(p.split_packs);
    const int j1 = last ? npk : min(npk, j0 + static_cast<int>(p.split_packs));
    const int32_t t = p.target[p.row_base + row];
    const bool ignored = t == p.ignore_index, bad = !ignored && (t < 0 || int64_t(t) >= N);
    C xt = C(0);
    if (p.splits == 1 && tid == 0 && !ignored && !bad) xt = capped(T::load(p.logits, row * N + t));

    // The shared memory's packs first (cp.async: no registers while in flight), then the streamed rest.
    const int js = j0 + (P + S) * B;  // the first streamed pack
    for (int v = 0; v < S; ++v) {
      const int j = j0 + (P + v) * B + tid;
      if (j < j1) kf_copy16(sp + v * B + tid, xp + j);
    }
    XSt<C> st{-C(INFINITY), C(0), C(0)};
    int jb = js;
    for (; jb + U * B <= j1; jb += U * B) {  // whole steps: every pack real
      uint4 q[U];
#pragma unroll
      for (int u = 0; u < U; ++u) q[u] = load_pack(xp, jb + u * B + tid);
#pragma unroll
      for (int g = 0; g < U; g += G) {
        C v[G][VW];
#pragma unroll
        for (int u = 0; u < G; ++u) values(q[g + u], v[u], true);
        XM::template add<G>(st, v, G, smooth);
      }
    }
    for (; jb < j1; jb += G * B) {  // the last partial step
      C v[G][VW];
      int nv = 0;
#pragma unroll
      for (int u = 0; u < G; ++u) {
        const int j = jb + u * B + tid;
        nv += j < j1;
        values(j < j1 ? load_pack(xp, j)   : NinfPack<T>::get(), v[u], j < j1);
      }
      XM::template add<G>(st, v, nv, smooth);
    }
    // The registers' packs after the streamed part (the shared memory's copies land meanwhile), so that
    // the streaming needs no registers beside them.
    uint4 r[P > 0 ? P : 1];
#pragma unroll
    for (int u = 0; u < P; ++u) {
      const int j = j0 + u * B + tid;
      r[u] = j < j1 ? load_pack(xp, j)   : NinfPack<T>::get();
    }
#pragma unroll
    for (int g = 0; g < P; g += G) {
      C v[G][VW];
      int nv = 0;
#pragma unroll
      for (int u = 0; u < G; ++u) {
        const bool ok = g + u < P && j0 + (g + u) * B + tid < j1;
        nv += ok;
        values(g + u < P ? r[g + u] : NinfPack<T>::get(), v[u], ok);
      }
      XM::template add<G>(st, v, nv, smooth);
    }
    if (S > 0) {
      kf_copy_wait();
      for (int v0 = 0; v0 < S; v0 += G) {
        C v[G][VW];
        int nv = 0;
#pragma unroll
        for (int u = 0; u < G; ++u) {
          const bool ok = v0 + u < S && j0 + (P + v0 + u) * B + tid < j1;
          nv += ok;
          values(ok ? sp[(v0 + u) * B + tid]   : NinfPack<T>::get(), v[u], ok);
        }
        XM::template add<G>(st, v, nv, smooth);
      }
    }
    // The head and the tail (fewer than a pack each): thread tid takes element tid of each.
    // (Read again for the gradient by the same thread.)
    const bool has_h = first && tid < head, has_t = last && tid < ntail;
    if (has_h) XM::add1(st, capped(T::load(xrow, tid)));
    if (has_t) XM::add1(st, capped(T::load(xrow, tail0 + tid)));

    XM::block_reduce(st, red);
    if (p.splits > 1) {
      if (tid == 0) {
        C* part = ws + 1 + p.rows + 3 * item;
        part[0] = st.m, part[1] = st.s, part[2] = st.x;
      }
      continue;
    }
    const C lse = st.m + m_log(st.s);
    if (tid == 0) {
      C loss = C(0);
      if (bad) loss = nan_of<C>();
      else if (!ignored) loss = lse - (C(1) - eps) * xt - eps_c * st.x + zl * lse * lse;
      ws[1 + p.row_base + row] = loss;
    }
    if constexpr (GRAD) {
      const XentGrad<T, CAP> xg(p, row, N, head, t, bad, ignored, st.m, m_log(st.s), ws[0], eps, eps_c, cap, zl);
      // The streamed packs first: the nearer their first read, the likelier the L2 cache still holds them.
      // (Not for f64: there ptxas then spills.)
      constexpr bool kStreamFirst = VW != 2;
      if constexpr (kStreamFirst)
        for (int j = js + tid; j < j1; j += B) xg.put(j, load_pack(xp, j));
#pragma unroll
      for (int u = 0; u < P; ++u) {
        const int j = u * B + tid;
        if (j < j1) xg.put(j, r[u]);
      }
      for (int v = 0; v < S; ++v) {
        const int j = (P + v) * B + tid;
        if (j < j1) xg.put(j, sp[v * B + tid]);
      }
      if constexpr (!kStreamFirst)
        for (int j = js + tid; j < j1; j += B) xg.put(j, load_pack(xp, j));
      if (has_h) xg.put1(xrow, tid);
      if (has_t) xg.put1(xrow, tail0 + tid);
    }
  }
}

// The mean: row losses added in row order (each thread a strided run, then the block sum), NaN when
// every target is ignored (as torch). A split forward's rows are finished here: their partials combined
// in split order, then the loss. The forward counts the targets here (count_in_final); the backward has
// counted them before its row pass.
template <class T>
__global__ void __launch_bounds__(1024) xent_final(const XentParams p) {
  using C = typename T::C;
  using XM = XentMath<T>;
  __shared__ C sm[32];
  const C* ws = static_cast<const C*>(p.ws);
  const C eps = static_cast<C>(p.smoothing), eps_c = static_cast<C>(p.smoothing / double(p.classes));
  const C zl = static_cast<C>(p.z_loss);
  C s = C(0);
  int64_t n = 0;
  for (int64_t r = threadIdx.x; r < p.rows; r += blockDim.x) {
    const int32_t t = p.target[p.row_base + r];
    const bool ignored = t == p.ignore_index, bad = !ignored && (t < 0 || int64_t(t) >= p.classes);
    n += !ignored;
    if (p.splits > 1) {  // (never soft-capped: linear_cross_entropy does not split)
      XSt<C> a{-C(INFINITY), C(0), C(0)};
      for (int k = 0; k < p.splits; ++k) {
        const C* part = ws + 1 + p.rows + 3 * (r * p.splits + k);
        XM::combine(a, part[0], part[1], part[2]);
      }
      const C lse = a.m + m_log(a.s);
      if (bad) s += nan_of<C>();
      else if (!ignored) s += lse - (C(1) - eps) * T::load(p.logits, r * p.classes + t) - eps_c * a.x + zl * lse * lse;
    } else {
      s += ws[1 + r];
    }
  }
  s = block_sum(s, sm);
  const C count = p.count_in_final ? block_sum(C(n), sm) : ws[0];
  if (threadIdx.x == 0) T::store(p.loss, 0, count == C(0) ? nan_of<C>() : s / count);
}

// Packs a thread of the backward's row in registers: as many as keep the kernel within 64 registers
// without spills (blocks of up to 1024 threads): 6 (soft-capped: 4; f64, whose values take twice the
// registers: 2).
template <class T, bool CAP> constexpr int kXentP = T::VW == 2 ? 2 : CAP ? 4 : 6;
constexpr int64_t kXentRange = 4096;  // the forward's packs a block (64 KiB), longer rows split

// The layout (XentLaunch) for rows of p.classes values in packs of vw, filling p's layout fields.
// Forward: about 16 packs a thread, 32 to 256 threads over ranges of at most 1.5 kXentRange packs (a
// 32k-class row of 16-bit values: one block of 256 threads; 128k: 4 blocks), or, unsplit (lce), up to
// 1024 threads. Backward: the row in registers (regs packs a thread) on up to 512 threads; longer rows
// 512 threads with up to 13 packs a thread in shared memory (104 KiB: two blocks a multiprocessor), then
// 1024 threads with as many as the device's opt-in limit holds; the rest streamed (read twice).
XentLaunch xent_plan(int vw, int regs, XentParams& p, int64_t smem_limit, bool may_split) {
  XentLaunch l;
  const int64_t npk = p.classes / vw;
  const auto pow2 = [](int64_t n, int hi) {
    int b = 32;
    while (b < hi && b < n) b *= 2;
    return b;
  };
  if (!p.grad) {
    l.splits = may_split && npk > kXentRange * 3 / 2 ? static_cast<int>((npk + kXentRange - 1) / kXentRange) : 1;
    const int64_t range = (npk + l.splits - 1) / l.splits;
    l.block = pow2((range + 15) / 16, may_split ? 256 : 1024);
    p.split_packs = range;
  } else {
    l.regs = regs;
    const int64_t s512 = std::min<int64_t>(13, smem_limit / (512 * 16));
    if (npk <= int64_t(512) * regs) {
      l.block = pow2((npk + regs - 1) / regs, 512);
    } else if (npk <= 512 * (regs + s512)) {
      l.block = 512;
      l.smem_packs = static_cast<int>((npk + 511) / 512 - regs);
    } else {
      l.block = 1024;
      l.smem_packs = static_cast<int>(std::clamp<int64_t>((npk + 1023) / 1024 - regs, 0, smem_limit / (1024 * 16)));
    }
  }
  p.smem_packs = l.smem_packs;
  p.splits = l.splits;
  return l;
}

template <class T, int P, bool CAP> int xent_rows_launch(const XentParams& p, const XentLaunch& l, gpuStream_t s) {
  const int64_t smem = int64_t(l.smem_packs) * l.block * 16;
  if (smem > 0) {  // dynamic + the kernel's static shared memory may pass 48 KiB (f64 rows of 8192: 48 KiB + static)
    const gpuError_t e = gpuFuncSetAttribute(reinterpret_cast<const void*>(&xent_rows<T, P, CAP>),
                                             gpuFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != gpuSuccess) return static_cast<int>(e);
  }
  const int64_t items = p.rows * p.splits;
  const uint32_t g = static_cast<uint32_t>(items < (int64_t(1) << 30) ? items : int64_t(1) << 30);
  xent_rows<T, P, CAP><<<g, l.block, smem, s>>>(p);
  return static_cast<int>(gpuGetLastError());
}

// The row pass of p.rows rows as planned (none: nothing to launch).
template <class T> int xent_rows_pass(const XentParams& p, const XentLaunch& l, gpuStream_t s) {
  if (p.rows == 0) return 0;
  const bool cap = p.softcap > 0;
  if (l.regs == 0) return cap ? xent_rows_launch<T, 0, true>(p, l, s) : xent_rows_launch<T, 0, false>(p, l, s);
  return cap ? xent_rows_launch<T, kXentP<T, true>, true>(p, l, s) : xent_rows_launch<T, kXentP<T, false>, false>(p, l, s);
}

#if KF_HAVE_CLUSTER_LAUNCH
// cross_entropy_backward's long rows on thread-block clusters (kernels.hpp ClusterPlan), as norm.cu's
// norm_cluster_kernel and rows.cu's rows_cluster_kernel: block `rank` of a cluster of P holds packs
// [rank part, (rank + 1) part) of the row's whole packs (the packs after the row's head, as xent_rows:
// rows need not start on a 16-byte boundary), thread t packs t + u B of those, kXentClusterR in
// registers and p.smem_packs in shared memory (cp.async), raw, all loads issued before any arithmetic;
// rank 0 also takes the row's head and rank P - 1 its tail (fewer than a pack each, element by element).
// Each block reduces its part to (max, sum of exp, sum) as xent_rows (batches of 16 values, the block's
// fixed-order reduction), publishes it in its shared memory; after the cluster barrier every block reads
// the P triples through distributed shared memory and combines them in rank order (XentMath::combine:
// the same bits in every block and every run), then writes its part of the gradient (XentGrad, as xent_rows:
// label smoothing, soft-capping from the raw logit, z-loss, ignored rows zero, a target out of range a
// NaN row). Rank 0's thread 0 reads x_t before the barrier and writes the row's loss. In place (grad ==
// logits) as xent_rows: every gradient element is written after the barrier by the thread that read it.
// One dynamic shared array (the host emulation runs a cluster's blocks at once, each with its own).
template <bool CAP> constexpr int kXentClusterR = 4;  // packs a thread in registers
constexpr int64_t kXentClusterTarget = 4096;          // packs a block when automatic

template <class T, bool CAP>
__global__ void __launch_bounds__(kClusterBlock, 4) xent_cluster_kernel(const XentParams p) {
#if KF_CLUSTERS
  using C = typename T::C;
  using XM = XentMath<T>;
  constexpr int VW = T::VW, G = kXentG<T>, R = kXentClusterR<CAP>;
  static_assert(R % G == 0, "register packs in whole batches");
  extern __shared__ __align__(16) unsigned char xent_cluster_smem[];
  C* const red = reinterpret_cast<C*>(xent_cluster_smem);  // block_reduce: 96 values
  C* const part3 = red + 96;                               // this part's (max, sum of exp, sum)
  uint4* const sp = reinterpret_cast<uint4*>(xent_cluster_smem + kClusterHeader);  // slot v B + tid
  const int B = blockDim.x, tid = threadIdx.x, S = p.smem_packs;
  const int P = p.cluster_p, part = p.cluster_part, rank = static_cast<int>(kf_cluster_rank());
  const bool first = rank == 0, last = rank == P - 1;
  const int64_t N = p.classes;
  C* ws = static_cast<C*>(p.ws);
  const C eps = static_cast<C>(p.smoothing), eps_c = static_cast<C>(p.smoothing / double(p.classes));
  const C cap = static_cast<C>(p.softcap), zl = static_cast<C>(p.z_loss);
  const bool smooth = p.smoothing != 0;
  const auto capped = [&](C z) {
    if constexpr (CAP) return cap * Math<C, false>::tanh(z / cap);
    else return z;
  };
  const auto values = [&](const uint4& r, C(&v)[VW], bool valid) {
    T::unpack(r, v);
    if constexpr (CAP) {
#pragma unroll
      for (int k = 0; k < VW; ++k) v[k] = valid ? capped(v[k]) : -C(INFINITY);
    }
  };
  for (int64_t row = blockIdx.x / P; row < p.rows; row += gridDim.x / P) {
    const unsigned char* xrow = static_cast<const unsigned char*>(p.logits) + row * N * T::ES;
    const int head = static_cast<int>(min(N, static_cast<int64_t>(((16 - (reinterpret_cast<uintptr_t>(xrow) & 15)) & 15) / T::ES)));
    const int npk = static_cast<int>((N - head) / VW), tail0 = head + npk * VW;
    const int ntail = static_cast<int>(N - tail0);
    const int j0 = rank * part, n = max(0, min(part, npk - j0));  // this part: packs [j0, j0 + n)
    const uint4* xp = reinterpret_cast<const uint4*>(xrow + head * T::ES);
    const uint4* xq = xp + j0;
    const int32_t t = p.target[p.row_base + row];
    const bool ignored = t == p.ignore_index, bad = !ignored && (t < 0 || int64_t(t) >= N);
    C xt = C(0);
    if (first && tid == 0 && !ignored && !bad) xt = capped(T::load(p.logits, row * N + t));
    // The register loads first (as rows_cluster_kernel: issued after the copies, ptxas placed them after
    // the copies' wait), then the copies.
    uint4 r[R];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      const int j = tid + u * B;
      r[u] = j < n ? load_pack(xq, j) : NinfPack<T>::get();
    }
#pragma unroll 1
    for (int v = 0; v < S; ++v) {
      const int j = tid + (R + v) * B;
      if (j < n) kf_copy16(sp + v * B + tid, xq + j);
    }
    const bool has_h = first && tid < head, has_t = last && tid < ntail;
    XSt<C> st{-C(INFINITY), C(0), C(0)};
#pragma unroll
    for (int g = 0; g < R; g += G) {
      C v[G][VW];
      int nv = 0;
#pragma unroll
      for (int u = 0; u < G; ++u) {
        const bool ok = tid + (g + u) * B < n;
        nv += ok;
        values(r[g + u], v[u], ok);
      }
      XM::template add<G>(st, v, nv, smooth);
    }
    if (S > 0) {
      kf_copy_wait();
      for (int v0 = 0; v0 < S; v0 += G) {
        C v[G][VW];
        int nv = 0;
#pragma unroll
        for (int u = 0; u < G; ++u) {
          const bool ok = v0 + u < S && tid + (R + v0 + u) * B < n;
          nv += ok;
          values(ok ? sp[(v0 + u) * B + tid] : NinfPack<T>::get(), v[u], ok);
        }
        XM::template add<G>(st, v, nv, smooth);
      }
    }
    if (has_h) XM::add1(st, capped(T::load(xrow, tid)));
    if (has_t) XM::add1(st, capped(T::load(xrow, tail0 + tid)));
    XM::block_reduce(st, red);  // (every thread ends with the same bits)
    if (tid == 0) part3[0] = st.m, part3[1] = st.s, part3[2] = st.x;
    kf_cluster_sync();
    {
      const C* q = kf_cluster_map(part3, 0);
      st.m = q[0], st.s = q[1], st.x = q[2];
      for (int k = 1; k < P; ++k) {
        q = kf_cluster_map(part3, k);
        XM::combine(st, q[0], q[1], q[2]);
      }
    }
    kf_cluster_arrive();  // (this block is done with the cluster's triples)
    const C lse = st.m + m_log(st.s);
    if (first && tid == 0) {
      C loss = C(0);
      if (bad) loss = nan_of<C>();
      else if (!ignored) loss = lse - (C(1) - eps) * xt - eps_c * st.x + zl * lse * lse;
      ws[1 + p.row_base + row] = loss;
    }
    const XentGrad<T, CAP> xg(p, row, N, head, t, bad, ignored, st.m, m_log(st.s), ws[0], eps, eps_c, cap, zl);
#pragma unroll
    for (int u = 0; u < R; ++u) {
      const int j = tid + u * B;
      if (j < n) xg.put(j0 + j, r[u]);
    }
    for (int v = 0; v < S; ++v) {
      const int j = tid + (R + v) * B;
      if (j < n) xg.put(j0 + j, sp[v * B + tid]);
    }
    if (has_h) xg.put1(xrow, tid);
    if (has_t) xg.put1(xrow, tail0 + tid);
    kf_cluster_wait();  // (every block done with this one's triple: it may change, or go)
  }
#else
  (void)p;
#endif
}

// The cluster kernel for cross_entropy_backward (f32, f16, bf16) on devices with clusters (compute
// capability 9.0, code for sm_90): automatically for the rows that xent_plan gives the 1024-thread block
// (past what a 512-thread block holds in registers and shared memory: f32 rows over 38912 classes, 16-bit
// over 77824 on an H100), on every row with rows_cluster=N (N blocks; 1: never). The part of each block
// from the row's whole packs counted as if the row started aligned (classes / VW: a row with a head has
// one pack fewer at most, the last part shorter). False (nothing launched) where it does not apply, a part
// does not fit the shared memory, or the launch was refused: xent_rows then.
template <class T, bool CAP> bool xent_cluster_launch_t(const XentParams& p0, gpuStream_t s, XentLaunch* used) {
  const ClusterPlan c = cluster_plan(p0.classes / T::VW, kXentClusterR<CAP>, 16, kXentClusterTarget, p0.smem_limit, p0.cluster);
  XentParams p = p0;
  p.splits = 1;
  if (!launch_on_clusters(&xent_cluster_kernel<T, CAP>, c, p, s)) return false;
  if (used) {
    *used = XentLaunch{};
    used->block = c.block, used->regs = kXentClusterR<CAP>, used->smem_packs = c.smem, used->cluster = c.P;
  }
  return true;
}
template <class T> bool xent_cluster_launch(const XentParams& p, const XentLaunch& l, gpuStream_t s, XentLaunch* used) {
  if constexpr (sizeof(typename T::C) != 4) {
    return false;
  } else {
    if (!p.grad || p.rows == 0 || p.cc < 90 || p.cluster == 1 || (p.cluster == 0 && l.block != 1024)) return false;
    if (p.classes / T::VW > INT32_MAX / 2) return false;
    return p.softcap > 0 ? xent_cluster_launch_t<T, true>(p, s, used) : xent_cluster_launch_t<T, false>(p, s, used);
  }
}
#endif

// ---- mse: p.blocks partial sums of (a - b)^2 (grid-stride, fixed grid), then one block adds them.
// PACKS (a and b 16-byte aligned): each thread loads kMseItems 16-byte packs of a and of b before using
// any, then the elements past the last whole pack one by one. (Element by element, a 16-bit thread had
// 2-byte loads in flight where f32 had 4: 0.70-0.81 of copy on an H100 against f32's 1.0.)
constexpr int kMseItems = 4;
template <class T, bool PACKS>
__global__ void __launch_bounds__(256) mse_partial(const MseParams p) {
  using C = typename T::C;
  constexpr int VW = T::VW, U = kMseItems;
  __shared__ C sm[32];
  C s = C(0);
  int64_t done = 0;
  if constexpr (PACKS) {
    const int64_t whole = p.n / VW, B = blockDim.x, tile = B * U;
    for (int64_t t0 = int64_t(blockIdx.x) * tile + threadIdx.x; t0 < whole; t0 += int64_t(gridDim.x) * tile) {
      uint4 ra[U], rb[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t pk = t0 + u * B;
        ra[u] = rb[u] = make_uint4(0, 0, 0, 0);  // zeros: add nothing
        if (pk < whole) ra[u] = load_pack(p.a, pk), rb[u] = load_pack(p.b, pk);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        C a[VW], b[VW];
        T::unpack(ra[u], a);
        T::unpack(rb[u], b);
#pragma unroll
        for (int k = 0; k < VW; ++k) {
          const C d = a[k] - b[k];
          s += d * d;
        }
      }
    }
    done = whole * VW;
  }
  for (int64_t i = done + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x) {
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
template <OptimOp OP, class T, int IT>
__global__ void __launch_bounds__(256) optim_packs(const OptimParams p) {
  using C = typename T::C;
  constexpr int VW = T::VW;
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

// ---- The matrix products' own epilogue, in place: y = dropout(act(y + bias)) + residual (docs/ops.md
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

// Attrs::out_dtype (matmul.cpp): dst = To(src + add), add optional; in To's compute type (float for f32, f16
// and bf16), so an f32 source is rounded once, to the output.
template <class Ti, class To>
__global__ void __launch_bounds__(256) convert_kernel(const ConvertParams p) {
  using C = typename To::C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x) {
    C v = static_cast<C>(Ti::load(p.src, i));
    if (p.add) v += To::load(p.add, i);
    To::store(p.dst, i, v);
  }
}

// The same epilogue by 16-byte packs, where each pack's elements share a row of y (inner == 1, n and the
// total whole packs, buffers 16-byte aligned: every linear and matmul output of kf's registry): one thread
// a pack, the channel of its first element from one division per pack instead of one 64-bit division per
// element, the bias and residual as packs, and one Philox block per 4 elements instead of one per element.
// The elementwise form above read 16-bit outputs 2 bytes a thread: on an H100 linear 4096 x 8192 + gelu
// spent 0.14 ms in it, where y's 128 MB read and write take 0.045.
// As eltwise.cu's kernel: tiles of kEltwiseItems packs a thread whose loads (y, bias, residual) are all
// issued before any is used or stored (a load after the previous pack's store waits a round trip, as the
// compiler must assume the store may alias it: one pack a thread at a time read 0.56 of DRAM's peak under
// Nsight Compute on linear 16384 x 8192 x 8192 bf16 + gelu, 272 us where bias_gelu's kernel takes 180),
// and the activation a template argument (no switch per element). EXTRA: the batch norm and the dropout
// compiled in (linear_dropout, the convolutions); without them the common bias + activation form holds
// fewer registers (their code took 66-76 where eltwise.cu's bias_gelu takes 42).
template <class T, class I, int ACT, bool EXTRA>
__global__ void __launch_bounds__(256) epilogue_packs(const EpilogueParams p) {
  using C = typename T::C;
  using M = Math<C, T::FAST>;  // 16-bit outputs take the fast activations, as the elementwise kernels
  constexpr int VW = T::VW, ITEMS = kEltwiseItems, WG = 256;
  const I npk = static_cast<I>(p.total / VW), n = static_cast<I>(p.n);
  const bool per_channel = p.bias || (EXTRA && p.bn_w);
  const I tile = I(WG) * ITEMS;
  for (I t0 = I(blockIdx.x) * tile; t0 < npk; t0 += I(gridDim.x) * tile) {
    uint4 ry[ITEMS], rb[ITEMS], rr[ITEMS];
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const I k = t0 + I(it) * WG + threadIdx.x;
      const bool in = k < npk;
      ry[it] = in ? load_pack(p.y, k) : make_uint4(0, 0, 0, 0);
      rb[it] = in && p.bias ? load_pack(p.bias, (k * VW) % n / VW) : make_uint4(0, 0, 0, 0);
      rr[it] = in && p.res ? load_pack(p.res, k) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const I k = t0 + I(it) * WG + threadIdx.x;
      if (k >= npk) break;
      const I i0 = k * VW, ch0 = per_channel ? i0 % n : I(0);
      C v[VW], b[VW], r[VW];
      T::unpack(ry[it], v);
      T::unpack(rb[it], b);
      T::unpack(rr[it], r);
      uint4 w = make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int e = 0; e < VW; ++e) {
        C x = v[e];
        if (p.bias) x += b[e];
        if (EXTRA && p.bn_w) {
          const int64_t ch = ch0 + e;
          const C sc = T::load(p.bn_w, ch) / m_sqrt(T::load(p.bn_var, ch) + C(p.eps));
          x = (x - T::load(p.bn_mean, ch)) * sc + T::load(p.bn_b, ch);
        }
        if constexpr (ACT == 1) x = relu_f<M>(x);
        else if constexpr (ACT == 2) x = gelu_f<M>(x);
        else if constexpr (ACT == 3) x = gelu_tanh_f<M>(x);
        else if constexpr (ACT == 4) x = silu_f<M>(x);
        if (EXTRA && p.thr != 0u) {
          // i0 is a multiple of 4 (VW >= 4) or of 2 with both elements in one block (f64): a new block
          // at e = 0 and every 4th element.
          if ((e & 3) == 0) {
            const uint64_t blk = static_cast<uint64_t>(i0 + e) >> 2;
            w = philox4x32_10(make_uint4(static_cast<unsigned>(blk), static_cast<unsigned>(blk >> 32), p.off_lo, p.off_hi),
                              p.seed_lo, p.seed_hi);
          }
          x = (word_of(w, static_cast<int64_t>(i0) + e) >> 8) >= p.thr ? x * C(p.keep_scale) : C(0);
        }
        if (p.res) x += r[e];
        v[e] = x;
      }
      store_pack(p.y, k, T::pack(v));
    }
  }
}

// cross_entropy: the backward counts the targets first (its gradient divides by the count); the forward
// counts them in its final pass.
template <class T> int xent_launch(const XentParams& p0, int64_t smem_limit, gpuStream_t s, XentLaunch* plan) {
  using C = typename T::C;
  XentParams p = p0;
  p.smem_limit = smem_limit;
  const XentLaunch l = xent_plan(T::VW, kXentP<T, false>, p, smem_limit, true);
  if (plan) *plan = l;
  if (p.grad) {
    xent_count<C><<<1, 1024, 0, s>>>(p);
    const int e = static_cast<int>(gpuGetLastError());
    if (e) return e;
  } else {
    p.count_in_final = 1;
  }
#if KF_HAVE_CLUSTER_LAUNCH
  if (!xent_cluster_launch<T>(p, l, s, plan)) {
#endif
    const int e = xent_rows_pass<T>(p, l, s);
    if (e) return e;
#if KF_HAVE_CLUSTER_LAUNCH
  }
#endif
  xent_final<T><<<1, 1024, 0, s>>>(p);
  return static_cast<int>(gpuGetLastError());
}

template <class T> int lce_pass(XentParams p, int pass, int64_t smem_limit, gpuStream_t s, XentLaunch* plan) {
  using C = typename T::C;
  if (pass == 0) {
    xent_count<C><<<1, 1024, 0, s>>>(p);
  } else if (pass == 1) {
    const XentLaunch l = xent_plan(T::VW, p.softcap > 0 ? kXentP<T, true> : kXentP<T, false>, p, smem_limit, false);
    if (plan) *plan = l;
    return xent_rows_pass<T>(p, l, s);
  } else {
    xent_final<T><<<1, 1024, 0, s>>>(p);
  }
  return static_cast<int>(gpuGetLastError());
}

template <class T> int mse_launch(const MseParams& p, gpuStream_t s) {
  if (mse_packs(p)) mse_partial<T, true><<<p.blocks, 256, 0, s>>>(p);
  else mse_partial<T, false><<<p.blocks, 256, 0, s>>>(p);
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
    const int it = p.items == 1 || p.items == 4 ? p.items : kOptimItems;
    const int64_t tiles = (p.n / T::VW + 256 * it - 1) / (256 * it);
    const uint32_t g = static_cast<uint32_t>(tiles < 1 ? 1 : tiles < int64_t(blocks) ? tiles : int64_t(blocks));
    if (it == 1) {
      optim_packs<OP, T, 1><<<g, 256, 0, s>>>(p);
    } else if (it == 4) {
      optim_packs<OP, T, 4><<<g, 256, 0, s>>>(p);
    } else {
      optim_packs<OP, T, kOptimItems><<<g, 256, 0, s>>>(p);
    }
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

int launch_lce_pass(Dt dt, const XentParams& p, int pass, int64_t smem_limit, void* stream, XentLaunch* plan) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (dt) {
    case Dt::f32: return lce_pass<F32>(p, pass, smem_limit, s, plan);
    case Dt::f16: return lce_pass<F16>(p, pass, smem_limit, s, plan);
    case Dt::bf16: return lce_pass<BF16>(p, pass, smem_limit, s, plan);
    case Dt::f64: return lce_pass<F64>(p, pass, smem_limit, s, plan);
  }
  return -1;
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

int launch_cross_entropy(Dt dt, const XentParams& p, int64_t smem_limit, void* stream, XentLaunch* plan) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (dt) {
    case Dt::f32: return xent_launch<F32>(p, smem_limit, s, plan);
    case Dt::f16: return xent_launch<F16>(p, smem_limit, s, plan);
    case Dt::bf16: return xent_launch<BF16>(p, smem_limit, s, plan);
    case Dt::f64: return xent_launch<F64>(p, smem_limit, s, plan);
  }
  return -1;
}

int64_t xent_ws_values(Dt dt, int64_t rows, int64_t classes, bool grad) {
  if (grad) return 1 + rows;
  const int64_t vw = dt == Dt::f64 ? 2 : dt == Dt::f32 ? 4 : 8;
  XentParams p;
  p.classes = classes;
  const XentLaunch l = xent_plan(static_cast<int>(vw), 8, p, 0, true);
  return 1 + rows + (l.splits > 1 ? 3 * rows * l.splits : 0);
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

template <class I, int ACT, bool EXTRA> void epilogue_packs_launch(Dt dt, const EpilogueParams& p, uint32_t pb, gpuStream_t s) {
  switch (dt) {
    case Dt::f32: epilogue_packs<F32, I, ACT, EXTRA><<<pb, 256, 0, s>>>(p); break;
    case Dt::f16: epilogue_packs<F16, I, ACT, EXTRA><<<pb, 256, 0, s>>>(p); break;
    case Dt::bf16: epilogue_packs<BF16, I, ACT, EXTRA><<<pb, 256, 0, s>>>(p); break;
    case Dt::f64: epilogue_packs<F64, I, ACT, EXTRA><<<pb, 256, 0, s>>>(p); break;
  }
}
template <class I, int ACT> void epilogue_packs_launch(Dt dt, const EpilogueParams& p, uint32_t pb, gpuStream_t s) {
  if (p.bn_w || p.thr != 0u) epilogue_packs_launch<I, ACT, true>(dt, p, pb, s);
  else epilogue_packs_launch<I, ACT, false>(dt, p, pb, s);
}
template <class I> void epilogue_packs_launch(Dt dt, const EpilogueParams& p, uint32_t pb, gpuStream_t s) {
  switch (p.act) {
    case 1: epilogue_packs_launch<I, 1>(dt, p, pb, s); break;
    case 2: epilogue_packs_launch<I, 2>(dt, p, pb, s); break;
    case 3: epilogue_packs_launch<I, 3>(dt, p, pb, s); break;
    case 4: epilogue_packs_launch<I, 4>(dt, p, pb, s); break;
    default: epilogue_packs_launch<I, 0>(dt, p, pb, s); break;
  }
}

template <class Ti> int convert_launch(Dt to, const ConvertParams& p, uint32_t blocks, gpuStream_t s) {
  switch (to) {
    case Dt::f32: convert_kernel<Ti, F32><<<blocks, 256, 0, s>>>(p); break;
    case Dt::f16: convert_kernel<Ti, F16><<<blocks, 256, 0, s>>>(p); break;
    case Dt::bf16: convert_kernel<Ti, BF16><<<blocks, 256, 0, s>>>(p); break;
    default: return static_cast<int>(gpuErrorInvalidValue);
  }
  return static_cast<int>(gpuGetLastError());
}

int launch_convert(Dt from, Dt to, const ConvertParams& p, uint32_t blocks, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (from) {
    case Dt::f32: return convert_launch<F32>(to, p, blocks, s);
    case Dt::f16: return convert_launch<F16>(to, p, blocks, s);
    case Dt::bf16: return convert_launch<BF16>(to, p, blocks, s);
    default: return static_cast<int>(gpuErrorInvalidValue);
  }
}

int launch_epilogue(Dt dt, const EpilogueParams& p, uint32_t blocks, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  const int vw = dt == Dt::f64 ? 2 : dt == Dt::f32 ? 4 : 8;
  const auto aligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15u) == 0; };
  if (p.inner == 1 && p.n % vw == 0 && p.total % vw == 0 && aligned(p.y) && aligned(p.bias) && aligned(p.res)) {
    const int64_t tile = int64_t(256) * kEltwiseItems;
    const uint32_t pb = std::max<uint32_t>(1, static_cast<uint32_t>(std::min<int64_t>(blocks, (p.total / vw + tile - 1) / tile)));
    // 32-bit indices where they fit (a 64-bit remainder is a subroutine call of dozens of instructions).
    if (p.total < (int64_t(1) << 31)) epilogue_packs_launch<uint32_t>(dt, p, pb, s);
    else epilogue_packs_launch<int64_t>(dt, p, pb, s);
    return static_cast<int>(gpuGetLastError());
  }
  switch (dt) {
    case Dt::f32: epilogue_kernel<F32><<<blocks, 256, 0, s>>>(p); break;
    case Dt::f16: epilogue_kernel<F16><<<blocks, 256, 0, s>>>(p); break;
    case Dt::bf16: epilogue_kernel<BF16><<<blocks, 256, 0, s>>>(p); break;
    case Dt::f64: epilogue_kernel<F64><<<blocks, 256, 0, s>>>(p); break;
  }
  return static_cast<int>(gpuGetLastError());
}

}  // namespace kf::hal::cuda
