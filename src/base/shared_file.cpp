#include "base/shared_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <utility>

namespace loom::base {
namespace {

std::size_t whole_pages(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return bytes == 0 ? page : (bytes + page - 1) / page * page;
}

constexpr int kResizeSeals = F_SEAL_SHRINK | F_SEAL_GROW;

}  // namespace

SharedFile::~SharedFile() {
  release();
}

SharedFile::SharedFile(SharedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      fd_(std::exchange(other.fd_, -1)),
      id_(other.id_) {}

SharedFile& SharedFile::operator=(SharedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    fd_ = std::exchange(other.fd_, -1);
    id_ = other.id_;
  }
  return *this;
}

void SharedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(data_, bytes_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr, bytes_ = 0, fd_ = -1;
}

SharedFile SharedFile::create(std::size_t bytes, int* err) {
  SharedFile f;
  const std::size_t size = whole_pages(bytes);
  const int fd = ::memfd_create("loom-window", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    *err = errno;
    return f;
  }
  f.fd_ = fd;
  struct stat st {};
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, kResizeSeals | F_SEAL_SEAL) != 0 || ::fstat(fd, &st) != 0) {
    *err = errno;
    return f;
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *err = errno;
    return f;
  }
  f.data_ = p, f.bytes_ = size;
  f.id_ = SharedFileId{static_cast<std::uint64_t>(::getpid()), static_cast<std::uint64_t>(fd),
                       static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
                       size};
  *err = 0;
  return f;
}

SharedFile SharedFile::open(const SharedFileId& id, int* err) {
  SharedFile f;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%llu/fd/%llu", static_cast<unsigned long long>(id.pid),
                static_cast<unsigned long long>(id.fd));
  const int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return f;
  }
  struct stat st {};
  const int seals = ::fcntl(fd, F_GET_SEALS);
  int failure = 0;
  if (::fstat(fd, &st) != 0)
    failure = errno;
  else if (static_cast<std::uint64_t>(st.st_dev) != id.device ||
           static_cast<std::uint64_t>(st.st_ino) != id.inode ||
           static_cast<std::uint64_t>(st.st_size) != id.bytes)
    failure = ESTALE;
  else if (seals < 0 || (seals & kResizeSeals) != kResizeSeals)
    failure = EPERM;
  void* p = failure != 0 ? MAP_FAILED
                         : ::mmap(nullptr, static_cast<std::size_t>(id.bytes),
                                  PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (failure == 0 && p == MAP_FAILED) failure = errno;
  ::close(fd);  // the mapping keeps the file
  if (failure != 0) {
    *err = failure;
    return f;
  }
  f.data_ = p, f.bytes_ = static_cast<std::size_t>(id.bytes);
  *err = 0;
  return f;
}

}  // namespace loom::base
