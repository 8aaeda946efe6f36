#pragma once
/// @file
/// A CDI spec checked against the host's device nodes before each hand-over
/// (issue 18, rule 3), and the spec's `cdiVersion` rules. Device nodes are
/// read under a host root, so every rule is testable on fixture trees.
/// Required nodes: an NVIDIA GPU's `/dev/nvidiaN`, `/dev/nvidiactl`,
/// `/dev/nvidia-uvm`; AMD `/dev/dri/renderD*` and `/dev/kfd`, and any node
/// not known to be optional. Optional: control and card nodes
/// (`/dev/nvidia-uvm-tools`, `/dev/nvidia-modeset`, `/dev/nvidia-caps/*`,
/// `/dev/dri/card*`, `/dev/dri/controlD*`): dropped with a warning when
/// missing.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/workers/oci_bundle.hpp"

namespace astraeus {

/// Whether a worker can do without a device node.
enum class cdi_node_need { required, optional };

/// The need of the node a container sees at `container_path`.
cdi_node_need node_need(const std::string& container_path);

/// What the host has at `host_path` under `host_root` ("/" or empty: the
/// real host).
struct host_device_node {
  bool exists = false;       ///< something is there
  bool is_char = false;      ///< a character device
  int64_t major = -1;        ///< its numbers (char or block device)
  int64_t minor = -1;
};

/// Reads the node at `host_path` under `host_root` (without following a
/// final symbolic link's absence: a dangling link does not exist).
host_device_node read_host_node(const std::string& host_root, const std::string& host_path);

/// Where the driver's default IMEX channel lives on the host and in a
/// container (NVIDIA, "IMEX Channels": created by the administrator with
/// mknod, major from /proc/devices' nvidia-caps-imex-channels, minor 0).
inline constexpr const char* imex_channel0_path = "/dev/nvidia-caps-imex-channels/channel0";

/// IMEX channel 0 as a container device (gpus.md: "a worker placed in a
/// domain gets IMEX channel 0"), read under `host_root`: its major and
/// minor, mode 0666. nullopt, with `problem` saying why ("... is missing on
/// the machine; create it: mknod ..."), when it is not a character device
/// there; CUDA's IMEX calls then fail with "insufficient permission".
std::optional<oci_device> imex_channel_device(const std::string& host_root,
                                              std::string& problem);

/// The result of checking a spec's device nodes against the host.
struct cdi_host_check {
  /// The nodes to hand over (missing optional ones dropped).
  std::vector<oci_device> devices;
  /// One line per optional node dropped ("/dev/nvidia-uvm-tools is missing
  /// on the host; handed over without it").
  std::vector<std::string> warnings;
  /// The first required node missing or not a character device
  /// ("/dev/nvidia3"); empty when none.
  std::string missing_required;
  /// Whether that node is there but is not a character device (a regular
  /// file, a folder): said so, not "missing".
  bool required_not_char = false;
  /// Why the spec is stale: a node whose major or minor differs from the
  /// host's ("/dev/nvidia-uvm is 511:0 in the spec, 235:0 on the host");
  /// empty when none.
  std::string stale;
};

/// Compares every node of `devices` with the host's node under
/// `host_root`: exists, is a character device, major and minor match.
cdi_host_check check_nodes_against_host(const std::string& host_root,
                                        const std::vector<oci_device>& devices);

/// The majors and minors of the host's NVIDIA device nodes under
/// `host_root` (/dev/nvidia*, /dev/nvidia-caps/*), one "path major:minor"
/// line each, sorted: part of the NVIDIA spec's fingerprint, so a driver
/// reload that moves `nvidia-uvm` to another major makes the spec stale.
std::string nvidia_node_numbers(const std::string& host_root);

/// The NVIDIA device minor of the GPU at `pci_address` (its /dev/nvidiaN),
/// from `<host_root>/proc/driver/nvidia/gpus/<pci>/information` ("Device
/// Minor: N"); -1 when unknown. Index-named specs are resolved through it,
/// never by assuming index = minor.
int64_t nvidia_device_minor(const std::string& host_root, const std::string& pci_address);

/// What a CDI spec uses that only some `cdiVersion`s allow.
struct cdi_spec_features {
  std::string version;                 ///< cdiVersion as written ("0.6.0")
  std::string kind;                    ///< "nvidia.com/gpu"
  std::vector<std::string> device_names;
  bool devices_listed = true;          ///< a `devices` list is there (required)
  bool host_path = false;              ///< a device node with hostPath (0.5.0)
  bool annotations = false;            ///< annotations anywhere (0.6.0)
  bool additional_gids = false;        ///< additionalGids anywhere (0.7.0)
  bool mount_type = false;             ///< a mount with a type (0.4.0)
};

/// Why a spec breaks its `cdiVersion`'s rules (a required field missing,
/// an unknown version, a feature newer than the version, a digit-first
/// device name before 0.5.0), naming the rule; empty when it keeps them.
std::string cdi_version_problem(const cdi_spec_features& spec);

} // namespace astraeus
