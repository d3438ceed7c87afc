// Part of tools/cuda-emu (see run.sh): the emulated CUDA dialect, standing in for hal/cuda/gpu_compat.hpp.
// Host emulation of the CUDA dialect: each block runs as blockDim std::threads with std::barrier for
// __syncthreads / __syncwarp; blocks run one after another, or a cluster's blocks at once (one barrier
// for the cluster, each block's dynamic shared memory readable by the others). For checking kernel logic
// on a CPU only.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>
#include <algorithm>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) alignas(n)
#define KF_DEV inline
#define KF_WARP 32
#define KF_GPU_API "EMU"
#define KF_HAVE_BF16_PAIR 0

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
inline unsigned __umulhi(unsigned a, unsigned b) { return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32); }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
struct float2 { float x, y; };
struct int2 { int x, y; };
inline int2 make_int2(int a, int b) { return int2{a, b}; }
inline float2 make_float2(float a, float b) { return float2{a, b}; }

// One block's barriers and shuffle exchange; each thread points at its block's (and its dynamic shared
// memory, and its blockIdx: a cluster's blocks run at once).
struct EmuBlock {
  explicit EmuBlock(unsigned n) : bar(n) {
    for (unsigned w = 0; w < (n + 31) / 32; ++w) warp_bar.emplace_back(new std::barrier<>(std::min(32u, n - 32 * w)));
  }
  std::barrier<> bar;
  std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
  double xchg[1024];
  unsigned vote[1024];
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline thread_local EmuBlock* emu_blk = nullptr;
inline thread_local unsigned char* emu_dyn_smem = nullptr;

inline void __syncthreads() { emu_blk->bar.arrive_and_wait(); }
inline void __syncwarp() { emu_blk->warp_bar[threadIdx.x / 32]->arrive_and_wait(); }
template <class T> inline T emu_shfl_xor(T v, int mask) {
  const unsigned lane = threadIdx.x % 32, base = threadIdx.x - lane;
  __syncwarp();
  emu_blk->xchg[threadIdx.x] = double(v);
  __syncwarp();
  const T r = T(emu_blk->xchg[base + (lane ^ unsigned(mask))]);
  __syncwarp();
  return r;
}
#define KF_SHFL_XOR(v, mask) emu_shfl_xor((v), (mask))
template <class T> inline T emu_shfl_idx(T v, int src) {
  const unsigned lane = threadIdx.x % 32, base = threadIdx.x - lane;
  __syncwarp();
  emu_blk->xchg[threadIdx.x] = double(v);
  __syncwarp();
  const T r = T(emu_blk->xchg[base + (unsigned(src) & 31u)]);
  __syncwarp();
  return r;
}
#define KF_SHFL_IDX(v, src) emu_shfl_idx((v), (src))
// Whether pred holds in every lane of the warp; every lane takes part, as the kernels use it.
inline bool __all_sync(unsigned, int pred) {
  const unsigned lane = threadIdx.x % 32, base = threadIdx.x - lane;
  __syncwarp();
  emu_blk->vote[threadIdx.x] = pred ? 1u : 0u;
  __syncwarp();
  bool r = true;
  for (unsigned l = 0; l < 32; ++l) r = r && emu_blk->vote[base + l] != 0;
  __syncwarp();
  return r;
}

// Thread-block clusters (hal/cuda/gpu_compat.hpp): one barrier for all the cluster's threads; a block's
// dynamic shared memory mapped to another's at the same offset.
#define KF_HAVE_CLUSTER_LAUNCH 1
#define KF_CLUSTERS 1
struct EmuCluster {
  explicit EmuCluster(unsigned n) : bar(n) {}
  std::barrier<> bar;
  std::vector<unsigned char*> smem;  // each block's dynamic shared memory
};
inline thread_local EmuCluster* emu_clu = nullptr;
inline thread_local unsigned emu_clu_rank = 0;
inline thread_local std::optional<std::barrier<>::arrival_token> emu_clu_token;
inline unsigned kf_cluster_rank() { return emu_clu_rank; }
template <class T> inline T* kf_cluster_map(T* p, unsigned rank) {
  const auto off = reinterpret_cast<unsigned char*>(const_cast<std::remove_const_t<T>*>(p)) - emu_dyn_smem;
  return reinterpret_cast<T*>(emu_clu->smem.at(rank) + off);
}
inline void kf_cluster_sync() { emu_clu->bar.arrive_and_wait(); }
inline void kf_cluster_arrive() { emu_clu_token.emplace(emu_clu->bar.arrive()); }
inline void kf_cluster_wait() {
  emu_clu->bar.wait(std::move(*emu_clu_token));
  emu_clu_token.reset();
}
inline bool kf_cluster_code(const void*) { return true; }

inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline double __longlong_as_double(long long u) { double f; std::memcpy(&f, &u, 8); return f; }
inline double __hiloint2double(int hi, int lo) { long long u = (long long)(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo); return __longlong_as_double(u); }
inline int __double2loint(double d) { long long u; std::memcpy(&u, &d, 8); return (int)(unsigned)u; }
inline int __double2hiint(double d) { long long u; std::memcpy(&u, &d, 8); return (int)(u >> 32); }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return expf(x); }
using std::min; using std::max;

inline float kf_half_to_float(unsigned short h) { _Float16 x; std::memcpy(&x, &h, 2); return float(x); }
inline unsigned short kf_float_to_half(float f) { _Float16 x = (_Float16)f; unsigned short h; std::memcpy(&h, &x, 2); return h; }
inline unsigned kf_pack_half2(float lo, float hi) { return unsigned(kf_float_to_half(lo)) | (unsigned(kf_float_to_half(hi)) << 16); }
#if KF_EMU_APPROX
// A model of the hardware's approximations (run.sh mem): ex2.approx.ftz of x log2(e) rounded to float
// (relative error growing with |x| as on the GPU), off by 2^-22 relative either way and subnormal
// results flushed to zero; div.approx as a / b off by 2^-22, and 0 for |b| > 2^126 (as __fdividef).
inline float kf_emu_wobble(float v) {
  unsigned u;
  std::memcpy(&u, &v, 4);
  return v * (1.0f + ((u >> 3) & 1 ? 2.384185791e-7f : -2.384185791e-7f));
}
inline float kf_fast_exp(float x) {
  const float r = exp2f(x * 1.44269504088896341f);
  return std::fabs(r) < 1.17549435e-38f ? 0.0f : kf_emu_wobble(r);
}
inline float kf_fast_div(float a, float b) {
  if (std::fabs(b) > 8.507059173e37f && std::fabs(b) <= 3.402823466e38f) return 0.0f * a;
  return kf_emu_wobble(a / b);
}
#else
inline float kf_fast_exp(float x) { return expf(x); }
inline float kf_fast_div(float a, float b) { return a / b; }
#endif
struct __half { unsigned short u; };
struct __nv_bfloat16 { unsigned short u; };

typedef int gpuError_t;
typedef void* gpuStream_t;
#define gpuSuccess 0
#define gpuErrorInvalidValue 1
inline int gpuGetLastError() { return 0; }
#define gpuFuncAttributeMaxDynamicSharedMemorySize 0
inline int gpuFuncSetAttribute(const void*, int, int) { return 0; }
struct gpuFuncAttributes {};
inline int gpuFuncGetAttributes(gpuFuncAttributes*, const void*) { return 0; }
// An H100's answer for a block of about 128 registers a thread and 128 threads.
inline int gpuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void*, int, size_t) { *n = 4; return 0; }

template <class K, class P>
void emu_launch(K kernel, dim3 grid, dim3 block, size_t shared, void*, const P& p) {
  std::vector<unsigned char> smem(shared + 256);
  unsigned char* const dyn = smem.data() + (128 - (reinterpret_cast<uintptr_t>(smem.data()) % 128));
  gridDim = grid;
  blockDim = block;
  const unsigned n = block.x;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        EmuBlock blk(n);
        std::memset(dyn, 0xcd, shared);  // garbage, as the GPU would have
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < n; ++t)
          ts.emplace_back([&, t] {
            threadIdx = dim3(t);
            blockIdx = dim3(x, y, z);
            emu_blk = &blk;
            emu_dyn_smem = dyn;
            kernel(p);
            blk.warp_bar[t / 32]->arrive_and_drop();
            blk.bar.arrive_and_drop();
          });
        for (auto& t : ts) t.join();
      }
}

// A 1-D grid in clusters of `cluster` blocks: each cluster's blocks run at once (cluster x block.x
// threads), one cluster after another.
template <class K, class P>
void emu_launch_cluster(K kernel, unsigned grid, unsigned block, size_t shared, unsigned cluster, const P& p) {
  if (cluster < 1 || grid % cluster != 0) std::abort();  // (the runtime refuses such a launch)
  std::vector<std::vector<unsigned char>> smem(cluster, std::vector<unsigned char>(shared + 256));
  std::vector<unsigned char*> dyn;
  for (auto& m : smem) dyn.push_back(m.data() + (128 - (reinterpret_cast<uintptr_t>(m.data()) % 128)));
  gridDim = dim3(grid);
  blockDim = dim3(block);
  for (unsigned c = 0; c < grid / cluster; ++c) {
    EmuCluster clu(cluster * block);
    clu.smem = dyn;
    std::vector<std::unique_ptr<EmuBlock>> blks;
    for (unsigned r = 0; r < cluster; ++r) {
      blks.emplace_back(new EmuBlock(block));
      std::memset(dyn[r], 0xcd, shared);
    }
    std::vector<std::thread> ts;
    for (unsigned r = 0; r < cluster; ++r)
      for (unsigned t = 0; t < block; ++t)
        ts.emplace_back([&, r, t] {
          threadIdx = dim3(t);
          blockIdx = dim3(c * cluster + r);
          emu_blk = blks[r].get();
          emu_dyn_smem = dyn[r];
          emu_clu = &clu;
          emu_clu_rank = r;
          kernel(p);
          emu_blk->warp_bar[t / 32]->arrive_and_drop();
          emu_blk->bar.arrive_and_drop();
          clu.bar.arrive_and_drop();
        });
    for (auto& t : ts) t.join();
  }
}
template <class K, class P>
int kf_launch_cluster(K kernel, unsigned grid, unsigned block, size_t shared, gpuStream_t, unsigned cluster, const P& p) {
  emu_launch_cluster(kernel, grid, block, shared, cluster, p);
  return 0;
}
