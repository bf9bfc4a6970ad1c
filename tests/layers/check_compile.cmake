# cmake -DCXX=... -DFLAGS=... -DINCLUDES=dir|dir|... -DSOURCE=file.cc -DEXPECT=success|failure
#       [-DEXPECT_REGEX=...] -P check_compile.cmake
# Compiles SOURCE (syntax only) with exactly the include directories given and checks the outcome;
# for an expected failure, the compiler's output must match EXPECT_REGEX (so an unrelated error,
# or a missing compiler, is not taken for the failure the test is about).
foreach(var CXX INCLUDES SOURCE EXPECT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_compile.cmake: -D${var}=... is required")
  endif()
endforeach()
string(REPLACE "|" ";" include_dirs "${INCLUDES}")
set(args ${FLAGS})
foreach(dir IN LISTS include_dirs)
  list(APPEND args -I${dir})
endforeach()
execute_process(COMMAND ${CXX} ${args} -fsyntax-only -x c++ ${SOURCE}
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
string(REPLACE ";" " " shown "${CXX} ${args} -fsyntax-only -x c++ ${SOURCE}")
if(EXPECT STREQUAL "success")
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "expected to compile, failed (${result}):\n${shown}\n${output}")
  endif()
  message(STATUS "compiled, as expected: ${shown}")
elseif(EXPECT STREQUAL "failure")
  if(result EQUAL 0)
    message(FATAL_ERROR "expected to fail, compiled:\n${shown}")
  endif()
  if(DEFINED EXPECT_REGEX AND NOT output MATCHES "${EXPECT_REGEX}")
    message(FATAL_ERROR "failed, but not with /${EXPECT_REGEX}/:\n${shown}\n${output}")
  endif()
  message(STATUS "failed, as expected: ${shown}\n${output}")
else()
  message(FATAL_ERROR "EXPECT must be success or failure, not '${EXPECT}'")
endif()
