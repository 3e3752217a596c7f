# Finds every third-party dependency as shared/DEPENDENCIES.md describes and
# wraps the ones without CMake configs in IMPORTED targets.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(ZLIB REQUIRED)  # crc32 of checkpoint files
find_package(OpenSSL 3 REQUIRED COMPONENTS Crypto)  # HMAC-SHA256 of control messages (common/message_key)
find_package(CLI11 CONFIG QUIET)
if(NOT CLI11_FOUND)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()

# OpenBLAS: CPU GEMM.
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES x86_64-linux-gnu/openblas-pthread openblas-pthread openblas REQUIRED)
find_library(OPENBLAS_LIBRARY NAMES openblas REQUIRED)
add_library(troupe_openblas INTERFACE)
target_include_directories(troupe_openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(troupe_openblas INTERFACE ${OPENBLAS_LIBRARY})

# CAF 0.17: no CMake config and no pkg-config.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
add_library(caf::core UNKNOWN IMPORTED)
set_target_properties(caf::core PROPERTIES IMPORTED_LOCATION ${CAF_CORE_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${CAF_INCLUDE_DIR} INTERFACE_LINK_LIBRARIES Threads::Threads)
add_library(caf::io UNKNOWN IMPORTED)
set_target_properties(caf::io PROPERTIES IMPORTED_LOCATION ${CAF_IO_LIBRARY}
  INTERFACE_LINK_LIBRARIES caf::core)

# UCX.
find_package(ucx REQUIRED)

# hiredis 0.14: its config needs the version to work.
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)

# Catch2 v2.
if(TROUPE_TESTS)
  find_package(Catch2 2 REQUIRED)
  include(Catch)
endif()

# CUDA: optional, built only where nvcc is found (on PATH, through CUDACXX, or
# at /usr/local/cuda, where the CUDA toolkit installs it). The backend is a
# module (libtroupe_cuda.so) loaded by `troupe` only for device = "cuda".
set(TROUPE_HAVE_CUDA OFF)
if(TROUPE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Ampere and Hopper code, and Hopper PTX for what comes after.
      set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;90-virtual")
    endif()
    set(CMAKE_CUDA_FLAGS_RELEASE "-O3 -DNDEBUG")
    enable_language(CUDA)
    # CMake 3.25 knows nvcc's C++17 flag but not its C++20 one (nvcc 12+ has it).
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(TROUPE_HAVE_CUDA ON)
    message(STATUS "troupe: CUDA backend enabled (${CMAKE_CUDA_COMPILER}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
  else()
    message(STATUS "troupe: nvcc not found, CUDA backend disabled (device = \"cuda\" will be refused)")
  endif()
endif()
