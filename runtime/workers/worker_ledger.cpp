#include "runtime/workers/worker_ledger.hpp"

#include <cstring>
#include <vector>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "messages/error.hpp"
#include "messages/worker_state.hpp"
#include "runtime/workers/worker_start.hpp"
#include "store/store.hpp"

namespace astraeus {

namespace {

caf::error write_process(Store& store, const v1::WorkerProcess& p) {
  return store.write({{family::workers, "proc/" + p.worker(), p.SerializeAsString()}}, true);
}

} // namespace

caf::expected<worker_ledger> worker_ledger::load(std::shared_ptr<Store> store) {
  if (!store)
    return caf::make_error(ec::invalid_config, "worker ledger: no store");
  worker_ledger out{store};
  auto err = store->for_each(family::workers, [&](std::string_view key,
                                                  std::string_view bytes) {
    if (key.substr(0, 5) == "proc/") {
      v1::WorkerProcess p;
      if (!p.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))
          || "proc/" + p.worker() != key) {
        spdlog::error("agent: stored worker process '{}' is corrupt; dropped",
                      std::string{key});
        return true;
      }
      out.processes_.emplace(p.worker(), std::move(p));
      return true;
    }
    v1::WorkerOrder order;
    if (!order.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))
        || order.worker() != key) {
      spdlog::error("agent: stored worker '{}' is corrupt; dropped (the "
                    "controller sends it again)",
                    std::string{key});
      return true;
    }
    out.workers_.emplace(std::string{key}, std::move(order));
    return true;
  });
  if (err)
    return err;
  return out;
}

caf::expected<v1::WorkerStatuses>
worker_ledger::apply(const std::string& machine, const v1::WorkerOrders& orders) {
  if (!orders.machine().empty() && orders.machine() != machine)
    return caf::make_error(ec::invalid_request,
                           "worker orders for machine '" + orders.machine()
                             + "' reached machine '" + machine + "'");
  std::map<std::string, const v1::WorkerOrder*> wanted;
  for (const auto& o : orders.workers()) {
    if (o.worker().empty())
      return caf::make_error(ec::invalid_request,
                             "worker orders hold a worker without a name");
    wanted[o.worker()] = &o;
  }
  std::vector<Store::change> changes;
  for (const auto& [name, order] : workers_)
    if (!wanted.count(name))
      changes.push_back({family::workers, name, std::nullopt});
  for (const auto& [name, order] : wanted) {
    auto held = workers_.find(name);
    auto bytes = order->SerializeAsString();
    if (held == workers_.end() || held->second.SerializeAsString() != bytes)
      changes.push_back({family::workers, name, std::move(bytes)});
  }
  if (auto err = store_->write(changes, true))
    return err;
  for (const auto& c : changes)
    if (!c.value)
      workers_.erase(c.key);
    else
      workers_[c.key] = *wanted[c.key];
  generation_ = orders.generation();
  return statuses(machine);
}

v1::WorkerStatuses worker_ledger::statuses(const std::string& machine) const {
  v1::WorkerStatuses out;
  out.set_machine(machine);
  out.set_generation(generation_);
  // The state, pid, exit and placement of process record `p` on `w`.
  auto take_process = [](const v1::WorkerProcess& p, v1::WorkerStatus& w) {
    if (auto state = state_of(p)) {
      set_state(w, *state);
    } else {  // a word this build does not know: passed on as it is
      w.set_state(p.state());
      w.clear_state_code();
    }
    w.set_detail(p.detail());
    w.set_pid(p.pid());
    w.set_exit_code(p.exit_code());
    w.set_runtime(p.runtime());
    *w.mutable_outputs() = p.outputs();
    w.set_cpus(p.cpus());
    w.set_mems(p.mems());
    *w.mutable_rdma_devices() = p.rdma_devices();
  };
  for (const auto& [name, order] : workers_) {
    auto* w = out.add_workers();
    w->set_worker(name);
    w->set_run(order.run());
    set_state(*w, worker_state::assigned);
    auto p = processes_.find(name);
    if (p == processes_.end() || is_starting(p->second))
      continue;
    take_process(p->second, *w);
  }
  // A worker that left the set is listed while its process record stays:
  // Stopping through its grace, then its end until it is forgotten. The
  // controller counts it until then (a drain is done, a machine removed,
  // only once no worker of it is left running: issue "drain").
  for (const auto& [name, p] : processes_) {
    if (workers_.count(name) || is_starting(p))
      continue;
    auto* w = out.add_workers();
    w->set_worker(name);
    w->set_run(p.run());
    take_process(p, *w);
  }
  return out;
}

caf::error worker_ledger::put_process(const v1::WorkerProcess& p) {
  if (auto err = write_process(*store_, p))
    return err;
  processes_[p.worker()] = p;
  return caf::none;
}

std::function<caf::error(const v1::WorkerProcess&)> worker_ledger::process_writer() const {
  return [store = store_](const v1::WorkerProcess& p) { return write_process(*store, p); };
}

caf::error worker_ledger::erase_process(const std::string& worker) {
  if (auto err = store_->write({{family::workers, "proc/" + worker, std::nullopt}}, true))
    return err;
  processes_.erase(worker);
  return caf::none;
}

caf::expected<std::string> route_source_address(const std::string& host,
                                                uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  auto service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
    return caf::make_error(ec::invalid_config,
                           "cannot resolve '" + host + "': " + gai_strerror(rc));
  std::string why = "no address";
  for (auto* ai = found; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    bool ok = ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0
              && ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
    if (!ok)
      why = std::strerror(errno);
    ::close(fd);
    if (!ok)
      continue;
    char text[INET6_ADDRSTRLEN] = {0};
    const void* where = local.ss_family == AF_INET
                          ? static_cast<const void*>(
                            &reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                          : static_cast<const void*>(
                            &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
    if (inet_ntop(local.ss_family, where, text, sizeof(text)) != nullptr) {
      freeaddrinfo(found);
      return std::string{text};
    }
  }
  freeaddrinfo(found);
  return caf::make_error(ec::invalid_config,
                         "no route to '" + host + "': " + why);
}

} // namespace astraeus
