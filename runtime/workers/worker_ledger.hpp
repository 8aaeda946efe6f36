#pragma once
/// @file
/// The agent's ledger of the workers the controller handed its machine
/// (store family `workers`, key = worker name, value = `v1::WorkerOrder`).
/// The controller sends the whole set each time (`v1::WorkerOrders`); the
/// ledger stores what is new with sync, forgets what left the set, and
/// answers with the workers it holds (`v1::WorkerStatuses`), which the
/// agent also puts in every report. A held worker is `Assigned` until the
/// worker supervisor (runtime/workers/worker_supervisor.hpp) records its process
/// (key "proc/<worker>", `v1::WorkerProcess`); its status is then the
/// process's state, pid and exit code.
/// Source: issue "The scheduler" ("Assignments reach the agents and are
/// acknowledged").

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"

namespace astraeus {

class Store;

/// The workers one agent holds, kept in its store.
class worker_ledger {
public:
  /// Loads the stored workers of `store` (required). Errors:
  /// ec::store_failure when the store cannot be read; a record that does not
  /// parse is logged and dropped (the controller sends it again).
  static caf::expected<worker_ledger> load(std::shared_ptr<Store> store);

  /// Makes the held set equal to `orders` for machine `machine`: new or
  /// changed workers are stored (one batch, sync) before this returns;
  /// workers no longer ordered are erased. Returns the workers now held,
  /// with `generation` = the orders'. Errors: ec::invalid_request when the
  /// orders name another machine or a worker without a name (nothing
  /// changes); ec::store_failure when the write fails (nothing changes).
  caf::expected<v1::WorkerStatuses> apply(const std::string& machine,
                                          const v1::WorkerOrders& orders);

  /// The workers held, by name, with the generation last applied (0 after
  /// a restart, so the controller sends its set again): `Assigned`, or the
  /// state of its process record (with its outputs once it has ended); a
  /// record still `Starting` reads `Assigned`. Then the workers that left
  /// the set but whose process record is still kept (`Stopping` through
  /// the stop grace, then their end until the supervisor forgets them), so
  /// the controller sees them end.
  v1::WorkerStatuses statuses(const std::string& machine) const;

  /// The orders of the workers held, by worker name.
  const std::map<std::string, v1::WorkerOrder>& workers() const {
    return workers_;
  }

  /// The processes started for workers (key "proc/<worker>"), by worker
  /// name; a worker that left the set keeps its record until its process
  /// has ended, so a restarted agent still stops it.
  const std::map<std::string, v1::WorkerProcess>& processes() const {
    return processes_;
  }

  /// Stores `p` (sync) and keeps it. Errors: ec::store_failure.
  caf::error put_process(const v1::WorkerProcess& p);

  /// Stores process records (sync) from any thread without touching this
  /// ledger's memory: how a worker's start is recorded before its fork, on
  /// the thread that starts it (runtime/workers/worker_start.hpp); the record
  /// comes back through `put_process` afterwards. The function keeps the
  /// store alive. Errors: ec::store_failure.
  std::function<caf::error(const v1::WorkerProcess&)> process_writer() const;

  /// Forgets the process record of `worker` (sync). Errors:
  /// ec::store_failure.
  caf::error erase_process(const std::string& worker);

private:
  explicit worker_ledger(std::shared_ptr<Store> store) : store_(std::move(store)) {}

  std::shared_ptr<Store> store_;
  std::map<std::string, v1::WorkerOrder> workers_;
  std::map<std::string, v1::WorkerProcess> processes_;
  uint64_t generation_ = 0;
};

/// The source address of this machine's route to `host`:`port` (an IPv4 or
/// IPv6 literal), found by connecting a UDP socket, which sends nothing.
/// Errors: ec::invalid_config when `host` does not resolve or no route
/// leads there.
caf::expected<std::string> route_source_address(const std::string& host,
                                                uint16_t port);

} // namespace astraeus
