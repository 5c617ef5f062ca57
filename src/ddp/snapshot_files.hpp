// The files of a snapshot folder: which are read (this user's regular files only, opened so that
// no file type can block), which are removed, and the fence file that keeps two jobs from
// writing one run's snapshots (docs/reliability.md, "Snapshots").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/ddp/layers.hpp"
#include "loom/ddp/optim.hpp"
#include "snapshot_format.hpp"

namespace loom::ddp::snapshot {

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&&) = delete;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, so that the caller sees the error (NFS reports write errors here).
  int close();

 private:
  int fd_;
};

// Opens a snapshot (or fence) file for reading without following a symbolic link and without
// blocking (a FIFO or device opens at once, then is refused): only a regular file owned by this
// user and writable by no one else is accepted. Error (not InvalidArgument: the file is not
// skipped as a corrupt one would be) naming `operation` and the file otherwise.
Fd open_checked(const std::string& path, const std::string& operation);

// "<run>-<step>", or "<step>" for the unnamed run.
std::string run_and_step(const std::string& run_id, std::uint64_t step);

// Run `run_id`'s snapshots in dir by their names, newest (highest step) first.
std::vector<std::pair<std::uint64_t, std::string>> snapshots_of(const std::string& dir,
                                                                const std::string& run_id);

// The header of an opened snapshot. InvalidArgument where it is none this build reads.
Header header_of(int fd, const std::string& path);

// A file's bytes, once it passes open_checked, its header shows it is this run's and its size
// fits this model. InvalidArgument for a file that is merely not a usable snapshot.
std::vector<unsigned char> read_candidate(const std::string& path, const std::string& run_id,
                                          Module& model, Optimizer& optimizer,
                                          const std::string& operation);

// The newest of run_id's snapshots in dir whose file passes open_checked and whose header names
// the run: its step and the highest fence of any such file (both nullopt/0 when there is none).
// Reads headers only.
struct Listed {
  std::optional<std::uint64_t> newest_step;
  std::uint64_t highest_fence = 0;
};
Listed list_headers(const std::string& dir, const std::string& run_id,
                    const std::string& operation);

// Warns (once per folder and process) when others than this user may write dir: they could
// remove or rename snapshots, though never have one of theirs read.
void warn_if_shared(const std::string& dir);

// Removes temporary files ".snapshot-<run>-<step>.tmp.<pid>.<host>" whose writer is gone: on
// this host, a dead pid (or this process: a run has one writer); on another host, a file
// untouched for longer than any save takes. Only this user's files are removed.
void remove_stale_temps(const std::string& dir, const std::string& run_id, const std::string& host);

// Writes bytes to a new file `temp` (0600), fsynced and closed; removes it on failure.
void write_new_file(const std::string& temp, const std::vector<unsigned char>& bytes);
// Makes the folder's entries (the rename) durable.
void fsync_folder(const std::string& dir);

std::string host_name();

// The run's fence file dir/.snapshot-<run>.fence (.snapshot.fence for the unnamed run), held
// under an exclusive lock for the object's life: the highest claim ever taken on the run's
// snapshots in that folder. `create`: make it where it is not (else exists() is false).
class FenceFile {
 public:
  FenceFile(const std::string& dir, const std::string& run_id, bool create,
            const std::string& operation);
  bool exists() const { return fd_.get() >= 0; }
  const std::string& path() const { return path_; }
  std::uint64_t read() const;  // 0 for an empty (new) file
  void write(std::uint64_t fence);

 private:
  std::string path_, operation_;
  Fd fd_;
};

}  // namespace loom::ddp::snapshot
