#pragma once
/// @file
/// A real etcd cluster (Debian's `etcd-server`) on loopback for the store's
/// conformance suite and the HA tests: 1 or 3 members in a temporary
/// folder, fresh ports, killed with their owner.

#include <string>
#include <vector>

#include <httplib.h>

#include "integration/cluster_harness.hpp"

namespace astraeus::itest {

/// The etcd program: $ASTRAEUS_ETCD, else /usr/bin/etcd.
inline std::string etcd_program() {
  const char* env = std::getenv("ASTRAEUS_ETCD");
  return env != nullptr && *env != '\0' ? std::string{env} : std::string{"/usr/bin/etcd"};
}

/// `members` etcd members on 127.0.0.1, started at construction.
class etcd_cluster {
public:
  /// `quota_bytes`: etcd's --quota-backend-bytes (0: etcd's default).
  /// Starts `members` members with their data under `dir`.
  etcd_cluster(const fs::path& dir, size_t members, uint64_t quota_bytes = 0) : dir_(dir) {
    std::string initial;
    for (size_t i = 0; i < members; ++i) {
      client_.push_back(free_port());
      peer_.push_back(free_port());
      if (!initial.empty())
        initial += ",";
      initial += name(i) + "=http://127.0.0.1:" + std::to_string(peer_[i]);
    }
    for (size_t i = 0; i < members; ++i) {
      auto c = "http://127.0.0.1:" + std::to_string(client_[i]);
      auto p = "http://127.0.0.1:" + std::to_string(peer_[i]);
      std::vector<std::string> argv = {etcd_program(),
                                       "--name", name(i),
                                       "--data-dir", (dir / name(i)).string(),
                                       "--listen-client-urls", c,
                                       "--advertise-client-urls", c,
                                       "--listen-peer-urls", p,
                                       "--initial-advertise-peer-urls", p,
                                       "--initial-cluster", initial,
                                       "--initial-cluster-state", "new",
                                       "--initial-cluster-token", dir.filename().string(),
                                       "--logger", "zap",
                                       "--log-level", "warn"};
      if (quota_bytes > 0) {
        argv.push_back("--quota-backend-bytes");
        argv.push_back(std::to_string(quota_bytes));
      }
      spawn_kept(procs_, dir, name(i), argv);
    }
  }

  /// Every member's client address, "127.0.0.1:PORT".
  std::vector<std::string> endpoints() const {
    std::vector<std::string> out;
    for (auto p : client_)
      out.push_back("127.0.0.1:" + std::to_string(p));
    return out;
  }

  /// The endpoints comma-separated (store.etcd.endpoints).
  std::string endpoint_list() const {
    std::string out;
    for (const auto& e : endpoints())
      out += (out.empty() ? "" : ",") + e;
    return out;
  }

  /// True once every running member answers /health with "true".
  bool wait_ready(milliseconds timeout) {
    return wait_until(
      [&] {
        for (size_t i = 0; i < client_.size(); ++i) {
          if (!procs_[i]->running())
            continue;
          httplib::Client cli{"127.0.0.1", client_[i]};
          cli.set_connection_timeout(0, 200000);
          cli.set_read_timeout(1, 0);
          auto res = cli.Get("/health");
          if (!res || res->status != 200 || !contains(res->body, "true"))
            return false;
        }
        return true;
      },
      timeout, 50ms);
  }

  /// Member `i`'s process.
  process& member(size_t i) {
    return *procs_[i];
  }

  /// Prints each member's stderr (on failure).
  void dump(bool failed) {
    end_processes(procs_, failed);
  }

private:
  static std::string name(size_t i) {
    return "m" + std::to_string(i);
  }

  fs::path dir_;
  std::vector<uint16_t> client_;
  std::vector<uint16_t> peer_;
  std::vector<std::unique_ptr<process>> procs_;
};

} // namespace astraeus::itest
