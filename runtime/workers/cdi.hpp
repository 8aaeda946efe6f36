#pragma once
/// @file
/// The Container Device Interface (CDI) as the agent uses it: reading the
/// specs in /etc/cdi and /var/run/cdi (the latter wins; two files in one
/// folder defining the same device is a conflict and that device is
/// refused), turning a worker's GPUs into container edits (device nodes,
/// mounts, hooks, env, groups), writing NVIDIA's spec with `nvidia-ctk cdi
/// generate` under the fingerprint rule, and writing the AMD spec from
/// sysfs. Source: shared/seeds/gpus.md ("How a worker gets its GPUs"),
/// the CDI specification (github.com/cncf-tags/container-device-interface,
/// SPEC.md).

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/workers/oci_bundle.hpp"

namespace astraeus {

/// Where CDI specs are and how they are made (agent keys `cdi.*`).
struct cdi_options {
  /// [cdi.static_dir] specs an admin wrote (lower priority).
  std::string static_dir = "/etc/cdi";
  /// [cdi.dynamic_dir] specs the agent and tools write (wins).
  std::string dynamic_dir = "/var/run/cdi";
  /// [cdi.nvidia_ctk] the nvidia-ctk program; empty: never generate.
  std::string nvidia_ctk = "nvidia-ctk";
  /// The host root device nodes are read under ("" or "/": the real host;
  /// tests: a fixture tree). Issue 18, rule 3.
  std::string host_root;
};

/// What a container gets for some CDI devices.
struct cdi_edits {
  std::vector<oci_device> devices;
  std::vector<oci_mount> mounts;
  std::vector<oci_hook> hooks;
  std::vector<std::string> env;          ///< "K=V"
  std::vector<uint32_t> additional_gids;
};

/// One device of a spec, with the file it came from.
struct cdi_device {
  std::string kind;     ///< "nvidia.com/gpu"
  std::string name;     ///< "GPU-5f1e...", "0", "all"
  std::string file;
  cdi_edits edits;      ///< the device's own edits
  cdi_edits common;     ///< the spec's containerEdits, applied once
};

/// Every device of the specs found, by "kind=name".
struct cdi_registry {
  std::map<std::string, cdi_device> devices;
  /// "kind=name" refused for a conflict, with the files that define it.
  std::map<std::string, std::string> conflicts;
  /// Files that could not be read: "<path>: <why>".
  std::vector<std::string> warnings;
  /// "kind=name" left out of `devices` because a required device node it
  /// names does not exist on the host (a stale spec), with that node's host
  /// path. A missing optional node is dropped with a warning instead
  /// (runtime/workers/cdi_host.hpp).
  std::map<std::string, std::string> stale;
  /// Spec files refused for breaking their cdiVersion's rules, with why
  /// (`cdi_version_problem`); their devices are not defined.
  std::map<std::string, std::string> refused;
};

/// A GPU the agent discovered, as a CDI spec may name it.
struct cdi_gpu {
  std::string uuid;          ///< GPU-5f1e...
  std::string pci_address;   ///< 0000:3b:00.0 (lower case)
  int64_t index = -1;        ///< the driver's index; -1 unknown
  /// The minor number of its /dev/nvidiaN (`nvidia_device_minor`); -1
  /// unknown. Index-named specs are resolved through it (issue 18).
  int64_t minor = -1;
};

/// Why the specs in `reg` cannot hand over the NVIDIA devices `names`
/// ("nvidia.com/gpu=GPU-..."), or "" when they can (seed, "How a worker
/// gets its GPUs": a stale spec is written again rather than a worker
/// started that will fail). Stale when a device named has a node that does
/// not exist ("CDI device nvidia.com/gpu=GPU-1 names /dev/nvidia3, which
/// does not exist"), is not defined, or when the spec's nvidia.com/gpu
/// devices do not match `discovered`: a discovered GPU the spec has no
/// device for, or a device for a GPU this machine does not have. Devices
/// are matched by how the spec names them: a UUID (GPU-...), an index
/// ("0") or a PCI address; other names ("all", MIG devices) are not
/// compared. Devices refused for a conflict are not stale (writing again
/// does not help; `cdi_edits_for` names them).
std::string nvidia_spec_stale(const cdi_registry& reg, const std::vector<std::string>& names,
                              const std::vector<cdi_gpu>& discovered);

/// The edits for a worker's CDI devices `names`, checked first: when the
/// NVIDIA spec is stale for them (`nvidia_spec_stale`) and this machine
/// has NVIDIA GPUs (`discovered`, driver `driver_version`), it is written
/// again with nvidia-ctk (`sync_nvidia_spec` with force) and checked once
/// more. Before the hand-over every device node is compared with the
/// host's under `o.host_root` (exists, character device, major and minor):
/// numbers that differ make the spec stale too; a missing optional node is
/// dropped with a warning. Index-named devices are resolved through the
/// GPUs' minors (`resolve_index_names`). Errors: ec::invalid_request
/// "hand-over failing: <node> missing (...)" for a required node the host
/// lacks (even after writing the spec again); "the NVIDIA CDI spec is stale
/// even after nvidia-ctk wrote it again: <why>" naming the device or node;
/// nvidia-ctk's failure (ec::store_failure); `cdi_edits_for`'s.
/// How the error of a hand-over that cannot work begins: "hand-over
/// failing: /dev/nvidia3 missing (...)". The worker fails with it and its
/// GPU is fenced (Faulty, latched) until an admin clears it.
inline constexpr const char* hand_over_failing_prefix = "hand-over failing: ";

caf::expected<cdi_edits> checked_cdi_edits(const cdi_options& o,
                                           const std::vector<std::string>& names,
                                           const std::string& driver_version,
                                           const std::vector<cdi_gpu>& discovered);

/// Reads the specs (*.json, *.yaml, *.yml) of `o.static_dir`, then of
/// `o.dynamic_dir` (its devices replace the static ones). Device nodes
/// without type/major/minor take them from the host's node (a missing node
/// leaves the device out, with a warning: a stale spec). Never fails;
/// unreadable files are warnings.
cdi_registry load_cdi(const cdi_options& o);

/// The edits for devices `names` ("nvidia.com/gpu=GPU-...") merged, the
/// common edits of each spec once. Errors: ec::invalid_request naming a
/// device that is not defined or refused for a conflict (with the files).
caf::expected<cdi_edits> cdi_edits_for(const cdi_registry& reg,
                                       const std::vector<std::string>& names);

/// The NVIDIA spec's fingerprint: the driver version and the GPU set
/// (sorted UUIDs), one line each, then `node_numbers`: the host's NVIDIA
/// device nodes with their majors and minors (`nvidia_node_numbers`), so a
/// driver reload that renumbers a node makes the spec stale.
std::string nvidia_fingerprint(const std::string& driver_version,
                               std::vector<std::string> gpu_ids,
                               const std::string& node_numbers = {});

/// The names `names` ("nvidia.com/gpu=GPU-...") resolved for a spec that
/// names its devices by index: a UUID the spec has no device for is
/// replaced by the index-named device whose /dev/nvidiaN node has the
/// GPU's minor number (`discovered`'s `minor`), never by assuming index =
/// minor. Names the spec defines, and GPUs whose minor is unknown, are kept.
std::vector<std::string> resolve_index_names(const cdi_registry& reg,
                                             const std::vector<std::string>& names,
                                             const std::vector<cdi_gpu>& discovered);

/// Keeps `<dynamic_dir>/nvidia.yaml` in step with the driver (seed, "How a
/// worker gets its GPUs"): with GPUs, runs `nvidia-ctk cdi generate
/// --output=<dynamic_dir>/nvidia.yaml --device-name-strategy=uuid` when
/// there is no spec, when the fingerprint file
/// (`.nvidia.yaml.astraeus-fingerprint`) is missing (a spec it did not
/// write is replaced the first time) or differs, or when `force` (a stale
/// spec); without GPUs, removes the spec and the fingerprint if it wrote
/// them. Returns true when it wrote or removed the spec. Thread-safe (one
/// write at a time per process). Errors:
/// ec::store_failure with nvidia-ctk's output when generation fails.
caf::expected<bool> sync_nvidia_spec(const cdi_options& o,
                                     const std::string& driver_version,
                                     const std::vector<std::string>& gpu_ids,
                                     bool force = false);

/// An AMD GPU for the AMD spec.
struct amd_cdi_gpu {
  std::string id;            ///< the device name (unique id or PCI address)
  std::string pci_address;   ///< 0000:c1:00.0
  /// Render nodes of its compute partitions (/dev/dri/renderD130), handed
  /// over with the whole GPU (issue 18, rule 4).
  std::vector<std::string> partition_render_nodes;
};

/// Writes `<dynamic_dir>/amd-astraeus.json` (kind amd.com/gpu): per GPU its
/// render node and card, found under `<sys_root>/sys/bus/pci/devices/<pci>/
/// drm` (matched by PCI address, not card number), plus /dev/kfd shared by
/// all, and the groups owning the nodes (`render`, `video`, from the
/// host's `<etc_root>/etc/group`) as supplementary groups. Only nodes that
/// exist under `dev_root` are listed (issue 18). Removes the
/// spec when `gpus` is empty. Returns true when the file changed. Errors:
/// ec::store_failure naming the file.
caf::expected<bool> write_amd_spec(const cdi_options& o, const std::string& sys_root,
                                   const std::string& dev_root,
                                   const std::vector<amd_cdi_gpu>& gpus);

} // namespace astraeus
