// The CUDA/HIP-common dialect of hal/cuda/ (VkFFT's idea in docs/architecture.md: one kernel source, several
// backends). Host code calls the runtime through gpu* names and kernels use the KF_* helpers below, so
// nvcc compiles these files as CUDA and hipcc compiles the very same files as HIP (build with KF_HIP, or
// tools/check-hip.sh). Nothing else in hal/cuda/ names cuda* or hip* directly.
#pragma once

#if defined(KF_HIP) || defined(__HIPCC__)
#ifndef KF_HIP
#define KF_HIP 1
#endif
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#else
#include <hip/hip_runtime_api.h>
#endif
#define KF_GPU_API "HIP"
#define KF_GPU_VENDOR "AMD"
#define KF_GPU(name) hip##name
#define gpuDeviceProp hipDeviceProp_t
#else
#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#else
#include <cuda_runtime_api.h>
#endif
#define KF_GPU_API "CUDA"
#define KF_GPU_VENDOR "NVIDIA"
#define KF_GPU(name) cuda##name
#define gpuDeviceProp cudaDeviceProp
#endif

// Runtime names used by the backend (types, constants and functions), spelled once for both APIs.
#define gpuError_t KF_GPU(Error_t)
#define gpuStream_t KF_GPU(Stream_t)
#define gpuEvent_t KF_GPU(Event_t)
#define gpuSuccess KF_GPU(Success)
#define gpuErrorNotReady KF_GPU(ErrorNotReady)
#define gpuErrorMemoryAllocation KF_GPU(ErrorMemoryAllocation)
#define gpuErrorNoDevice KF_GPU(ErrorNoDevice)
#define gpuErrorInsufficientDriver KF_GPU(ErrorInsufficientDriver)
#define gpuErrorIllegalAddress KF_GPU(ErrorIllegalAddress)
#define gpuErrorLaunchFailure KF_GPU(ErrorLaunchFailure)
#define gpuErrorInvalidValue KF_GPU(ErrorInvalidValue)
#define gpuStreamNonBlocking KF_GPU(StreamNonBlocking)
#define gpuMemcpyHostToDevice KF_GPU(MemcpyHostToDevice)
#define gpuMemcpyDeviceToHost KF_GPU(MemcpyDeviceToHost)
#define gpuGetDeviceCount KF_GPU(GetDeviceCount)
#define gpuGetDeviceProperties KF_GPU(GetDeviceProperties)
#define gpuDriverGetVersion KF_GPU(DriverGetVersion)
#define gpuRuntimeGetVersion KF_GPU(RuntimeGetVersion)
#define gpuSetDevice KF_GPU(SetDevice)
#define gpuGetDevice KF_GPU(GetDevice)
#define gpuGetErrorName KF_GPU(GetErrorName)
#define gpuGetErrorString KF_GPU(GetErrorString)
#define gpuGetLastError KF_GPU(GetLastError)
#define gpuMalloc KF_GPU(Malloc)
#define gpuFree KF_GPU(Free)
#define gpuMemGetInfo KF_GPU(MemGetInfo)
#define gpuMemcpyAsync KF_GPU(MemcpyAsync)
#define gpuMemsetAsync KF_GPU(MemsetAsync)
#define gpuStreamCreateWithFlags KF_GPU(StreamCreateWithFlags)
#define gpuStreamDestroy KF_GPU(StreamDestroy)
#define gpuStreamQuery KF_GPU(StreamQuery)
#define gpuEventCreate KF_GPU(EventCreate)
#define gpuEventDestroy KF_GPU(EventDestroy)
#define gpuEventRecord KF_GPU(EventRecord)
#define gpuEventQuery KF_GPU(EventQuery)
#define gpuEventElapsedTime KF_GPU(EventElapsedTime)
#define gpuFuncAttributes KF_GPU(FuncAttributes)
#define gpuFuncGetAttributes KF_GPU(FuncGetAttributes)
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor KF_GPU(OccupancyMaxActiveBlocksPerMultiprocessor)
#define gpuFuncSetAttribute KF_GPU(FuncSetAttribute)
#define gpuFuncAttributeMaxDynamicSharedMemorySize KF_GPU(FuncAttributeMaxDynamicSharedMemorySize)

// Device-side helpers (only in files the GPU compiler builds).
#if defined(__CUDACC__) || defined(__HIPCC__)
#define KF_DEV __device__ __forceinline__

// The warp (CUDA) or wavefront (HIP) width of the code being compiled. The host reads the running
// device's width from its properties and never launches fewer threads per row than that.
#if defined(KF_HIP)
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define KF_WARP __AMDGCN_WAVEFRONT_SIZE
#else
#define KF_WARP 64
#endif
#define KF_SHFL_XOR(v, mask) __shfl_xor((v), (mask))
#define KF_SHFL_IDX(v, src) __shfl((v), (src))
#else
#define KF_WARP 32
#define KF_SHFL_XOR(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask))
#define KF_SHFL_IDX(v, src) __shfl_sync(0xffffffffu, (v), (src))  // src: a lane of the warp
#endif

// IEEE half <-> float through the vendor's conversion instructions (round to nearest even); pairs in
// one instruction where there is one (cvt.rn.f16x2.f32, cvt.rn.bf16x2.f32 on sm_80 and newer).
KF_DEV float kf_half_to_float(unsigned short h) { return __half2float(__ushort_as_half(h)); }
KF_DEV unsigned short kf_float_to_half(float f) { return __half_as_ushort(__float2half_rn(f)); }
// Two values as one 32-bit word, lo in the low half. kf_pack_bf162 returns false where the compiler
// has no bf16 pair conversion (HIP): the caller rounds by bit operations instead.
KF_DEV unsigned kf_pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return unsigned(__half_as_ushort(__low2half(h))) | (unsigned(__half_as_ushort(__high2half(h))) << 16);
}
#if defined(KF_HIP)
#define KF_HAVE_BF16_PAIR 0
#else
#define KF_HAVE_BF16_PAIR 1
KF_DEV unsigned kf_pack_bf162(float lo, float hi) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
  return unsigned(__bfloat16_as_ushort(__low2bfloat16(b))) | (unsigned(__bfloat16_as_ushort(__high2bfloat16(b))) << 16);
}
#endif
// The hardware's approximate exp and division (about 2 ulp): for dtypes stored in 16 bits, whose
// rounding is a thousand times coarser.
KF_DEV float kf_fast_exp(float x) { return __expf(x); }
KF_DEV float kf_fast_div(float a, float b) { return __fdividef(a, b); }

// ---- Thread-block clusters (CUDA, sm_90 and newer): the blocks of a cluster share a barrier and read
// each other's shared memory. KF_HAVE_CLUSTER_LAUNCH: the host side may launch cluster kernels (CUDA;
// never HIP). KF_CLUSTERS: the device code being compiled has clusters (sm_90 and newer); elsewhere a
// cluster kernel's body is empty, and the host launches it only where kf_cluster_code() says the code
// the device loaded has them (the compute_80 PTX that newer GPUs JIT-compile does not).
#if !defined(KF_HIP)
#define KF_HAVE_CLUSTER_LAUNCH 1
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KF_CLUSTERS 1
#include <cooperative_groups.h>
KF_DEV unsigned kf_cluster_rank() { return cooperative_groups::this_cluster().block_rank(); }
// p (this block's shared memory) as the same variable of the cluster's block `rank`.
template <class T> KF_DEV T* kf_cluster_map(T* p, unsigned rank) {
  return cooperative_groups::this_cluster().map_shared_rank(p, rank);
}
// Every thread of the cluster: arrive (release: this thread's earlier writes and reads of shared memory
// are done) and wait (acquire: every thread's have happened); kf_cluster_sync() both.
KF_DEV void kf_cluster_sync() { cooperative_groups::this_cluster().sync(); }
KF_DEV void kf_cluster_arrive() { (void)cooperative_groups::this_cluster().barrier_arrive(); }
KF_DEV void kf_cluster_wait() { cooperative_groups::this_cluster().barrier_wait(); }
#else
#define KF_CLUSTERS 0
#endif
#else
#define KF_HAVE_CLUSTER_LAUNCH 0
#define KF_CLUSTERS 0
#endif
#endif

// ---- Host side of the clusters (CUDA sources only).
#if defined(__CUDACC__) && !defined(KF_HIP)
// Launches kernel on grid blocks in clusters of `cluster` (1-D; grid a multiple of it).
template <class Params>
inline gpuError_t kf_launch_cluster(void (*kernel)(Params), unsigned grid, unsigned block, size_t smem, gpuStream_t s,
                                    unsigned cluster, const Params& p) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, p);
}
// Whether the code of kernel that the current device runs was compiled for sm_90 or newer (its cluster
// body is there): false for the compute_80 PTX that a GPU without matching SASS JIT-compiles.
inline bool kf_cluster_code(const void* kernel) {
  cudaFuncAttributes a;
  if (cudaFuncGetAttributes(&a, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.ptxVersion >= 90 && a.binaryVersion >= 90;
}
#endif
