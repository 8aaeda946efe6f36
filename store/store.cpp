#include "store/store.hpp"

#include <string>

namespace astraeus {

const char* to_string(family f) {
  switch (f) {
    case family::machines: return "machines";
    case family::gpus: return "gpus";
    case family::faults: return "faults";
    case family::runs: return "runs";
    case family::workers: return "workers";
    case family::tokens: return "tokens";
    case family::validations: return "validations";
    case family::audit: return "audit";
    case family::workspaces: return "workspaces";
    case family::gpu_history: return "gpu_history";
  }
  return "unknown";
}

std::string key_text(family f, std::string_view key) {
  std::string out = to_string(f);
  out += " key \"";
  out.append(key.data(), key.size());
  out += '"';
  return out;
}

void store_faults::fail_next_writes(size_t count, kind k) {
  std::lock_guard<std::mutex> lock{mu_};
  armed_ = count;
  kind_ = k;
}

size_t store_faults::armed() const {
  std::lock_guard<std::mutex> lock{mu_};
  return armed_;
}

size_t store_faults::failed() const {
  std::lock_guard<std::mutex> lock{mu_};
  return failed_;
}

std::optional<store_faults::kind> store_faults::take() {
  std::lock_guard<std::mutex> lock{mu_};
  if (armed_ == 0)
    return std::nullopt;
  --armed_;
  ++failed_;
  return kind_;
}

Store::~Store() = default;

caf::error Store::put(family f, std::string_view key,
                      const google::protobuf::Message& value, bool sync) {
  std::string bytes;
  if (!value.SerializeToString(&bytes))
    return caf::make_error(ec::store_failure,
                           "store " + path() + ": cannot serialize "
                             + value.GetDescriptor()->full_name() + " for "
                             + key_text(f, key));
  return put_raw(f, key, bytes, sync);
}

caf::expected<bool> Store::get(family f, std::string_view key,
                               google::protobuf::Message& out) {
  auto bytes = get_raw(f, key);
  if (!bytes)
    return bytes.error();
  if (!*bytes)
    return false;
  const auto& b = **bytes;
  if (!out.ParseFromArray(b.data(), static_cast<int>(b.size())))
    return corrupt(f, key, out.GetDescriptor()->full_name());
  return true;
}

store_limits Store::limits() const {
  return {};
}

caf::error Store::write_chunked(const std::vector<change>& changes, bool sync) {
  auto lim = limits();
  std::vector<change> chunk;
  size_t bytes = 0;
  for (const auto& c : changes) {
    auto size = c.key.size() + (c.value ? c.value->size() : 0);
    if (!chunk.empty()
        && (chunk.size() + 1 > lim.max_batch_changes || bytes + size > lim.max_batch_bytes)) {
      if (auto err = write(chunk, sync))
        return err;
      chunk.clear();
      bytes = 0;
    }
    chunk.push_back(c);
    bytes += size;
  }
  if (chunk.empty())
    return caf::none;
  return write(chunk, sync);
}

caf::error Store::corrupt(family f, std::string_view key,
                          const std::string& type) const {
  return caf::make_error(ec::corrupt_record, "store " + path() + ": " + key_text(f, key)
                                               + " does not parse as " + type);
}

caf::error Store::sync_wal() {
  return caf::none;
}

} // namespace astraeus
