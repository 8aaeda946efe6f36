#pragma once
/// @file
/// Every GPU's history on the controller (issue 19 "GPU history", issue 13
/// item 6): the samples of its machine's reports (utilisation, memory used,
/// temperature, power, clocks, errors, health) kept in three tiers, with no
/// actor in sight so that it is tested with plain calls:
/// - raw samples for the last hour;
/// - 1-minute means for the hours up to 6 h ago;
/// - 5-minute means up to 24 h ago; older points are dropped.
/// A bucket moves down a tier only whole (once its end is past the tier's
/// window), so tiers never overlap and a point's time is its bucket's start.
/// Memory is bounded: each tier has a most-points cap per GPU and the book
/// a most-GPUs cap. Every change is also recorded as a pending store change
/// (family `gpu_history`, one key per point) that the history actor writes
/// in one batch (actors/controller/gpu_history_actor.hpp).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"
#include "messages/gpu_health_state.hpp"
#include "store/store.hpp"

namespace astraeus {

/// How long each tier keeps its points and how many it may hold.
struct gpu_history_limits {
  /// Raw samples are kept this long (ms; default 1 h).
  int64_t raw_window_ms = 3'600'000;
  /// The middle tier's bucket (ms; default 1 min) and how long it is kept
  /// (ms from now; default 6 h).
  int64_t minute_bucket_ms = 60'000;
  int64_t minute_window_ms = 6 * 3'600'000;
  /// The last tier's bucket (ms; default 5 min, a multiple of the middle
  /// one) and how long it is kept (ms from now; default 24 h).
  int64_t five_minute_bucket_ms = 300'000;
  int64_t five_minute_window_ms = 24 * 3'600'000;
  /// Most raw samples kept per GPU (default 720: one every 5 s for an
  /// hour). Past it the oldest whole minute is folded early.
  size_t max_raw_points = 720;
  /// Most GPUs kept; samples of further GPUs are refused (default 65,536).
  size_t max_gpus = 65'536;
  /// Most pending store changes kept while the store refuses writes
  /// (default 4,000,000); past it the pending changes are dropped (the
  /// memory's history stays whole; the stored one misses them).
  size_t max_pending_changes = 4'000'000;

  /// Errors: ec::invalid_config naming the first window or bucket <= 0, a
  /// bucket that does not divide the next, a window shorter than the tier
  /// above it, or a cap of 0.
  caf::error validate() const;
};

/// One point of a GPU's history: a raw sample (`folded` 1) or the mean of
/// `folded` samples of one bucket. 48 bytes, against a GpuSample's ~150.
struct gpu_point {
  /// Bit of `present` per optional series.
  enum series : uint8_t {
    utilization = 1,
    memory_used = 2,
    temperature = 4,
    power = 8,
    sm_clock = 16,
    memory_clock = 32,
    ecc = 64,
  };
  /// The sample's time, or its bucket's start (Unix ms).
  int64_t unix_ms = 0;
  uint64_t memory_used_bytes = 0;
  /// Kernel-log events of the GPU seen up to then (a counter).
  uint64_t xid_events = 0;
  /// Uncorrectable ECC (NVIDIA volatile) or RAS (AMD) errors (a counter).
  uint64_t ecc_uncorrectable = 0;
  float utilization_percent = 0;
  float temperature_c = 0;
  float power_watts = 0;
  uint32_t sm_clock_mhz = 0;
  uint32_t memory_clock_mhz = 0;
  /// Reports folded into this point (1 = raw).
  uint32_t folded = 1;
  /// Which optional series the point has (`series` bits).
  uint8_t present = 0;
  /// The worst health among its reports; 0 = not known.
  uint8_t health = 0;

  /// Whether it has series `s`.
  bool has(series s) const {
    return (present & s) != 0;
  }
};

/// A GPU's sample as the API shows it (health as its word, "" unknown).
v1::GpuSample to_sample(const gpu_point& p);

/// The point of a stored or sent sample (an unknown health word is 0).
gpu_point from_sample(const v1::GpuSample& s);

/// The sample a machine report gives of GPU `facts` at `unix_ms`, with the
/// health its GPU actor last judged (nullopt: not judged yet). Its errors
/// are the incidents' counts summed, and ECC volatile uncorrectable (AMD:
/// RAS uncorrectable).
gpu_point point_of(const v1::Gpu& facts, std::optional<gpu_health> health,
                   int64_t unix_ms);

/// The mean of `points` (at least one) as one point at `unix_ms`: weighted
/// by `folded`, per series over the points that have it; counters take the
/// highest, health the worst (Faulty, Foreign, AtRisk, Healthy).
gpu_point fold_points(const gpu_point* first, const gpu_point* last, int64_t unix_ms);

/// One GPU's tiers, oldest first in each, oldest tier first.
struct gpu_series {
  std::string machine;
  /// The GPU's id (UUID, AMD id or PCI address), as its machine reports.
  std::string gpu;
  /// From the last report, so `astra gpu show` may name it so ("" / unset
  /// until one came since the controller started).
  std::string pci_address;
  std::optional<uint32_t> index;
  std::deque<gpu_point> five_minutes;
  std::deque<gpu_point> minutes;
  std::deque<gpu_point> raw;

  /// Points in every tier.
  size_t size() const {
    return five_minutes.size() + minutes.size() + raw.size();
  }
};

/// Every GPU's history. Not thread-safe: one actor owns it.
class gpu_history_book {
public:
  /// A book with `limits` (validated by the caller).
  explicit gpu_history_book(gpu_history_limits limits = {});

  /// Adds GPU `gpu`'s raw point `p` of machine `machine` (with its PCI
  /// address and index, "" / nullopt when unknown). False (nothing kept)
  /// when `machine` or `gpu` is empty or holds '/', when `p` is not newer
  /// than the GPU's last raw point, or when the book holds max_gpus GPUs
  /// and this is another.
  bool add(const std::string& machine, const std::string& gpu,
           const std::string& pci_address, std::optional<uint32_t> index,
           const gpu_point& p);

  /// Moves the buckets past each tier's window (measured back from
  /// `now_unix_ms`) down a tier, drops points older than the last window,
  /// folds raw points past max_raw_points early, and forgets GPUs left
  /// with no point.
  void compact(int64_t now_unix_ms);

  /// Forgets every GPU of `machine` (a removed machine), its stored points too.
  void forget_machine(const std::string& machine);

  /// The history `q` asks for, oldest first: the GPU named by id, PCI
  /// address or index on `q.machine`, its points since `q.since_unix_ms`,
  /// folded evenly down to `q.max_points` when it asks for fewer.
  /// Errors: ec::invalid_request "machine M has no GPU G in its history"
  /// when nothing is kept for it (no report since it was added, or a GPU
  /// it does not have).
  caf::expected<v1::GpuHistory> query(const v1::GetGpuHistory& q) const;

  /// The GPU's series; null when none is kept.
  const gpu_series* find(const std::string& machine, const std::string& gpu) const;

  /// GPUs kept, and points kept over all of them.
  size_t gpu_count() const;
  size_t point_count() const;

  /// The store changes since the last `clear_pending` (puts of new or
  /// changed points, erases of folded or dropped ones), in key order.
  std::vector<Store::change> pending_changes() const;
  /// How many store changes are pending.
  size_t pending_count() const;
  /// Forgets the pending changes (after they were written).
  void clear_pending();

  /// Loads every point of family `gpu_history` (as a restart does), then
  /// compacts at `now_unix_ms`. A key or value that does not parse is
  /// skipped and counted; loading records no pending change but those of
  /// the compaction. Errors: the store's when it cannot be read.
  caf::expected<size_t> load(Store& store, int64_t now_unix_ms);

  /// How long the oldest tier reaches back, seconds.
  uint64_t retention_seconds() const;

  /// The store key of a point of tier `tier` ('f' five-minute, 'm' minute,
  /// 'r' raw): "<machine>/<gpu>/<tier>/<unix ms, 20 digits>".
  static std::string key_of(const std::string& machine, const std::string& gpu,
                            char tier, int64_t unix_ms);

private:
  void put(const gpu_series& s, char tier, const gpu_point& p);
  void erase(const gpu_series& s, char tier, int64_t unix_ms);
  void fold_down(gpu_series& s, std::deque<gpu_point>& from, char from_tier,
                 std::deque<gpu_point>& to, char to_tier, int64_t bucket_ms,
                 int64_t cutoff, size_t keep_at_most);
  void drop_pending_if_over();

  gpu_history_limits limits_;
  /// By "<machine>/<gpu>", so a machine's GPUs are adjacent.
  std::map<std::string, gpu_series> series_;
  /// Store key -> the point to put, or nullopt to erase.
  std::map<std::string, std::optional<gpu_point>> pending_;
};

} // namespace astraeus
