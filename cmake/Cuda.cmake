# The CUDA backend (hal/cuda/), added to the kf target; or the same sources built as the HIP backend.
#  - KF_CUDA (set in CMakeLists.txt: ON when check_language(CUDA) found nvcc): device code for
#    KF_CUDA_ARCHITECTURES (SASS for sm_90a, H100/H200, with the Hopper-only instructions the
#    attention kernel attention_wgmma.cu uses, plus compute_80 PTX that other GPUs JIT-compile; an
#    architecture list without 90a builds no warpgroup kernel: KF_CUDA_WGMMA unset).
#    The CUDA runtime is linked statically (CUDA::cudart_static) and its symbols kept inside libkf, so
#    libkf loads on machines without CUDA; there the backend lists no usable device.
#  - KF_HIP: hal/cuda/ built as the HIP backend instead ("hip"): the same .cu files compiled by hipcc for
#    KF_HIP_ARCHITECTURES. tools/check-hip.sh compiles them without CMake, target by target.
# A missing compiler is a configure-time message, never an error.
option(KF_HIP "Build hal/cuda/ as the HIP backend (ROCm) instead of the CUDA backend" OFF)
set(KF_CUDA_ARCHITECTURES "90a-real;80-virtual" CACHE STRING
    "CUDA architectures of the CUDA backend (CMAKE_CUDA_ARCHITECTURES syntax)")
set(KF_HIP_ARCHITECTURES "gfx90a;gfx942;gfx1100" CACHE STRING "AMD GPU targets of the HIP backend")

set(kf_gpu_host_sources hal/cuda/allocator.cpp hal/cuda/device.cpp hal/cuda/kernels.cpp hal/cuda/matmul.cpp
                         hal/cuda/lce.cpp)
set(kf_gpu_device_sources hal/cuda/eltwise.cu hal/cuda/rows.cu hal/cuda/norm.cu hal/cuda/train.cu
                          hal/cuda/attention.cu hal/cuda/attention_decode.cu hal/cuda/attention_mma.cu hal/cuda/attention_bwd.cu hal/cuda/attention_bwd_mma.cu hal/cuda/attention_keep.cu
                          hal/cuda/attention_wgmma.cu
                          hal/cuda/conv.cu)

# The project's warning and sanitizer flags are for the host compiler: keep them from nvcc (it rejects
# -Wall) and hand the warnings to nvcc's host compiler instead.
function(kf_host_only_compile_options target lang)
  get_target_property(opts ${target} COMPILE_OPTIONS)
  if(opts)
    set(wrapped)
    foreach(o IN LISTS opts)
      list(APPEND wrapped "$<$<NOT:$<COMPILE_LANGUAGE:${lang}>>:${o}>")
    endforeach()
    set_target_properties(${target} PROPERTIES COMPILE_OPTIONS "${wrapped}")
  endif()
endfunction()

if(KF_HIP)
  # hipcc compiles the kernels into objects that join libkf; the host files go through the C++ compiler
  # with the HIP runtime's headers. (Not CMake's HIP language: CMake 3.25 does not find Debian's
  # multiarch ROCm layout.) The HIP runtime, libamdhip64, is linked dynamically: ROCm has no static one.
  find_program(KF_HIPCC hipcc)
  find_library(KF_AMDHIP64 amdhip64)
  find_path(KF_HIP_INCLUDE_DIR hip/hip_runtime_api.h)
  if(KF_HIPCC AND KF_AMDHIP64 AND KF_HIP_INCLUDE_DIR)
    set(kf_hip_objects)
    set(kf_hip_arch_flags)
    foreach(a IN LISTS KF_HIP_ARCHITECTURES)
      list(APPEND kf_hip_arch_flags --offload-arch=${a})
    endforeach()
    foreach(src IN LISTS kf_gpu_device_sources)
      get_filename_component(stem ${src} NAME_WE)
      set(obj ${CMAKE_CURRENT_BINARY_DIR}/hip/${stem}.o)
      add_custom_command(
        OUTPUT ${obj}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/hip
        COMMAND ${KF_HIPCC} -x hip ${kf_hip_arch_flags} -std=c++17 -O3 -fPIC -I${CMAKE_SOURCE_DIR}
                -I${CMAKE_SOURCE_DIR}/include -I${CMAKE_SOURCE_DIR}/src -c ${CMAKE_SOURCE_DIR}/${src} -o ${obj}
        DEPENDS ${src} hal/cuda/common.cuh hal/cuda/attention_common.cuh hal/cuda/kernels.hpp hal/cuda/gpu_compat.hpp
                src/plan/depthwise.hpp
        WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
        COMMENT "hipcc ${src} (${KF_HIP_ARCHITECTURES})"
        VERBATIM)
      list(APPEND kf_hip_objects ${obj})
    endforeach()
    set_source_files_properties(${kf_hip_objects} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
    target_sources(kf PRIVATE ${kf_gpu_host_sources} ${kf_hip_objects})
    target_include_directories(kf PRIVATE ${KF_HIP_INCLUDE_DIR})
    target_compile_definitions(kf PRIVATE KF_HAVE_CUDA KF_HIP __HIP_PLATFORM_AMD__)
    target_link_libraries(kf PRIVATE ${KF_AMDHIP64})
    set(KF_GPU_BACKEND_BUILT hip)  # tests/CMakeLists.txt: the conformance run of this backend
    message(STATUS "kf: HIP backend ON (hal/cuda/ through ${KF_HIPCC}, ${KF_HIP_ARCHITECTURES})")
  else()
    message(STATUS "kf: HIP backend OFF (KF_HIP=ON but hipcc, libamdhip64 or the HIP headers were not found)")
  endif()
elseif(KF_CUDA AND NOT CMAKE_CUDA_COMPILER)
  message(STATUS "kf: CUDA backend OFF (KF_CUDA=ON but no CUDA compiler was found: put nvcc on PATH or set "
                 "CMAKE_CUDA_COMPILER)")
elseif(KF_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${KF_CUDA_ARCHITECTURES})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  target_sources(kf PRIVATE ${kf_gpu_host_sources} ${kf_gpu_device_sources})
  set_target_properties(kf PROPERTIES CUDA_ARCHITECTURES "${KF_CUDA_ARCHITECTURES}" CUDA_STANDARD 17
                                      CUDA_STANDARD_REQUIRED ON CUDA_RUNTIME_LIBRARY Static)
  kf_host_only_compile_options(kf CUDA)
  target_compile_options(kf PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
  # The oldest compute capability the build has code for (PTX of an architecture runs on newer ones).
  set(kf_min_arch 1000)
  foreach(a IN LISTS KF_CUDA_ARCHITECTURES)
    string(REGEX MATCH "^[0-9]+" kf_arch_number "${a}")
    if(kf_arch_number AND kf_arch_number LESS kf_min_arch)
      set(kf_min_arch ${kf_arch_number})
    endif()
  endforeach()
  string(REPLACE ";" "," kf_archs_text "${KF_CUDA_ARCHITECTURES}")
  if(KF_CUDA_ARCHITECTURES MATCHES "90a")  # attention_wgmma.cu's kernel exists (kernels.cpp may pick it)
    target_compile_definitions(kf PRIVATE KF_CUDA_WGMMA)
  endif()
  target_compile_definitions(kf PRIVATE KF_HAVE_CUDA KF_CUDA_MIN_ARCH=${kf_min_arch}
                                        "KF_CUDA_ARCHS=\"${kf_archs_text}\"")
  # cuBLASLt (linear, matmul) is opened at run time by hal/cuda/matmul.cpp (dlopen), not linked: only its
  # headers are used here, so libkf still loads where CUDA is absent.
  target_link_libraries(kf PRIVATE CUDA::cudart_static ${CMAKE_DL_LIBS})
  # Keep the static runtime's symbols out of libkf's exports: a program that also loads libcudart.so
  # (PyTorch, say) must not bind to ours.
  target_link_options(kf PRIVATE "LINKER:--exclude-libs,libcudart_static.a")
  set(KF_GPU_BACKEND_BUILT cuda)  # tests/CMakeLists.txt: the conformance run of this backend
  message(STATUS "kf: CUDA backend ON (CUDA ${CUDAToolkit_VERSION}, architectures ${KF_CUDA_ARCHITECTURES}, "
                 "static runtime)")
else()
  message(STATUS "kf: CUDA backend OFF")
endif()
