#pragma once
/// @file
/// A store's writes and fsync on a thread of their own. The scheduler's
/// group commit (issue 14, issue 15) hands each burst's runs to this thread
/// (`write_and_sync`): it writes them without sync and makes the write-ahead
/// log durable while the actor goes on gathering the next burst; the
/// answers of a burst go out once its write and sync are done. With etcd
/// the write itself is the round trip to the quorum (a few ms), which the
/// actor no longer waits for. The agent (issue 17) writes a new fault latch
/// without sync, reports it to the controller at once and has it synced
/// here meanwhile (`request`). One sync at a time; a request made while one
/// runs is served by the next.
///
/// Several batches in flight (issue 15): with `writes_in_flight` above 1
/// (the store's `store_limits::writes_in_flight`, etcd: 3) that many
/// threads each write one batch at a time, so a burst is committed while
/// the bursts before it still wait for their quorum; the caller hands over
/// at once only batches with no key in common (the scheduler holds a burst
/// back while one of its runs is in flight) and puts the reports back in
/// order itself.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <caf/error.hpp>

#include "store/store.hpp"

namespace astraeus {

/// How a syncer's threads are scheduled by the kernel.
enum class sync_priority {
  /// As the process's other threads (SCHED_OTHER).
  normal,
  /// SCHED_FIFO at the lowest real-time priority, where the process may
  /// (root or CAP_SYS_NICE; else normal, and the log says why). Issue 14
  /// (bench/RESULTS.md 36): on a 2-core controller the sync thread, woken
  /// by a burst or by the end of its fsync, waited for a CPU about as long
  /// as it ran (15-24 % of the wall clock), because the actors' threads held
  /// both cores; every answer waited for that. A real-time thread takes a
  /// core at once. It sleeps in fsync (or etcd's round trip) most of the
  /// time, and its CPU work per burst (serializing the runs, RocksDB's
  /// memtable insert) is bounded by the burst.
  realtime,
};

/// Runs `Store::write_chunked` and `Store::sync_wal` on its own thread and
/// reports each result. Its threads are named "astraeus.wal".
class wal_syncer {
public:
  /// Called on a syncer's thread: once per batch handed to
  /// `write_and_sync` (its number), and after the sync that serves a
  /// `request` (the latest number requested). The batch, or every write
  /// made before `request(seq)`, is durable when `err` is empty. With `err`
  /// set, the batch may be written in part or not at all (the caller writes
  /// it again). With one thread batches are reported in the order handed
  /// over; with several, in the order they finish.
  using done_fn = std::function<void(uint64_t seq, caf::error err)>;

  /// Starts `writes_in_flight` threads (at least 1), scheduled as
  /// `priority` says. `store` and `done` are required.
  wal_syncer(std::shared_ptr<Store> store, done_fn done, size_t writes_in_flight = 1,
             sync_priority priority = sync_priority::realtime);

  /// Waits for a write or sync in progress, then stops the thread; a request
  /// not started yet is dropped (its writes are simply not acknowledged).
  ~wal_syncer();

  wal_syncer(const wal_syncer&) = delete;
  wal_syncer& operator=(const wal_syncer&) = delete;

  /// How many batches may be written at once (the threads started).
  size_t writes_in_flight() const { return writes_in_flight_; }

  /// Syncs every write made so far, then calls `done(seq, err)`. A request
  /// made while a sync runs is served after it (the latest `seq` wins).
  void request(uint64_t seq);

  /// Writes `changes` (`Store::write_chunked` without sync: each batch
  /// within the store's limits is atomic), then syncs, then calls
  /// `done(seq, err)`. With one thread, batches are written in the order
  /// handed over, each after the one before has been written, so a key's
  /// later value is never overwritten by an earlier one; once one fails the
  /// later ones pending are not written and are reported failed with it
  /// (`err` names the store's failure, e.g. etcd's "not the leader: ..."
  /// for a deposed leader). With several threads, batches start in the
  /// order handed over and run side by side: the caller must not hand over
  /// a batch with a key of one not yet reported. `seq` must grow from call
  /// to call.
  void write_and_sync(uint64_t seq, std::vector<Store::change> changes);

  /// Fills in a batch's values on the syncer's thread before it is written
  /// (issue 14: the scheduler has the runs it answers serialized there, off
  /// its own thread). Not called for a batch not written (an earlier one
  /// failed, or the syncer stops first).
  using prepare_fn = std::function<void(std::vector<Store::change>&)>;

  /// As `write_and_sync(seq, changes)`, with `prepare(changes)` run on the
  /// syncer's thread first.
  void write_and_sync(uint64_t seq, std::vector<Store::change> changes, prepare_fn prepare);

private:
  void loop();

  std::shared_ptr<Store> store_;
  done_fn done_;
  const size_t writes_in_flight_;  ///< threads, each writing one batch at a time
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t wanted_ = 0;  ///< the latest requested seq not started; 0: none
  /// Batches handed to `write_and_sync`, not started yet, oldest first.
  struct pending_write {
    uint64_t seq = 0;
    std::vector<Store::change> changes;
    prepare_fn prepare; ///< may be empty
  };
  std::deque<pending_write> writes_;
  bool stop_ = false;
  /// With one thread it takes every pending batch at once (one sync for
  /// them all); with several each takes one.
  std::vector<std::thread> threads_;
};

} // namespace astraeus
