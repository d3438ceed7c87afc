# Installs the built kf into a scratch prefix, then configures, builds and runs tests/install against it.
# Usage: cmake -DBUILD_DIR=<kf build> -DSOURCE_DIR=<tests/install> -DWORK_DIR=<scratch>
#              -DGENERATOR=<generator> -P check.cmake
foreach(v BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check.cmake: -D${v}= is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "failed (${rc}): ${cmd}")
  endif()
endfunction()

step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
# An installed tool runs from the prefix as it is, with no library path set (its run path is relative).
if(EXPECT_TOOLS)
  set(ENV{LD_LIBRARY_PATH} "")
  set(ENV{KF_BACKEND} cpu)
  execute_process(COMMAND ${prefix}/bin/kf-info RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "cpu")
    message(FATAL_ERROR "the installed kf-info failed (${rc}): ${err}${out}")
  endif()
  unset(ENV{KF_BACKEND})
endif()
step(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
     -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix})
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step(${WORK_DIR}/build/app)
