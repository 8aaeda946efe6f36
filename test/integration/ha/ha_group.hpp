#pragma once
/// @file
/// Three HA controllers (store.backend etcd) on a 3-member etcd on
/// loopback, for the HA tests (test/integration/ha) and the failover bench
/// (bench/ha_failover_bench.cpp). Each controller has its own gate and API
/// port; they share one keys folder (gate key, token key, owner token), as
/// an HA deployment shares it (README "High availability").

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "integration/store/etcd_cluster.hpp"
#include "store/etcd_store.hpp"
#include "store/leader_election.hpp"

namespace astraeus::itest {

/// The etcd cluster and `size` controllers, started by `start`.
class ha_group {
public:
  explicit ha_group(const fs::path& dir, size_t size = 3) : dir_(dir), etcd_(dir, 3) {
    for (size_t i = 0; i < size; ++i) {
      gate_.push_back(free_port());
      api_.push_back(free_port());
      procs_.push_back(nullptr);
    }
  }

  /// Waits for etcd and opens a store for looking at the leader key.
  bool ready_etcd() {
    if (!etcd_.wait_ready(15s))
      return false;
    etcd_options opts;
    opts.endpoints = etcd_.endpoints();
    opts.prefix = "/astraeus/default/";
    auto st = etcd_store::open(opts);
    if (!st)
      return false;
    store_ = std::shared_ptr<etcd_store>{std::move(*st)};
    return true;
  }

  /// (Re)starts controller `i`.
  process* start(size_t i, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{program("astraeus-controller"),
                                  "--listen", "127.0.0.1",
                                  "--port", std::to_string(gate_[i]),
                                  "--data-dir", (dir_ / ("controller" + std::to_string(i))).string(),
                                  "--heartbeat-lapse", "3s",
                                  "--set", "heartbeat.report_interval=600ms",
                                  "--set", "gate.hello_timeout=1s",
                                  "--set", "gate.keepalive_interval=500ms",
                                  "--set", "store.backend=etcd",
                                  "--set", "store.etcd.endpoints=" + etcd_.endpoint_list(),
                                  "--set", "keys.path=" + keys().string(),
                                  "--set", "api.listen=127.0.0.1:" + std::to_string(api_[i]),
                                  "--set", "api.plain_http=true",
                                  "--set", "api.view_refresh=50ms"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    procs_[i] = spawn_kept(kept_, dir_, "controller" + std::to_string(i), argv);
    return procs_[i];
  }

  /// Starts every controller as an HA deployment does: the first alone
  /// until it has made the shared keys folder (gate.key, token.key,
  /// owner-token), then the others with those keys (README "High
  /// availability": copy the first controller's keys before starting the
  /// next). Started together on an empty folder, two controllers may each
  /// make keys of their own and one then refuses to stand.
  bool start_all(milliseconds keys_timeout = 15s) {
    start(0);
    bool keys_made = wait_until(
      [&] {
        std::error_code ec;
        return std::filesystem::exists(keys() / "gate.key", ec)
               && std::filesystem::exists(keys() / "token.key", ec)
               && std::filesystem::exists(keys() / "owner-token", ec);
      },
      keys_timeout, 20ms);
    for (size_t i = 1; i < gate_.size(); ++i)
      start(i);
    return keys_made;
  }

  /// Who the leader key names: the index of that controller, nullopt when
  /// none leads (or etcd cannot be asked).
  std::optional<size_t> leader() {
    auto got = store_->get_key(store_->control_key("leader"));
    if (!got || !*got)
      return std::nullopt;
    auto info = leader_info::from_value((*got)->first);
    if (!info)
      return std::nullopt;
    for (size_t i = 0; i < gate_.size(); ++i)
      if (info->gate == "127.0.0.1:" + std::to_string(gate_[i]))
        return i;
    return std::nullopt;
  }

  /// Waits until a controller leads and answers the owner on its gate;
  /// its index.
  std::optional<size_t> wait_leader(milliseconds timeout) {
    std::optional<size_t> out;
    wait_until(
      [&] {
        out = leader();
        return out && use_owner_credentials(gate_[*out], keys())
               && static_cast<bool>(gate_client::connect_cli(
                 loopback(gate_[*out]), 300ms, owner_credentials(gate_[*out])));
      },
      timeout, 20ms);
    return out;
  }

  /// Waits until controller `i`'s gate (a standby's too) accepts a TCP
  /// connection: a standby that started after the leader may not listen yet.
  bool wait_gate(size_t i, milliseconds timeout) {
    return wait_listening(gate_[i], timeout);
  }

  /// Waits until controller `i`'s gate and API both accept a TCP connection.
  bool wait_listening(size_t i, milliseconds timeout) {
    return wait_listening(gate_[i], timeout) && wait_listening(api_[i], timeout);
  }

  /// Waits until 127.0.0.1:`port` accepts a TCP connection.
  static bool wait_listening(uint16_t port, milliseconds timeout) {
    return wait_until(
      [&] {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
          return false;
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(port);
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
        ::close(fd);
        return ok;
      },
      timeout, 20ms);
  }

  /// Waits until a controller other than `old` leads and accepts a write;
  /// its index, nullopt after `timeout`.
  std::optional<size_t> wait_new_leader(size_t old, milliseconds timeout) {
    std::optional<size_t> next;
    bool ok = wait_until(
      [&] {
        next = leader();
        return next && *next != old && write_through(*next, 500ms);
      },
      timeout, 10ms);
    return ok ? next : std::nullopt;
  }

  /// A write (a join token minted through the gate of controller `i`):
  /// true when it was accepted.
  bool write_through(size_t i, milliseconds timeout = 1s) {
    if (!use_owner_credentials(gate_[i], keys()))
      return false;
    v1::Request req;
    req.mutable_create_join_token();
    auto resp = gate_call(gate_[i], std::move(req), timeout);
    return resp && !resp->has_error() && resp->has_join_token();
  }

  /// The join tokens controller `i` knows (ids); nullopt when it cannot
  /// be asked.
  std::optional<std::vector<std::string>> join_tokens(size_t i) {
    if (!use_owner_credentials(gate_[i], keys()))
      return std::nullopt;
    v1::Request req;
    req.mutable_list_join_tokens();
    auto resp = gate_call(gate_[i], std::move(req));
    if (!resp || resp->has_error() || !resp->has_join_tokens())
      return std::nullopt;
    std::vector<std::string> out;
    for (const auto& t : resp->join_tokens().tokens())
      out.push_back(t.id());
    return out;
  }

  /// "127.0.0.1:G0,127.0.0.1:G1,..." (an agent's --controller).
  std::string gate_list() const {
    std::string out;
    for (auto p : gate_)
      out += (out.empty() ? "" : ",") + std::string{"127.0.0.1:"} + std::to_string(p);
    return out;
  }

  /// The keys folder every controller shares.
  fs::path keys() const {
    return dir_ / "keys";
  }
  /// Controller `i`'s gate port.
  uint16_t gate_port(size_t i) const {
    return gate_[i];
  }
  /// Controller `i`'s HTTP API port (plain HTTP on 127.0.0.1).
  uint16_t api_port(size_t i) const {
    return api_[i];
  }
  /// Controller `i`'s latest process (null before `start`).
  process* controller(size_t i) {
    return procs_[i];
  }
  /// How many controllers.
  size_t size() const {
    return gate_.size();
  }
  /// Every process started (controllers, and what a test adds: agents).
  std::vector<std::unique_ptr<process>>& kept() {
    return kept_;
  }
  /// The etcd cluster.
  etcd_cluster& etcd() {
    return etcd_;
  }

  /// Kills everything, printing each process's stderr when `failed`.
  void end(bool failed) {
    end_processes(kept_, failed);
    etcd_.dump(failed);
  }

private:
  fs::path dir_;
  etcd_cluster etcd_;
  std::shared_ptr<etcd_store> store_;
  std::vector<uint16_t> gate_;
  std::vector<uint16_t> api_;
  std::vector<process*> procs_;
  std::vector<std::unique_ptr<process>> kept_;
};

} // namespace astraeus::itest
