#include "runtime/http/api_view.hpp"

#include <mutex>

#include <algorithm>
#include <unordered_map>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "messages/json.hpp"
#include "runtime/http/prometheus_metrics.hpp"

namespace astraeus {

std::string deterministic_bytes(const google::protobuf::Message& msg) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream{&out};
    google::protobuf::io::CodedOutputStream coded{&stream};
    coded.SetSerializationDeterministic(true);
    msg.SerializeToCodedStream(&coded);
  }
  return out;
}

const std::string& render_json_once(api_json_cell& cell, const google::protobuf::Message& msg) {
  std::call_once(cell.once, [&] { cell.text = message_to_json(msg, false); });
  return cell.text;
}

std::string gpu_view_key(const v1::GpuView& g) {
  // ',' sorts below every character of a machine name, a PCI address and a
  // UUID, so keys sort as (machine, pci_address, id) do; and the key is the
  // X-Next-Cursor a client pastes into ?cursor=, where a ',' needs no
  // escaping (a space did).
  return g.machine() + "," + g.gpu().pci_address() + "," + g.gpu().id();
}

const api_view_item<v1::MachineView>* api_view::machine(const std::string& name) const {
  auto i = std::lower_bound(machines.begin(), machines.end(), name,
                            [](const auto& m, const std::string& n) { return m.key < n; });
  return i != machines.end() && i->key == name ? &*i : nullptr;
}

std::pair<size_t, size_t> api_view::gpus_of(const std::string& machine) const {
  auto lo = std::lower_bound(gpus.begin(), gpus.end(), machine,
                             [](const auto& g, const std::string& m) {
                               return g.message.machine() < m;
                             });
  auto hi = std::upper_bound(lo, gpus.end(), machine,
                             [](const std::string& m, const auto& g) {
                               return m < g.message.machine();
                             });
  return {static_cast<size_t>(lo - gpus.begin()), static_cast<size_t>(hi - gpus.begin())};
}

const api_view_item<v1::GpuView>* api_view::gpu(const std::string& machine,
                                                const std::string& id) const {
  size_t first = 0, last = gpus.size();
  if (!machine.empty())
    std::tie(first, last) = gpus_of(machine);
  for (auto i = first; i < last; ++i)
    if (gpus[i].message.gpu().id() == id)
      return &gpus[i];
  return nullptr;
}

namespace {

/// The metrics buffer of the last view that went, kept for the next render.
struct metrics_buffer_spare {
  std::mutex mutex;
  std::string buffer;
};

metrics_buffer_spare& spare_metrics_buffer() {
  static auto* spare = new metrics_buffer_spare; // never destroyed: views may outlive statics
  return *spare;
}

} // namespace

const std::string& api_view::metrics() const {
  std::call_once(metrics_once_, [this] {
    {
      auto& spare = spare_metrics_buffer();
      std::lock_guard<std::mutex> guard{spare.mutex};
      metrics_.swap(spare.buffer);
    }
    metrics_.clear();
    render_prometheus_metrics(metrics_, *this);
  });
  return metrics_;
}

api_view::~api_view() {
  if (metrics_.capacity() == 0)
    return;
  auto& spare = spare_metrics_buffer();
  std::lock_guard<std::mutex> guard{spare.mutex};
  if (metrics_.capacity() > spare.buffer.capacity())
    metrics_.swap(spare.buffer);
}

namespace {

/// Fills `out` from `msgs`, reusing `old`'s JSON for unchanged objects;
/// true when anything differs from `old`.
template <class T, class KeyFn>
bool fill_items(google::protobuf::RepeatedPtrField<T>& msgs,
                const std::vector<api_view_item<T>>* old,
                std::vector<api_view_item<T>>& out, KeyFn key_of) {
  std::unordered_map<std::string_view, const api_view_item<T>*> before;
  if (old != nullptr) {
    before.reserve(old->size());
    for (const auto& item : *old)
      before.emplace(item.key, &item);
  }
  out.reserve(static_cast<size_t>(msgs.size()));
  for (auto& m : msgs) {
    api_view_item<T> item;
    item.key = key_of(m);
    item.bytes = deterministic_bytes(m);
    item.message = std::move(m);
    out.push_back(std::move(item));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  bool changed = old == nullptr || old->size() != out.size();
  for (auto& item : out) {
    auto i = before.find(item.key);
    if (i != before.end() && i->second->bytes == item.bytes)
      item.cell = i->second->cell;  // its JSON, rendered or not, carries over
    else
      changed = true;
  }
  return changed;
}

} // namespace

std::shared_ptr<const api_view> build_api_view(v1::MachineList machines, v1::GpuList gpus,
                                               v1::RunList runs,
                                               const std::shared_ptr<const api_view>& previous) {
  auto view = std::make_shared<api_view>();
  bool changed = fill_items(*machines.mutable_machines(),
                            previous ? &previous->machines : nullptr, view->machines,
                            [](const v1::MachineView& m) { return m.name(); });
  changed |= fill_items(*gpus.mutable_gpus(), previous ? &previous->gpus : nullptr,
                        view->gpus, [](const v1::GpuView& g) { return gpu_view_key(g); });
  view->runs = std::move(runs);
  if (previous && deterministic_bytes(previous->runs) != deterministic_bytes(view->runs))
    changed = true;
  if (previous && !changed)
    return previous;
  view->index = previous ? previous->index + 1 : 1;
  return view;
}

} // namespace astraeus
