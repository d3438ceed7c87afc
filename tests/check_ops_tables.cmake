# The op tables of README.md and docs/ops.md are generated from the registry by kf-info; this script
# checks that the committed tables match what the build's kf-info prints, or rewrites them (UPDATE=1).
# kf-info --ops --markdown opens no device, so the check needs no GPU and no Vulkan driver.
#   check:      cmake -DKF_INFO=build/tools/kf-info -DSOURCE_DIR=. -P tests/check_ops_tables.cmake
#   regenerate: cmake -DKF_INFO=build/tools/kf-info -DSOURCE_DIR=. -DUPDATE=1 -P tests/check_ops_tables.cmake
if(NOT KF_INFO OR NOT SOURCE_DIR)
  message(FATAL_ERROR "usage: cmake -DKF_INFO=<kf-info> -DSOURCE_DIR=<source tree> [-DUPDATE=1] -P check_ops_tables.cmake")
endif()

set(regenerate "cmake -DKF_INFO=<build>/tools/kf-info -DSOURCE_DIR=<source tree> -DUPDATE=1 -P tests/check_ops_tables.cmake")
set(failed "")

# file: the markdown file; flags: kf-info's arguments (a list).
function(check_table file flags)
  execute_process(COMMAND ${KF_INFO} ${flags} OUTPUT_VARIABLE table RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kf-info ${flags} failed (${rc}): ${err}")
  endif()
  set(path "${SOURCE_DIR}/${file}")
  file(READ "${path}" text)
  set(begin "<!-- ops-table begin -->\n")
  set(end "<!-- ops-table end -->")
  string(FIND "${text}" "${begin}" b)
  string(FIND "${text}" "${end}" e)
  if(b EQUAL -1 OR e EQUAL -1 OR e LESS b)
    message(FATAL_ERROR "${file}: no '<!-- ops-table begin -->' ... '<!-- ops-table end -->' section")
  endif()
  string(LENGTH "${begin}" blen)
  math(EXPR start "${b} + ${blen}")
  math(EXPR len "${e} - ${start}")
  string(SUBSTRING "${text}" ${start} ${len} committed)
  if(committed STREQUAL table)
    return()
  endif()
  if(UPDATE)
    string(SUBSTRING "${text}" 0 ${start} head)
    string(SUBSTRING "${text}" ${e} -1 tail)
    file(WRITE "${path}" "${head}${table}${tail}")
    message(STATUS "${file}: op table regenerated")
  else()
    set(failed "${failed} ${file}" PARENT_SCOPE)
  endif()
endfunction()

check_table(README.md "--ops;--markdown")
check_table(docs/ops.md "--ops;--markdown;--per-op")

if(failed)
  message(FATAL_ERROR "The op table in${failed} differs from what kf-info prints from the registry "
                      "(an op or a dtype was added or changed). Regenerate the tables with\n  ${regenerate}\n"
                      "and commit the result.")
endif()
