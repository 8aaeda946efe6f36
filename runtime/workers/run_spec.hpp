#pragma once
/// @file
/// The run spec a user writes: parsed from a spec file (JSON or YAML, the
/// same fields) into `v1::RunSpec`, validated, and written back as YAML.
/// `astra run --name NAME --gpus 8 --workers 2 --image IMG -- CMD ...` fills
/// the same message from flags and goes through the same validation.
///
/// A spec file (shared/seeds/inside-a-worker.md; every field optional
/// unless `validate_run_spec` says otherwise):
///
/// ```yaml
/// name: llm-train            # 1-63 letters, digits, '-'; starts with a letter or digit
/// image: ghcr.io/acme/train:1.4
/// command: [torchrun, train.py]   # a list is run as is (no shell);
///                                 # a string S means [sh, -c, S]
/// args: [--epochs, "3"]      # appended to command; without one, the ENTRYPOINT's
/// env: {NCCL_DEBUG: INFO}    # values: any scalar, kept as written
/// gpus: 8                    # whole GPUs per worker, 0-64
/// cpus: 16                   # CPU cores per worker (fractions allowed)
/// memory: 256GiB             # per worker: 256M (= MiB), 16G, 16GiB, 1.5G, bytes
/// workers: 2                 # a plain worker count; or task_groups:
/// task_groups:
///   - {name: launcher, size: 1, leader: true}
///   - {name: trainers, size: 4}
/// array: {size: 10}          # copies of the run, 0-10000
/// pool: h100                 # machines must carry pool=h100
/// labels: {topology.astraeus.io/site: east}
/// gpu_requests: {healthy_only: true}
/// time_limit: 2h             # or time_limit_seconds: 7200
/// workspace: vision
/// outputs: true              # the workers get $ASTRAEUS_OUTPUTS (key=value lines,
///                            # shown by `astra run show` once they end)
/// cpu_burst: true            # cpus is a weight only: no quota, idle cores usable
/// rdma: true                 # the machine's RDMA devices (/dev/infiniband) and memlock
///                            # unlimited; waits for machines with an RDMA port up
/// on_gpu_fault: stop         # a GPU of a worker becomes Faulty: stop its gang (the run
///                            # Fails, resubmit it); default report: keeps running, shown
/// security_context:
///   ulimits:                 # replace the defaults (nofile, memlock); -1 = unlimited
///     - {name: stack, soft: 67108864, hard: 67108864}   # hard defaults to soft
///   ipc_mode: host           # the machine's /dev/shm (default workspace only)
/// # The seed's spellings (inside-a-worker.md), the same fields:
/// task_template: {user: "1000:1000"}  # name, uid or uid:gid; else the image's USER
/// cpu_cores: 4               # = cpus
/// memory_bytes: 17179869184  # = memory (a number or a size: 16GiB)
/// per_gpu: {memory_bytes: 64GiB}      # memory = this x gpus
/// node_fraction: 0.5         # a share of a machine: no CPU or memory limit
/// volumes:
///   - {name: scratch, type: EmptyDir, mount_path: /scratch}
///   - {name: data, type: Bind, host_path: /data/x, mount_path: /data, mode: ReadWrite}
/// configs:
///   - name: app
///     mounts: [{mount_path: /etc/app.yaml, content: "lr: 0.1\n"}]
/// ```
///
/// Fields of the seed the product does not support yet (`datavolume_refs`,
/// `secret_refs`, `identity`, `model`, `interactive`, `external_accesses`,
/// `network.egress`) are refused with "not supported yet: FIELD", not as
/// unknown fields.
///
/// Choices:
/// - JSON is read by the YAML parser (JSON is YAML); one code path, the
///   same errors and line numbers for both.
/// - Types are strict: a number field takes a number, not a quoted string
///   (`"gpus": "8"` is an error); a text field (name, image, env values,
///   labels, ...) takes any scalar as written (`OMP_NUM_THREADS: 8` is "8").
///   A null (`pool: ~`, `"pool": null`, `pool:`) is the same as leaving the
///   field out; a null inside a list or map (`command: [~]`) is an error.
/// - Without `workers` and without `task_groups` a run has 1 worker.
/// - A key given twice in one map is an error.
///
/// Errors are `ec::invalid_request`, rendered (`render_error`) as
/// `SOURCE:LINE: FIELD: WHAT`, e.g.
/// `runs/llm.yaml:9: task_groups[1].sizee: unknown field (did you mean size?)`;
/// validation errors have no source: `task_groups: two groups are named
/// 'trainer'`.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"
#include "messages/error.hpp"

namespace astraeus {

/// The rendezvous port every run's workers are told (`MASTER_PORT`).
/// Source: shared/seeds/inside-a-worker.md ("Rendezvous").
inline constexpr uint32_t master_port = 29500;

/// The largest spec text `parse_run_spec` reads, in bytes (1 MiB).
inline constexpr size_t max_run_spec_bytes = 1 << 20;

/// The most GPUs one worker may ask for (a machine has at most 64 slots).
inline constexpr uint32_t max_run_gpus_per_worker = 64;
/// CPU cores one worker may ask for at most: the most CPUs a Debian kernel
/// runs (CONFIG_NR_CPUS=8192), so a larger figure is a mistake, refused at
/// submit rather than waiting for a machine that cannot exist.
inline constexpr double max_run_cpus_per_worker = 8192;

/// The largest `array.size`.
inline constexpr uint32_t max_run_array_size = 10000;

/// The most workers one copy of a run may have (a gang of 16,384 one-GPU
/// workers), and the most workers of all its copies together: beyond these a
/// run is refused before anything is stored or placed.
inline constexpr uint32_t max_run_workers = 16384;
inline constexpr uint64_t max_run_workers_all_copies = 100000;

/// The largest packed code (`astra run --code`, RunSpec.code_tgz) in bytes.
inline constexpr size_t max_run_code_bytes = 512 << 10;

/// The most volumes, and the most config files, one run may have.
inline constexpr int max_run_volumes = 64;
inline constexpr int max_run_config_files = 64;

/// The most bytes all of a run's config files (`configs[].mounts[].content`)
/// may hold together.
inline constexpr size_t max_run_config_bytes = 256 << 10;

/// The largest run spec as a message (with its code and configs), in bytes:
/// it travels to each of its machines in one frame (the gate's 1 MiB cap).
inline constexpr size_t max_run_message_bytes = 896 << 10;

/// The longest time limit, in seconds (30 days).
inline constexpr uint64_t max_run_time_limit_seconds = 30ull * 24 * 3600;

/// Parses a run spec file's text, JSON or YAML, into a `v1::RunSpec`.
/// Only the structure is checked here (known fields, types, units); call
/// `validate_run_spec` on the result before submitting it.
///
/// Fields and where they go: name, image, workspace, pool -> the same;
/// `command` (a list of strings, or a string S meaning `[sh, -c, S]`) and
/// `args` (a list: appended to `command` when there is one, else `args`,
/// the image ENTRYPOINT's arguments); env, labels (maps of text)
/// -> the same; gpus -> `gpus_per_worker`; cpus (a number >= 0) ->
/// `cpus_per_worker`; memory (`parse_memory_size` text or a number of
/// bytes) -> `memory_bytes_per_worker`; workers; task_groups (a list of
/// {name, size, leader}); array.size -> `array_size`;
/// gpu_requests.healthy_only -> `healthy_only`; time_limit_seconds (a
/// whole number of seconds) or time_limit (a duration: "2h", "90m",
/// "1h30m", "1d", "45s", or a number of seconds; not both) ->
/// `time_limit_seconds`; outputs, cpu_burst, rdma (booleans) -> the same;
/// security_context.ulimits (a list of {name, soft, hard}, values whole
/// numbers or -1; hard defaults to soft) -> `ulimits`. `workers` is 1
/// when neither workers nor task_groups is given. The seed's spellings:
/// task_template.user -> `user`; cpu_cores -> `cpus_per_worker` (not with
/// cpus); memory_bytes, or per_gpu.memory_bytes times gpus (needs gpus) ->
/// `memory_bytes_per_worker` (one of memory, memory_bytes, per_gpu);
/// node_fraction (a number, 0 < f <= 1); volumes (a list of {name, type:
/// EmptyDir|Bind, mount_path, host_path, mode: ReadOnly|ReadWrite}) and
/// configs (a list of {name, mounts: [{mount_path, content}]});
/// security_context.ipc_mode (host) -> `ipc_mode`.
///
/// @param text the file's contents (at most `max_run_spec_bytes`).
/// @param source names the file in errors, e.g. "runs/llm.yaml".
/// @returns the spec, or `ec::invalid_request` naming the source, the line
///   and the field path, e.g. `x.yaml:7: task_groups[1].sizee: unknown
///   field (did you mean size?)`, `x.json:3: gpus: expected a whole number,
///   got the string "8"`, `x.yaml:4: memory: "12X" is not a memory size
///   (...)`, `x.yaml:2:5: syntax error: ...` (line and column).
caf::expected<v1::RunSpec> parse_run_spec(std::string_view text,
                                          std::string_view source);

/// Checks a spec before it is submitted (from a file or from `astra run`
/// flags): name valid (1-63 letters, digits and '-', starting with a letter
/// or digit); an image or a command; a non-empty program (`command[0]`);
/// workers >= 1 without task_groups, and not workers > 1 with task_groups;
/// task_groups: names valid (as a run name) and unique, sizes >= 1, at most
/// one marked leader (when none is, the first group leads); at most 2^32-1
/// workers in all; gpus <= 64 per worker; cpus finite and >= 0;
/// array.size <= 10000; time limit <= 30 days; env names non-empty without
/// '='; label keys non-empty; `labels.pool` not different from `pool`;
/// each ulimit names a resource limit (`rlimit_resource`) once, its values
/// -1 or more, soft not above hard
/// ("security_context.ulimits[1].name: \"stak\" is not a resource limit
/// (use one of as, core, ...)"); the user's form (a name, uid or uid:gid);
/// node_fraction in (0, 1] and not with cpus or memory; volumes: valid
/// unique names, absolute mount paths without "..", unique, not on /,
/// /proc, /sys, /dev or the worker's own paths; Bind needs an absolute
/// host_path and the default workspace (workspaces have no path grants
/// yet); configs' mount paths the same rules, contents at most 256 KiB in
/// all; ipc_mode "" or host (default workspace only); code at most 512 KiB;
/// the whole spec at most `max_run_message_bytes` as a message.
/// @returns `caf::none`, or the first problem as `ec::invalid_request` in
///   user words naming the field: "task_groups: two groups are named
///   'trainer'", "gpus: at most 64 GPUs per worker, got 65".
caf::error validate_run_spec(const v1::RunSpec& spec);

/// The fields of `spec` that only the runc runtime can give, as users name
/// them, with the names inside: "task_template.user", "volumes (data)",
/// "configs (sbatch: the batch script of astra slurm sbatch)", "ipc_mode";
/// joined with ", " and " and "; empty when none is set.
std::string runc_only_fields(const v1::RunSpec& spec);

/// The RLIMIT_* resource `name` stands for in `security_context.ulimits`
/// (the lower-case name without RLIMIT_: "stack" -> RLIMIT_STACK, "nofile",
/// "memlock", ...); nullopt for a name that is not a resource limit.
std::optional<int> rlimit_resource(std::string_view name);

/// The names `rlimit_resource` knows, comma-separated ("as, core, cpu, ...").
std::string rlimit_names();

/// Total workers of a run: the sum of its group sizes with task_groups,
/// else `workers` (so 0 for an unvalidated spec without either).
/// Saturates at UINT32_MAX (which `validate_run_spec` rejects).
uint32_t run_world_size(const v1::RunSpec& spec);

/// The run's worker groups in rank order as (group name, size) pairs: the
/// leader group first (so rank 0 is the leader), then the other groups in
/// the spec's order. Without task_groups: one pair ("default", workers).
/// The leader group is the first one marked `leader`, or the first group
/// when none is marked.
std::vector<std::pair<std::string, uint32_t>>
run_groups_in_rank_order(const v1::RunSpec& spec);

/// Parses a memory size as users write it for runs, case-insensitive:
/// a number of bytes ("1073741824", optionally with "B"); K, M, G, T
/// (powers of 1024, Docker/Slurm style: "256M" = 256 MiB), also spelled
/// Ki/Mi/Gi/Ti or KiB/MiB/GiB/TiB; KB, MB, GB, TB (powers of 1000, as in
/// the process config). A fraction is allowed with a unit ("1.5G") and is
/// rounded down to a whole byte.
/// @returns bytes, or `ec::invalid_request` quoting the text:
///   `"12X" is not a memory size (use 256M, 16G, 16GiB, 1.5G or a number
///   of bytes)`, `"99999999T" is too large for a memory size`.
caf::expected<uint64_t> parse_memory_size(std::string_view text);

/// The spec as YAML text in the spec-file syntax (fields in the order of
/// the example above; fields at their defaults left out; maps sorted by
/// key; memory as "256MiB" when a whole number of MiB/GiB/..., else bytes;
/// the time limit as `time_limit_seconds`). `parse_run_spec(to_yaml(s))`
/// gives `s` back for every spec that `validate_run_spec` accepts.
std::string to_yaml(const v1::RunSpec& spec);

/// Parses a duration of whole seconds: a number of seconds, or one or more
/// <number><unit> with units d, h, m, s ("2h", "1h30m", "45s", "7d") (run
/// time limits, token TTLs). nullopt for anything else or on overflow.
std::optional<uint64_t> parse_seconds(std::string_view text);

} // namespace astraeus
