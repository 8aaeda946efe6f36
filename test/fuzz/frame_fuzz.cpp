// libFuzzer target: the gate's frame decoder (runtime/gate/frame_codec.hpp), fed
// a byte stream as a socket would deliver it, in pieces. Invariants: no
// crash, no sanitizer report, a record is never longer than the cap, and a
// length over the cap fails before its body is read. Issue 7.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/gate/frame_codec.hpp"

using namespace astraeus;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  // The first byte picks the cap and the piece size, the rest is the stream.
  const uint64_t caps[] = {1024, 4096, 1u << 20};
  auto cap = caps[data[0] % 3];
  size_t piece = 1 + (data[0] >> 2);
  const char* stream = reinterpret_cast<const char*>(data + 1);
  size_t n = size - 1;
  frame_reader reader{cap};
  size_t fed = 0;
  while (fed < n) {
    auto k = std::min(piece, n - fed);
    reader.feed(stream + fed, k);
    fed += k;
    for (;;) {
      auto next = reader.next();
      if (!next || !*next)
        break;
      // A frame that parsed has a body and serializes within the cap.
      if ((*next)->body_case() == v1::Frame::BODY_NOT_SET)
        std::abort();
      (void) frame_kind(**next);
    }
  }
  // The raw record path and the length check, on the same bytes.
  if (n >= frame_header_size) {
    auto len = decode_frame_length(stream, cap);
    if (len && (*len == 0 || *len > cap))
      std::abort();
    if (len && n >= frame_header_size + *len)
      (void) decode_frame_body(stream + frame_header_size, *len);
  }
  frame_reader records{cap};
  records.feed(stream, n);
  for (;;) {
    auto r = records.next_record();
    if (!r || !*r)
      break;
    if ((*r)->size() > cap)
      std::abort();
  }
  return 0;
}
