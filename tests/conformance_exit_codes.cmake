# kf-conformance's exit status (run by CTest with cmake -P): 1 when a check fails, with reports that say so,
# and 2 for a selection that matches nothing. A failure is forced by scaling every tolerance to 0: the CPU
# backend's gelu in f32 is then inexact. Arguments: -DTOOL= -DCHECKER= -DOUT= (a path prefix for reports).
execute_process(COMMAND ${TOOL} --backend cpu --filter "^gelu$" --dtypes f32 --tolerance-scale 0 --progress none
                        --json ${OUT}.json --junit ${OUT}.xml
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "kf-conformance with tolerances x 0 exited with '${rc}', expected 1:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CHECKER} --expect-failures ${OUT}.json ${OUT}.xml RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the reports of a failing run are wrong:\n${out}\n${err}")
endif()
message(STATUS "failing run: exit status 1; ${out}")

execute_process(COMMAND ${TOOL} --filter "^no_such_op$" --json ${OUT}.json RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "kf-conformance with a filter that matches no op exited with '${rc}', expected 2:\n${out}\n${err}")
endif()
if(EXISTS ${OUT}.json)
  message(FATAL_ERROR "kf-conformance left ${OUT}.json from the run before when this one selected nothing")
endif()
message(STATUS "empty selection: exit status 2 (${err})")
