# Shader variants of docs/ops.md section 4 beyond mm.comp / mm_coopmat.comp (included by variants.cmake),
# looked up by hal/vulkan/embedding.cpp and conv.cpp. No f64: the epilogues take gelu / silu.
foreach(dt IN LISTS KF_DTYPES)
  string(TOUPPER ${dt} DT)
  # Few rows (decode) and split-K: linear / linear_dropout with W [N, K].
  list(APPEND KF_SHADER_VARIANTS "mm_gemv_${dt}|mm_gemv.comp|DT_${DT}")
endforeach()
# embedding: a gather and an add, f64 too.
foreach(dt IN LISTS KF_DTYPES ITEMS f64)
  string(TOUPPER ${dt} DT)
  list(APPEND KF_SHADER_VARIANTS "embedding_${dt}|embedding.comp|DT_${DT}")
endforeach()
# Convolutions (conv2d, conv2d_bn_relu, conv2d_gelu_dropout): the implicit GEMM and the batch-norm fold.
foreach(dt IN LISTS KF_DTYPES)
  string(TOUPPER ${dt} DT)
  list(APPEND KF_SHADER_VARIANTS "conv_${dt}|conv.comp|DT_${DT}")
  list(APPEND KF_SHADER_VARIANTS "conv_fold_bn_${dt}|conv.comp|DT_${DT},FOLD_BN")
  list(APPEND KF_SHADER_VARIANTS "conv_depthwise_${dt}|conv_depthwise.comp|DT_${DT}")  # groups == C
  if(dt STREQUAL "f16" OR dt STREQUAL "bf16")  # the column matrix of the tensor-core path
    list(APPEND KF_SHADER_VARIANTS "conv_im2col_${dt}|conv.comp|DT_${DT},IM2COL")
  endif()
endforeach()
