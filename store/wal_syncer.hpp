#pragma once
/// @file
/// A store's fsync on a thread of its own. The scheduler's group commit
/// (issue 14) writes each burst's runs without sync on the actor's thread,
/// then asks this thread to make the write-ahead log durable while the actor
/// goes on with the next burst; the answers of a burst go out once its sync
/// is done. The agent (issue 17) writes a new fault latch without sync,
/// reports it to the controller at once and has it synced here meanwhile.
/// One sync at a time; a request made while one runs is served by the next.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include <caf/error.hpp>

namespace astraeus {

class Store;

/// Runs `Store::sync_wal` on its own thread and reports each result.
class wal_syncer {
public:
  /// Called on the syncer's thread after each sync: every write made
  /// before `request(seq)` is durable when `err` is empty.
  using done_fn = std::function<void(uint64_t seq, caf::error err)>;

  /// Starts the thread. `store` and `done` are required.
  wal_syncer(std::shared_ptr<Store> store, done_fn done);

  /// Waits for a sync in progress, then stops the thread; a request not
  /// started yet is dropped (its writes are simply not acknowledged).
  ~wal_syncer();

  wal_syncer(const wal_syncer&) = delete;
  wal_syncer& operator=(const wal_syncer&) = delete;

  /// Syncs every write made so far, then calls `done(seq, err)`. A request
  /// made while a sync runs is served after it (the latest `seq` wins).
  void request(uint64_t seq);

private:
  void loop();

  std::shared_ptr<Store> store_;
  done_fn done_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t wanted_ = 0;  ///< the latest requested seq not started; 0: none
  bool stop_ = false;
  std::thread thread_;
};

} // namespace astraeus
