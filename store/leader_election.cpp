#include "store/leader_election.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "messages/error.hpp"

namespace astraeus {

std::string leader_info::to_value() const {
  return nlohmann::json{{"id", id}, {"api", api_url}, {"gate", gate},
                        {"lease", std::to_string(lease)}}
    .dump();
}

caf::expected<leader_info> leader_info::from_value(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string())
    return caf::make_error(ec::corrupt_record,
                           "leader key holds no leader record: '" + text.substr(0, 200) + "'");
  leader_info out;
  out.id = j["id"].get<std::string>();
  out.api_url = j.value("api", std::string{});
  out.gate = j.value("gate", std::string{});
  try {
    out.lease = std::stoll(j.value("lease", std::string{"0"}));
  } catch (...) {
    out.lease = 0;
  }
  return out;
}

caf::error election_config::validate() const {
  if (!store)
    return caf::make_error(ec::invalid_config, "election: no etcd store");
  if (id.empty())
    return caf::make_error(ec::invalid_config, "election: empty controller id");
  if (ttl < std::chrono::seconds{1})
    return caf::make_error(ec::invalid_config, "store.etcd.lease_ttl: under 1 s");
  if (poll < std::chrono::milliseconds{10})
    return caf::make_error(ec::invalid_config, "election: poll under 10 ms");
  return caf::none;
}

leader_election::leader_election(election_config config) : config_(std::move(config)) {
  // nop
}

leader_election::~leader_election() {
  stopping_ = true;
  if (renewer_.joinable())
    renewer_.join();
}

caf::expected<bool>
leader_election::campaign(const std::function<bool()>& stop,
                          const std::function<void(const std::optional<leader_info>&)>& on_leader) {
  if (auto err = config_.validate())
    return err;
  auto& st = *config_.store;
  auto key = st.control_key("leader");
  std::optional<std::string> last_id;
  bool first = true;
  std::string last_problem;
  auto last_read = std::chrono::steady_clock::now();
  while (!(stop && stop())) {
    auto now = st.get_key(key);
    if (!now) {
      auto text = render_error(now.error());
      if (text != last_problem)
        spdlog::warn("election: cannot read {}: {} (retrying)", key, text);
      last_problem = text;
      // Unanswered for longer than a lease: the leader seen last cannot
      // have renewed its lease either (etcd without a quorum, or cut off
      // from us): nobody is known to lead until etcd answers again.
      auto silent = std::chrono::steady_clock::now() - last_read;
      if (last_id && silent > config_.ttl) {
        spdlog::warn("election: etcd has not answered for {} ms, longer than the leader "
                     "lease: no leader is known until it does",
                     std::chrono::duration_cast<std::chrono::milliseconds>(silent).count());
        last_id.reset();
        {
          std::lock_guard<std::mutex> lock{mu_};
          seen_.reset();
        }
        if (on_leader)
          on_leader(std::nullopt);
      }
      std::this_thread::sleep_for(config_.poll);
      continue;
    }
    last_read = std::chrono::steady_clock::now();
    last_problem.clear();
    std::optional<leader_info> seen;
    if (*now) {
      auto parsed = leader_info::from_value((*now)->first);
      if (parsed)
        seen = *parsed;
      else
        seen = leader_info{"(unreadable)", "", "", 0};
    }
    {
      std::lock_guard<std::mutex> lock{mu_};
      seen_ = seen;
    }
    std::optional<std::string> id = seen ? std::optional<std::string>{seen->id} : std::nullopt;
    if (first || id != last_id) {
      if (on_leader)
        on_leader(seen);
      if (seen)
        spdlog::info("election: {} leads (gate {}, API {})", seen->id, seen->gate,
                     seen->api_url);
      first = false;
      last_id = id;
    }
    if (!seen) {
      // No leader: stand with a fresh lease.
      auto lease = st.grant_lease(config_.ttl);
      if (!lease) {
        spdlog::warn("election: cannot grant a lease: {}", render_error(lease.error()));
        std::this_thread::sleep_for(config_.poll);
        continue;
      }
      leader_info me{config_.id, config_.api_url, config_.gate, *lease};
      auto value = me.to_value();
      auto won = st.create_key(key, value, *lease);
      if (won && *won) {
        st.fence_on(key, value);
        std::lock_guard<std::mutex> lock{mu_};
        self_ = me;
        seen_ = me;
        spdlog::info("election: {} leads now (lease {}, TTL {} s)", me.id, *lease,
                     config_.ttl.count());
        return true;
      }
      (void) st.revoke_lease(*lease);
      continue;  // someone else was faster: look again at once
    }
    std::this_thread::sleep_for(config_.poll);
  }
  return false;
}

void leader_election::keep_leading(std::function<void(const std::string& why)> on_lost) {
  std::optional<leader_info> me;
  {
    std::lock_guard<std::mutex> lock{mu_};
    me = self_;
  }
  if (!me) {
    on_lost("not leading");
    return;
  }
  auto store = config_.store;
  auto ttl = config_.ttl;
  renewer_ = std::thread{[this, store, ttl, lease = me->lease, on_lost = std::move(on_lost)] {
    auto period = std::chrono::duration_cast<std::chrono::milliseconds>(ttl) / 4;
    auto last_ok = std::chrono::steady_clock::now();
    while (!stopping_) {
      std::this_thread::sleep_for(period);
      if (stopping_)
        return;
      auto left = store->keep_alive(lease);
      auto now = std::chrono::steady_clock::now();
      std::string why;
      if (left) {
        last_ok = now;
        continue;
      }
      auto text = render_error(left.error());
      if (text.find("not granted or has expired") != std::string::npos)
        why = "the leader lease " + std::to_string(lease) + " expired";
      else if (now - last_ok >= ttl)
        why = "cannot renew the leader lease for " + std::to_string(ttl.count())
              + " s: " + text;
      else
        continue;
      {
        std::lock_guard<std::mutex> lock{mu_};
        self_.reset();
      }
      on_lost(why);
      return;
    }
  }};
}

caf::error leader_election::resign() {
  stopping_ = true;
  if (renewer_.joinable())
    renewer_.join();
  std::optional<leader_info> me;
  {
    std::lock_guard<std::mutex> lock{mu_};
    me = self_;
    self_.reset();
  }
  if (!me)
    return caf::none;
  return config_.store->revoke_lease(me->lease);
}

std::optional<leader_info> leader_election::self() const {
  std::lock_guard<std::mutex> lock{mu_};
  return self_;
}

std::optional<leader_info> leader_election::last_seen() const {
  std::lock_guard<std::mutex> lock{mu_};
  return seen_;
}

} // namespace astraeus
