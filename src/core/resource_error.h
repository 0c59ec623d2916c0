// The exception for a machine that fails to carry out valid input: a disk that is full or over quota, or a
// device's I/O error, while braid writes (docs/architecture.md, "Errors"). Not a mistake in the user's files
// (UserError, exit 2, which `braid check` finds beforehand) nor a bug (exit 3): the CLI prints it and exits
// with status 1, as for running out of memory or losing a peer. Permission denied, a missing folder or a
// path that is a file stay UserErrors: what the user named cannot be used as given, and check says so.
#pragma once
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/error.h"

namespace braid {

class ResourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The errno values ResourceError stands for: no space, over quota, a file over the size limit (EFBIG: the
// process's RLIMIT_FSIZE, `ulimit -f`, or the file system's largest file; braid ignores SIGXFSZ so that such
// a write fails instead of killing it), the device's I/O error. All are the machine's, as a full disk is.
inline bool is_resource_errno(int err) { return err == ENOSPC || err == EDQUOT || err == EFBIG || err == EIO; }

// True when a library's error text (HDF5's, which quotes the system's) says the disk is full, over quota,
// or the file over its size limit.
inline bool says_disk_full(const std::string& text) {
  for (int err : {ENOSPC, EDQUOT, EFBIG})
    if (text.find(std::strerror(err)) != std::string::npos) return true;
  return false;
}

// A failed system call on `at`'s path: ResourceError for is_resource_errno(err), else UserError at `at`.
// `message` already holds the system's words (strerror).
[[noreturn]] inline void throw_os_error(int err, const SourceLoc& at, const std::string& message,
                                        const std::string& hint = "") {
  if (is_resource_errno(err)) throw ResourceError((at.valid() ? at.str() + ": " : std::string()) + message);
  throw UserError(at, message, hint);
}

}  // namespace braid
