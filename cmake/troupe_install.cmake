# `cmake --install build --prefix P`: libtroupe.so, the public headers (and
# the internal ones they include, under include/troupe/detail), a CMake
# package (find_package(Troupe 0.1 REQUIRED) -> Troupe::troupe) and a
# pkg-config file (troupe.pc). The executables, the CUDA module and the
# benchmarks' Python peers are installed by their own folders.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS troupe_lib EXPORT TroupeTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES config.hpp error.hpp messages.hpp node.hpp plugin.hpp registry.hpp stage_actor.hpp stage_state.hpp
  troupe.hpp version.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/troupe)
# The layers' headers the public ones reach (not the tests', the test
# harness's nor a concrete device's kernels).
foreach(layer common schedules backends ops runtime training actors)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/troupe/detail
    FILES_MATCHING PATTERN "*.hpp"
    PATTERN "*.test.hpp" EXCLUDE PATTERN "harness" EXCLUDE PATTERN "testing" EXCLUDE PATTERN "cuda" EXCLUDE)
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/generated/common/version_numbers.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/troupe/detail/common)

set(TROUPE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Troupe)
install(EXPORT TroupeTargets NAMESPACE Troupe:: DESTINATION ${TROUPE_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TroupeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/TroupeConfig.cmake INSTALL_DESTINATION ${TROUPE_CMAKE_DIR})
# 0.x: a minor version is an ABI (PL-1), so a package satisfies only its own.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/TroupeConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/TroupeConfig.cmake ${PROJECT_BINARY_DIR}/TroupeConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/TroupeDependencies.cmake
  DESTINATION ${TROUPE_CMAKE_DIR})

get_filename_component(TROUPE_CAF_INCLUDE_DIR ${CAF_INCLUDE_DIR} ABSOLUTE)
get_filename_component(TROUPE_CAF_LIBRARY_DIR ${CAF_CORE_LIBRARY} DIRECTORY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/troupe.pc.in ${PROJECT_BINARY_DIR}/troupe.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/troupe.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
