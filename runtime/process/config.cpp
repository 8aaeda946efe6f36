#include "runtime/process/config.hpp"
#include "runtime/host/sysfs_text.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include <yaml-cpp/yaml.h>

extern char** environ;

namespace astraeus {

namespace {

using std::chrono::milliseconds;
using namespace std::chrono_literals;

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = KiB * 1024;
constexpr uint64_t no_limit = std::numeric_limits<uint64_t>::max();

// -- text helpers -----------------------------------------------------------

std::string quote(std::string_view x) {
  std::string out = "\"";
  for (auto c : x) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

/// Splits "  500 ms " into (500, "ms"); nullopt without leading digits or on
/// overflow.
std::optional<std::pair<uint64_t, std::string>>
split_number(std::string_view text) {
  text = trim(text);
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    auto digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (no_limit - digit) / 10)
      return std::nullopt;
    value = value * 10 + digit;
    ++i;
  }
  if (i == 0)
    return std::nullopt;
  return std::make_pair(value, ascii_lower(trim(text.substr(i))));
}

std::optional<uint64_t> parse_uint(std::string_view text) {
  auto parts = split_number(text);
  if (!parts || !parts->second.empty())
    return std::nullopt;
  return parts->first;
}

std::optional<milliseconds> parse_duration(std::string_view text) {
  auto parts = split_number(text);
  if (!parts)
    return std::nullopt;
  int64_t factor = 0;
  auto& unit = parts->second;
  if (unit == "ms")
    factor = 1;
  else if (unit.empty() || unit == "s")
    factor = 1000;
  else if (unit == "m")
    factor = 60 * 1000;
  else if (unit == "h")
    factor = 3600 * 1000;
  else
    return std::nullopt;
  if (parts->first > static_cast<uint64_t>(
        std::numeric_limits<milliseconds::rep>::max() / factor))
    return std::nullopt;
  return milliseconds{static_cast<milliseconds::rep>(parts->first) * factor};
}

std::optional<uint64_t> parse_bytes(std::string_view text) {
  auto parts = split_number(text);
  if (!parts)
    return std::nullopt;
  static const std::pair<const char*, uint64_t> units[] = {
    {"", 1},
    {"b", 1},
    {"kb", 1000},
    {"mb", 1000 * 1000},
    {"gb", 1000ull * 1000 * 1000},
    {"tb", 1000ull * 1000 * 1000 * 1000},
    {"kib", KiB},
    {"mib", MiB},
    {"gib", MiB * KiB},
    {"tib", MiB * MiB},
  };
  for (auto& [name, factor] : units)
    if (parts->second == name) {
      if (parts->first > no_limit / factor)
        return std::nullopt;
      return parts->first * factor;
    }
  return std::nullopt;
}

std::optional<double> parse_percent(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.back() == '%')
    text = trim(text.substr(0, text.size() - 1));
  if (text.empty())
    return std::nullopt;
  std::string copy{text};
  char* end = nullptr;
  errno = 0;
  auto value = std::strtod(copy.c_str(), &end);
  if (errno != 0 || end != copy.c_str() + copy.size() || !std::isfinite(value)
      || value < 0 || value > 100)
    return std::nullopt;
  return value;
}

std::optional<bool> parse_bool(std::string_view text) {
  auto x = ascii_lower(trim(text));
  if (x == "true" || x == "yes" || x == "on" || x == "1")
    return true;
  if (x == "false" || x == "no" || x == "off" || x == "0")
    return false;
  return std::nullopt;
}

std::string show_duration(milliseconds x) {
  auto n = x.count();
  if (n != 0 && n % 3600000 == 0)
    return std::to_string(n / 3600000) + "h";
  if (n != 0 && n % 60000 == 0)
    return std::to_string(n / 60000) + "m";
  if (n != 0 && n % 1000 == 0)
    return std::to_string(n / 1000) + "s";
  return std::to_string(n) + "ms";
}

std::string show_bytes(uint64_t x) {
  static const std::pair<const char*, uint64_t> units[] = {
    {"TiB", MiB * MiB}, {"GiB", MiB * KiB}, {"MiB", MiB}, {"KiB", KiB}};
  for (auto& [name, factor] : units)
    if (x != 0 && x % factor == 0)
      return std::to_string(x / factor) + name;
  return std::to_string(x) + "B";
}

std::string env_name(std::string_view key) {
  std::string out = "ASTRAEUS_";
  for (auto c : key)
    out += c == '.' ? '_'
                    : static_cast<char>(
                      std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// -- the key tables ---------------------------------------------------------

/// One configuration key of settings struct `C`.
template <class C>
struct key_def {
  /// Dotted key, e.g. "heartbeat.lapse".
  std::string key;
  /// Type and range for humans, e.g. "duration, 100ms to 24h".
  std::string type;
  /// Parses `text` into the member; returns what is wrong with it, e.g.
  /// "is not a duration (use 60s, 500ms, 2m)", or nullopt on success.
  std::function<std::optional<std::string>(C&, const std::string& text)> set;
  /// The member's value as text in the syntax `set` reads.
  std::function<std::string(const C&)> show;
  /// One-line comment.
  std::string comment;
  /// Default as shown by `describe`; empty means `show(C{})`.
  std::string default_text = {};
};

template <class C>
key_def<C> text_key(std::string key, std::string C::*m, bool non_empty,
                    std::string comment, std::string default_text = {}) {
  return {std::move(key), non_empty ? "non-empty string" : "string",
          [m, non_empty](C& c, const std::string& text)
            -> std::optional<std::string> {
            if (non_empty && trim(text).empty())
              return "must not be empty";
            c.*m = text;
            return std::nullopt;
          },
          [m](const C& c) { return quote(c.*m); }, std::move(comment),
          std::move(default_text)};
}

template <class C>
key_def<C> choice_key(std::string key, std::string C::*m, std::string what,
                      std::vector<std::string> choices, std::string comment) {
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0)
      list += i + 1 == choices.size() ? " or " : ", ";
    list += choices[i];
  }
  return {std::move(key), "one of " + list,
          [m, what, list, choices](C& c, const std::string& text)
            -> std::optional<std::string> {
            auto x = ascii_lower(trim(text));
            if (std::find(choices.begin(), choices.end(), x) == choices.end())
              return "is not a " + what + " (use " + list + ")";
            c.*m = x;
            return std::nullopt;
          },
          [m](const C& c) { return c.*m; }, std::move(comment)};
}

template <class C>
key_def<C> bool_key(std::string key, bool C::*m, std::string comment) {
  return {std::move(key), "bool",
          [m](C& c, const std::string& text) -> std::optional<std::string> {
            auto x = parse_bool(text);
            if (!x)
              return "is not a boolean (use true or false)";
            c.*m = *x;
            return std::nullopt;
          },
          [m](const C& c) { return std::string{c.*m ? "true" : "false"}; },
          std::move(comment)};
}

template <class C, class U>
key_def<C> uint_key(std::string key, U C::*m, uint64_t lo, uint64_t hi,
                    std::string what, std::string comment) {
  auto range = std::to_string(lo) + " to " + std::to_string(hi);
  return {std::move(key), what + ", " + range,
          [m, lo, hi, what, range](C& c, const std::string& text)
            -> std::optional<std::string> {
            auto x = parse_uint(text);
            if (!x || *x < lo || *x > hi)
              return "is not a " + what + " (use " + range + ")";
            c.*m = static_cast<U>(*x);
            return std::nullopt;
          },
          [m](const C& c) { return std::to_string(c.*m); },
          std::move(comment)};
}

template <class C>
key_def<C> duration_key(std::string key, milliseconds C::*m, milliseconds lo,
                        milliseconds hi, std::string comment) {
  auto range = show_duration(lo) + " to " + show_duration(hi);
  return {std::move(key), "duration, " + range,
          [m, lo, hi, range](C& c, const std::string& text)
            -> std::optional<std::string> {
            auto x = parse_duration(text);
            if (!x)
              return std::string{"is not a duration (use 60s, 500ms, 2m)"};
            if (*x < lo || *x > hi)
              return "is out of range (use " + range + ")";
            c.*m = *x;
            return std::nullopt;
          },
          [m](const C& c) { return show_duration(c.*m); },
          std::move(comment)};
}

template <class C>
key_def<C> bytes_key(std::string key, uint64_t C::*m, uint64_t lo, uint64_t hi,
                     std::string comment) {
  auto range = hi == no_limit ? std::string{}
                              : show_bytes(lo) + " to " + show_bytes(hi);
  return {std::move(key), range.empty() ? "byte size" : "byte size, " + range,
          [m, lo, hi, range](C& c, const std::string& text)
            -> std::optional<std::string> {
            auto x = parse_bytes(text);
            if (!x)
              return std::string{"is not a byte size (use 512KiB, 1MiB, "
                                 "100MB, or a number of bytes)"};
            if (*x < lo || *x > hi)
              return "is out of range (use " + range + ")";
            c.*m = *x;
            return std::nullopt;
          },
          [m](const C& c) { return show_bytes(c.*m); }, std::move(comment)};
}

template <class C>
key_def<C> percent_key(std::string key, double C::*m, std::string comment) {
  return {std::move(key), "percent, 0 to 100",
          [m](C& c, const std::string& text) -> std::optional<std::string> {
            auto x = parse_percent(text);
            if (!x)
              return "is not a percentage (use a number from 0 to 100)";
            c.*m = *x;
            return std::nullopt;
          },
          [m](const C& c) { return show_number(c.*m); }, std::move(comment)};
}

const std::vector<std::string> store_backends = {"rocksdb", "etcd"};

const std::vector<std::string> log_levels = {"trace", "debug", "info",
                                             "warn",  "error", "off"};

const std::vector<key_def<ControllerConfig>>& controller_keys() {
  using C = ControllerConfig;
  static const std::vector<key_def<C>> keys = {
    text_key("listen.address", &C::listen_address, true,
             "address the gate listens on for agents and the CLI"),
    uint_key("listen.port", &C::listen_port, 0, 65535, "port number",
             "TCP port the gate listens on (0: a free one, logged at start)"),
    text_key("xid.fence", &C::xid_fence, false,
             "Xids that fence the GPU, beyond the built-in table (e.g. 13, 31)"),
    text_key("xid.at_risk", &C::xid_at_risk, false,
             "Xids that make the GPU AtRisk instead"),
    text_key("xid.record", &C::xid_record, false,
             "Xids only recorded as history (e.g. to stop one fencing)"),
    uint_key("xid.application_processes", &C::xid_application_processes, 1, 1000, "count",
             "different processes reporting application Xids (13, 31, 43, 45, 69) on one "
             "GPU within 24 h after which it is AtRisk"),
    text_key("amd.fence", &C::amd_fence, false,
             "AMD kernel-log events that fence the GPU (amd_reset_failed, "
             "amd_reset_unfinished, amd_vram_lost, amd_ras_fatal, amd_ring_timeout)"),
    text_key("amd.at_risk", &C::amd_at_risk, false,
             "AMD kernel-log events that make the GPU AtRisk instead"),
    text_key("amd.record", &C::amd_record, false,
             "AMD kernel-log events only recorded as history"),
    text_key("store.path", &C::data_dir, false,
             "folder of the controller's RocksDB store, created if missing",
             "/var/lib/astraeus/controller as root, else "
             "~/.local/share/astraeus/controller"),
    choice_key("store.backend", &C::store_backend, "backend", store_backends,
               "rocksdb: one controller with its own store; etcd: HA mode, several "
               "controllers on one etcd cluster"),
    text_key("store.etcd.endpoints", &C::etcd_endpoints, false,
             "comma-separated HOST:PORT of the etcd members (store.backend etcd)"),
    text_key("store.etcd.prefix", &C::etcd_prefix, false,
             "every etcd key starts with it; empty: /astraeus/<cluster.name>/"),
    duration_key("store.etcd.lease_ttl", &C::etcd_lease_ttl, 2s, 60s,
                 "the leader lease's TTL: a leader that stops renewing for this long "
                 "is replaced"),
    duration_key("heartbeat.lapse", &C::heartbeat_lapse, 100ms, 24h,
                 "a machine that sends no report for this long is Down"),
    duration_key("heartbeat.report_interval", &C::heartbeat_report_interval, 100ms, 1h,
                 "the agents' report interval, told to every agent as the "
                 "longest it may use; heartbeat.lapse must be at least 3 times it"),
    bytes_key("gate.frame_cap", &C::frame_cap_bytes, KiB, 64 * MiB,
              "largest frame the gate accepts; larger ones close the "
              "connection"),
    duration_key("gate.hello_timeout", &C::hello_timeout, 100ms, 1h,
                 "how long a new connection may take to say hello"),
    duration_key("gate.keepalive_interval", &C::keepalive_interval, 100ms, 1min,
                 "HA mode: how often the leader's gate tells each quiet agent "
                 "it is alive; an agent leaves a gate silent for three of "
                 "these (a frozen leader)"),
    duration_key("gate.request_timeout", &C::request_timeout, 100ms, 1h,
                 "how long a request through the gate may wait for its "
                 "answer"),
    bytes_key("pressure.memory_available_min", &C::memory_available_min_bytes,
              0, no_limit,
              "a machine with less available memory is under memory "
              "pressure (0 disables)"),
    percent_key("pressure.memory_available_min_percent",
                &C::memory_available_min_percent,
                "the same as a percentage of total memory (0 disables)"),
    percent_key("pressure.memory_psi_full_avg10_max",
                &C::memory_psi_full_avg10_max,
                "memory PSI full avg10 above which a machine is under memory "
                "pressure"),
    percent_key("pressure.disk_free_min_percent", &C::disk_free_min_percent,
                "free space on the data filesystem below which a machine is "
                "under disk pressure"),
    text_key("cluster.name", &C::cluster_name, true, "the cluster's name"),
    text_key("keys.path", &C::keys_dir, false,
             "folder of the gate's Ed25519 key, the token-hashing key and the "
             "first owner API token (owner-token), files mode 0600",
             "store.path + \"-keys\""),
    text_key("gate.advertise_address", &C::advertise_address, false,
             "HOST:PORT machines reach the gate at, for install commands; "
             "empty: astra uses its own --addr"),
    uint_key("gate.max_unauthenticated_per_address",
             &C::max_unauthenticated_per_address, 1, 100000, "count",
             "connections from one address that may be open at once before "
             "finishing their handshake; more are closed at once"),
    choice_key("log.level", &C::log_level, "log level", log_levels,
               "least severe log level written"),
    text_key("log.file", &C::log_file, false,
             "file to log to; empty logs to stderr"),
    text_key("api.listen", &C::api_listen, true,
             "HOST:PORT the HTTP API and /metrics listen on (port 0: any free "
             "port); off serves no HTTP"),
    bool_key("api.plain_http", &C::api_plain_http,
             "plain HTTP instead of HTTPS, only on a loopback api.listen"),
    text_key("api.certificate", &C::api_certificate, false,
             "PEM certificate of the API; empty: keys.path/api.crt, created "
             "self-signed on first start"),
    text_key("api.private_key", &C::api_private_key, false,
             "PEM private key of the API; empty: keys.path/api.key"),
    text_key("api.organization", &C::api_organization, true,
             "the organisation name in the API's paths"),
    bytes_key("api.body_cap", &C::api_body_cap_bytes, KiB, 64 * MiB,
              "largest request body the API accepts; larger ones get 413"),
    duration_key("api.view_refresh", &C::api_view_refresh, 10ms, 1h,
                 "how old the API's view of machines and GPUs may get while "
                 "it is read"),
    uint_key("api.threads", &C::api_threads, 1, 1024, "count",
             "HTTP worker threads"),
    duration_key("api.read_timeout", &C::api_read_timeout, 100ms, 1h,
                 "a client that sends nothing for this long is cut off"),
    text_key("api.advertise_url", &C::api_advertise_url, false,
             "URL machines reach the HTTP API at, for install commands "
             "(https://10.0.0.5:7451); empty: api.listen's scheme and port "
             "with gate.advertise_address's host"),
    text_key("releases.dir", &C::releases_dir, false,
             "folder of the agent's release files served under /releases/ "
             "(ninja agent-release fills it)",
             "share/astraeus/releases next to the program"),
    text_key("validation.check_program", &C::validation_check_program, true,
             "the program a validation's check runs on the machine"),
    bool_key("validation.quick_on_up", &C::validation_quick_on_up,
             "run the quick check when a machine comes Up"),
    duration_key("validation.poll_interval", &C::validation_poll_interval, 10ms, 1h,
                 "how often a validation looks at its steps and the machines"),
    text_key("validation.console_url", &C::validation_console_url, false,
             "the console's address printed with a new validation; empty: none"),
    duration_key("validation.installer_batch_delay", &C::validation_installer_batch_delay,
                 0ms, 24h,
                 "acceptance of machines installed with --accept starts this long after "
                 "the last machine of their joining batch"),
  };
  return keys;
}

const std::vector<key_def<AgentConfig>>& agent_keys() {
  using C = AgentConfig;
  static const std::vector<key_def<C>> keys = {
    text_key("controller.address", &C::controller_address, true,
             "address of the controller's gate; in HA mode every controller's, "
             "comma-separated HOST or HOST:PORT (the agent follows the leader)"),
    uint_key("controller.port", &C::controller_port, 1, 65535, "port number",
             "TCP port of the controller's gate"),
    text_key("machine.name", &C::name, false,
             "this machine's name in the cluster; empty uses the host name"),
    text_key("machine.advertise_address", &C::advertise_address, false,
             "the address other machines reach this one by (MASTER_ADDR of "
             "runs led from here); empty: the source address of the route "
             "to the controller"),
    text_key("data.path", &C::data_dir, false,
             "folder of the agent's RocksDB (fault latches), created if "
             "missing",
             "/var/lib/astraeus/agent as root, else "
             "~/.local/share/astraeus/agent"),
    duration_key("report.interval", &C::report_interval, 100ms, 1h,
                 "time between two reports to the controller"),
    text_key("host.root", &C::host_root, true,
             "prefix for /proc and /sys (tests point it at a fixture tree)"),
    text_key("kmsg.path", &C::kmsg_path, false,
             "kernel log watched for GPU faults; empty: none"),
    text_key("gpu.nvml_library", &C::nvml_library, true,
             "NVML library loaded with dlopen at run time"),
    text_key("gpu.nvidia_smi", &C::nvidia_smi, true,
             "nvidia-smi program used where NVML cannot be loaded"),
    duration_key("gpu.call_deadline", &C::nvml_call_deadline, 10ms, 1min,
                 "an NVML call slower than this makes its GPU unresponsive"),
    duration_key("reconnect.min_backoff", &C::reconnect_min, 10ms, 1h,
                 "first wait before reconnecting to the controller"),
    duration_key("reconnect.max_backoff", &C::reconnect_max, 10ms, 24h,
                 "longest wait between reconnects (at least min_backoff)"),
    bytes_key("gate.frame_cap", &C::frame_cap_bytes, KiB, 64 * MiB,
              "largest frame accepted from the controller"),
    text_key("enrol.token_file", &C::token_file, false,
             "file holding a join token, presented once on first start; "
             "delete it after"),
    text_key("controller.public_key", &C::controller_key, false,
             "the controller's Ed25519 public key (64 hex digits) to pin; "
             "empty: the one kept since enrolment"),
    choice_key("workers.runtime", &C::workers_runtime, "runtime",
               {"auto", "runc", "process"},
               "how workers run: auto (runc where found, else process), runc "
               "(OCI containers) or process (host processes)"),
    text_key("workers.runc", &C::runc, true, "the runc program"),
    text_key("workers.umoci", &C::umoci, true,
             "umoci, which unpacks OCI image layouts"),
    text_key("workers.skopeo", &C::skopeo, true,
             "skopeo, which converts docker archives to OCI layouts"),
    text_key("workers.images_dir", &C::images_dir, false,
             "where image names (busybox) are looked up: a root filesystem "
             "folder, an OCI layout or a docker archive of that name",
             "<data.path>/images"),
    duration_key("workers.poll_interval", &C::worker_poll, 10ms, 1min,
                 "how often the agent checks its workers"),
    uint_key("workers.rdma_min_rate", &C::rdma_min_gbps, 0, 10000, "rate in Gb/s",
             "RDMA ports slower than this are left out of NCCL_IB_HCA"),
    bytes_key("workers.log_max_bytes", &C::worker_log_max_bytes, 4 * KiB, 1024 * 1024 * MiB,
              "a worker's log is rotated at this size; log and log.1 are kept"),
    duration_key("stop.grace", &C::stop_grace, 0ms, 1h,
                 "time between a worker's stop signal and SIGKILL"),
    text_key("cdi.static_dir", &C::cdi_static_dir, false,
             "CDI specs an admin wrote (lower priority)"),
    text_key("cdi.dynamic_dir", &C::cdi_dynamic_dir, false,
             "CDI specs the agent and tools write (wins over cdi.static_dir)"),
    text_key("cdi.nvidia_ctk", &C::nvidia_ctk, false,
             "nvidia-ctk, which writes the NVIDIA CDI spec; empty: never"),
    choice_key("log.level", &C::log_level, "log level", log_levels,
               "least severe log level written"),
    text_key("log.file", &C::log_file, false,
             "file to log to; empty logs to stderr"),
    key_def<C>{"data_dir", "absolute path",
               [](C& c, const std::string& text) -> std::optional<std::string> {
                 if (!text.empty() && text[0] != '/')
                   return "is not an absolute path ('" + text + "')";
                 c.data_location = text;
                 return std::nullopt;
               },
               [](const C& c) { return quote(c.data_location); },
               "the machine's data location (the installer's --data-dir), reported to "
               "the controller; empty: not chosen yet"},
    bool_key("validation.request_acceptance", &C::request_acceptance,
             "the installer's --accept: acceptance starts by itself once the "
             "machine's GPUs are free"),
  };
  return keys;
}

// -- loading ----------------------------------------------------------------

caf::error config_error(std::string text) {
  return caf::make_error(ec::invalid_config, std::move(text));
}

/// Loads one settings struct through its key table.
template <class C>
class loader {
public:
  explicit loader(const std::vector<key_def<C>>& keys) : keys_(keys) {
    for (auto& def : keys_)
      origin_[def.key] = "default";
  }

  C& config() {
    return cfg_;
  }

  /// Where `key`'s value came from: "default", a file path, "environment
  /// VARIABLE" or "command line".
  const std::string& origin(const std::string& key) {
    return origin_[key];
  }

  caf::error load_file(const std::string& path) {
    namespace fs = std::filesystem;
    std::string where = "config " + path;
    std::error_code err;
    if (fs::is_directory(path, err))
      return config_error(where + ": is a folder, not a file");
    std::ifstream in{path};
    if (!in)
      return config_error(where + ": cannot read: " + std::strerror(errno));
    std::stringstream buf;
    buf << in.rdbuf();
    if (in.bad())
      return config_error(where + ": cannot read: " + std::strerror(errno));
    YAML::Node root;
    try {
      root = YAML::Load(buf.str());
    } catch (const YAML::Exception& e) {
      return config_error(where + ": YAML syntax error at line "
                          + std::to_string(e.mark.line + 1) + ", column "
                          + std::to_string(e.mark.column + 1) + ": " + e.msg);
    }
    try {
      if (root.IsNull())
        return caf::none;
      if (!root.IsMap())
        return config_error(where + ": line " + line_of(root)
                            + ": expected a map of keys at the top level");
      return walk(root, "", path);
    } catch (const std::exception& e) {
      return config_error(where + ": " + e.what());
    }
  }

  caf::error load_env(const std::map<std::string, std::string>& env) {
    for (auto& def : keys_) {
      auto name = env_name(def.key);
      if (auto i = env.find(name); i != env.end())
        if (auto err = set(def, i->second, "environment " + name))
          return err;
    }
    return caf::none;
  }

  caf::error
  load_flags(const std::vector<std::pair<std::string, std::string>>& flags) {
    for (auto& [key, value] : flags) {
      auto def = find(key);
      if (def == nullptr)
        return config_error("config command line: unknown key " + quote(key)
                            + hint(key));
      if (auto err = set(*def, value, "command line"))
        return err;
    }
    return caf::none;
  }

private:
  const key_def<C>* find(std::string_view key) const {
    for (auto& def : keys_)
      if (def.key == key)
        return &def;
    return nullptr;
  }

  /// True when some key starts with `prefix` + ".".
  bool is_section(std::string_view prefix) const {
    for (auto& def : keys_)
      if (def.key.size() > prefix.size()
          && def.key.compare(0, prefix.size(), prefix) == 0
          && def.key[prefix.size()] == '.')
        return true;
    return false;
  }

  /// A suggestion for the unknown `key`, e.g. " (did you mean x.y?)".
  std::string hint(std::string_view key) const {
    if (is_section(key)) {
      std::string out = " (a section; its keys:";
      for (auto& def : keys_)
        if (def.key.compare(0, key.size(), key) == 0
            && def.key.size() > key.size() && def.key[key.size()] == '.')
          out += " " + def.key;
      return out + ")";
    }
    const key_def<C>* best = nullptr;
    size_t best_distance = 4;
    for (auto& def : keys_) {
      auto d = edit_distance(key, def.key);
      if (d < best_distance) {
        best = &def;
        best_distance = d;
      }
    }
    return best ? " (did you mean " + best->key + "?)" : std::string{};
  }

  static std::string line_of(const YAML::Node& node) {
    auto mark = node.Mark();
    return mark.is_null() ? std::string{"?"} : std::to_string(mark.line + 1);
  }

  caf::error set(const key_def<C>& def, const std::string& text,
                 const std::string& from) {
    if (auto what = def.set(cfg_, text))
      return config_error("config " + from + ": " + def.key + ": "
                          + quote(text) + " " + *what);
    origin_[def.key] = from;
    return caf::none;
  }

  /// Flattens the map `node` under `prefix` and sets every leaf it holds.
  caf::error walk(const YAML::Node& node, const std::string& prefix,
                  const std::string& path) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      // yaml-cpp's iterator hands out a temporary pair: copy the nodes.
      YAML::Node name = it->first;
      YAML::Node value = it->second;
      if (!name.IsScalar())
        return config_error("config " + path + ": line " + line_of(name)
                            + ": keys must be plain names");
      auto key = prefix.empty() ? name.Scalar() : prefix + "." + name.Scalar();
      auto def = find(key);
      if (def == nullptr && !is_section(key))
        return config_error("config " + path + ": unknown key " + quote(key)
                            + " at line " + line_of(name) + hint(key));
      if (value.IsNull())
        continue; // unset: keeps the default
      if (value.IsMap()) {
        if (def != nullptr)
          return config_error("config " + path + ": " + key + ": expected a "
                              + def->type + " at line " + line_of(value)
                              + ", got a map");
        if (auto err = walk(value, key, path))
          return err;
        continue;
      }
      if (def == nullptr) // a section given a value
        return config_error("config " + path + ": unknown key " + quote(key)
                            + " at line " + line_of(name) + hint(key));
      if (!value.IsScalar())
        return config_error("config " + path + ": " + key + ": expected a "
                            + def->type + " at line " + line_of(value)
                            + ", got a list");
      if (auto err = set(*def, value.Scalar(), path))
        return err;
    }
    return caf::none;
  }

  const std::vector<key_def<C>>& keys_;
  C cfg_;
  std::map<std::string, std::string> origin_;
};

/// Defaults that depend on other keys.
void fill_derived(ControllerConfig& cfg) {
  if (cfg.keys_dir.empty()) {
    auto base = cfg.data_dir;
    while (base.size() > 1 && base.back() == '/')
      base.pop_back();
    cfg.keys_dir = base + "-keys";
  }
}

void fill_derived(AgentConfig&) {
}

template <class C, class Check>
caf::expected<C>
load(const std::vector<key_def<C>>& keys, std::string_view component,
     const std::optional<std::string>& file,
     const std::map<std::string, std::string>& env,
     const std::vector<std::pair<std::string, std::string>>& flags,
     Check check) {
  try {
    loader<C> l{keys};
    if (file)
      if (auto err = l.load_file(*file))
        return err;
    if (auto err = l.load_env(env))
      return err;
    if (auto err = l.load_flags(flags))
      return err;
    if (auto err = check(l))
      return err;
    auto& cfg = l.config();
    if (cfg.data_dir.empty())
      cfg.data_dir = default_data_dir(component);
    fill_derived(cfg);
    return std::move(cfg);
  } catch (const std::exception& e) {
    return config_error(std::string{"config: "} + e.what());
  }
}

template <class C>
std::string describe(const std::vector<key_def<C>>& keys) {
  C defaults;
  std::string out;
  for (auto& def : keys) {
    out += def.key + " = ";
    out += def.default_text.empty() ? def.show(defaults) : def.default_text;
    out += "  (" + def.type + ", env " + env_name(def.key) + ")\n";
    out += "    " + def.comment + "\n";
  }
  return out;
}

template <class C>
std::string render(const std::vector<key_def<C>>& keys, const C& cfg) {
  std::string out;
  for (auto& def : keys)
    out += def.key + ": " + def.show(cfg) + "\n";
  return out;
}

} // namespace

std::optional<std::chrono::milliseconds> parse_duration_text(std::string_view text) {
  return parse_duration(text);
}

std::string default_data_dir(std::string_view component) {
  std::string tail = "astraeus/";
  tail += component;
  if (geteuid() == 0)
    return "/var/lib/" + tail;
  if (auto xdg = std::getenv("XDG_DATA_HOME"); xdg != nullptr && xdg[0] == '/')
    return std::string{xdg} + "/" + tail;
  std::string home;
  if (auto h = std::getenv("HOME"); h != nullptr && h[0] != '\0') {
    home = h;
  } else {
    struct passwd pw;
    struct passwd* result = nullptr;
    std::vector<char> buf(16384);
    if (getpwuid_r(geteuid(), &pw, buf.data(), buf.size(), &result) == 0
        && result != nullptr && result->pw_dir != nullptr)
      home = result->pw_dir;
  }
  if (home.empty())
    return ".local/share/" + tail;
  if (home.back() == '/')
    home.pop_back();
  return home + "/.local/share/" + tail;
}

caf::error check_heartbeat(std::chrono::milliseconds lapse, const std::string& lapse_origin,
                           std::chrono::milliseconds interval, const std::string& interval_key,
                           const std::string& interval_origin) {
  if (lapse >= 3 * interval)
    return caf::none;
  return config_error("config: heartbeat.lapse " + show_duration(lapse) + " (from "
                      + lapse_origin + ") must be at least 3 times " + interval_key + " "
                      + show_duration(interval) + " (from " + interval_origin + "), "
                      + show_duration(3 * interval)
                      + ": with less, a report that comes a little late makes the "
                        "machine flap Down and Up");
}

/// Checks `store.etcd.endpoints`: HOST:PORT items, comma-separated, each
/// with a host and a port from 1 to 65535. Returns why not, or "".
static std::string etcd_endpoints_problem(const std::string& list) {
  size_t n = 0;
  size_t from = 0;
  for (;;) {
    auto comma = list.find(',', from);
    auto item = list.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    ++n;
    auto colon = item.rfind(':');
    auto port = colon == std::string::npos ? std::string{} : item.substr(colon + 1);
    bool digits = !port.empty() && port.size() <= 5
                  && port.find_first_not_of("0123456789") == std::string::npos;
    if (item.empty())
      return "item " + std::to_string(n) + " is empty (a comma too many?)";
    if (colon == 0 || !digits || std::stoul(port) == 0 || std::stoul(port) > 65535)
      return "item " + std::to_string(n) + " '" + item
             + "' is not HOST:PORT with a port from 1 to 65535";
    if (comma == std::string::npos)
      return {};
    from = comma + 1;
  }
}

caf::expected<ControllerConfig>
load_controller_config(const std::optional<std::string>& file,
                       const std::map<std::string, std::string>& env,
                       const std::vector<std::pair<std::string, std::string>>&
                         flags) {
  return load(controller_keys(), "controller", file, env, flags,
              [](loader<ControllerConfig>& l) -> caf::error {
                const auto& cfg = l.config();
                if (cfg.store_backend == "etcd" && cfg.etcd_endpoints.empty())
                  return config_error("config: store.backend is etcd but "
                                      "store.etcd.endpoints is empty (give the etcd "
                                      "members' HOST:PORT, comma-separated)");
                if (cfg.store_backend == "etcd") {
                  auto problem = etcd_endpoints_problem(cfg.etcd_endpoints);
                  if (!problem.empty())
                    return config_error("config: store.etcd.endpoints '" + cfg.etcd_endpoints
                                        + "' (from " + l.origin("store.etcd.endpoints")
                                        + "): " + problem);
                }
                return check_heartbeat(cfg.heartbeat_lapse, l.origin("heartbeat.lapse"),
                                       cfg.heartbeat_report_interval,
                                       "heartbeat.report_interval",
                                       l.origin("heartbeat.report_interval"));
              });
}

caf::expected<AgentConfig>
load_agent_config(const std::optional<std::string>& file,
                  const std::map<std::string, std::string>& env,
                  const std::vector<std::pair<std::string, std::string>>&
                    flags) {
  return load(agent_keys(), "agent", file, env, flags,
              [](loader<AgentConfig>& l) -> caf::error {
                auto& cfg = l.config();
                if (cfg.reconnect_max >= cfg.reconnect_min)
                  return caf::none;
                return config_error(
                  "config: reconnect.max_backoff "
                  + show_duration(cfg.reconnect_max) + " (from "
                  + l.origin("reconnect.max_backoff")
                  + ") must be at least reconnect.min_backoff "
                  + show_duration(cfg.reconnect_min) + " (from "
                  + l.origin("reconnect.min_backoff") + ")");
              });
}

std::map<std::string, std::string> environment_map() {
  std::map<std::string, std::string> out;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    std::string_view entry{*p};
    auto eq = entry.find('=');
    if (eq == std::string_view::npos)
      continue;
    out.emplace(std::string{entry.substr(0, eq)},
                std::string{entry.substr(eq + 1)});
  }
  return out;
}

std::string describe_controller_keys() {
  return describe(controller_keys());
}

std::string describe_agent_keys() {
  return describe(agent_keys());
}

std::string render_config(const ControllerConfig& cfg) {
  return render(controller_keys(), cfg);
}

std::string render_config(const AgentConfig& cfg) {
  return render(agent_keys(), cfg);
}

} // namespace astraeus
