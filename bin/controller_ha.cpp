#include "bin/controller_ha.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <sys/socket.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "actors/controller/api_bridge.hpp"
#include "actors/controller/controller.hpp"
#include "actors/controller/standby_gate.hpp"
#include "bin/process.hpp"
#include "messages/error.hpp"
#include "runtime/http/api_server.hpp"
#include "runtime/http/tls_certificate.hpp"
#include "runtime/gate/gate_listener.hpp"
#include "runtime/gate/secure_channel.hpp"
#include "store/etcd_store.hpp"
#include "store/leader_election.hpp"

namespace astraeus::bin {

namespace {

using namespace std::chrono_literals;

/// "a,b , c" as {"a","b","c"}.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text + ",") {
    if (c == ',') {
      auto b = cur.find_first_not_of(" \t");
      auto e = cur.find_last_not_of(" \t");
      if (b != std::string::npos)
        out.push_back(cur.substr(b, e - b + 1));
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

/// What a standby answers on api.listen while another controller leads: a
/// 307 to the same path on the leader's API, saying who leads, or a 503
/// while no leader is known. Runs its own threads.
class follower_api {
public:
  follower_api(const ControllerConfig& cfg, std::string host, uint16_t port)
    : host_(std::move(host)), port_(port) {
    if (!cfg.api_plain_http) {
      auto cert = load_or_create_certificate(cfg.keys_dir, cfg.api_certificate,
                                             cfg.api_private_key, local_hostname());
      if (cert)
        server_ = std::make_unique<httplib::SSLServer>(cert->certificate_path.c_str(),
                                                       cert->private_key_path.c_str());
      else
        spdlog::error("controller: standby API: {}", render_error(cert.error()));
    } else {
      server_ = std::make_unique<httplib::Server>();
    }
    if (!server_)
      return;
    // SO_REUSEADDR only, as the API server (runtime/http/api_server.cpp):
    // cpp-httplib's default (SO_REUSEPORT alone) leaves connections in
    // TIME_WAIT that keep the API server from binding this port once this
    // controller leads.
    server_->set_socket_options([](int sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    auto answer = [this](const httplib::Request& req, httplib::Response& res) {
      std::optional<leader_info> leader;
      {
        std::lock_guard<std::mutex> lock{mu_};
        leader = leader_;
      }
      nlohmann::json body;
      if (leader && !leader->api_url.empty()) {
        auto target = req.target.empty() ? req.path : req.target;
        res.status = 307;
        res.set_header("Location", leader->api_url + target);
        res.set_header("X-Astraeus-Leader", leader->id);
        // The API's error shape ({"code","message"}, README "HTTP API"),
        // with who leads beside it.
        body = {{"code", "NOT_LEADER"},
                {"message", "this controller is a standby; " + leader->id
                              + " leads: use " + leader->api_url},
                {"leader", {{"id", leader->id}, {"api", leader->api_url},
                            {"gate", leader->gate}}}};
      } else {
        res.status = 503;
        res.set_header("Retry-After", "1");
        body = {{"code", "NO_LEADER"},
                {"message", "no controller leads yet (an election is under way)"}};
      }
      res.set_content(body.dump() + "\n", "application/json");
    };
    // A request without a body (the seeds' `curl -X POST .../clear-fault`,
    // no Content-Length) is answered before httplib would try to read one,
    // which it refuses with an empty 400, as the API server does (a new-user
    // trial got that 400 from a standby where the leader answers 200).
    server_->set_pre_routing_handler([answer](const httplib::Request& req,
                                              httplib::Response& res) {
      if (req.has_header("Content-Length") || req.has_header("Transfer-Encoding"))
        return httplib::Server::HandlerResponse::Unhandled;
      answer(req, res);
      return httplib::Server::HandlerResponse::Handled;
    });
    for (auto* m : {"GET", "POST", "PUT", "PATCH", "DELETE"}) {
      auto pattern = ".*";
      if (std::string{m} == "GET")
        server_->Get(pattern, answer);
      else if (std::string{m} == "POST")
        server_->Post(pattern, answer);
      else if (std::string{m} == "PUT")
        server_->Put(pattern, answer);
      else if (std::string{m} == "PATCH")
        server_->Patch(pattern, answer);
      else
        server_->Delete(pattern, answer);
    }
    if (!server_->bind_to_port(host_.c_str(), port_)) {
      spdlog::error("controller: standby API cannot listen on {}:{}", host_, port_);
      server_.reset();
      return;
    }
    thread_ = std::thread{[this] { server_->listen_after_bind(); }};
  }

  ~follower_api() {
    stop();
  }

  /// Records who leads (nullopt: nobody).
  void set_leader(const std::optional<leader_info>& l) {
    std::lock_guard<std::mutex> lock{mu_};
    leader_ = l;
  }

  /// Stops serving and frees the port.
  void stop() {
    if (server_)
      server_->stop();
    if (thread_.joinable())
      thread_.join();
    server_.reset();
  }

private:
  std::string host_;
  uint16_t port_;
  std::mutex mu_;
  std::optional<leader_info> leader_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

/// The leader's housekeeping of etcd: every `period`, compacts history
/// older than `keep` revisions (auto-compaction is off in etcd 3.4 by
/// default) and, every 60th time, defragments the member it talks to.
class compactor {
public:
  compactor(std::shared_ptr<etcd_store> store, std::chrono::seconds period, int64_t keep)
    : store_(std::move(store)) {
    thread_ = std::thread{[this, period, keep] {
      int n = 0;
      std::unique_lock<std::mutex> lock{mu_};
      while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
        auto rev = store_->revision();
        if (!rev || *rev <= keep)
          continue;
        if (auto err = store_->compact(*rev - keep))
          spdlog::warn("controller: etcd compaction: {}", render_error(err));
        else
          spdlog::debug("controller: etcd compacted to revision {}", *rev - keep);
        if (++n % 60 == 0)
          if (auto err = store_->defragment())
            spdlog::warn("controller: etcd defragmentation: {}", render_error(err));
      }
    }};
  }

  ~compactor() {
    {
      std::lock_guard<std::mutex> lock{mu_};
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
  }

private:
  std::shared_ptr<etcd_store> store_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

/// The gate key every controller of the group must share (agents and astra
/// pin it): recorded in etcd (control key "gate_key") by the first
/// controller to start, and compared by every later one, so a controller
/// started without the first one's keys folder refuses to stand instead of
/// leading under a key nobody trusts (found by a user trial).
/// Errors: ec::invalid_config naming both keys and what to copy; the
/// store's error when etcd cannot be asked; the keys folder's when the key
/// cannot be read or made.
caf::error check_cluster_gate_key(etcd_store& store, const ControllerConfig& cfg) {
  namespace fs = std::filesystem;
  auto keys_dir = cfg.keys_dir.empty() ? cfg.data_dir + "-keys" : cfg.keys_dir;
  auto identity = load_or_create_keypair((fs::path{keys_dir} / "gate.key").string());
  if (!identity)
    return identity.error();
  auto mine = identity->public_hex();
  auto key = store.control_key("gate_key");
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto recorded = store.get_key(key);
    if (!recorded)
      return recorded.error();
    if (*recorded) {
      const auto& theirs = (*recorded)->first;
      if (theirs == mine)
        return caf::none;
      return caf::make_error(
        ec::invalid_config,
        "this controller's gate key " + mine.substr(0, 16) + "... (in " + keys_dir
          + ") is not the cluster's " + theirs.substr(0, 16)
          + "..., recorded in etcd by its first controller: agents and astra pin that key "
            "and would refuse this one; copy the first controller's keys folder (gate.key, "
            "token.key, owner-token) to "
          + keys_dir + " before starting this one (README, High availability)");
    }
    auto created = store.create_key(key, mine, 0);  // no lease: kept for good
    if (!created)
      return created.error();
    if (*created) {
      spdlog::info("controller: the cluster's gate key {}... recorded in etcd",
                   mine.substr(0, 16));
      return caf::none;
    }
    // Another controller recorded one meanwhile: compare with it.
  }
  return caf::make_error(ec::store_failure, "cannot record the cluster's gate key in etcd");
}

} // namespace

int run_ha_controller(caf::actor_system& sys, const ControllerConfig& cfg,
                      const sigset_t& signals) {
  etcd_options eo;
  eo.endpoints = split_list(cfg.etcd_endpoints);
  eo.prefix = cfg.etcd_prefix.empty() ? "/astraeus/" + cfg.cluster_name + "/" : cfg.etcd_prefix;
  auto opened = etcd_store::open(eo);
  if (!opened) {
    spdlog::error("controller: cannot start: {}", render_error(opened.error()));
    return 1;
  }
  std::shared_ptr<etcd_store> store{std::move(*opened)};
  if (auto err = check_cluster_gate_key(*store, cfg)) {
    spdlog::error("controller: cannot stand for leadership: {}", render_error(err));
    return 1;
  }
  // Who this controller is, for the leader key: its gate and API as others
  // reach them.
  auto host = cfg.listen_address == "0.0.0.0" || cfg.listen_address == "::"
                ? local_hostname()
                : cfg.listen_address;
  election_config ec_cfg;
  ec_cfg.store = store;
  // An IPv6 literal goes in brackets, as every gate address parser wants it.
  auto bracketed = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  ec_cfg.gate = cfg.advertise_address.empty()
                  ? bracketed + ":" + std::to_string(cfg.listen_port)
                  : cfg.advertise_address;
  ec_cfg.id = ec_cfg.gate;
  ec_cfg.ttl = std::chrono::duration_cast<std::chrono::seconds>(cfg.etcd_lease_ttl);
  std::optional<std::pair<std::string, uint16_t>> api_at;
  if (cfg.api_listen != "off") {
    auto hp = parse_host_port(cfg.api_listen, "api.listen");
    if (!hp) {
      spdlog::error("controller: {}", render_error(hp.error()));
      return 1;
    }
    if (hp->second == 0 && cfg.api_advertise_url.empty()) {
      spdlog::error("controller: api.listen: HA mode needs a fixed port (or "
                    "api.advertise_url), so standbys can point clients at the leader");
      return 1;
    }
    api_at = *hp;
    auto api_host = hp->first == "0.0.0.0" || hp->first == "::" ? host : hp->first;
    ec_cfg.api_url = cfg.api_advertise_url.empty()
                       ? std::string{cfg.api_plain_http ? "http" : "https"} + "://"
                           + (api_host.find(':') != std::string::npos ? "[" + api_host + "]"
                                                                       : api_host)
                           + ":" + std::to_string(hp->second)
                       : cfg.api_advertise_url;
  }
  // Telemetry history stays out of etcd: each controller keeps its own,
  // opened before standing (a takeover need not wait for it).
  auto history = Store::open(cfg.data_dir);
  if (!history) {
    spdlog::error("controller: cannot open the local history store: {}",
                  render_error(history.error()));
    return 1;
  }
  std::shared_ptr<Store> history_store{std::move(*history)};
  // A standby looks at the leader key every 25 ms: a takeover waits for the
  // lease to end (TTL, plus up to etcd's 500 ms expiry sweep), not for us.
  ec_cfg.poll = std::chrono::milliseconds{25};
  leader_election election{ec_cfg};
  std::unique_ptr<follower_api> standby;
  if (api_at)
    standby = std::make_unique<follower_api>(cfg, api_at->first, api_at->second);
  // While standing by, a standby gate on the gate's port tells agents and
  // astra who leads. Once elected, the leader's gate binds the port beside
  // it (SO_REUSEPORT) before it closes, so the port never refuses a
  // connection during the takeover (runtime/gate/gate_listener.hpp).
  auto standby_socket = listen_tcp(cfg.listen_address, cfg.listen_port, true);
  if (!standby_socket) {
    spdlog::error("controller: cannot start: {}", render_error(standby_socket.error()));
    return 1;
  }
  standby_gate_config sg_cfg;
  sg_cfg.listen_socket = *standby_socket;
  sg_cfg.hello_timeout = cfg.hello_timeout;
  sg_cfg.max_open_per_address = cfg.max_unauthenticated_per_address;
  auto standby_gate = spawn_standby_gate(sys, sg_cfg);
  if (!standby_gate) {
    spdlog::error("controller: cannot start the standby gate: {}",
                  render_error(standby_gate.error()));
    return 1;
  }
  standby_gate_actor standby_gate_handle = standby_gate->first;
  // Stops the standby gate and waits until it is gone (its copy of the
  // socket closed), on every way out of standing by.
  auto stop_standby_gate = [&] {
    if (!standby_gate_handle)
      return;
    caf::scoped_actor waiter{sys};
    waiter->send_exit(standby_gate_handle, caf::exit_reason::user_shutdown);
    waiter->wait_for(standby_gate_handle);
    standby_gate_handle = standby_gate_actor{};
  };
  spdlog::info("controller: HA mode on {} as {}: standing for leadership", store->path(),
               ec_cfg.id);
  // Stop signals are polled while campaigning (they stay blocked).
  int stop_signal = 0;
  auto stop = [&] {
    timespec zero{0, 0};
    auto sig = ::sigtimedwait(&signals, nullptr, &zero);
    if (sig > 0)
      stop_signal = sig;
    return stop_signal != 0;
  };
  auto won = election.campaign(stop, [&](const std::optional<leader_info>& l) {
    if (standby)
      standby->set_leader(l);
    // A key that names this controller's gate is a term of an earlier run
    // of it (restarted before its lease ran out): nobody leads there now.
    auto gate = l && l->gate != ec_cfg.gate ? l->gate : std::string{};
    caf::anon_send(standby_gate_handle, atom::leader_v, std::move(gate));
  });
  if (!won) {
    spdlog::error("controller: cannot stand for leadership: {}", render_error(won.error()));
    stop_standby_gate();
    return 1;
  }
  if (!*won) {
    spdlog::info("controller: signal {} while standing by, stopping", stop_signal);
    stop_standby_gate();
    return 0;
  }
  auto elected_at = std::chrono::steady_clock::now();
  auto gate_socket = listen_tcp(cfg.listen_address, cfg.listen_port, true);
  if (!gate_socket) {
    spdlog::error("controller: cannot start the gate: {}",
                  render_error(gate_socket.error()));
    stop_standby_gate();
    (void) election.resign();
    return 1;
  }
  // Peers the standby gate holds (they asked while no one led) are sent
  // here: they connect again and wait in the new socket's backlog for the
  // gate.
  caf::anon_send(standby_gate_handle, atom::leader_v, ec_cfg.gate);
  stop_standby_gate();
  standby.reset();
  // Deposed (the lease ended while this process was stopped or cut off):
  // every write is already refused by the fence; stop at once, and let the
  // service manager start a standby.
  election.keep_leading([](const std::string& why) {
    spdlog::error("controller: no longer the leader ({}): exiting", why);
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    ::_exit(3);
  });
  auto ctl = start_controller(sys, cfg, real_wall_clock(), store, history_store,
                              *gate_socket);
  if (!ctl) {
    spdlog::error("controller: cannot start: {}", render_error(ctl.error()));
    (void) election.resign();
    return 1;
  }
  auto api = start_api(sys, *ctl, cfg);
  if (!api) {
    spdlog::error("controller: cannot start the HTTP API: {}", render_error(api.error()));
    stop_controller(sys, *ctl);
    (void) election.resign();
    return 1;
  }
  spdlog::info("controller: leading cluster '{}' (state loaded from {} in {} ms); gate on "
               "{}:{}, API {}",
               cfg.cluster_name, store->path(),
               std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - elected_at)
                 .count(),
               cfg.listen_address, ctl->port, api->address);
  compactor housekeeping{store, std::chrono::seconds{60}, 10000};
  auto sig = wait_for_stop_signal(signals);
  spdlog::info("controller: signal {}, stopping and resigning", sig);
  bound_shutdown("controller", std::chrono::milliseconds{4000});
  if (api->server)
    api->server->stop();
  stop_controller(sys, *ctl);
  if (auto err = election.resign())
    spdlog::warn("controller: cannot resign (the lease ends by itself): {}",
                 render_error(err));
  return 0;
}

} // namespace astraeus::bin
