# Finds Astraeus' dependencies (all Debian 12 packages) and defines the
# imported targets the libraries link against. Shared by the build tree and
# by AstraeusConfig.cmake for projects that embed the library.
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(RocksDB CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
# Abseil's hash maps for the scheduler's name-keyed tables (actors/scheduler/
# name_maps.hpp); Debian's libabsl-dev.
find_package(absl CONFIG REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
pkg_check_modules(LIBPCI REQUIRED IMPORTED_TARGET libpci)
# jemalloc for the programs: reports are allocated on the gate's thread and
# freed on the machine actors' threads, where glibc's malloc serialises
# (bench/RESULTS.md).
pkg_check_modules(JEMALLOC REQUIRED IMPORTED_TARGET jemalloc)

# CAF 0.17.6 ships neither a CMake package nor a .pc file.
if(NOT TARGET caf::core)
  find_path(CAF_INCLUDE_DIR caf/actor_system.hpp REQUIRED)
  find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
  find_library(CAF_IO_LIBRARY caf_io REQUIRED)
  add_library(caf::core SHARED IMPORTED)
  set_target_properties(caf::core PROPERTIES
    IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES Threads::Threads)
  add_library(caf::io SHARED IMPORTED)
  set_target_properties(caf::io PROPERTIES
    IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
    INTERFACE_LINK_LIBRARIES caf::core)
endif()
