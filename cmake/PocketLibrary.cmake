# pocket_library(NAME SOURCES ... DEPS ...): one layer = one static library. Linking only to
# the layers below it is what enforces the dependency arrows of docs/architecture.md.
function(pocket_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(${name} PRIVATE ${POCKET_WARNING_FLAGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# pocket_test(NAME SOURCES ... DEPS ... [LABELS ...]): a GoogleTest binary registered with CTest.
function(pocket_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT POCKET_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${POCKET_WARNING_FLAGS})
  target_compile_definitions(${name} PRIVATE
    POCKET_SHARED_DIR="${POCKET_SHARED_DIR}" POCKET_CACHE_DIR="${POCKET_CACHE_DIR}"
    POCKET_SOURCE_DIR="${PROJECT_SOURCE_DIR}" POCKET_BINARY_DIR="${PROJECT_BINARY_DIR}")
  # GTest::gtest (installed) or gtest (built from source in cross builds): the top level says.
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} ${POCKET_GTEST_LIBRARIES})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
endfunction()
