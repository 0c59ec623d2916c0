// libFuzzer target for the rendezvous store's wire parser (src/distributed/store_protocol.h), the code that reads
// bytes from unauthenticated peers. Treats the input as a connection's byte stream: splits frames off the
// front as the server does and parses each as a request and as a reply. Checks, beyond ASan/UBSan: a frame
// never claims more bytes than the buffer holds or the limit allows, and the encoding is canonical: a
// request that parses re-encodes to exactly the bytes it came from.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "distributed/store_protocol.h"

using namespace braid::dist;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first byte picks the size limit, so that both small and large limits are explored.
  if (size == 0) return 0;
  const size_t limit = data[0] < 128 ? 64 : kDefaultMaxMessageBytes;
  std::span<const std::byte> buf(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  while (!buf.empty()) {
    const FrameView f = next_frame(buf, limit);
    if (f.state != ParseState::Frame) break;
    if (f.frame_bytes > buf.size() || f.body.size() > limit || f.body.size() + kFrameHeaderBytes != f.frame_bytes)
      std::abort();
    StoreRequest q;
    if (parse_request(f.body, q).empty()) {
      const auto again = encode_request(q);
      if (again.size() != f.frame_bytes || std::memcmp(again.data(), buf.data(), again.size()) != 0) std::abort();
    }
    StoreReply r;
    if (parse_reply(f.body, r).empty()) {
      const auto again = encode_reply(r);
      if (again.size() != f.frame_bytes || std::memcmp(again.data(), buf.data(), again.size()) != 0) std::abort();
    }
    buf = buf.subspan(f.frame_bytes);
  }
  return 0;
}
