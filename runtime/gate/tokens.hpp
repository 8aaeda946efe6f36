#pragma once
/// @file
/// Join tokens and API tokens (issue 7; shared/seeds/machines.md, "Create
/// one"; shared/seeds/bring-up-a-gpu-cluster.md, step 1 and
/// Troubleshooting).
///
/// - A join token lets one new machine enrol: single use (a second machine
///   gets `ec::enrollment_used`, the seed's ENROLLMENT_USED), valid for a TTL
///   (default 1 h), its labels become the machine's labels.
/// - An API token authenticates `astra` as a principal with a role: owner,
///   admin or member. Only owners and admins create join tokens, clear GPU
///   faults, cordon, uncordon, and put machines in maintenance.
///
/// Tokens are 32 random bytes shown once, as "astj_" (join) or "asta_" (API)
/// and 64 hex digits. The store keeps only their keyed BLAKE2b hash
/// (`crypto_generichash` with the controller's token key), in family
/// `tokens`, and compares it in constant time; no token is ever stored or
/// logged.
///
/// Expiry is a date users read ("expired at 2026-12-01 14:05:09 UTC"), so it
/// stays on the wall clock: every call takes `now_ms`, which the cluster reads
/// from its injected `wall_clock` (runtime/process/wall_clock.hpp); a wall
/// clock set back keeps a token valid for longer, by design.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"
#include "store/store.hpp"

namespace astraeus {


/// What a principal may do, least to most.
enum class role : uint8_t { member = 0, admin = 1, owner = 2 };

/// "member", "admin", "owner".
const char* to_string(role r);

/// Parses a role name (any case). nullopt for anything else.
std::optional<role> parse_role(std::string_view text);

/// Whether `principal`'s role is `min` or above (an unknown role is none).
bool has_role(const v1::Principal& principal, role min);

/// Default time a join token stays valid: 1 h (the seed's API default).
constexpr uint64_t default_join_ttl_seconds = 3600;

/// Longest time a join token may stay valid: 30 days.
constexpr uint64_t max_join_ttl_seconds = 30ull * 24 * 3600;

/// The key tokens are hashed with: 32 random bytes kept at `path` (64 hex
/// digits, mode 0600), created on first use. Errors: ec::store_failure
/// naming the path; ec::invalid_config when the file holds no key.
caf::expected<std::array<uint8_t, 32>>
load_or_create_token_key(const std::string& path);

/// Mints, checks and revokes tokens against the store. Not thread-safe:
/// owned by one actor (the cluster), which serialises enrolments, so of
/// many machines presenting one join token at once exactly one succeeds.
class token_registry {
public:
  /// `store`: the controller's store; `key`: the hashing key.
  token_registry(std::shared_ptr<Store> store, std::array<uint8_t, 32> key);
  ~token_registry();
  token_registry(const token_registry&) = delete;
  token_registry& operator=(const token_registry&) = delete;

  /// A new join token, stored (hash only, with sync) before it is returned
  /// with its record. `ttl_seconds` 0 means the default (1 h). Errors:
  /// ec::invalid_request for a TTL over 30 days or a bad label;
  /// ec::store_failure.
  caf::expected<std::pair<std::string, v1::JoinTokenRecord>>
  mint_join(const std::map<std::string, std::string>& labels,
            uint64_t ttl_seconds, const std::string& created_by, int64_t now_ms);

  /// Checks `token` for `machine` as `redeem_join` does and returns the
  /// change that marks it used, without writing it: the caller writes it in
  /// the same batch as the machine's identity and record, so a kill between
  /// them cannot leave the token used by a machine that never joined
  /// (issue 23 item 2). Errors: as `redeem_join`.
  caf::expected<std::pair<Store::change, v1::JoinTokenRecord>>
  prepare_redeem_join(const std::string& token, const std::string& machine,
                      int64_t now_ms);

  /// Uses up `token` for `machine`: stored as used (sync) before it returns
  /// the token's record. Errors: ec::enrollment_required (not a join token
  /// this controller minted), ec::enrollment_used (names the machine that
  /// used it), ec::enrollment_expired (says when), ec::store_failure.
  caf::expected<v1::JoinTokenRecord>
  redeem_join(const std::string& token, const std::string& machine,
              int64_t now_ms);

  /// A new API token for `name` with `r`, stored (hash only, sync).
  /// `ttl_seconds` 0: it never expires. Errors: ec::invalid_request for an
  /// empty name or a TTL over 10 years (max_api_token_ttl_seconds); ec::store_failure.
  caf::expected<std::pair<std::string, v1::ApiTokenRecord>>
  mint_api(const std::string& name, role r, uint64_t ttl_seconds,
           const std::string& created_by, int64_t now_ms);

  /// Who holds `token`. Errors: ec::unauthenticated ("no API token",
  /// "unknown API token", "API token <id> expired at ...", "API token <id>
  /// was revoked"); ec::store_failure.
  caf::expected<v1::Principal> authenticate(const std::string& token,
                                            int64_t now_ms);

  /// Revokes the API token with id `id` (stored with sync); returns its
  /// record. Errors: ec::invalid_request when no API token has that id;
  /// ec::failed_precondition when it is the last owner token that still
  /// works at `now_ms` (revoking it would lock every admin out for good:
  /// create another owner token first); ec::store_failure.
  caf::expected<v1::ApiTokenRecord> revoke_api(const std::string& id, int64_t now_ms);

  /// How many owner API tokens still work at `now_ms` (neither revoked nor
  /// expired). Errors: ec::store_failure.
  caf::expected<size_t> count_working_owners(int64_t now_ms);

  /// Every join token, oldest first, without its hash (`astra tokens
  /// list`). Errors: ec::store_failure.
  caf::expected<std::vector<v1::JoinTokenRecord>> list_join();

  /// Revokes the unused join token with id `id` (stored with sync): no
  /// machine may enrol with it any more. Returns its record (no hash).
  /// Errors: ec::invalid_request when no join token has that id, or it was
  /// already used (name the machine: remove that machine instead).
  caf::expected<v1::JoinTokenRecord> revoke_join(const std::string& id);

  /// Every API token, oldest first, without its hash (`astra api-tokens
  /// list`). Errors: ec::store_failure.
  caf::expected<std::vector<v1::ApiTokenRecord>> list_api();

  /// Whether any API token exists (revoked ones count): false on a new
  /// controller, which then mints the first owner token.
  caf::expected<bool> has_api_tokens();

  /// The keyed hash of `token`, as 64 hex digits (the store key's tail).
  std::string hash_hex(const std::string& token) const;

private:
  std::array<uint8_t, 32> hash(const std::string& token) const;
  std::shared_ptr<Store> store_;
  std::array<uint8_t, 32> key_;
};

/// The command that installs an agent with join token `token` (the seed's
/// `install` answer, with our own programs): it writes the token to a file
/// only root reads, starts the agent pinned to the controller's key, and
/// the token is never on a command line (`ps`). `address`: the gate as
/// machines reach it. What `astra tokens create` prints and the API's
/// `install`.
std::string install_command(const v1::JoinToken& token, const std::string& address);

/// Where machines fetch the installer from (issue 20): what an install
/// command that runs install.sh needs beyond the token.
struct install_site_info {
  /// The HTTP API as machines reach it ("https://10.0.0.5:7451"); empty:
  /// no HTTP API, and the install command runs astraeus-agent directly.
  std::string api_url;
  /// The gate as machines reach it (HOST:PORT).
  std::string gate_address;
  /// The organisation name (api.organization).
  std::string organization;
  /// curl's --pinnedpubkey value for a self-signed API certificate
  /// ("sha256//BASE64"); empty: the certificate is verified as usual.
  std::string curl_pin;
};

/// install_site_info shared by the HTTP API, which knows it once it is
/// listening, and the cluster actor, which mints join tokens. Thread-safe.
class install_site {
public:
  /// Replaces what is known.
  void set(install_site_info info);
  /// What is known; an empty api_url until the API runs.
  install_site_info get() const;

private:
  mutable std::mutex mutex_;
  install_site_info info_;
};

/// The console's address (the API serves it): `configured`
/// (validation.console_url, else api.advertise_url) without a trailing '/',
/// else the API's address once it runs (`site`, may be null), else "".
std::string console_base(const std::string& configured, const install_site* site);

/// The organisation id install.sh checks `--org-id` against: the first 32
/// hex digits of the gate's public key (hex), so a command made for
/// another controller is refused.
std::string install_org_id(const std::string& controller_key_hex);

/// The seed's install command (machines.md "Create one"): the token into
/// ./astraeus-token, `curl -fsSL API/api/v1/install.sh | sudo sh -s --
/// --apiserver GATE --token-file ./astraeus-token --releases API/releases
/// --org 'ORG' --org-id ID`, then the token file removed. A curl_pin adds
/// `--insecure --pinnedpubkey PIN` (a self-signed certificate, pinned).
std::string install_script_command(const v1::JoinToken& token, const install_site_info& site);

/// The gate(s) an install command names (`--apiserver G` of
/// `install_script_command`'s, `--controller G` of `install_command`'s):
/// "HOST:PORT" or a comma-separated list; "" when it names none.
std::string gate_named_in(const std::string& command);

/// `command` (an install command: `install_script_command`'s, or
/// `install_command`'s) naming `gates` (HA mode: "HOST:PORT,HOST:PORT,...",
/// every controller's gate) in place of the one gate it names, so the agent
/// follows whichever controller leads. `astra --addr A,B,C tokens create`
/// uses it when gate.advertise_address is unset (the controller only knows
/// its own gate). `command` unchanged when it names no gate.
std::string install_command_naming(const std::string& command, const std::string& gates);

} // namespace astraeus
