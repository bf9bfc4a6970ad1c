# pocket_library(NAME SOURCES ... DEPS ...): one layer = one static library. Linking only to
# the layers below it is what enforces the dependency arrows of docs/architecture.md.
#
# Headers are enforced too: a library's include path holds only its own folder and those of the
# libraries it links (transitively, through their PUBLIC dependencies), never all of src/. For
# pocket_X with sources in src/X, ${PROJECT_BINARY_DIR}/layer_include/pocket_X/ holds one symlink
# X -> src/X, and that directory is the library's PUBLIC include directory, so sources keep the
# spelling "X/file.h" while "Y/file.h" of a layer it does not link is not found. Sub-folders of a
# layer (kernels/reference, kernels/x86, kernels/arm) come with it. The layer checks in
# tests/layers/ prove that it fails.

# pocket_layer_include_dir(OUT_VAR LAYER [SOURCE_DIR]): the include directory that exposes only
# LAYER's folder (default: the calling CMakeLists' folder) as "LAYER/...".
function(pocket_layer_include_dir out_var layer)
  set(source_dir ${CMAKE_CURRENT_SOURCE_DIR})
  if(ARGC GREATER 2)
    set(source_dir ${ARGV2})
  endif()
  get_filename_component(folder ${source_dir} NAME)
  set(dir ${PROJECT_BINARY_DIR}/layer_include/${layer})
  file(MAKE_DIRECTORY ${dir})
  # Replace whatever is there (a stale link, or a link to another checkout of the sources).
  file(REMOVE ${dir}/${folder})
  file(CREATE_LINK ${source_dir} ${dir}/${folder} SYMBOLIC)
  set(${out_var} ${dir} PARENT_SCOPE)
endfunction()

# The sanitized (debug) build compiles the layers that do the arithmetic with -O1, the level
# AddressSanitizer's documentation recommends: at -O0 the suite's forward passes, grammar masks
# and tokenizers ran 2-10x slower under ASan and the whole suite outgrew CI's time limit. The
# other layers, the apps and the tests stay at -O0 (their code is thin, and GCC with the
# sanitizers compiles them 2x faster there: the CLI, the JSON and the test files dominate the
# build).
set(POCKET_SANITIZE_OPTIMIZED_LAYERS pocket_base pocket_kernels pocket_quant pocket_format
    pocket_model pocket_tokenizer pocket_generate pocket_runtime)

function(pocket_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  pocket_layer_include_dir(include_dir ${name})
  target_include_directories(${name} PUBLIC ${include_dir})
  target_compile_options(${name} PRIVATE ${POCKET_WARNING_FLAGS})
  if(POCKET_SANITIZE AND name IN_LIST POCKET_SANITIZE_OPTIMIZED_LAYERS)
    target_compile_options(${name} PRIVATE -O1)
  endif()
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  set_property(GLOBAL APPEND PROPERTY POCKET_LAYER_LIBRARIES ${name})
endfunction()

# pocket_test(NAME SOURCES ... DEPS ... [LABELS ...]): a GoogleTest binary registered with CTest.
# It sees the headers of its DEPS only (and, through quoted includes, those beside its sources).
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
