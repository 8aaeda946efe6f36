#pragma once
/// @file
/// Process configuration: one YAML file per process (`config/*.yaml` ships
/// every key with its default), overridden by `ASTRAEUS_*` environment
/// variables, then by command-line flags. See DESIGN.md, "Config, logs,
/// errors".
///
/// Keys are the file's nested maps flattened with dots (`heartbeat.lapse`);
/// a file may also spell a key dotted at any level. The environment
/// variable of a key is `ASTRAEUS_` + the key upper-cased with dots turned
/// into underscores (`ASTRAEUS_HEARTBEAT_LAPSE=30s`); only variables naming
/// a known key are read, other `ASTRAEUS_*` variables (the CLI's
/// `ASTRAEUS_ADDR`, `ASTRAEUS_TOKEN`, a worker's) are ignored.
/// Precedence: defaults < file < environment < flags.
///
/// Value syntax:
/// - duration: an integer with a unit `ms`, `s`, `m` or `h` ("500ms", "10s",
///   "2m", "1h"); a bare integer is seconds.
/// - byte size: an integer with a unit `B`, `KB`, `MB`, `GB`, `TB` (powers of
///   1000) or `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024), any case; a bare
///   integer is bytes.
/// - percent: a number from 0 to 100, optionally followed by `%`.
/// - bool: true/false, yes/no, on/off, 1/0.
/// - A YAML null (`key:` with nothing, or `~`) leaves the key at its lower
///   precedence value, so a section whose keys are all commented out is fine.
///
/// Every error is `ec::invalid_config` with a message naming where the value
/// came from, the key, the value and what was expected, e.g.
/// `config /etc/astraeus/controller.yaml: heartbeat.lapse: "sixty" is not a
/// duration (use 60s, 500ms, 2m)`.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/error.hpp"

namespace astraeus {

/// Settings of `astraeus-controller`. Each member names its key.
struct ControllerConfig {
  /// listen.address: address the gate listens on (non-empty); every
  /// interface by default: only the secure channel is served there.
  std::string listen_address = "0.0.0.0";
  /// listen.port: TCP port of the gate, 0-65535 (0: a free one, chosen
  /// when the gate binds; `controller_handles::port` says which).
  uint16_t listen_port = 7450;
  /// store.path: folder of the RocksDB store. Empty in a default-constructed
  /// struct; the loaders fill it with `default_data_dir("controller")`.
  std::string data_dir;
  /// store.backend: "rocksdb" (the default: one controller, its own store
  /// in store.path) or "etcd" (HA mode: several controllers on one etcd
  /// cluster, one of them leads; README "High availability").
  std::string store_backend = "rocksdb";
  /// store.etcd.endpoints: comma-separated HOST:PORT (or http://HOST:PORT)
  /// of the etcd members' client URLs; required with store.backend etcd.
  std::string etcd_endpoints;
  /// store.etcd.prefix: every etcd key starts with it; empty:
  /// "/astraeus/<cluster.name>/". Must start and end with '/'.
  std::string etcd_prefix;
  /// store.etcd.lease_ttl: the leader lease's TTL (2s-60s): a leader that
  /// stops renewing for this long is replaced.
  std::chrono::milliseconds etcd_lease_ttl{2000};
  /// heartbeat.lapse: silence after which a machine is Down (100ms-24h).
  std::chrono::milliseconds heartbeat_lapse{60000};
  /// heartbeat.report_interval: the agents' report interval (100ms-1h),
  /// told to every agent in the welcome as the longest it may use; the
  /// lapse must be at least 3 times it (issue 18, rule 10).
  std::chrono::milliseconds heartbeat_report_interval{10000};
  /// gate.frame_cap: largest frame accepted, in bytes (1KiB-64MiB).
  uint64_t frame_cap_bytes = 1 << 20;
  /// gate.hello_timeout: how long a new connection may take to say hello
  /// (100ms-1h).
  std::chrono::milliseconds hello_timeout{10000};
  /// gate.keepalive_interval (HA mode only, store.backend etcd): how often
  /// the leader's gate sends each quiet agent a keepalive; an agent leaves a
  /// gate silent for three of these (a frozen leader) (100ms-1min).
  std::chrono::milliseconds keepalive_interval{1000};
  /// gate.request_timeout: how long a request may wait for its answer
  /// (100ms-1h).
  std::chrono::milliseconds request_timeout{10000};
  /// pressure.memory_available_min: a machine with less available memory,
  /// in bytes, is under memory pressure (0 disables).
  uint64_t memory_available_min_bytes = 100ull << 20;
  /// pressure.memory_available_min_percent: the same as a percentage of
  /// total memory (0-100; 0 disables).
  double memory_available_min_percent = 5;
  /// pressure.memory_psi_full_avg10_max: memory PSI "full" avg10 above which
  /// a machine is under memory pressure (percent, 0-100).
  double memory_psi_full_avg10_max = 20;
  /// pressure.disk_free_min_percent: free space on the data filesystem below
  /// which a machine is under disk pressure (percent, 0-100).
  double disk_free_min_percent = 10;
  /// cluster.name: the cluster's name (non-empty).
  std::string cluster_name = "default";
  /// keys.path: folder of the gate's Ed25519 key, the token-hashing key and
  /// the first owner API token (mode 0700, files 0600). Empty in a
  /// default-constructed struct; the loaders fill it with store.path +
  /// "-keys" (outside the store, which never holds a secret).
  std::string keys_dir;
  /// gate.advertise_address: HOST:PORT machines reach the gate at, put in
  /// join tokens' install commands; empty: `astra` uses its own --addr.
  std::string advertise_address;
  /// gate.max_unauthenticated_per_address: connections from one source
  /// address that may be open at once before finishing their handshake
  /// (1-100000).
  uint32_t max_unauthenticated_per_address = 32;
  /// xid.fence / xid.at_risk / xid.record: comma-separated Xid numbers
  /// whose action overrides the built-in table (runtime/faults/xid_policy.hpp).
  std::string xid_fence;
  std::string xid_at_risk;
  std::string xid_record;
  /// xid.application_processes: distinct processes reporting application
  /// Xids (13, 31, 43, 45, 69) on one GPU within 24 h after which it is at
  /// risk (issue 17, rule 5), 1 to 1000.
  uint32_t xid_application_processes = 3;
  /// amd.fence / amd.at_risk / amd.record: comma-separated AMD kernel-log
  /// events (amd_reset_failed, amd_reset_unfinished, amd_vram_lost,
  /// amd_ras_fatal, amd_ring_timeout) whose action overrides the built-in
  /// AMD table (issue 17, rule 4; runtime/faults/xid_policy.hpp).
  std::string amd_fence;
  std::string amd_at_risk;
  std::string amd_record;
  /// log.level: trace, debug, info, warn, error or off.
  std::string log_level = "info";
  /// log.file: file to log to; empty logs to stderr.
  std::string log_file;
  /// api.listen: HOST:PORT the HTTP API and /metrics listen on (port 0: any
  /// free port, logged); "off" serves no HTTP.
  std::string api_listen = "0.0.0.0:7451";
  /// api.plain_http: serve plain HTTP instead of HTTPS; refused unless
  /// api.listen is a loopback address (127.0.0.1, ::1, localhost).
  bool api_plain_http = false;
  /// api.certificate / api.private_key: PEM files of the API's TLS
  /// certificate and key; empty: api.crt and api.key in keys.path, created
  /// (self-signed) on first start.
  std::string api_certificate;
  std::string api_private_key;
  /// api.organization: the organisation name in the API's paths (the
  /// cluster's is cluster.name); another is a 404 naming it.
  std::string api_organization = "default";
  /// api.body_cap: largest request body accepted (1KiB-64MiB); larger: 413.
  uint64_t api_body_cap_bytes = 1 << 20;
  /// api.view_refresh: how old the API's read-only view of machines and
  /// GPUs may get while it is read (10ms-1h); writes through the API
  /// refresh it at once.
  std::chrono::milliseconds api_view_refresh{1000};
  /// api.threads: HTTP worker threads (1-1024).
  uint32_t api_threads = 8;
  /// api.read_timeout: a client that sends nothing for this long is cut
  /// off (100ms-1h), so slow clients cannot hold every thread.
  std::chrono::milliseconds api_read_timeout{10000};
  /// api.advertise_url: the URL machines reach the HTTP API at, written
  /// into install commands (`curl URL/api/v1/install.sh`); empty: the
  /// scheme and port of api.listen with the host of gate.advertise_address,
  /// else api.listen's host, else 127.0.0.1 (issue 20).
  std::string api_advertise_url;
  /// releases.dir: the folder of the agent's release files the API serves
  /// under /releases/ (SHA256SUMS, the .deb and the tarball;
  /// `ninja agent-release` fills it). Empty: share/astraeus/releases next
  /// to the controller's program (/usr/local/share/astraeus/releases for
  /// /usr/local/bin/astraeus-controller).
  std::string releases_dir;
  /// validation.check_program: the program a validation's check runs on
  /// the machine (`<program> <check> --json ...`; a name is looked up in
  /// the agent's PATH).
  std::string validation_check_program = "astraeus-check";
  /// validation.quick_on_up: run the quick check when a machine comes Up.
  bool validation_quick_on_up = true;
  /// validation.poll_interval: how often a validation looks at its steps
  /// and machines (10ms-1h).
  std::chrono::milliseconds validation_poll_interval{500};
  /// validation.console_url: the console's address printed with a new
  /// validation ("https://console.example:7451"); empty: none printed.
  std::string validation_console_url;
  /// validation.installer_batch_delay: how long after the last machine of a
  /// joining batch installed with --accept its acceptance starts (0-24h;
  /// issue 20/21, bring-up-a-gpu-cluster.md: "2 minutes after the last of a
  /// joining batch").
  std::chrono::milliseconds validation_installer_batch_delay{120000};
};

/// Settings of `astraeus-agent`. Each member names its key.
struct AgentConfig {
  /// controller.address: address of the controller's gate (non-empty).
  std::string controller_address = "127.0.0.1";
  /// controller.port: TCP port of the controller's gate, 1-65535.
  uint16_t controller_port = 7450;
  /// machine.name: this machine's name; empty means the host name.
  std::string name;
  /// machine.advertise_address: the address other machines reach this one
  /// by (a run led from here gets it as MASTER_ADDR); empty: the source
  /// address of this machine's route to the controller.
  std::string advertise_address;
  /// data.path: folder of the agent's RocksDB (fault latches). Empty in a
  /// default-constructed struct; the loaders fill it with
  /// `default_data_dir("agent")`.
  std::string data_dir;
  /// report.interval: time between two reports (100ms-1h).
  std::chrono::milliseconds report_interval{10000};
  /// host.root: prefix for /proc and /sys (tests point it at a fixture tree;
  /// non-empty).
  std::string host_root = "/";
  /// kmsg.path: the kernel log watched for GPU faults (Xid lines, AMD
  /// resets); empty: none.
  std::string kmsg_path = "/dev/kmsg";
  /// gpu.nvml_library: the NVML library dlopen'ed at run time (non-empty).
  std::string nvml_library = "libnvidia-ml.so.1";
  /// gpu.nvidia_smi: the nvidia-smi program used where NVML cannot be
  /// loaded (non-empty).
  std::string nvidia_smi = "nvidia-smi";
  /// gpu.call_deadline: how long one NVML call may take before its GPU (or
  /// the driver) is reported unresponsive (10ms-1m).
  std::chrono::milliseconds nvml_call_deadline{2000};
  /// reconnect.min_backoff: first wait before reconnecting (10ms-1h).
  std::chrono::milliseconds reconnect_min{500};
  /// reconnect.max_backoff: longest wait between reconnects (10ms-24h, and
  /// at least reconnect.min_backoff).
  std::chrono::milliseconds reconnect_max{30000};
  /// gate.frame_cap: largest frame accepted, in bytes (1KiB-64MiB).
  uint64_t frame_cap_bytes = 1 << 20;
  /// workers.runtime: auto (runc where found, else process), runc or process.
  std::string workers_runtime = "auto";
  /// workers.runc: the runc program (non-empty).
  std::string runc = "runc";
  /// workers.umoci / workers.skopeo: image tools (non-empty).
  std::string umoci = "umoci";
  std::string skopeo = "skopeo";
  /// workers.images_dir: where image names ("busybox") are looked up; empty:
  /// `<data.path>/images`.
  std::string images_dir;
  /// workers.poll_interval: how often workers are checked (10ms-1m).
  std::chrono::milliseconds worker_poll{250};
  /// workers.rdma_min_rate: RDMA ports slower than this many Gb/s are left
  /// out of NCCL_IB_HCA (0-10000).
  uint32_t rdma_min_gbps = 100;
  /// workers.log_max_bytes: a worker's log is rotated at this size (log and
  /// log.1 are kept; 4KiB-1TiB).
  uint64_t worker_log_max_bytes = 64ull << 20;
  /// stop.grace: time between a worker's stop signal and SIGKILL (0-1h;
  /// ASTRAEUS_STOP_GRACE).
  std::chrono::milliseconds stop_grace{30000};
  /// cdi.static_dir / cdi.dynamic_dir: CDI spec folders (the latter wins).
  std::string cdi_static_dir = "/etc/cdi";
  std::string cdi_dynamic_dir = "/var/run/cdi";
  /// cdi.nvidia_ctk: the nvidia-ctk program; empty: never generate.
  std::string nvidia_ctk = "nvidia-ctk";
  /// log.level: trace, debug, info, warn, error or off.
  std::string log_level = "info";
  /// log.file: file to log to; empty logs to stderr.
  std::string log_file;
  /// enrol.token_file: a file holding a join token (`astra tokens create`),
  /// presented once on first start; afterwards the agent connects with its
  /// identity alone and the file can be deleted. Empty: none.
  std::string token_file;
  /// controller.public_key: the gate's Ed25519 public key (64 hex digits,
  /// from the install command) the agent insists on. Empty: the key kept in
  /// the data folder since the first enrolment; with none yet, the first
  /// key seen is trusted and kept (logged as a warning).
  std::string controller_key;
  /// data_dir: the machine's data location (the installer's --data-dir;
  /// shared/seeds/machines.md, "Where a machine keeps data"), an absolute
  /// path, reported to the controller; empty: not chosen yet. Not the
  /// agent's own folder (data.path).
  std::string data_location;
  /// validation.request_acceptance: the installer's --accept: the
  /// controller starts acceptance once the machine's GPUs are free, 2
  /// minutes after the last machine of its joining batch.
  bool request_acceptance = false;
};

/// Where `component` ("controller", "agent") keeps its data by default:
/// `/var/lib/astraeus/<component>` when running as root (effective uid 0),
/// else `$XDG_DATA_HOME/astraeus/<component>` when XDG_DATA_HOME is an
/// absolute path, else `$HOME/.local/share/astraeus/<component>` (HOME from
/// the environment, else the password database). Never fails; with no home
/// at all it returns `.local/share/astraeus/<component>` (relative).
std::string default_data_dir(std::string_view component);

/// A duration as config values write it: a whole number with "ms", "s" (or
/// no unit), "m" or "h" ("10m", "90s", "1500ms"); nullopt for anything else.
std::optional<std::chrono::milliseconds> parse_duration_text(std::string_view text);

/// Refuses a heartbeat lapse shorter than 3 times the report interval
/// (`interval_key`: heartbeat.report_interval, or the agent's
/// report.interval in `astraeus dev`); the `*_origin` say where each value
/// came from. Errors: ec::invalid_config naming both keys.
caf::error check_heartbeat(std::chrono::milliseconds lapse, const std::string& lapse_origin,
                           std::chrono::milliseconds interval, const std::string& interval_key,
                           const std::string& interval_origin);

/// Loads the controller's settings: defaults, then `file` (when given), then
/// the known keys' variables in `env` (see `environment_map`), then `flags`
/// as (key, value) pairs in order (the program maps its flags to keys).
/// An empty `data_dir` is filled with `default_data_dir("controller")`.
/// Errors (`ec::invalid_config`): `file` missing or unreadable (names the
/// path); a YAML syntax error (names file, line and column); an unknown key
/// in the file or flags (names the key and the file or "command line"); a
/// bad value (names the key, the value and what was expected); a cross-field
/// check (names both keys).
caf::expected<ControllerConfig>
load_controller_config(const std::optional<std::string>& file,
                       const std::map<std::string, std::string>& env,
                       const std::vector<std::pair<std::string, std::string>>&
                         flags);

/// Loads the agent's settings; as `load_controller_config`, with `data_dir`
/// defaulting to `default_data_dir("agent")`. Cross-field check:
/// reconnect.max_backoff >= reconnect.min_backoff.
caf::expected<AgentConfig>
load_agent_config(const std::optional<std::string>& file,
                  const std::map<std::string, std::string>& env,
                  const std::vector<std::pair<std::string, std::string>>&
                    flags);

/// The process environment as a map from variable name to value (for the
/// `env` parameter of the loaders).
std::map<std::string, std::string> environment_map();

/// Every controller key, one entry per key: its line `key = default (type,
/// env VARIABLE)` followed by an indented one-line comment; for
/// `--help-config` style output.
std::string describe_controller_keys();

/// Every agent key, as `describe_controller_keys`.
std::string describe_agent_keys();

/// The effective settings `cfg` as YAML-compatible `key: value` lines, one
/// per key in table order, with durations and sizes in their shortest exact
/// unit (e.g. "heartbeat.lapse: 60s"); for logging the effective config at
/// start and for `--print-config`.
std::string render_config(const ControllerConfig& cfg);

/// The effective settings `cfg`, as `render_config(const ControllerConfig&)`.
std::string render_config(const AgentConfig& cfg);

} // namespace astraeus
