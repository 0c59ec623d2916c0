// The rendezvous store's wire format: length-prefixed binary frames, and a parser that is a pure function
// over bytes (no I/O, no allocation beyond the decoded fields) so that it can be tested and fuzzed alone.
// Frame: u32 body length (little-endian), then the body: u8 opcode, then the opcode's fields in order;
// strings are u32 length + bytes, integers little-endian. A length above the limit is rejected as soon as
// the 4-byte prefix has arrived, before any body byte is buffered. Replies use the same framing with a
// status byte in place of the opcode. Invariant: encode_* followed by parse_* gives back the same fields.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace braid::dist {

inline constexpr uint32_t kStoreVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 4;
inline constexpr size_t kDefaultMaxMessageBytes = size_t{64} << 20;
inline constexpr size_t kMaxKeysPerWait = 4096;

enum class StoreOp : uint8_t {
  Hello = 1,    // version u32, token str: must be the first frame of a connection
  Set = 2,      // key, value
  Get = 3,      // key                      -> Ok value | NotFound
  Wait = 4,     // u32 count, keys..., timeout_ms u64  -> Ok | Timeout
  Add = 5,      // key, delta i64           -> Ok i64 (the new value; a missing key counts as 0)
  Barrier = 6,  // name, n u32, timeout_ms u64 -> Ok | Timeout
  Delete = 7,   // key                      -> Ok u8 (1 if it existed)
  Age = 8,      // key                      -> Ok u64 (ms since the key was last written) | NotFound
  Time = 9,     // (no fields)              -> Ok i64 (the server's steady clock, ns; for clock alignment)
};
std::string_view store_op_name(StoreOp op);

enum class StoreStatus : uint8_t { Ok = 0, NotFound = 1, Timeout = 2, Error = 3 };

struct StoreRequest {
  StoreOp op = StoreOp::Get;
  uint32_t version = 0;            // Hello
  std::string token;               // Hello
  std::string key;                 // Set, Get, Add, Delete, Age; Barrier: its name
  std::string value;               // Set
  std::vector<std::string> keys;   // Wait
  int64_t delta = 0;               // Add
  uint32_t n = 0;                  // Barrier
  uint64_t timeout_ms = 0;         // Wait, Barrier
};

struct StoreReply {
  StoreStatus status = StoreStatus::Ok;
  std::string payload;  // Get: the value; Add: i64; Delete: u8; Age: u64; Time: i64; Error: the message
};

// What the parser found at the front of a byte buffer.
enum class ParseState : uint8_t { NeedMore, Frame, Invalid };

struct FrameView {
  ParseState state = ParseState::NeedMore;
  size_t frame_bytes = 0;           // Frame: header + body, to consume
  std::span<const std::byte> body;  // Frame: the body
  std::string error;                // Invalid: why
};

// Splits one frame off the front of `buf`. A declared length above max_body is Invalid immediately.
FrameView next_frame(std::span<const std::byte> buf, size_t max_body);

// Decodes a request body. Returns "" and fills `out`, or an error message (trailing bytes, short fields,
// unknown opcode, too many keys); never reads outside `body`.
std::string parse_request(std::span<const std::byte> body, StoreRequest& out);
std::string parse_reply(std::span<const std::byte> body, StoreReply& out);

// A whole frame (header included).
std::vector<std::byte> encode_request(const StoreRequest& r);
std::vector<std::byte> encode_reply(const StoreReply& r);

// Little-endian helpers for payloads.
std::string encode_i64(int64_t v);
int64_t decode_i64(std::string_view s);  // 0 unless s has 8 bytes

// Equal strings in time that depends only on the lengths, never on where they first differ.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace braid::dist
