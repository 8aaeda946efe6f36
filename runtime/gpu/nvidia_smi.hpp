#pragma once
/// @file
/// NVIDIA GPUs read through `nvidia-smi`: the fallback where NVML
/// (libnvidia-ml.so.1) cannot be loaded (shared/seeds/gpus.md, "How GPUs are
/// found"). The program is run by path with fork/exec (no shell) under a
/// deadline, so tests run the same code on fixture scripts that print
/// recorded outputs (DESIGN.md, "Host access, and how tests reach it").
///
/// Nothing here throws. Values nvidia-smi cannot give ("[N/A]",
/// "[Not Supported]", "[Unknown Error]", "ERR!", "[Insufficient
/// Permissions]", "[GPU is lost]", ...) stay absent in the v1::Gpu, never 0.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// What `nvidia-smi` answered.
struct nvidia_smi_result {
  /// True when the program ran and its --query-gpu output was understood
  /// (also when it lists no GPU: "No devices were found"). False when it
  /// could not be started, timed out, failed without listing any GPU, or
  /// printed nothing parseable.
  bool ok = false;
  /// Why ok is false, or what went partly wrong when ok is true (a
  /// secondary query that failed, lines that were not understood, a
  /// non-zero exit status after listing GPUs). Empty when all went well.
  std::string detail;
  /// The driver's version, "535.129.03" (the driver_version column of the
  /// first GPU that has one); empty when unknown.
  std::string driver_version;
  /// The newest CUDA version the driver supports, "12.2" (the "CUDA Version"
  /// line of `nvidia-smi -q -d COMPUTE`); empty when unknown.
  std::string cuda_version;
  /// One per GPU, in nvidia-smi's order. vendor "nvidia"; status "ok", or
  /// "lost" for a GPU nvidia-smi reports as lost or cannot get a handle
  /// for.
  std::vector<v1::Gpu> gpus;
  /// What in the output was not as expected, each as a reason that holds
  /// no reading, so it reads the same on every pass and the caller can log
  /// each once, e.g. "nvidia-smi --query-gpu printed up to 28 fields per
  /// GPU line where 26 were asked for (a newer driver?); the first 26 are
  /// used, the rest ignored".
  /// Lines that could not be used at all are also described in `detail`.
  std::vector<std::string> warnings;
};

/// The --query-gpu fields asked for, in column order: index, uuid, name,
/// pci.bus_id, driver_version, memory.total, memory.used, utilization.gpu,
/// temperature.gpu, power.draw, power.limit, clocks.sm, clocks.mem,
/// fan.speed, the four ecc.errors.{corrected,uncorrected}.{volatile,
/// aggregate}.total, retired_pages.single_bit_ecc.count,
/// retired_pages.double_bit.count, retired_pages.pending, serial,
/// vbios_version, compute_cap, clocks_throttle_reasons.hw_thermal_slowdown,
/// clocks_throttle_reasons.sw_thermal_slowdown. An older driver that rejects
/// one of the fields after pci.bus_id ("Field "compute_cap" is not a valid
/// field to query.") is asked again without it.
const std::vector<std::string>& nvidia_smi_gpu_fields();

/// Runs `program --query-gpu=<nvidia_smi_gpu_fields()>
/// --format=csv,noheader,nounits`, then, with the time left,
/// `program --query-remapped-rows=gpu_uuid,remapped_rows.correctable,
/// remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure
/// --format=csv,noheader,nounits` (row remapping; Ampere and newer) and
/// `program -q -d COMPUTE` (the CUDA version) and `program nvlink -s`
/// (NVLink link state, apply_nvidia_smi_nvlink_status()). When the NVLink
/// query fails, every GPU gets "nvlinks: <what failed>" in unknown_fields
/// and no link; when it succeeds and prints nothing (no GPU has NVLink, as
/// driver 580 answers on an H200 without it), no GPU has a link and nothing
/// is unknown.
///
/// `program` is a path, or a bare name looked up in $PATH. It runs with
/// fork/exec, no shell, stdin /dev/null, in a process group of its own.
/// `deadline` bounds the three runs together: when it passes, the whole
/// process group is killed (SIGKILL) and the read returns within a few
/// milliseconds. If the GPU query timed out, ok is false and detail says
/// "... did not finish within <N> ms"; a later query that times out only
/// leaves its fields unknown and says so in detail. A process stuck in the
/// kernel that SIGKILL cannot end at once is reaped by a background thread.
/// Never throws.
nvidia_smi_result read_nvidia_smi(const std::string& program, std::chrono::milliseconds deadline);

/// Parses `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`
/// output, one line per GPU, columns in the order of `fields` (names as in
/// nvidia_smi_gpu_fields(); unknown names are ignored). Pure: reads nothing.
///
/// Units: memory MiB -> bytes; power W; clocks MHz; temperature degrees C;
/// utilisation and fan percent. pci.bus_id "00000000:3B:00.0" ->
/// "0000:3b:00.0". compute_cap -> architecture (nvidia_architecture()),
/// name -> data_centre (nvidia_data_centre_model()). id is the UUID, or the
/// PCI address when the UUID is unknown. thermal_slowdown is true when
/// either thermal throttle reason is "Active", false when both are known
/// inactive, else absent.
///
/// Unknown values stay absent, never 0. "[N/A]" and "[Not Supported]"
/// (the GPU lacks it) are silent; other markers and unparseable values add
/// "<field>: <why>" to the Gpu's unknown_fields. A GPU with any
/// "[GPU is lost]" value gets status "lost". A line "Unable to determine the
/// device handle for GPU<n>: 0000:3B:00.0: Unknown Error" (a GPU fallen off
/// the bus) becomes a Gpu with only index and pci_address known, status
/// "lost" and the line as status_detail.
///
/// A line with more columns than `fields` (a newer driver that prints more)
/// is used when its pci.bus_id column is a PCI address: its first
/// fields.size() columns are read, the rest ignored, and a warning says so.
/// Other lines with another column count (fewer columns, or more without a
/// PCI address where it belongs) are skipped, described in detail (how
/// many, and the first one) and in a warning. ok is true when at least one
/// GPU line parsed, or the text says "No devices were found"; if none
/// parsed, ok is false. cuda_version is left empty.
nvidia_smi_result parse_nvidia_smi_csv(std::string_view text,
                                       const std::vector<std::string>& fields = nvidia_smi_gpu_fields());

/// Applies `nvidia-smi --query-remapped-rows=gpu_uuid,remapped_rows.correctable,
/// remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure
/// --format=csv,noheader,nounits` output to the GPUs with those UUIDs
/// (row_remapping: counts of rows; pending and failed as "Yes"/"No" or
/// 1/0). Unknown markers stay absent. Returns how many GPUs were updated.
size_t apply_nvidia_smi_remapped_rows(std::string_view text, std::vector<v1::Gpu>& gpus);

/// Applies `nvidia-smi nvlink -s` output (NVLink link state) to `gpus`:
///
///     GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5f1e2d3c-...)
///          Link 0: 26.562 GB/s
///          Link 1: <inactive>
///
/// A GPU line names a GPU by UUID (matched to id), else by its index; each
/// link line under it becomes an NvLink {link, active, remote_kind
/// "unknown"}: active when it gives a speed, inactive for "<inactive>".
/// The error counters and the other end are not in this output and stay
/// absent. A GPU line without link lines: the GPU has no NVLink (nvlinks
/// stays empty, nothing unknown). A link line with another state adds
/// "nvlinks[<n>]: unexpected state '<text>'" to unknown_fields and is left
/// out; a GPU of `gpus` the output does not name, unless it is "lost", gets
/// "nvlinks: <unlisted>" (read_nvidia_smi passes what failed when the
/// query did, e.g. "nvidia-smi nvlink -s exited with status 2: ..."). The
/// named GPUs' earlier nvlinks are replaced. Returns how many GPUs the
/// output named. Pure.
size_t apply_nvidia_smi_nvlink_status(
    std::string_view text, std::vector<v1::Gpu>& gpus,
    const std::string& unlisted = "not listed by nvidia-smi nvlink -s");

/// The "CUDA Version : 12.2" line of `nvidia-smi -q` output -> "12.2";
/// empty when there is none or it says N/A.
std::string parse_nvidia_smi_cuda_version(std::string_view text);

/// "00000000:3B:00.0" (nvidia-smi, NVML) -> "0000:3b:00.0" (sysfs: domain
/// at least four hex digits, lower case); nullopt unless the text is
/// <domain>:<bus>:<device>.<function> in hex. nvml::normalise_pci_address
/// with the domain required.
std::optional<std::string> normalize_pci_bus_id(std::string_view bus_id);

/// Architecture from a CUDA compute capability "<major>.<minor>" (digits
/// only, surrounding whitespace ignored) through
/// nvml::architecture_from_compute_capability: 3.x kepler, 5.x maxwell, 6.x
/// pascal, 7.0 and 7.2 volta, 7.5 turing, 8.0 8.6 8.7 ampere, 8.9 ada, 9.x
/// hopper, 10.x 11.x 12.x blackwell; empty when unknown or not of that form.
std::string nvidia_architecture(std::string_view compute_capability);

/// Whether an NVIDIA model name is a data-centre board: the same as
/// nvml::is_data_centre_model (one table; "Tesla ..." names and the
/// families listed there). "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"
/// are; "NVIDIA GeForce RTX 4090", "NVIDIA RTX A6000" are not.
bool nvidia_data_centre_model(std::string_view name);

} // namespace astraeus
