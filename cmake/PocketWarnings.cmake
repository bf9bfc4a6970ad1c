# Warnings are errors for the project's own code (not for dependencies).
set(POCKET_WARNING_FLAGS -Wall -Wextra -Wpedantic -Werror -Wshadow=local -Wnon-virtual-dtor
    -Wcast-align -Wimplicit-fallthrough)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(REMOVE_ITEM POCKET_WARNING_FLAGS -Wshadow=local)
  list(APPEND POCKET_WARNING_FLAGS -Wshadow-uncaptured-local)
endif()
if(POCKET_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # The sanitized build optimizes its compute layers (-O1, PocketLibrary.cmake), and GCC's
  # maybe-uninitialized analysis then reports false positives inside libstdc++ (std::regex's
  # std::function states): the sanitizers' instrumentation hides the initialization. GCC's manual
  # advises against -Werror with sanitizers for this reason; the release build (-O3) keeps the
  # warning as an error.
  list(APPEND POCKET_WARNING_FLAGS -Wno-maybe-uninitialized)
endif()
