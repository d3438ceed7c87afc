# Fails when a committed generated document differs from what its generator prints now.
# cmake -DGENERATOR=<program> "-DARGS=<arguments>" -DDOC=<file> "-DREGENERATE=<how>" -P check_generated_doc.cmake
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${GENERATOR} ${args} OUTPUT_VARIABLE generated RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${GENERATOR} ${ARGS} failed (${rc})")
endif()
file(READ ${DOC} committed)
if(NOT generated STREQUAL committed)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/generated_doc.md)
  file(WRITE ${out} "${generated}")
  message(FATAL_ERROR "${DOC} is out of date: it differs from what `${GENERATOR} ${ARGS}` prints now (written "
                      "to ${out}). Regenerate it: ${REGENERATE}")
endif()
message(STATUS "${DOC} matches `${GENERATOR} ${ARGS}`")
