#pragma once
// Files and CDI folders shared by the worker tests (oci_bundle_test,
// cdi_test, worker_process_test, worker_supervisor_test): writing and reading
// fixture files, a CDI spec of named devices, and a CDI folder with the
// stand-in nvidia-ctk (test/fixtures/nvidia-ctk) counting its calls.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "actor_fixture.hpp"
#include "runtime/workers/cdi.hpp"

namespace astraeus::test {

namespace fs = std::filesystem;

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

/// Writes `text` to `p`, creating its folders.
inline void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream{p} << text;
}

/// The whole of `p` ("" when it cannot be read).
inline std::string read(const fs::path& p) {
  std::ifstream in{p};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A CDI spec of `kind` defining devices `names`, each with the node `node`.
inline std::string spec_of(const std::string& kind, const std::vector<std::string>& names,
                           const std::string& node = "/dev/null") {
  std::string out = "cdiVersion: 0.5.0\nkind: " + kind + "\ndevices:\n";
  for (const auto& n : names)
    out += "- name: " + n + "\n  containerEdits:\n    deviceNodes:\n    - path: /dev/x-"
           + n + "\n      hostPath: " + node + "\n";
  return out;
}

/// The stand-in nvidia-ctk: prints a spec for $FAKE_CTK_GPUS, counts its
/// calls in $FAKE_CTK_CALLS.
inline const std::string stand_in_ctk = ASTRAEUS_SOURCE_DIR "/test/fixtures/nvidia-ctk/nvidia-ctk.sh";

/// A CDI test folder with the stand-in nvidia-ctk counting its calls.
struct ctk_fixture {
  test::temp_dir dir;
  cdi_options o;
  std::string calls = dir.path() + "/calls";
  ctk_fixture() {
    o.static_dir = dir.path() + "/etc";
    o.dynamic_dir = dir.path() + "/run";
    o.nvidia_ctk = stand_in_ctk;
    ::setenv("FAKE_CTK_CALLS", calls.c_str(), 1);
  }
  ~ctk_fixture() {
    ::unsetenv("FAKE_CTK_CALLS");
    ::unsetenv("FAKE_CTK_GPUS");
    ::unsetenv("FAKE_CTK_NODE");
  }
  long generated() const {
    auto text = read(calls);
    return std::count(text.begin(), text.end(), '\n');
  }
  /// A spec the agent wrote for `driver` and `gpus` (fingerprint kept).
  void ours(const std::string& text, const std::string& driver,
            const std::vector<std::string>& gpus) const {
    write(fs::path{o.dynamic_dir} / "nvidia.yaml", text);
    write(fs::path{o.dynamic_dir} / ".nvidia.yaml.astraeus-fingerprint",
          nvidia_fingerprint(driver, gpus));
  }
};

/// Two NVIDIA GPUs as discovery names them (UUID, PCI address, index).
inline const std::vector<cdi_gpu> two_gpus = {{"GPU-1", "0000:3b:00.0", 0},
                                       {"GPU-2", "0000:5e:00.0", 1}};

} // namespace astraeus::test
