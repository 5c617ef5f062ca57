// Memory that the processes of one host map at once: an anonymous file (memfd) mapped shared.
// Another process maps it by opening /proc/<pid>/fd/<fd> of its owner, and checks that what it
// opened is the owner's file (device and inode) and is sealed against resizing, so that no
// process can shrink it under another's mapping (a read past a shrunk end would be SIGBUS). The
// memory lives while any process maps it: an owner that dies leaves the others' mappings valid.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::base {

// What another process of this host needs to map a SharedFile: its owner's pid and descriptor,
// and the file's identity to check against.
struct SharedFileId {
  std::uint64_t pid = 0;
  std::uint64_t fd = 0;
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t bytes = 0;
};

class SharedFile {
 public:
  SharedFile() = default;
  ~SharedFile();
  SharedFile(SharedFile&& other) noexcept;
  SharedFile& operator=(SharedFile&& other) noexcept;
  SharedFile(const SharedFile&) = delete;
  SharedFile& operator=(const SharedFile&) = delete;

  // A new file of `bytes` (rounded up to whole pages, at least one), zeroed and mapped here.
  // Invalid on failure, with its errno in *err.
  static SharedFile create(std::size_t bytes, int* err);
  // Another process's file, mapped here. Invalid on failure, with its errno in *err (ESTALE:
  // the path led to another file, e.g. the pid is another process's in another pid namespace;
  // EPERM: not sealed against resizing).
  static SharedFile open(const SharedFileId& id, int* err);

  bool valid() const { return data_ != nullptr; }
  void* data() const { return data_; }
  // The mapped bytes (whole pages).
  std::size_t size() const { return bytes_; }
  // What another process passes to open(); only meaningful for a file this process created.
  SharedFileId id() const { return id_; }

 private:
  void release() noexcept;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int fd_ = -1;  // kept open by its creator: peers open it through /proc
  SharedFileId id_;
};

}  // namespace loom::base
