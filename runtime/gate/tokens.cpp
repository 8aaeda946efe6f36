#include "runtime/gate/tokens.hpp"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <filesystem>

#include <sodium.h>

#include "messages/error.hpp"
#include "messages/labels.hpp"
#include "runtime/process/duration_limits.hpp"
#include "runtime/process/wall_clock.hpp"
#include "runtime/process/private_file.hpp"
#include "runtime/gate/secure_channel.hpp"
#include "store/store.hpp"

namespace astraeus {

namespace {

constexpr std::string_view join_prefix = "astj_";
constexpr std::string_view api_prefix = "asta_";

std::string random_token(std::string_view prefix) {
  std::array<uint8_t, 32> bytes{};
  randombytes_buf(bytes.data(), bytes.size());
  auto out = std::string{prefix}
             + to_hex(std::string_view{reinterpret_cast<const char*>(bytes.data()),
                                       bytes.size()});
  sodium_memzero(bytes.data(), bytes.size());
  return out;
}


bool has_prefix(const std::string& s, std::string_view prefix) {
  return s.size() > prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

bool same_hash(const std::string& stored, const std::array<uint8_t, 32>& h) {
  return stored.size() == h.size()
         && sodium_memcmp(stored.data(), h.data(), h.size()) == 0;
}

std::string hex_of(const std::array<uint8_t, 32>& h) {
  return to_hex(std::string_view{reinterpret_cast<const char*>(h.data()), h.size()});
}

/// The record stored under `family_prefix` + the hex of `h`, if its stored
/// hash matches `h` (compared in constant time); nullopt when there is none.
template <class Record>
caf::expected<std::optional<Record>> find_hashed(Store& store,
                                                  const std::string& family_prefix,
                                                  const std::array<uint8_t, 32>& h) {
  Record rec;
  auto found = store.get(family::tokens, family_prefix + hex_of(h), rec);
  if (!found)
    return found.error();
  if (!*found || !same_hash(rec.hash(), h))
    return std::optional<Record>{};
  return std::optional<Record>{std::move(rec)};
}

} // namespace

const char* to_string(role r) {
  switch (r) {
    case role::member: return "member";
    case role::admin: return "admin";
    case role::owner: return "owner";
  }
  return "member";
}

std::optional<role> parse_role(std::string_view text) {
  std::string x;
  for (auto c : text)
    x += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (auto r : {role::member, role::admin, role::owner})
    if (x == to_string(r))
      return r;
  return std::nullopt;
}

bool has_role(const v1::Principal& principal, role min) {
  auto r = parse_role(principal.role());
  return r && static_cast<uint8_t>(*r) >= static_cast<uint8_t>(min);
}

caf::expected<std::array<uint8_t, 32>>
load_or_create_token_key(const std::string& path) {
  if (sodium_init() < 0)
    return caf::make_error(ec::store_failure, "libsodium did not initialise");
  std::array<uint8_t, 32> key{};
  std::error_code err;
  if (std::filesystem::exists(path, err)) {
    auto text = read_trimmed_file(path);
    if (!text)
      return text.error();
    // The same encoding as a public key: 64 hex digits.
    auto parsed = parse_public_key(*text, path);
    sodium_memzero(text->data(), text->size());
    if (!parsed)
      return caf::make_error(ec::invalid_config,
                             path + " does not hold a token key (64 hex "
                                    "digits): every token minted with it is "
                                    "void without it; restore it from a backup");
    std::copy(parsed->begin(), parsed->end(), key.begin());
    return key;
  }
  randombytes_buf(key.data(), key.size());
  auto text = to_hex(std::string_view{reinterpret_cast<const char*>(key.data()),
                                      key.size()});
  auto written = write_private_file(path, text);
  sodium_memzero(text.data(), text.size());
  if (written)
    return written;
  return key;
}

token_registry::token_registry(std::shared_ptr<Store> store,
                               std::array<uint8_t, 32> key)
  : store_(std::move(store)), key_(key) {
}

token_registry::~token_registry() {
  sodium_memzero(key_.data(), key_.size());
}

std::array<uint8_t, 32> token_registry::hash(const std::string& token) const {
  std::array<uint8_t, 32> out{};
  crypto_generichash(out.data(), out.size(),
                     reinterpret_cast<const uint8_t*>(token.data()),
                     token.size(), key_.data(), key_.size());
  return out;
}

std::string token_registry::hash_hex(const std::string& token) const {
  return hex_of(hash(token));
}

caf::expected<std::pair<std::string, v1::JoinTokenRecord>>
token_registry::mint_join(const std::map<std::string, std::string>& labels,
                          uint64_t ttl_seconds, const std::string& created_by,
                          int64_t now_ms) {
  if (ttl_seconds == 0)
    ttl_seconds = default_join_ttl_seconds;
  if (ttl_seconds > max_join_ttl_seconds)
    return caf::make_error(ec::invalid_request,
                           "a join token may stay valid at most 30 days "
                           "(720h); mint one closer to the install");
  // The same rule as `astra label`: topology keys with '/' are welcome.
  for (const auto& [k, v] : labels)
    if (auto err = check_label(k, v))
      return err;
  auto token = random_token(join_prefix);
  auto h = hash(token);
  v1::JoinTokenRecord rec;
  rec.set_hash(std::string{reinterpret_cast<const char*>(h.data()), h.size()});
  auto hex = to_hex(rec.hash());
  rec.set_id(hex.substr(0, 12));
  for (const auto& [k, v] : labels)
    (*rec.mutable_labels())[k] = v;
  rec.set_created_unix_ms(now_ms);
  rec.set_expires_unix_ms(now_ms + static_cast<int64_t>(ttl_seconds) * 1000);
  rec.set_created_by(created_by);
  if (auto err = store_->put(family::tokens, "join/" + hex, rec, true))
    return err;
  return std::make_pair(std::move(token), std::move(rec));
}

caf::expected<std::pair<Store::change, v1::JoinTokenRecord>>
token_registry::prepare_redeem_join(const std::string& token, const std::string& machine,
                                    int64_t now_ms) {
  auto unknown = caf::make_error(ec::enrollment_required,
                                 "the join token is not one this controller "
                                 "minted (mint one with `astra tokens create`)");
  if (!has_prefix(token, join_prefix))
    return unknown;
  auto h = hash(token);
  auto found = find_hashed<v1::JoinTokenRecord>(*store_, "join/", h);
  if (!found)
    return found.error();
  if (!*found)
    return unknown;
  auto& rec = **found;
  if (!rec.used_by().empty())
    return caf::make_error(ec::enrollment_used,
                           "ENROLLMENT_USED: join token " + rec.id()
                             + " was already used by machine " + rec.used_by()
                             + " at " + format_utc(rec.used_unix_ms())
                             + "; mint one token per machine");
  if (rec.revoked())
    return caf::make_error(ec::enrollment_required,
                           "join token " + rec.id()
                             + " was revoked; mint a new one with `astra tokens create`");
  if (now_ms >= rec.expires_unix_ms())
    return caf::make_error(ec::enrollment_expired,
                           "join token " + rec.id() + " expired at "
                             + format_utc(rec.expires_unix_ms())
                             + "; mint a new one with `astra tokens create`");
  rec.set_used_by(machine);
  rec.set_used_unix_ms(now_ms);
  Store::change used{family::tokens, "join/" + hex_of(h), rec.SerializeAsString()};
  return std::make_pair(std::move(used), std::move(rec));
}

caf::expected<v1::JoinTokenRecord>
token_registry::redeem_join(const std::string& token, const std::string& machine,
                            int64_t now_ms) {
  auto prepared = prepare_redeem_join(token, machine, now_ms);
  if (!prepared)
    return prepared.error();
  if (auto err = store_->write({prepared->first}, true))
    return err;
  return std::move(prepared->second);
}

caf::expected<std::pair<std::string, v1::ApiTokenRecord>>
token_registry::mint_api(const std::string& name, role r, uint64_t ttl_seconds,
                         const std::string& created_by, int64_t now_ms) {
  if (auto err = check_api_token_name(name))
    return err;
  if (auto err = check_seconds_bound(ttl_seconds, "ttl_seconds", max_api_token_ttl_seconds))
    return err;
  auto token = random_token(api_prefix);
  auto h = hash(token);
  v1::ApiTokenRecord rec;
  rec.set_hash(std::string{reinterpret_cast<const char*>(h.data()), h.size()});
  auto hex = to_hex(rec.hash());
  rec.set_id(hex.substr(0, 12));
  rec.set_name(name);
  rec.set_role(to_string(r));
  rec.set_created_unix_ms(now_ms);
  if (ttl_seconds > 0)
    rec.set_expires_unix_ms(now_ms + static_cast<int64_t>(ttl_seconds) * 1000);
  rec.set_created_by(created_by);
  if (auto err = store_->put(family::tokens, "api/" + hex, rec, true))
    return err;
  return std::make_pair(std::move(token), std::move(rec));
}

caf::expected<v1::Principal> token_registry::authenticate(const std::string& token,
                                                          int64_t now_ms) {
  if (token.empty())
    return caf::make_error(ec::unauthenticated,
                           "no API token: run `astra login`, or set "
                           "ASTRAEUS_TOKEN");
  auto unknown = caf::make_error(ec::unauthenticated,
                                 "the API token is not one this controller "
                                 "knows");
  if (!has_prefix(token, api_prefix))
    return unknown;
  auto found = find_hashed<v1::ApiTokenRecord>(*store_, "api/", hash(token));
  if (!found)
    return found.error();
  if (!*found)
    return unknown;
  const auto& rec = **found;
  if (rec.revoked())
    return caf::make_error(ec::unauthenticated,
                           "API token " + rec.id() + " was revoked");
  if (rec.expires_unix_ms() > 0 && now_ms >= rec.expires_unix_ms())
    return caf::make_error(ec::unauthenticated,
                           "API token " + rec.id() + " expired at "
                             + format_utc(rec.expires_unix_ms()));
  v1::Principal out;
  out.set_name(rec.name());
  out.set_role(rec.role());
  out.set_token_id(rec.id());
  return out;
}

namespace {

/// Whether API token `rec` still authenticates at `now_ms`.
bool works_at(const v1::ApiTokenRecord& rec, int64_t now_ms) {
  return !rec.revoked() && (rec.expires_unix_ms() == 0 || now_ms < rec.expires_unix_ms());
}

} // namespace

caf::expected<size_t> token_registry::count_working_owners(int64_t now_ms) {
  size_t n = 0;
  auto err = store_->for_each(family::tokens, [&](std::string_view k, std::string_view bytes) {
    v1::ApiTokenRecord rec;
    if (k.substr(0, 4) == "api/"
        && rec.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))
        && rec.role() == to_string(role::owner) && works_at(rec, now_ms))
      ++n;
    return true;
  });
  if (err)
    return err;
  return n;
}

caf::expected<v1::ApiTokenRecord> token_registry::revoke_api(const std::string& id,
                                                             int64_t now_ms) {
  std::string key;
  v1::ApiTokenRecord found;
  auto err = store_->for_each(family::tokens, [&](std::string_view k,
                                                  std::string_view bytes) {
    if (k.substr(0, 4) != "api/")
      return true;
    v1::ApiTokenRecord rec;
    if (rec.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))
        && !id.empty() && rec.id() == id) {
      key = std::string{k};
      found = std::move(rec);
      return false;
    }
    return true;
  });
  if (err)
    return err;
  if (key.empty())
    return caf::make_error(ec::invalid_request, "no API token has id '" + id + "'");
  if (found.role() == to_string(role::owner) && works_at(found, now_ms)) {
    auto owners = count_working_owners(now_ms);
    if (!owners)
      return owners.error();
    if (*owners <= 1)
      return caf::make_error(ec::failed_precondition,
                             "refused: " + id + " is the cluster's last owner token; create "
                             "another owner token first (astra api-tokens create --role owner)");
  }
  found.set_revoked(true);
  if (auto e = store_->put(family::tokens, key, found, true))
    return e;
  return found;
}

namespace {

/// Every record under `prefix` in family `tokens` ("join/", "api/"), oldest
/// first, without its hash; `key_of` (if given) receives the store keys.
template <class Record>
caf::expected<std::vector<Record>> list_records(Store& store, std::string_view prefix,
                                                std::vector<std::string>* key_of = nullptr) {
  std::vector<std::pair<Record, std::string>> all;
  auto err = store.for_each(family::tokens, [&](std::string_view k, std::string_view bytes) {
    if (k.substr(0, prefix.size()) != prefix)
      return true;
    Record rec;
    if (rec.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
      all.emplace_back(std::move(rec), std::string{k});
    return true;
  });
  if (err)
    return err;
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.first.created_unix_ms() < b.first.created_unix_ms();
  });
  std::vector<Record> out;
  for (auto& [rec, key] : all) {
    if (key_of)
      key_of->push_back(key);
    out.push_back(std::move(rec));
  }
  return out;
}

} // namespace

caf::expected<std::vector<v1::JoinTokenRecord>> token_registry::list_join() {
  auto all = list_records<v1::JoinTokenRecord>(*store_, "join/");
  if (all)
    for (auto& rec : *all)
      rec.clear_hash();
  return all;
}

caf::expected<v1::JoinTokenRecord> token_registry::revoke_join(const std::string& id) {
  std::vector<std::string> keys;
  auto all = list_records<v1::JoinTokenRecord>(*store_, "join/", &keys);
  if (!all)
    return all.error();
  for (size_t i = 0; i < all->size(); ++i) {
    auto& rec = (*all)[i];
    if (id.empty() || rec.id() != id)
      continue;
    if (!rec.used_by().empty())
      return caf::make_error(ec::invalid_request,
                             "join token " + id + " was used by machine " + rec.used_by()
                               + "; a used token admits nobody else (remove the machine "
                                 "with `astra machine remove " + rec.used_by() + "`)");
    rec.set_revoked(true);
    if (auto err = store_->put(family::tokens, keys[i], rec, true))
      return err;
    rec.clear_hash();
    return std::move(rec);
  }
  return caf::make_error(ec::invalid_request, "no join token has id '" + id
                                                + "' (see `astra tokens list`)");
}

caf::expected<std::vector<v1::ApiTokenRecord>> token_registry::list_api() {
  auto all = list_records<v1::ApiTokenRecord>(*store_, "api/");
  if (all)
    for (auto& rec : *all)
      rec.clear_hash();
  return all;
}

caf::expected<bool> token_registry::has_api_tokens() {
  bool any = false;
  auto err = store_->for_each(family::tokens, [&](std::string_view k,
                                                  std::string_view) {
    if (k.substr(0, 4) == "api/") {
      any = true;
      return false;
    }
    return true;
  });
  if (err)
    return err;
  return any;
}

std::string install_command(const v1::JoinToken& token, const std::string& address) {
  return "umask 077 && echo '" + token.token()
         + "' > ./astraeus-token && sudo astraeus-agent --controller " + address
         + " --controller-key " + token.controller_key()
         + " --token-file ./astraeus-token";
}

void install_site::set(install_site_info info) {
  std::lock_guard<std::mutex> guard{mutex_};
  info_ = std::move(info);
}

install_site_info install_site::get() const {
  std::lock_guard<std::mutex> guard{mutex_};
  return info_;
}

std::string console_base(const std::string& configured, const install_site* site) {
  auto base = configured;
  if (base.empty() && site != nullptr)
    base = site->get().api_url;
  while (!base.empty() && base.back() == '/')
    base.pop_back();
  return base;
}

std::string install_org_id(const std::string& controller_key_hex) {
  return controller_key_hex.substr(0, 32);
}

namespace {

/// `text` as one single-quoted shell word.
std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text)
    out += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return out + "'";
}

} // namespace

std::string install_script_command(const v1::JoinToken& token, const install_site_info& site) {
  std::string curl = "curl -fsSL ";
  if (!site.curl_pin.empty())
    curl += "--insecure --pinnedpubkey " + site.curl_pin + " ";
  return "echo " + shell_quote(token.token()) + " > ./astraeus-token && " + curl + site.api_url
         + "/api/v1/install.sh | sudo sh -s -- --apiserver " + site.gate_address
         + " --token-file ./astraeus-token --releases " + site.api_url + "/releases --org "
         + shell_quote(site.organization) + " --org-id "
         + install_org_id(token.controller_key()) + " && rm -f ./astraeus-token";
}

std::string gate_named_in(const std::string& command) {
  for (const char* flag : {" --apiserver ", " --controller "}) {
    auto at = command.find(flag);
    if (at == std::string::npos)
      continue;
    auto start = at + std::char_traits<char>::length(flag);
    return command.substr(start, command.find(' ', start) - start);
  }
  return {};
}

std::string install_command_naming(const std::string& command, const std::string& gates) {
  for (const char* flag : {" --apiserver ", " --controller "}) {
    auto at = command.find(flag);
    if (at == std::string::npos)
      continue;
    auto start = at + std::char_traits<char>::length(flag);
    auto end = command.find(' ', start);
    if (end == std::string::npos)
      end = command.size();
    return command.substr(0, start) + gates + command.substr(end);
  }
  return command;
}

} // namespace astraeus
