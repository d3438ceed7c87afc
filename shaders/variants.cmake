# The shader variant table: which GLSL source is compiled with which defines (ggml-style). Each
# variant is named <family>_<op>_<dtype>[_sg]; the Vulkan backend looks kernels up by that name.
# Ops that need exp/tanh/erf have no f64 variant: GLSL has no float64 transcendentals (the backend
# reports them unsupported, naming that reason).
set(KF_ELTWISE_OPS
  add_relu mul_relu add_sigmoid mul_tanh bias_relu bias_gelu bias_gelu_tanh bias_silu swiglu geglu
  mish_scale prelu_bias dropout gelu_dropout bias_gelu_dropout add_dropout_residual
  add mul prelu copy relu sigmoid tanh gelu gelu_tanh silu mish)
set(KF_ELTWISE_F64_OPS
  add_relu mul_relu bias_relu prelu_bias dropout add_dropout_residual add mul prelu copy relu)
set(KF_ROW_OPS sum_squared mean_abs softmax log_softmax)
set(KF_ROW_F64_OPS sum_squared mean_abs)
set(KF_DTYPES f32 f16 bf16)

set(KF_SHADER_VARIANTS)  # entries: name|source|define,define,...
foreach(op IN LISTS KF_ELTWISE_OPS)
  foreach(dt IN LISTS KF_DTYPES)
    string(TOUPPER ${dt} DT)
    list(APPEND KF_SHADER_VARIANTS "eltwise_${op}_${dt}|eltwise.comp|OP_${op},DT_${DT}")
  endforeach()
endforeach()
foreach(op IN LISTS KF_ELTWISE_F64_OPS)
  list(APPEND KF_SHADER_VARIANTS "eltwise_${op}_f64|eltwise.comp|OP_${op},DT_F64")
endforeach()
# Matrix products (linear, matmul): one portable tiled kernel per dtype; no f64 (gelu/silu epilogues).
foreach(dt IN LISTS KF_DTYPES)
  string(TOUPPER ${dt} DT)
  list(APPEND KF_SHADER_VARIANTS "mm_${dt}|mm.comp|DT_${DT}")
endforeach()
# A kernel that runs long and ends by itself, for the fault tests (detail::record_long_kernel).
list(APPEND KF_SHADER_VARIANTS "long_kernel|long_kernel.comp|LONG_KERNEL")
# Tensor-core products through GL_NV_cooperative_matrix, when this glslc compiles it (Debian 12's does),
# and through GL_KHR_cooperative_matrix from the same source (below: a newer glslang).
# Tile shapes (hal/vulkan/matmul.cpp kCoopmatConfigs, KF_TUNE mm_cfg): subgroups SG_M x SG_N,
# each FM x FN 16x16 accumulators, BK-deep slices, 1 or 2 shared-memory stages.
set(kf_coopmat_tiles
  "c1|SG_M=2,SG_N=4,FM=4,FN=2,BK=32,STAGES=1"
  "c2|SG_M=2,SG_N=4,FM=4,FN=2,BK=32,STAGES=2"
  "c3|SG_M=2,SG_N=4,FM=4,FN=2,BK=64,STAGES=1"
  "c4|SG_M=2,SG_N=2,FM=4,FN=4,BK=32,STAGES=2"
  "c5|SG_M=2,SG_N=4,FM=4,FN=4,BK=32,STAGES=1"
  "c6|SG_M=4,SG_N=2,FM=2,FN=4,BK=32,STAGES=2"
  "c7|SG_M=2,SG_N=4,FM=4,FN=2,BK=32,STAGES=3"
  "c8|SG_M=4,SG_N=2,FM=2,FN=4,BK=32,STAGES=3"
  "c9|SG_M=4,SG_N=4,FM=2,FN=2,BK=32,STAGES=2"
  "c10|SG_M=4,SG_N=4,FM=2,FN=2,BK=32,STAGES=3"
  "c11|SG_M=2,SG_N=4,FM=4,FN=2,BK=32,STAGES=0"
  "c12|SG_M=8,SG_N=2,FM=2,FN=4,BK=32,STAGES=1"
  "c13|SG_M=4,SG_N=4,FM=2,FN=4,BK=32,STAGES=1"
  "c14|SG_M=1,SG_N=8,FM=4,FN=2,BK=32,STAGES=1"
)
execute_process(
  COMMAND ${GLSLC} -fshader-stage=comp --target-env=vulkan1.2 -o /dev/null ${CMAKE_CURRENT_LIST_DIR}/mm_coopmat.comp
  RESULT_VARIABLE coopmat_nv_rc OUTPUT_QUIET ERROR_QUIET)
if(coopmat_nv_rc EQUAL 0)
  # bf16 (bias, residual and output in bf16): the same tiles on f16 operands scaled by powers of two
  # (bf16_rows_to_f16.comp converts A and B first: per row, or per column for operands stored [K, N]).
  foreach(tile IN LISTS kf_coopmat_tiles)
    string(REPLACE "|" ";" t "${tile}")
    list(GET t 0 cname)
    list(GET t 1 cdefs)
    list(APPEND KF_SHADER_VARIANTS "mm_coopmat_f16_${cname}|mm_coopmat.comp|${cdefs}")
    list(APPEND KF_SHADER_VARIANTS "mm_coopmat_bf16_${cname}|mm_coopmat.comp|${cdefs},OUT_BF16")
  endforeach()
  list(APPEND KF_SHADER_VARIANTS "bf16_rows_to_f16|bf16_rows_to_f16.comp|KF_ROWS_TO_F16")
  list(APPEND KF_SHADER_VARIANTS "bf16_cols_to_f16|bf16_rows_to_f16.comp|COLS")
  list(APPEND KF_SHADER_VARIANTS
    "mm_coopmat_peak_f16|mm_coopmat_peak.comp|KF_COOPMAT_NV"
    # The ceiling with shared-memory fragment loads added (KF_TUNE mm_peak=1..8; mm_coopmat_peak.comp).
    "mm_coopmat_peak_f16_l1|mm_coopmat_peak.comp|PEAK_LOAD=1"
    "mm_coopmat_peak_f16_l2|mm_coopmat_peak.comp|PEAK_LOAD=2"
    "mm_coopmat_peak_f16_l3|mm_coopmat_peak.comp|PEAK_LOAD=3"
    "mm_coopmat_peak_f16_l4|mm_coopmat_peak.comp|PEAK_LOAD=4"
    "mm_coopmat_peak_f16_l5|mm_coopmat_peak.comp|PEAK_LOAD=5"
    "mm_coopmat_peak_f16_l6|mm_coopmat_peak.comp|PEAK_LOAD=6"
    "mm_coopmat_peak_f16_l7|mm_coopmat_peak.comp|PEAK_LOAD=7"
    "mm_coopmat_peak_f16_l8|mm_coopmat_peak.comp|PEAK_LOAD=8")
  message(STATUS "kf: glslc compiles GL_NV_cooperative_matrix: tensor-core matmul variant built")
else()
  message(STATUS "kf: glslc cannot compile GL_NV_cooperative_matrix: portable matmul only")
endif()
# The same products through GL_KHR_cooperative_matrix (KF_COOPMAT_KHR; the glslang 13 and SPIRV-Tools of
# tools/install-deps.sh, cmake/Shaders.cmake): mm_coopmat_khr_<dtype>_<tile> at 16x16x16, and at the other
# f16 shapes devices list (16x8x16, 16x8x8: B and the accumulators 8 columns wide, twice as many of them
# per subgroup so that the workgroup's tile stays the same; 8x16x16 below) for the tiles the backend picks
# by default.
set(kf_khr_left_out)
if(KF_KHR_SHADERS)
  foreach(tile IN LISTS kf_coopmat_tiles)
    string(REPLACE "|" ";" t "${tile}")
    list(GET t 0 cname)
    list(GET t 1 cdefs)
    list(APPEND KF_SHADER_VARIANTS "mm_coopmat_khr_f16_${cname}|mm_coopmat.comp|${cdefs},KF_COOPMAT_KHR")
    list(APPEND KF_SHADER_VARIANTS "mm_coopmat_khr_bf16_${cname}|mm_coopmat.comp|${cdefs},OUT_BF16,KF_COOPMAT_KHR")
  endforeach()
  foreach(tile "c1|SG_M=2,SG_N=4,FM=4,FN=4,BK=32,STAGES=1" "c13|SG_M=4,SG_N=4,FM=2,FN=8,BK=32,STAGES=1"
               "c14|SG_M=1,SG_N=8,FM=4,FN=4,BK=32,STAGES=1")
    string(REPLACE "|" ";" t "${tile}")
    list(GET t 0 cname)
    list(GET t 1 cdefs)
    foreach(shape "16x8x16|CM_N=8" "16x8x8|CM_N=8,CM_K=8")
      string(REPLACE "|" ";" sh "${shape}")
      list(GET sh 0 sname)
      list(GET sh 1 sdefs)
      list(APPEND KF_SHADER_VARIANTS
        "mm_coopmat_khr_f16_${cname}_${sname}|mm_coopmat.comp|${cdefs},${sdefs},KF_COOPMAT_KHR"
        "mm_coopmat_khr_bf16_${cname}_${sname}|mm_coopmat.comp|${cdefs},${sdefs},OUT_BF16,KF_COOPMAT_KHR")
    endforeach()
  endforeach()
  # Intel's 8x16x16 (A 8 rows deep) on the subgroup size its pipelines are made to require (SGS: 8 on
  # Xe-HPG, 16 on Xe2; hal/vulkan/coopmat.cpp), mm_coopmat_khr_<dtype>_<tile>_8x16x16_sg<SGS>: the same
  # workgroup tile and invocations as at 16x16x16, in more subgroups of fewer accumulators (as many
  # accumulator values per lane as 16x16x16 on 32), for the tiles the backend picks by default.
  foreach(tile "c1|8|SG_M=8,SG_N=4,FM=2,FN=2" "c13|8|SG_M=8,SG_N=8,FM=2,FN=2" "c14|8|SG_M=4,SG_N=8,FM=2,FN=2"
               "c1|16|SG_M=4,SG_N=4,FM=4,FN=2" "c13|16|SG_M=4,SG_N=8,FM=4,FN=2" "c14|16|SG_M=2,SG_N=8,FM=4,FN=2")
    string(REPLACE "|" ";" t "${tile}")
    list(GET t 0 cname)
    list(GET t 1 sgs)
    list(GET t 2 cdefs)
    set(cdefs "${cdefs},BK=32,STAGES=1,CM_M=8,SGS=${sgs}")
    list(APPEND KF_SHADER_VARIANTS
      "mm_coopmat_khr_f16_${cname}_8x16x16_sg${sgs}|mm_coopmat.comp|${cdefs},KF_COOPMAT_KHR"
      "mm_coopmat_khr_bf16_${cname}_8x16x16_sg${sgs}|mm_coopmat.comp|${cdefs},OUT_BF16,KF_COOPMAT_KHR")
  endforeach()
  # Another output dtype (Attrs::out_dtype) on the default tiles at 16x16x16, built here so that the common
  # calls compile nothing at run time; the other KHR tiles and shapes, like the NV kernels, get theirs
  # compiled at run time (hal/vulkan/matmul.cpp out_dtype_variant; KHR through an NV form and a rewrite,
  # hal/vulkan/runtime_shader.hpp).
  foreach(cname c1 c13 c14)
    foreach(tile IN LISTS kf_coopmat_tiles)
      if(tile MATCHES "^${cname}\\|(.*)$")
        set(cdefs ${CMAKE_MATCH_1})
      endif()
    endforeach()
    foreach(odt f32 f16 bf16)
      string(TOUPPER ${odt} ODT)
      if(NOT odt STREQUAL "f16")
        list(APPEND KF_SHADER_VARIANTS "mm_coopmat_khr_f16_${cname}_o${odt}|mm_coopmat.comp|${cdefs},ODT_${ODT},KF_COOPMAT_KHR")
      endif()
      if(NOT odt STREQUAL "bf16")
        list(APPEND KF_SHADER_VARIANTS
          "mm_coopmat_khr_bf16_${cname}_o${odt}|mm_coopmat.comp|${cdefs},OUT_BF16,ODT_${ODT},KF_COOPMAT_KHR")
      endif()
    endforeach()
  endforeach()
  # bf16 operands as bf16 (KF_COOPMAT_BF16: GL_EXT_bfloat16, bf16 x bf16 -> f32 at 16x16x16; compiled through
  # slang's glslang, cmake/Shaders.cmake): mm_coopmat_khr_bf16n_<tile>, no conversion or scaling of A and B;
  # another output dtype on the default tiles, as above. VulkanDevice::coopmat_bf16 picks them (KF_TUNE
  # bf16_coopmat).
  if(KF_BF16_SHADERS)
    foreach(tile IN LISTS kf_coopmat_tiles)
      string(REPLACE "|" ";" t "${tile}")
      list(GET t 0 cname)
      list(GET t 1 cdefs)
      list(APPEND KF_SHADER_VARIANTS
        "mm_coopmat_khr_bf16n_${cname}|mm_coopmat.comp|${cdefs},OUT_BF16,KF_COOPMAT_KHR,KF_COOPMAT_BF16")
      if(cname MATCHES "^c(1|13|14)$")
        foreach(odt f32 f16)
          string(TOUPPER ${odt} ODT)
          list(APPEND KF_SHADER_VARIANTS
            "mm_coopmat_khr_bf16n_${cname}_o${odt}|mm_coopmat.comp|${cdefs},OUT_BF16,ODT_${ODT},KF_COOPMAT_KHR,KF_COOPMAT_BF16")
        endforeach()
      endif()
    endforeach()
  else()
    message(STATUS "kf: left out the bf16-native tensor-core variants mm_coopmat_khr_bf16n_* (linear, matmul, ffn): "
                   "${KF_BF16_WHY}; bf16 products take the f16 kernels on scaled operands")
  endif()
  if(NOT coopmat_nv_rc EQUAL 0)  # the bf16 operands' conversion, otherwise listed with the NV variants
    list(APPEND KF_SHADER_VARIANTS "bf16_rows_to_f16|bf16_rows_to_f16.comp|KF_ROWS_TO_F16")
    list(APPEND KF_SHADER_VARIANTS "bf16_cols_to_f16|bf16_rows_to_f16.comp|COLS")
  endif()
else()
  list(APPEND kf_khr_left_out "mm_coopmat_khr_* (linear, matmul, ffn, the convolutions, linear_cross_entropy)")
endif()
foreach(op IN LISTS KF_ROW_OPS)
  set(dts ${KF_DTYPES})
  if(op IN_LIST KF_ROW_F64_OPS)
    list(APPEND dts f64)
  endif()
  foreach(dt IN LISTS dts)
    string(TOUPPER ${dt} DT)
    list(APPEND KF_SHADER_VARIANTS "rows_${op}_${dt}|rows.comp|OP_${op},DT_${DT}")
    list(APPEND KF_SHADER_VARIANTS "rows_${op}_${dt}_sg|rows.comp|OP_${op},DT_${DT},SUBGROUP")
  endforeach()
endforeach()
# Sections 3 and 6 (normalizations, losses, optimizers): shaders/variants_training.cmake.
include(${CMAKE_CURRENT_LIST_DIR}/variants_training.cmake)
# Section 4 beyond the tiled products (few-rows / split-K, convolutions, embedding).
include(${CMAKE_CURRENT_LIST_DIR}/variants_linalg.cmake)
if(kf_khr_left_out)
  string(JOIN ", " kf_khr_left_out ${kf_khr_left_out})
  message(STATUS "kf: no glslang 13 / SPIRV-Tools 2025 (tools/install-deps.sh unpacks them into .tools/): left out the "
                 "KHR cooperative-matrix variants ${kf_khr_left_out}; devices with only VK_KHR_cooperative_matrix "
                 "take the portable kernels")
endif()
