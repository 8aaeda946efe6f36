#pragma once
/// @file
/// One run of `astra`: its global options, its exit code, the storage of
/// every command's options, and the call to the controller's gate that
/// most commands make. Each command group (bin/astra/commands.hpp) adds
/// its commands to a CLI11 app and keeps what they parse in the invocation.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "messages/astraeus.pb.h"
#include "runtime/gate/gate_client.hpp"

namespace astraeus::cli {

/// astra's global options (`astra --addr ... --output json COMMAND`).
struct options {
  /// The controller's gate, HOST:PORT; in HA mode several, comma-separated
  /// (any order: astra finds the leader).
  std::string addr;
  /// Whether --addr or ASTRAEUS_ADDR gave `addr` (else `astra login`'s wins).
  bool addr_given = false;
  /// "table" or "json".
  std::string output = "table";
  /// Seconds to wait for the controller.
  double timeout_s = 10;
  /// --token-file: the file holding the API token.
  std::string token_file;
  /// --controller-key: the gate's public key to insist on (64 hex digits).
  std::string controller_key;
};

/// One run of astra. Owns every command's option storage: a command's
/// values live as long as the invocation, so callbacks may refer to them.
class invocation {
public:
  /// The global options, filled by the parse.
  options opts;
  /// The exit code the command's callback sets (cli::exit_code in
  /// bin/astra/usage.hpp): 0 ok, 1 the controller answered with an error,
  /// 2 bad input, 3 the controller is unreachable.
  int rc = 0;
  /// The arguments after the first `--`: a run's command, untouched by
  /// option parsing (bin/astra/usage.hpp).
  std::vector<std::string> trailing;
  /// Whether the command line had a `--`.
  bool has_trailing = false;
  /// Whether a command took `trailing` (only `astra run` does).
  bool trailing_used = false;

  /// A new value of type T owned by this invocation (a command's option
  /// storage), valid until the invocation ends.
  template <class T>
  T& keep(T init = T{}) {
    auto held = std::make_shared<T>(std::move(init));
    auto& ref = *held;
    kept_.push_back(std::move(held));
    return ref;
  }

private:
  std::vector<std::shared_ptr<void>> kept_;
};

/// Milliseconds since the Unix epoch, for the ages astra prints.
int64_t now_ms();

/// Where `astra login` keeps its credentials:
/// $XDG_CONFIG_HOME/astraeus/credentials, else ~/.config/astraeus/credentials.
std::string credentials_path();

/// The "key=value" lines of the credentials file at `path` (token, addr,
/// controller_key); empty when it cannot be read.
std::map<std::string, std::string> read_credentials(const std::string& path);

/// Whom astra authenticates as, and which gate key it insists on. In
/// order: --token-file; ASTRAEUS_TOKEN; `astra login`'s credentials (whose
/// address replaces `opts.addr` unless one was given); the first owner
/// token a local controller wrote (`astraeus dev`'s, then a controller's at
/// the default data folder), pinning that controller's key.
/// --controller-key pins in every case. A malformed --controller-key (or
/// a kept key that does not parse) or an unreadable --token-file is printed
/// to stderr and yields nullopt: the command then fails with exit code 2
/// before anything is sent (a pin that is skipped is worse than none).
std::optional<gate_credentials> resolve_credentials(options& opts);

/// Connects to the gate as `opts` says (address, credentials, pinned key).
/// On failure prints why on stderr (`quiet`: only a bad address or
/// credentials, for a caller that tries again), sets `rc` (2 a bad address
/// or credentials: nothing was sent; 3 unreachable) and returns nullopt.
std::optional<gate_client> connect_gate(options opts, int& rc, bool quiet = false);

/// Sends one request and answers the controller's Response; nullopt after
/// printing why on stderr (an error answer also as JSON on stdout with
/// --output json), with `rc` set: 1 the controller answered with an error,
/// 2 a bad address or credentials, 3 unreachable or no answer. `rc` is 0
/// with an answer.
std::optional<v1::Response> ask_controller(const options& opts, v1::Request req, int& rc);

/// Sends one request and prints its answer (`table` for people, JSON with
/// --output json); returns the exit code: 0 ok, 1 the controller answered
/// with an error, 2 a bad address, 3 unreachable.
int call(options opts, v1::Request req,
         const std::function<std::string(const v1::Response&)>& table);

/// The cluster the controller named in its welcome on the last `call`
/// (`cluster.name`; empty before any call): the submission line says it
/// ("whoami submitted to gpu-east: ...").
std::string& last_cluster_name();

} // namespace astraeus::cli
