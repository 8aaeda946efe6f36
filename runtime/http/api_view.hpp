#pragma once
/// @file
/// The HTTP API's read-only view of the cluster: every machine, every GPU
/// and every run as the cluster last answered, with each object's JSON
/// rendered once. A view is immutable and shared (`std::shared_ptr<const
/// api_view>`): the HTTP threads render lists, pages and /metrics from it
/// without asking an actor, and a new view replaces it when something
/// changed (actors/controller/api_bridge.hpp rebuilds it). Asking 5,000
/// machine actors per request is what missed the figures ~100x.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// An object's JSON, rendered on first use (protobuf's JSON printer is the
/// costly part of a view: only objects someone reads are rendered) and
/// shared with the next view while the object is unchanged.
struct api_json_cell {
  std::once_flag once;  ///< guards `text`
  std::string text;     ///< message_to_json(message, false)
};

/// One object of a view: its message, its stored bytes (to see whether the
/// next view changed it) and its JSON.
template <class T>
struct api_view_item {
  std::string key;    ///< sort and cursor key (machine name; "machine pci id")
  T message;          ///< the object
  std::string bytes;  ///< its deterministic serialisation
  std::shared_ptr<api_json_cell> cell = std::make_shared<api_json_cell>();

  /// The object's JSON (the protobuf JSON mapping, one line).
  const std::string& json() const;
};

/// `msg`'s bytes with map entries in key order, so equal messages have
/// equal bytes.
std::string deterministic_bytes(const google::protobuf::Message& msg);

/// Renders `msg` into `cell` once.
const std::string& render_json_once(api_json_cell& cell, const google::protobuf::Message& msg);

template <class T>
const std::string& api_view_item<T>::json() const {
  return render_json_once(*cell, message);
}

/// An immutable view of the cluster.
struct api_view {
  /// Increases by one with every view whose content differs from the last;
  /// a watch (`?index=N`) answers once the index passes N.
  uint64_t index = 0;
  /// Machines sorted by name.
  std::vector<api_view_item<v1::MachineView>> machines;
  /// GPUs sorted by machine, PCI address, id.
  std::vector<api_view_item<v1::GpuView>> gpus;
  /// Every run, sorted by name.
  v1::RunList runs;

  /// The machine named `name`; null when none.
  const api_view_item<v1::MachineView>* machine(const std::string& name) const;
  /// The GPUs of `machine` as [first, last) indices into `gpus`.
  std::pair<size_t, size_t> gpus_of(const std::string& machine) const;
  /// The GPU with id `id` (on `machine` when that is not empty); null when none.
  const api_view_item<v1::GpuView>* gpu(const std::string& machine, const std::string& id) const;

  /// The Prometheus text of this view (runtime/http/prometheus_metrics.hpp),
  /// rendered on first use and kept: scrapes between two views cost a copy.
  /// The text is rendered into the buffer of a view that has gone (one is
  /// kept), so a scrape of 40,000 GPUs (~127 MiB) does not fault fresh pages
  /// in each time: that was most of its cost (bench/RESULTS.md section 21).
  const std::string& metrics() const;

  api_view() = default;
  api_view(const api_view&) = delete;
  api_view& operator=(const api_view&) = delete;
  /// Hands the metrics buffer on to the next view's render.
  ~api_view();

private:
  mutable std::once_flag metrics_once_;
  mutable std::string metrics_;
};

/// A new view of `machines`, `gpus` and `runs`: objects whose bytes equal
/// those in `previous` keep its JSON (rendering is the costly part), and
/// the index is `previous`'s when nothing changed (then `previous` itself is
/// returned), else one more. `previous` may be null.
std::shared_ptr<const api_view> build_api_view(v1::MachineList machines, v1::GpuList gpus,
                                               v1::RunList runs,
                                               const std::shared_ptr<const api_view>& previous);

/// The sort key of a GPU view, also its paging cursor:
/// "machine,pci_address,id" (URL-safe as it is).
std::string gpu_view_key(const v1::GpuView& g);

/// One page of `items[first, last)`: from the first item whose key is not
/// less than `cursor` (empty: from `first`), at most `limit` of them (0: all).
/// `next` is set to the key of the item after the page, empty on the last.
template <class T>
std::pair<size_t, size_t> api_page(const std::vector<api_view_item<T>>& items, size_t first,
                                   size_t last, const std::string& cursor, size_t limit,
                                   std::string& next) {
  size_t lo = first, hi = last;
  if (!cursor.empty()) {
    while (lo < hi) {
      auto mid = lo + (hi - lo) / 2;
      if (items[mid].key < cursor)
        lo = mid + 1;
      else
        hi = mid;
    }
    hi = last;
  }
  size_t end = limit == 0 || hi - lo <= limit ? hi : lo + limit;
  next = end < last ? items[end].key : std::string{};
  return {lo, end};
}

} // namespace astraeus
