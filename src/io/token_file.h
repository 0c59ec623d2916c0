// Token files: flat little-endian arrays of token ids (u16, u32 or i32), the `.bin` files of nanoGPT and
// Megatron-style preprocessing, with no header. TokenFile maps one read-only (mmap: nothing is copied; pages
// are read on demand and shared with the page cache); token_range scans ids at memory speed (a vectorised
// min/max) so a whole file can be checked against a vocabulary before training. TokenFileWriter writes one
// atomically (a temporary beside it, fsync, rename). A file changed while mapped is the user's to avoid.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace braid::io {

enum class TokenDType { u16, u32, i32 };

std::optional<TokenDType> parse_token_dtype(std::string_view name);  // "u16", "u32", "i32"
const char* token_dtype_name(TokenDType t);
int64_t token_dtype_size(TokenDType t);
// The largest vocabulary a dtype holds (ids 0..n-1): 65536, 2^32, 2^31.
int64_t token_dtype_capacity(TokenDType t);
// The dtype of a token file for a vocabulary of `vocab` ids: `name` ("u16", "u32", "i32") when given, else u16
// when the ids fit and u32 otherwise. UserError (no place) for an unknown name or a dtype too small; `who`
// names the vocabulary's owner in it ("tokenizer 'm.model'").
TokenDType choose_token_dtype(const std::string& name, int64_t vocab, const std::string& who);

class TokenFile {
 public:
  // Maps `path`. Throws UserError (without a place: callers add theirs) naming the path when it is missing,
  // not a regular file, unreadable, or its size is not a multiple of the dtype's size.
  static std::shared_ptr<const TokenFile> open(const std::string& path, TokenDType dtype);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  TokenDType dtype() const { return dtype_; }
  int64_t size() const { return size_; }  // tokens
  const void* data() const { return data_; }
  int64_t at(int64_t i) const;  // id i (bounds asserted)
  // Hints the kernel how the pages will be read next: sequentially (a scan) or at random (training windows).
  void advise_sequential(bool sequential) const;

 private:
  TokenFile(std::string path, TokenDType dtype, const void* data, int64_t size, size_t mapped)
      : path_(std::move(path)), dtype_(dtype), data_(data), size_(size), mapped_(mapped) {}
  std::string path_;
  TokenDType dtype_;
  const void* data_;
  int64_t size_;
  size_t mapped_;  // bytes mapped (0: an empty file, nothing mapped)
};

struct TokenRange {
  int64_t min = 0, max = -1;  // over an empty range: min 0, max -1
};
// The least and greatest id of tokens [begin, end): one vectorised pass (about memory bandwidth).
TokenRange token_range(const TokenFile& f, int64_t begin, int64_t end);
// The first offset in [begin, end) whose id lies outside [lo, hi), or -1 when none does.
int64_t first_token_outside(const TokenFile& f, int64_t begin, int64_t end, int64_t lo, int64_t hi);

// Writes a token file atomically: ids go to a temporary in the destination's folder; commit() fsyncs it and
// renames it over `path`. Destroyed without commit(), the temporary is removed and `path` is untouched.
// A full disk is a ResourceError (exit 1); a folder that cannot be written a UserError.
class TokenFileWriter {
 public:
  TokenFileWriter(std::string path, TokenDType dtype);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;
  // Appends ids, each asserted to fit the dtype (callers check the vocabulary against the dtype first).
  void append(const int* ids, size_t n);
  int64_t written() const { return written_; }
  void commit();

 private:
  void flush();
  std::string path_, tmp_;
  TokenDType dtype_;
  int fd_ = -1;
  std::string buf_;
  int64_t written_ = 0;
  bool committed_ = false;
};

// Replaces `path` with `bytes` as TokenFileWriter does (temporary, fsync, rename): a tokenizer's `.model`.
void write_bytes_atomically(const std::string& path, std::string_view bytes);

}  // namespace braid::io
