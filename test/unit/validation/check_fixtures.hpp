#pragma once
// Fixture helpers of the checks' tests: a copy of a fixture host tree that a
// test may change, and the stand-ins' fixtures.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "actor_fixture.hpp"

namespace astraeus::test {

/// The fixture machine with two H100s, one trained at Gen4 x8
/// (test/fixtures/checks/host-gen4x8/README.md).
inline std::string gen4x8_fixture() {
  return std::string{ASTRAEUS_FIXTURES} + "/checks/host-gen4x8";
}

/// A writable copy of host tree `from` in `dir` (links kept as links).
inline std::string copy_host(const temp_dir& dir, const std::string& from) {
  namespace fs = std::filesystem;
  auto to = dir.path() + "/host";
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  return to;
}

/// Writes `text` to `path`, replacing it.
inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

/// Points the stand-ins at fixtures: NVML (ASTRAEUS_NVML_FIXTURE) and CUDA
/// (ASTRAEUS_CUDA_FIXTURE); an empty path unsets it.
inline void use_fixtures(const std::string& nvml, const std::string& cuda) {
  auto set = [](const char* var, const std::string& v) {
    if (v.empty())
      ::unsetenv(var);
    else
      ::setenv(var, v.c_str(), 1);
  };
  set("ASTRAEUS_NVML_FIXTURE", nvml);
  set("ASTRAEUS_CUDA_FIXTURE", cuda);
}

}  // namespace astraeus::test
