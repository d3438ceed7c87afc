// Part of tools/cuda-emu (see run.sh): the CPU model of hal/cuda/mma_ptx.cuh, with the same fragment
// layouts (PTX ISA, "Matrix fragments for mma.m16n8k16" and "ldmatrix"; see the real header's comment).
//  - cp.async: each thread's copies are queued in its open group, commit closes the group, and
//    wait_group N performs the oldest committed groups until at most N remain: the data lands in shared
//    memory only at the wait, so a kernel that reads a tile before waiting for it reads garbage here.
//  - ldmatrix and mma.sync are warp-collective: each lane publishes its address or registers, the warp
//    synchronizes, and each lane assembles its own result from the others' values.
#pragma once
#include <cstring>
#include <deque>
#include <vector>
#include "hal/cuda/gpu_compat.hpp"

namespace kf::hal::cuda {
namespace {
// Shared-memory addresses are 32-bit values as on the GPU: offsets from the block's dynamic shared
// memory (the only shared memory these instructions address here).
inline unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(static_cast<const unsigned char*>(p) - emu_dyn_smem);
}
inline void* emu_smem_ptr(unsigned a) { return emu_dyn_smem + a; }
struct EmuCopy { void* dst; const void* src; int bytes; };
inline thread_local std::vector<EmuCopy> emu_cp_open;
inline thread_local std::deque<std::vector<EmuCopy>> emu_cp_groups;
inline const void* emu_ptr_xchg[1024];
inline unsigned emu_reg_xchg[1024][6];

inline void cp_async16(unsigned smem, const void* gmem, int src_bytes) { emu_cp_open.push_back({emu_smem_ptr(smem), gmem, src_bytes}); }
inline void cp_async_commit() {
  emu_cp_groups.push_back(emu_cp_open);
  emu_cp_open.clear();
}
template <int N> inline void cp_async_wait() {
  while (emu_cp_groups.size() > size_t(N)) {
    for (const EmuCopy& c : emu_cp_groups.front()) {
      std::memcpy(c.dst, c.src, size_t(c.bytes));
      std::memset(static_cast<unsigned char*>(c.dst) + c.bytes, 0, size_t(16 - c.bytes));
    }
    emu_cp_groups.pop_front();
  }
}

inline void emu_ldsm(unsigned (&r)[4], unsigned smem_addr, bool trans) {
  const void* smem = emu_smem_ptr(smem_addr);
  const unsigned lane = threadIdx.x % 32, base = threadIdx.x - lane, g = lane / 4, t = lane % 4;
  __syncwarp();
  emu_ptr_xchg[threadIdx.x] = smem;
  __syncwarp();
  for (int i = 0; i < 4; ++i) {
    unsigned short e[2];
    for (int k = 0; k < 2; ++k) {
      const unsigned row = trans ? 2 * t + k : g, col = trans ? g : 2 * t + k;
      const unsigned short* rp = static_cast<const unsigned short*>(emu_ptr_xchg[base + 8 * i + row]);
      e[k] = rp[col];
    }
    r[i] = unsigned(e[0]) | (unsigned(e[1]) << 16);
  }
  __syncwarp();
}
inline void ldsm_x4(unsigned (&r)[4], unsigned smem) { emu_ldsm(r, smem, false); }
inline void ldsm_x4_trans(unsigned (&r)[4], unsigned smem) { emu_ldsm(r, smem, true); }

inline float emu_b16(unsigned w, int hi, bool bf16) {
  const unsigned short h = static_cast<unsigned short>(hi ? w >> 16 : w & 0xffffu);
  return bf16 ? __uint_as_float(unsigned(h) << 16) : kf_half_to_float(h);
}
template <bool BF16>
inline void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  const unsigned lane = threadIdx.x % 32, base = threadIdx.x - lane, g = lane / 4, t = lane % 4;
  __syncwarp();
  for (int k = 0; k < 4; ++k) emu_reg_xchg[threadIdx.x][k] = a[k];
  emu_reg_xchg[threadIdx.x][4] = b0, emu_reg_xchg[threadIdx.x][5] = b1;
  __syncwarp();
  float A[16][16], B[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned* x = emu_reg_xchg[base + l];
    const unsigned lg = l / 4, lt = l % 4;
    for (int h = 0; h < 2; ++h) {
      A[lg][2 * lt + h] = emu_b16(x[0], h, BF16);
      A[lg + 8][2 * lt + h] = emu_b16(x[1], h, BF16);
      A[lg][2 * lt + 8 + h] = emu_b16(x[2], h, BF16);
      A[lg + 8][2 * lt + 8 + h] = emu_b16(x[3], h, BF16);
      B[2 * lt + h][lg] = emu_b16(x[4], h, BF16);
      B[2 * lt + 8 + h][lg] = emu_b16(x[5], h, BF16);
    }
  }
  __syncwarp();
  for (int i = 0; i < 4; ++i) {
    const unsigned row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    float s = 0;
    for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
    d[i] += s;
  }
}
}  // namespace
}  // namespace kf::hal::cuda
