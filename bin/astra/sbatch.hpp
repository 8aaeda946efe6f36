#pragma once
/// @file
/// `astra slurm sbatch job.sbatch` (issue 13, item 8): the `#SBATCH`
/// directives of a Slurm batch script that map onto a run, read the way
/// sbatch reads them (sbatch(1), "DESCRIPTION"):
/// - directives are lines that begin with `#SBATCH` (then a space or tab);
///   they are read until the first line that is neither blank nor a comment
///   (the first command), and ignored after it, as Slurm does;
/// - `#SBATCH --x=y`, `#SBATCH --x y`, short forms (`-J name`, `-N2`), and
///   several options on one line; a word starting with `#` ends the line (a
///   comment), quotes group words;
/// - other comments (`##SBATCH`, `# SBATCH`, `#!`) are not directives.
///
/// What maps: --job-name/-J, --nodes/-N (workers, one per machine),
/// --ntasks-per-node=1, --gpus-per-node and --gres=gpu:[TYPE:]N (GPUs per
/// worker), --cpus-per-task/-c, --mem (MB unless K/M/G/T), --time/-t
/// (minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]], UNLIMITED), --array/-a 0-N
/// (N+1 copies; a `%K` throttle is refused), --output/-o (%j %x %a %A %N
/// %%). Any other directive is refused, named with its line.
///
/// Plain C++, no I/O: unit-tested on scripts as Slurm users write them.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace astraeus::cli {

/// What a batch script's directives ask for.
struct sbatch_script {
  std::string job_name;            ///< --job-name; empty: not given
  uint32_t nodes = 1;              ///< --nodes: workers, one per machine
  uint32_t gpus_per_node = 0;      ///< --gpus-per-node or --gres=gpu:N
  double cpus_per_task = 0;        ///< --cpus-per-task; 0: not given
  uint64_t memory_bytes = 0;       ///< --mem in bytes; 0: not given
  uint64_t time_limit_seconds = 0; ///< --time; 0: none
  uint32_t array_size = 0;         ///< --array 0-N: N+1 copies; 0: none
  std::string output;              ///< --output pattern (noted; the output stays in the log)
  std::string interpreter = "/bin/sh"; ///< from the `#!` line, else /bin/sh
};

/// The result of `parse_sbatch`: the script's directives, or the first
/// problem in words naming the directive and its line ("line 4: #SBATCH
/// --partition=gpu has no Astraeus equivalent ...").
struct sbatch_parse {
  std::optional<sbatch_script> script; ///< set when every directive maps
  std::string error;                   ///< set otherwise
};

/// Reads the directives of batch script `text`.
sbatch_parse parse_sbatch(std::string_view text);

/// Slurm's --time: "30" (minutes), "30:00" (MM:SS), "1:30:00", "2-0",
/// "2-12:00", "2-12:00:00", "UNLIMITED"/"INFINITE" (0). Seconds; nullopt
/// when it does not parse.
std::optional<uint64_t> parse_slurm_time(std::string_view text);

/// Slurm's --mem: a number of MB, or with K, M, G or T. Bytes; nullopt
/// when it does not parse (or is 0: "all the memory", which has no
/// equivalent).
std::optional<uint64_t> parse_slurm_mem(std::string_view text);

/// The worker's command: the script (mounted read-only at
/// `/astra/job.sbatch`) run by its interpreter with `args`, SLURM_ARRAY_*
/// set in an array. `--output` is left out: its file would be in the
/// container's own filesystem (a batch run has no volume), lost with it; the
/// output stays in `astra logs`.
std::vector<std::string> sbatch_command(const sbatch_script& s,
                                        const std::vector<std::string>& args);

/// Where the script is mounted in each worker.
inline constexpr const char* sbatch_mount_path = "/astra/job.sbatch";

} // namespace astraeus::cli
