// The sm_80+ warp-level matrix instructions the tensor-core attention kernel uses (attention_mma.cu
// attn_mma), each as one inline-PTX wrapper: cp.async (16 bytes, zero-filled past src_bytes), its
// commit / wait, ldmatrix .x4 (and .trans) and mma.sync.m16n8k16 with f16 or bf16 inputs and float
// accumulators. Fragment layouts as the PTX ISA documents them ("Matrix fragments for mma.m16n8k16",
// "ldmatrix"): for lane l, g = l / 4, t = l % 4,
//  - A (16 x 16, row): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9];
//  - B (16 x 8, col): b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g];
//  - C / D (16 x 8, float): c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1];
//  - ldmatrix .x4: lanes 8i..8i+7 give the row addresses of 8 x 8 matrix i; r[i] = M_i[g][2t, 2t+1]
//    (.trans: M_i[2t][g], M_i[2t+1][g]); the lower index in the low 16 bits.
// tools/cuda-emu/hal/cuda/mma_ptx.cuh models each of them on the CPU with these layouts.
#pragma once
#include "hal/cuda/gpu_compat.hpp"

namespace kf::hal::cuda {
namespace {
#if !defined(KF_HIP)
KF_DEV unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
// Shared-memory operands are 32-bit shared-window addresses (smem_u32 of a pointer, plus byte offsets),
// so that the offsets of unrolled loops fold into the instructions' immediates.
KF_DEV void cp_async16(unsigned smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes));
}
KF_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> KF_DEV void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
KF_DEV void ldsm_x4(unsigned (&r)[4], unsigned smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem));
}
KF_DEV void ldsm_x4_trans(unsigned (&r)[4], unsigned smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem));
}
// d += A B for one 16 x 8 tile; BF16 selects the input type.
template <bool BF16>
KF_DEV void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (BF16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif
}  // namespace
}  // namespace kf::hal::cuda
