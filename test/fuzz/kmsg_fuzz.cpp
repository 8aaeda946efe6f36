// libFuzzer target for the kernel-log parsers (runtime/faults/kmsg.hpp): any bytes
// as a /dev/kmsg line and as a record's message. Besides what the
// sanitizers catch, it aborts when a result breaks its documented form.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/faults/kmsg.hpp"

namespace {

bool valid_utf8(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    auto byte = static_cast<unsigned char>(text[i]);
    size_t length = byte < 0x80 ? 1 : (byte & 0xe0) == 0xc0 ? 2 : (byte & 0xf0) == 0xe0 ? 3
                                    : (byte & 0xf8) == 0xf0 ? 4 : 0;
    if (length == 0 || i + length > text.size())
      return false;
    for (size_t k = 1; k < length; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80)
        return false;
    i += length;
  }
  return true;
}

// "dddd:bb:dd.f", lower-case hex, domain 4 to 8 digits; or empty.
bool pci_form(const std::string& pci) {
  if (pci.empty())
    return true;
  if (pci.size() < 12 || pci.size() > 16)
    return false;
  size_t domain = pci.size() - 8;
  for (size_t i = 0; i < pci.size(); ++i) {
    char c = pci[i];
    if (i == domain || i == domain + 3) {
      if (c != ':')
        return false;
    } else if (i == domain + 6) {
      if (c != '.')
        return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

void check(const astraeus::kmsg_record& record) {
  auto event = astraeus::parse_gpu_event(record);
  if (!event)
    return;
  if (event->text.size() > 512 || !valid_utf8(event->text) || !pci_form(event->pci_address)
      || event->xid.has_value() != (event->kind == astraeus::gpu_event_kind::xid)
      || event->sequence != record.sequence || event->timestamp_us != record.timestamp_us
      || std::string_view(astraeus::to_string(event->kind)) == "unknown")
    std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  if (auto record = astraeus::parse_kmsg_line(input)) {
    if (record->priority < -1)
      std::abort();
    check(*record);
  }
  astraeus::kmsg_record raw;
  raw.message = std::string(input);
  check(raw);
  return 0;
}
