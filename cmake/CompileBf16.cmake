# One bf16-native shader variant (KF_COOPMAT_BF16, cmake/Shaders.cmake): GL_EXT_bfloat16 needs glslang 16,
# which only slang's GLSL pass-through (tools/slang-glsl.cpp, kf-slang-glsl) offers here, and it takes
# neither -D nor #include. So: glslangValidator -E (glslang 13, the KHR toolchain's) with the variant's
# defines, then kf-slang-glsl, spirv-opt -O and the new spirv-val for Vulkan 1.3 (as the other KHR
# variants). The depfile lists the files the preprocessor read (its #line directives).
# Usage: cmake -DLIB=<tools' lib> -DPP=glslangValidator -DDRIVER=kf-slang-glsl -DOPT=spirv-opt -DVAL=spirv-val
#              -DSRC=<.comp> -DDEFINES=A,B=1 -DOUT=<.spv> -DDEPFILE=<.d> -P CompileBf16.cmake
# OUT.opt.spv is the optimized module (embedded, and checked again by the spirv_val_khr test).
string(REPLACE "," ";" defines "${DEFINES}")
set(dflags)
foreach(d IN LISTS defines)
  list(APPEND dflags -D${d})
endforeach()
set(env ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${LIB})
set(pp ${OUT}.pp.comp)
execute_process(COMMAND ${env} ${PP} --quiet -E -S comp ${dflags} ${SRC}
                OUTPUT_FILE ${pp} ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${SRC} (${DEFINES}): the preprocessor failed: ${err}")
endif()
# kf-slang-glsl finds slang's libraries by its run path.
execute_process(COMMAND ${DRIVER} ${pp} ${OUT} ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${SRC} (${DEFINES}): slang's glslang failed: ${err}")
endif()
execute_process(COMMAND ${env} ${OPT} -O ${OUT} -o ${OUT}.opt.spv ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${SRC} (${DEFINES}): spirv-opt failed: ${err}")
endif()
execute_process(COMMAND ${env} ${VAL} --target-env vulkan1.3 ${OUT}.opt.spv
                OUTPUT_VARIABLE err ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${SRC} (${DEFINES}): spirv-val --target-env vulkan1.3 rejects it: ${err}")
endif()
file(STRINGS ${pp} lines REGEX "^#line [0-9]+ \".*\"$")
set(deps ${SRC})
foreach(l IN LISTS lines)
  string(REGEX REPLACE "^#line [0-9]+ \"(.*)\"$" "\\1" f "${l}")
  list(APPEND deps ${f})
endforeach()
list(REMOVE_DUPLICATES deps)
string(REPLACE " " "\\ " deps "${deps}")
list(JOIN deps " " deps)
file(WRITE ${DEPFILE} "${OUT}: ${deps}\n")
