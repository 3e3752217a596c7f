# troupe_library(NAME SOURCES... DEPS ...): one static library per layer.
# troupe_test(NAME SOURCES... DEPS ...): a Catch2 test binary registered with CTest.
function(troupe_library name)
  # SERIAL: the executable's tests run alone (they measure time on a shared machine).
  cmake_parse_arguments(ARG "SERIAL" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  # Position-independent for libtroupe.so, without the cost of calls that a
  # preloaded library could interpose: none may (-Bsymbolic-functions there).
  target_compile_options(${name} PRIVATE -Wall -Wextra -fno-semantic-interposition)
  if(TROUPE_NATIVE)
    target_compile_options(${name} PRIVATE -march=native)
  endif()
endfunction()

function(troupe_test name)
  if(NOT TROUPE_TESTS)
    return()
  endif()
  # SERIAL: the executable's tests run alone (they measure time on a shared machine).
  cmake_parse_arguments(ARG "SERIAL" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} Catch2::Catch2WithMain)
  target_compile_options(${name} PRIVATE -Wall -Wextra)
  if(TROUPE_NATIVE)
    target_compile_options(${name} PRIVATE -march=native)
  endif()
  # A test's own code (Catch2's expansions, setup, references) at -O1 in a
  # Release build: five of the largest test files compiled in 52 s instead of
  # 60 (each file's best of two), and the code under test is the libraries',
  # built at -O3.
  target_compile_options(${name} PRIVATE $<$<CONFIG:Release>:-O1>)
  # End-to-end tests find the executable and the source tree through these.
  target_compile_definitions(${name} PRIVATE
    TROUPE_BIN_PATH="${PROJECT_BINARY_DIR}/tools/troupe/troupe"
    TROUPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  # A test that cannot run here calls troupe::testing::skip(), which exits
  # with 77: CTest reports it Skipped, never Passed.
  if(ARG_SERIAL)
    catch_discover_tests(${name} PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
  else()
    catch_discover_tests(${name} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endfunction()

# Test names are CTest names: a ';' or '[' in one splits or corrupts the list
# catch_discover_tests builds, and the broken entries match no test and "pass".
# tests/test_names.sh (run by CTest) fails if any name has one.
