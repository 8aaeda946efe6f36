#include "store/etcd_store.hpp"

#include <algorithm>
#include <future>
#include <mutex>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "messages/error.hpp"

namespace astraeus {

namespace {

using nlohmann::json;

/// etcd's int64s travel as strings; a missing one is 0.
int64_t as_int(const json& obj, const char* name) {
  if (!obj.is_object() || !obj.contains(name))
    return 0;
  const auto& v = obj[name];
  if (v.is_string())
    return std::stoll(v.get<std::string>());
  if (v.is_number_integer())
    return v.get<int64_t>();
  return 0;
}

/// A bytes field (base64); a missing one is empty (proto3 JSON omits it).
std::string as_bytes(const json& obj, const char* name) {
  if (!obj.is_object() || !obj.contains(name) || !obj[name].is_string())
    return {};
  return base64_decode(obj[name].get<std::string>()).value_or(std::string{});
}

bool is_quota_error(const caf::error& err) {
  // The write that fills the quota gets "mvcc: database space exceeded";
  // later ones, while the NOSPACE alarm is raised, "etcdserver: no space".
  auto text = render_error(err);
  return text.find("database space exceeded") != std::string::npos
         || text.find("etcdserver: no space") != std::string::npos;
}

} // namespace

caf::error etcd_options::validate() const {
  if (endpoints.empty())
    return caf::make_error(ec::invalid_config, "store.etcd.endpoints: no endpoint given");
  for (const auto& e : endpoints)
    if (e.empty() || e.find(' ') != std::string::npos)
      return caf::make_error(ec::invalid_config,
                             "store.etcd.endpoints: '" + e + "' is not HOST:PORT or a URL");
  if (prefix.size() < 2 || prefix.front() != '/' || prefix.back() != '/')
    return caf::make_error(ec::invalid_config, "store.etcd.prefix: '" + prefix
                                                 + "' must start and end with '/'");
  if (timeout < std::chrono::milliseconds{10})
    return caf::make_error(ec::invalid_config, "store.etcd timeout: under 10 ms");
  if (connections == 0 || connections > 64)
    return caf::make_error(ec::invalid_config,
                           "store.etcd connections: must be from 1 to 64");
  return caf::none;
}

struct etcd_store::impl {
  etcd_options opts;
  std::unique_ptr<etcd_gateway> gw;
  /// "etcd ENDPOINTS PREFIX", for messages.
  std::string name;
  store_faults faults;
  /// Guards the fence.
  mutable std::mutex fence_mu;
  /// The fence key and value (`fence_on`); empty key: no fence.
  std::string fence_key;
  std::string fence_value;

  std::string family_prefix(family f) const {
    return opts.prefix + to_string(f) + "/";
  }

  std::string full_key(family f, std::string_view key) const {
    auto out = family_prefix(f);
    out.append(key.data(), key.size());
    return out;
  }

  std::string where(family f, std::string_view key) const {
    return key_text(f, key);
  }

  caf::error refused_history(const std::string& what) const {
    return caf::make_error(ec::store_failure,
                           "store " + name + ": cannot " + what
                             + ": gpu_history (telemetry) is kept out of etcd; the "
                               "controller keeps it in its local RocksDB");
  }

  /// "store full: ..." for etcd's quota, else "store NAME: cannot WHAT: ...".
  caf::error failure(const std::string& what, const caf::error& err) const {
    auto text = render_error(err);
    if (is_quota_error(err))
      return caf::make_error(ec::store_failure, "store full: " + name
                                                  + " space quota exceeded (" + text
                                                  + "): cannot " + what);
    return caf::make_error(ec::store_failure, "store " + name + ": cannot " + what + ": " + text);
  }

  /// An armed fault's error, if one is armed.
  caf::error injected(const std::string& what) {
    auto k = faults.take();
    if (!k)
      return caf::none;
    if (*k == store_faults::kind::disk_full)
      return caf::make_error(ec::store_failure,
                             "store full: " + name + " space quota exceeded (injected by "
                               "the store's fault hook): cannot " + what);
    return caf::make_error(ec::store_failure, "store " + name + ": cannot " + what
                                                + ": injected by the store's fault hook");
  }

  /// The fence compare, if fenced.
  json fence_compares() const {
    json out = json::array();
    std::lock_guard<std::mutex> lock{fence_mu};
    if (!fence_key.empty())
      out.push_back({{"key", base64_encode(fence_key)},
                     {"target", "VALUE"},
                     {"result", "EQUAL"},
                     {"value", base64_encode(fence_value)}});
    return out;
  }

  bool fenced() const {
    std::lock_guard<std::mutex> lock{fence_mu};
    return !fence_key.empty();
  }

  caf::error deposed(const std::string& what) const {
    std::lock_guard<std::mutex> lock{fence_mu};
    return caf::make_error(ec::store_failure,
                           "store " + name + ": cannot " + what + ": not the leader: "
                             + fence_key
                             + " no longer holds this controller's value (deposed)");
  }

  /// Runs one txn of `ops` behind the fence (and `compares`). True when
  /// applied; false when `compares` failed; a fence failure is an error.
  caf::expected<bool> txn(json compares, json ops, const std::string& what) {
    auto fence = fence_compares();
    bool has_fence = !fence.empty();
    for (auto& c : fence)
      compares.push_back(std::move(c));
    json body = {{"compare", compares}, {"success", ops}, {"failure", json::array()}};
    auto r = gw->call("/v3/kv/txn", body);
    if (!r)
      return failure(what, r.error());
    if (r->value("succeeded", false))
      return true;
    if (has_fence) {
      // Which compare failed: ours is deposed if the fence no longer holds.
      auto fk = fence_compares();
      if (!fk.empty()) {
        auto got = gw->call("/v3/kv/range", {{"key", fk[0]["key"]}});
        if (!got)
          return failure(what, got.error());
        auto kvs = (*got).value("kvs", json::array());
        if (kvs.empty() || as_bytes(kvs[0], "value") != as_bytes(fk[0], "value"))
          return deposed(what);
      }
    }
    return false;
  }

  static json put_op(const std::string& key, std::string_view value, lease_id lease = 0) {
    json p = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
    if (lease != 0)
      p["lease"] = std::to_string(lease);
    return {{"request_put", p}};
  }

  static json delete_op(const std::string& key) {
    return {{"request_delete_range", {{"key", base64_encode(key)}}}};
  }
};

etcd_store::etcd_store(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

etcd_store::~etcd_store() = default;

caf::expected<std::unique_ptr<etcd_store>> etcd_store::open(etcd_options opts) {
  if (auto err = opts.validate())
    return err;
  auto st = std::make_unique<impl>();
  st->gw = std::make_unique<etcd_gateway>(opts.endpoints, opts.timeout, opts.connections);
  st->name = "etcd " + st->gw->endpoints() + " " + opts.prefix;
  st->opts = std::move(opts);
  auto r = st->gw->call("/v3/kv/range", {{"key", base64_encode(st->opts.prefix)},
                                         {"range_end",
                                          base64_encode(prefix_range_end(st->opts.prefix))},
                                         {"count_only", true}});
  if (!r)
    return caf::make_error(ec::unreachable,
                           "store " + st->name + ": cannot open: " + render_error(r.error()));
  return std::unique_ptr<etcd_store>{new etcd_store(std::move(st))};
}

caf::error etcd_store::put_raw(family f, std::string_view key, std::string_view bytes,
                               bool) {
  auto what = "write " + impl_->where(f, key);
  if (f == family::gpu_history)
    return impl_->refused_history(what);
  if (auto err = impl_->injected(what))
    return err;
  auto r = impl_->txn(json::array(),
                      json::array({impl::put_op(impl_->full_key(f, key), bytes)}), what);
  if (!r)
    return r.error();
  return caf::none;
}

caf::expected<std::optional<std::string>> etcd_store::get_raw(family f,
                                                              std::string_view key) {
  if (f == family::gpu_history)
    return std::optional<std::string>{};
  auto r = impl_->gw->call("/v3/kv/range",
                           {{"key", base64_encode(impl_->full_key(f, key))}});
  if (!r)
    return impl_->failure("read " + impl_->where(f, key), r.error());
  auto kvs = r->value("kvs", json::array());
  if (kvs.empty())
    return std::optional<std::string>{};
  return std::optional<std::string>{as_bytes(kvs[0], "value")};
}

caf::error etcd_store::erase(family f, std::string_view key, bool) {
  auto what = "erase " + impl_->where(f, key);
  if (f == family::gpu_history)
    return impl_->refused_history(what);
  if (auto err = impl_->injected(what))
    return err;
  auto r = impl_->txn(json::array(), json::array({impl::delete_op(impl_->full_key(f, key))}),
                      what);
  if (!r)
    return r.error();
  return caf::none;
}

store_limits etcd_store::limits() const {
  auto connections = impl_->gw->connections();
  return {max_txn_ops, max_request_bytes - 64 * 1024,
          connections > 1 ? connections - 1 : size_t{1}};
}

caf::error etcd_store::write(const std::vector<change>& changes, bool) {
  if (changes.empty())
    return caf::none;
  auto what = "write a batch of " + std::to_string(changes.size()) + " change(s)";
  auto lim = limits();
  if (changes.size() > lim.max_batch_changes)
    return caf::make_error(ec::store_failure,
                           "store " + impl_->name + ": cannot " + what + ": exceeds etcd's "
                             + std::to_string(max_txn_ops)
                             + " operations per transaction (nothing written)");
  size_t bytes = 0;
  json ops = json::array();
  for (const auto& c : changes) {
    if (c.f == family::gpu_history)
      return impl_->refused_history(what);
    auto key = impl_->full_key(c.f, c.key);
    bytes += key.size() + (c.value ? c.value->size() : 0);
    ops.push_back(c.value ? impl::put_op(key, *c.value) : impl::delete_op(key));
  }
  if (bytes > lim.max_batch_bytes)
    return caf::make_error(ec::store_failure,
                           "store " + impl_->name + ": cannot " + what + ": its "
                             + std::to_string(bytes) + " bytes exceed etcd's "
                             + std::to_string(max_request_bytes)
                             + " bytes per request (nothing written)");
  if (auto err = impl_->injected(what))
    return err;
  auto r = impl_->txn(json::array(), std::move(ops), what);
  if (!r)
    return r.error();
  return caf::none;
}

caf::error etcd_store::write_chunked(const std::vector<change>& changes, bool sync) {
  // The same split as Store::write_chunked.
  auto lim = limits();
  std::vector<std::vector<change>> chunks;
  size_t bytes = 0;
  for (const auto& c : changes) {
    auto size = c.key.size() + (c.value ? c.value->size() : 0);
    if (chunks.empty() || chunks.back().size() + 1 > lim.max_batch_changes
        || bytes + size > lim.max_batch_bytes) {
      chunks.emplace_back();
      bytes = 0;
    }
    chunks.back().push_back(c);
    bytes += size;
  }
  auto width = impl_->gw->connections();
  if (chunks.size() < 2 || width < 2)
    return Store::write_chunked(changes, sync);
  // Side by side only when their order cannot matter: no key twice.
  std::unordered_set<std::string> keys;
  keys.reserve(changes.size());
  for (const auto& c : changes)
    if (!keys.insert(impl_->full_key(c.f, c.key)).second)
      return Store::write_chunked(changes, sync);
  std::vector<caf::error> errs(chunks.size());
  for (size_t start = 0; start < chunks.size(); start += width) {
    auto end = std::min(start + width, chunks.size());
    std::vector<std::future<void>> others;
    for (size_t k = start + 1; k < end; ++k)
      others.push_back(std::async(std::launch::async,
                                  [this, &chunks, &errs, k, sync] {
                                    errs[k] = write(chunks[k], sync);
                                  }));
    errs[start] = write(chunks[start], sync);
    for (auto& f : others)
      f.get();
  }
  for (auto& err : errs)
    if (err)
      return std::move(err);
  return caf::none;
}

caf::error
etcd_store::for_each(family f, const std::function<bool(std::string_view key,
                                                        std::string_view bytes)>& fn) {
  if (f == family::gpu_history)
    return caf::none;
  auto prefix = impl_->family_prefix(f);
  auto end = base64_encode(prefix_range_end(prefix));
  std::string from = prefix;
  int64_t at = 0;  // the snapshot's revision, pinned by the first page
  for (;;) {
    json body = {{"key", base64_encode(from)}, {"range_end", end}, {"limit", "500"}};
    if (at != 0)
      body["revision"] = std::to_string(at);
    auto r = impl_->gw->call("/v3/kv/range", body);
    if (!r)
      return impl_->failure(std::string{"iterate "} + to_string(f), r.error());
    if (at == 0)
      at = as_int((*r)["header"], "revision");
    auto kvs = r->value("kvs", json::array());
    for (const auto& kv : kvs) {
      auto key = as_bytes(kv, "key");
      auto value = as_bytes(kv, "value");
      if (!fn(std::string_view{key}.substr(prefix.size()), value))
        return caf::none;
      from = key + std::string(1, '\0');
    }
    if (!r->value("more", false) || kvs.empty())
      return caf::none;
  }
}

caf::expected<bool>
etcd_store::compare_and_swap(family f, std::string_view key,
                             const std::optional<std::string>& expected,
                             const std::optional<std::string>& desired, lease_id lease) {
  auto what = "compare-and-swap " + impl_->where(f, key);
  if (f == family::gpu_history)
    return impl_->refused_history(what);
  if (auto err = impl_->injected(what))
    return err;
  auto full = impl_->full_key(f, key);
  json cmp = expected ? json{{"key", base64_encode(full)},
                             {"target", "VALUE"},
                             {"result", "EQUAL"},
                             {"value", base64_encode(*expected)}}
                      : json{{"key", base64_encode(full)},
                             {"target", "CREATE"},
                             {"result", "EQUAL"},
                             {"create_revision", "0"}};
  auto op = desired ? impl::put_op(full, *desired, lease) : impl::delete_op(full);
  auto r = impl_->txn(json::array({cmp}), json::array({op}), what);
  if (!r && render_error(r.error()).find("lease not found") != std::string::npos)
    return caf::make_error(ec::store_failure,
                           "store " + impl_->name + ": cannot " + what + ": lease "
                             + std::to_string(lease) + " is not granted or has expired");
  return r;
}

caf::expected<lease_id> etcd_store::grant_lease(std::chrono::seconds ttl) {
  if (ttl.count() < 1)
    return caf::make_error(ec::store_failure, "store " + impl_->name
                                                + ": a lease needs a TTL of at least 1 s, not "
                                                + std::to_string(ttl.count()));
  auto r = impl_->gw->call("/v3/lease/grant", {{"TTL", std::to_string(ttl.count())}});
  if (!r)
    return impl_->failure("grant a lease", r.error());
  auto id = as_int(*r, "ID");
  if (id == 0)
    return caf::make_error(ec::store_failure, "store " + impl_->name
                                                + ": cannot grant a lease: "
                                                + r->value("error", std::string{"no ID"}));
  return id;
}

caf::expected<int64_t> etcd_store::keep_alive(lease_id lease) {
  int64_t ttl = -1;
  auto err = impl_->gw->stream("/v3/lease/keepalive", {{"ID", std::to_string(lease)}},
                               [&](const json& result) {
                                 ttl = as_int(result, "TTL");
                                 return false;
                               },
                               impl_->opts.timeout);
  if (err)
    return impl_->failure("renew lease " + std::to_string(lease), err);
  if (ttl <= 0)
    return caf::make_error(ec::store_failure, "store " + impl_->name + ": lease "
                                                + std::to_string(lease)
                                                + " is not granted or has expired");
  return ttl;
}

caf::error etcd_store::revoke_lease(lease_id lease) {
  auto r = impl_->gw->call("/v3/lease/revoke", {{"ID", std::to_string(lease)}});
  if (!r && render_error(r.error()).find("lease not found") == std::string::npos)
    return impl_->failure("revoke lease " + std::to_string(lease), r.error());
  return caf::none;
}

caf::expected<int64_t> etcd_store::revision() {
  auto r = impl_->gw->call("/v3/kv/range", {{"key", base64_encode(impl_->opts.prefix)},
                                            {"count_only", true}});
  if (!r)
    return impl_->failure("read the revision", r.error());
  return as_int((*r)["header"], "revision");
}

caf::error etcd_store::watch(family f, int64_t from,
                             const std::function<bool(const store_event&)>& fn,
                             const std::function<bool()>& stop,
                             std::chrono::milliseconds poll) {
  if (f == family::gpu_history)
    return caf::none;
  auto prefix = impl_->family_prefix(f);
  int64_t next = std::max<int64_t>(from, 1);
  bool done = false;
  caf::error compacted;
  while (!done) {
    json body = {{"create_request",
                  {{"key", base64_encode(prefix)},
                   {"range_end", base64_encode(prefix_range_end(prefix))},
                   {"start_revision", std::to_string(next)}}}};
    auto err = impl_->gw->stream(
      "/v3/watch", body,
      [&](const json& result) {
        if (auto c = as_int(result, "compact_revision"); c != 0) {
          compacted = caf::make_error(ec::store_failure,
                                      "store " + impl_->name + ": revision "
                                        + std::to_string(next)
                                        + " is compacted (oldest kept " + std::to_string(c)
                                        + ")");
          return false;
        }
        for (const auto& e : result.value("events", json::array())) {
          const auto& kv = e["kv"];
          store_event ev;
          ev.f = f;
          ev.key = as_bytes(kv, "key").substr(prefix.size());
          if (e.value("type", std::string{"PUT"}) != "DELETE")
            ev.value = as_bytes(kv, "value");
          ev.revision = as_int(kv, "mod_revision");
          next = ev.revision + 1;
          if (!fn(ev)) {
            done = true;
            return false;
          }
        }
        return !(stop && stop());
      },
      poll);
    if (compacted)
      return compacted;
    if (err)
      return impl_->failure(std::string{"watch "} + to_string(f), err);
    if (stop && stop())
      return caf::none;
  }
  return caf::none;
}

const std::string& etcd_store::path() const {
  return impl_->name;
}

std::string etcd_store::write_problem() {
  auto r = impl_->gw->call("/v3/maintenance/alarm", {{"action", "GET"}});
  if (!r)
    return {};  // unreachable is not "full"; writes will say why they fail
  for (const auto& a : r->value("alarms", json::array()))
    if (a.value("alarm", std::string{}) == "NOSPACE")
      return "store full: " + impl_->name
             + " space quota exceeded (etcd's NOSPACE alarm is raised)";
  return {};
}

store_faults& etcd_store::faults() {
  return impl_->faults;
}

std::string etcd_store::control_key(std::string_view name) const {
  return impl_->opts.prefix + "control/" + std::string{name};
}

caf::expected<std::optional<std::pair<std::string, int64_t>>>
etcd_store::get_key(const std::string& key) {
  using result = std::optional<std::pair<std::string, int64_t>>;
  auto r = impl_->gw->call("/v3/kv/range", {{"key", base64_encode(key)}});
  if (!r)
    return impl_->failure("read " + key, r.error());
  auto kvs = r->value("kvs", json::array());
  if (kvs.empty())
    return result{};
  return result{std::pair{as_bytes(kvs[0], "value"), as_int(kvs[0], "create_revision")}};
}

caf::expected<bool> etcd_store::create_key(const std::string& key, const std::string& value,
                                           lease_id lease) {
  json body = {{"compare", json::array({{{"key", base64_encode(key)},
                                         {"target", "CREATE"},
                                         {"result", "EQUAL"},
                                         {"create_revision", "0"}}})},
               {"success", json::array({impl::put_op(key, value, lease)})}};
  auto r = impl_->gw->call("/v3/kv/txn", body);
  if (!r)
    return impl_->failure("create " + key, r.error());
  return r->value("succeeded", false);
}

void etcd_store::fence_on(std::string key, std::string value) {
  std::lock_guard<std::mutex> lock{impl_->fence_mu};
  impl_->fence_key = std::move(key);
  impl_->fence_value = std::move(value);
}

caf::error etcd_store::compact(int64_t revision) {
  auto r = impl_->gw->call("/v3/kv/compaction",
                           {{"revision", std::to_string(revision)}, {"physical", true}});
  if (!r)
    return impl_->failure("compact to revision " + std::to_string(revision), r.error());
  return caf::none;
}

caf::error etcd_store::defragment() {
  auto r = impl_->gw->call("/v3/maintenance/defragment", json::object());
  if (!r)
    return impl_->failure("defragment", r.error());
  return caf::none;
}

} // namespace astraeus
