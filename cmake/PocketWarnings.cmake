# Warnings are errors for the project's own code (not for dependencies).
set(POCKET_WARNING_FLAGS -Wall -Wextra -Wpedantic -Werror -Wshadow=local -Wnon-virtual-dtor
    -Wcast-align -Wimplicit-fallthrough)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(REMOVE_ITEM POCKET_WARNING_FLAGS -Wshadow=local)
  list(APPEND POCKET_WARNING_FLAGS -Wshadow-uncaptured-local)
endif()
