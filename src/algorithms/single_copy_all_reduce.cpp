// All-reduce on one host, each byte crossing between ranks' memory once each way: rank r owns
// block r of the buffer. It reads block r of every peer's input straight out of the peer's memory
// (process_vm_readv), a piece at a time into a scratch buffer that stays in its core's cache, folds
// each piece into block r of its output, and writes the finished piece straight into every peer's
// output (process_vm_writev) while it is still in the cache. The slots' ring copies every byte into
// a slot and out again, on the way round and back.
//
// Writing the block, rather than having each peer read it, leaves every line of the buffers with
// the core that wrote it last: the peers never read a rank's own block, so its next fold finds the
// lines in its own cache instead of taking each back from a peer (at 1 MiB, 2 ranks, reading it
// made the fold 3-6x slower), and in place the block a rank reads next of a peer's input is the
// one it wrote there itself.
//
// No rank but r reads or writes block r of any rank's buffers in the call, so the only order is
// the call's end: two small messages to every peer, each sent to all peers before any is awaited:
//   hello  where the sender's buffers are (its pid, and a random word it keeps for the call);
//   done   the sender no longer reads the receiver's input and has written its block into the
//          receiver's output.
// A rank returns once every peer's "done" is here, so its buffers are free again.
//
// A rank checks the peer's word before it touches the peer's buffers, and before each piece it
// writes, so a pid that names another process (ranks in different pid namespaces) is a failed
// read, never wrong data, and a peer that has left the call (its word goes when it leaves) is
// written into no further. The first call of a communicator adds a round in which every rank says
// whether it could read and write every peer's word: where any could not (a container's seccomp
// filter, Yama's ptrace scope), every rank learns it from the same messages and this call and
// every later one run the ring through the slots.
//
// Later, a read or write that fails stops the rank's copies, and its "done" says so (the errno,
// and whose memory); every rank still sends its "done" before it awaits any, so no rank waits for
// one that waits for it. A peer that is gone is named by its connection's error where its "done"
// was due, or, where it sent its "done" and died, by the check of its process that a failed copy
// of its memory makes. Where every rank is there, each learns from the same messages who failed:
// out of place the call runs again as the ring (the inputs are intact); in place every rank raises
// (the inputs are partly overwritten), naming the rank whose copy failed, whose memory, and why;
// every later call runs the ring. A rank that leaves the call on an error clears its word and
// waits, briefly, for the peers that may still be writing into it.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "algorithms/algorithm_costs.hpp"
#include "algorithms/algorithms.hpp"
#include "algorithms/peer_word.hpp"
#include "algorithms/primitives.hpp"
#include "base/logging.hpp"
#include "base/process_memory.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace loom::algorithms {
namespace {

struct Hello {
  std::uint64_t pid = 0;
  std::uint64_t nonce = 0;
  std::uint64_t nonce_address = 0;  // where the sender keeps `nonce` until the call's end
  std::uint64_t in_address = 0;
  std::uint64_t out_address = 0;
  std::uint64_t count = 0;  // the call's elements, checked against the receiver's
  std::uint8_t dtype = 0;
  std::uint8_t op = 0;
  std::uint8_t pad[6] = {};
};
// The first call's verdict, then each call's "done".
struct Word {
  std::uint32_t value = 0;
  std::uint32_t err = 0;   // the errno of the sender's failed read or write, or 0
  std::uint32_t redo = 0;  // the sender's inputs are intact: the call can run again
  std::int32_t peer = -1;  // the rank whose memory the sender failed to read or write
};

// Calls the single copy served to the end, in this process (tests check the path was taken).
std::atomic<std::uint64_t> calls_served{0};

// Across the calls of one communicator: whether every rank reads and writes every peer (decided by
// the first call, alike on every rank, and undone by a later call's failed copy), and the scratch
// buffer the pieces are read into.
struct Record {
  bool checked = false;
  bool usable = false;
  std::vector<std::byte> scratch;
};

// The piece read at a time: a quarter of a core's cache, where the probe measured it (the piece,
// the output's block of it and the input's stay cached while they are folded).
std::size_t piece_bytes(const Engine& engine) {
  const double cap = engine.selector()
                         .inputs()
                         .costs.of(transport::TransportKind::shm)
                         .slice_cap_bytes;  // an eighth of the core's cache
  const auto bytes = cap > 0 ? static_cast<std::size_t>(2 * cap) : std::size_t{256} << 10;
  return std::clamp(bytes, std::size_t{64} << 10, std::size_t{1} << 20);
}

class SingleCopyAllReduce {
 public:
  SingleCopyAllReduce(Engine& engine, const Collective& call)
      : engine_(engine),
        record_(engine.records().get<Record>()),
        call_(call),
        n_(engine.size()),
        r_(engine.rank()),
        elem_(size_of(call.dtype)),
        in_(static_cast<const std::byte*>(call.in)),
        out_(static_cast<std::byte*>(call.out)) {
    // Blocks of whole cache lines where the elements allow, so that no two ranks write one line.
    const std::size_t per_line = std::max<std::size_t>(1, 64 / elem_);
    const std::size_t share = (call.count + static_cast<std::size_t>(n_) - 1) / n_;
    per_block_ = (share + per_line - 1) / per_line * per_line;
  }

  SingleCopyAllReduce(const SingleCopyAllReduce&) = delete;
  SingleCopyAllReduce& operator=(const SingleCopyAllReduce&) = delete;
  ~SingleCopyAllReduce() { nonce_ = 0; }

  // False where the call is to run as the ring: the ranks cannot read and write each other, or
  // a copy failed out of place (every rank returns false alike).
  bool run() {
    if (record_.checked && !record_.usable) return false;
    // Buffers that overlap without being one: the peers read a copy of the input, which this
    // rank's output would otherwise overwrite under them.
    const std::size_t bytes = call_.count * elem_;
    if (in_ != out_ && in_ < out_ + bytes && out_ < in_ + bytes) {
      staged_.assign(in_, in_ + bytes);
      in_ = staged_.data();
    }
    for (int k = 1; k < n_; ++k) engine_.connection(peer(k)), engine_.connection(peer(-k));
    try {
      // From here on the peers may write into this rank's output.
      say(Hello{static_cast<std::uint64_t>(::getpid()), nonce_,
                reinterpret_cast<std::uint64_t>(&nonce_), reinterpret_cast<std::uint64_t>(in_),
                reinterpret_cast<std::uint64_t>(out_), call_.count,
                static_cast<std::uint8_t>(call_.dtype), static_cast<std::uint8_t>(call_.op)});
      return exchange();
    } catch (...) {
      leave();
      throw;
    }
  }

  static std::uint64_t served() { return calls_served.load(std::memory_order_relaxed); }

 private:
  static constexpr std::uint32_t kDone = 2;    // every read and write went through
  static constexpr std::uint32_t kFailed = 3;  // one failed (Word::err): the sender stopped there
  // How long a rank that leaves the call on an error waits for the peers still writing into it.
  static constexpr auto kLeaveWait = std::chrono::milliseconds(200);
  // How long a peer whose memory could not be found (ESRCH) is given to finish dying.
  static constexpr auto kDyingWait = std::chrono::milliseconds(200);

  bool exchange() {
    theirs_.resize(static_cast<std::size_t>(n_));
    for (int k = 1; k < n_; ++k) hear(peer(-k), theirs_[idx(peer(-k))]);
    const int err = check_words();
    if (!record_.checked) {
      if (!agree(err)) return false;
    } else if (err != 0) {
      fail(first_unread_, err);
    }
    if (err_ == 0) reduce_and_write_own_block();
    say(Word{err_ == 0 ? kDone : kFailed, static_cast<std::uint32_t>(err_), intact() ? 1u : 0u,
             failed_peer_});
    return ends();
  }

  int peer(int k) const { return positive_mod(r_ + k, n_); }
  static std::size_t idx(int rank) { return static_cast<std::size_t>(rank); }
  std::pair<std::size_t, std::size_t> block(int owner) const {
    const std::size_t from = std::min(call_.count, idx(owner) * per_block_);
    return {from, std::min(call_.count, from + per_block_) - from};
  }
  Primitives to(int other) { return Primitives(engine_, nullptr, &engine_.connection(other)); }
  Primitives from(int other) { return Primitives(engine_, &engine_.connection(other), nullptr); }

  template <class Message>
  void say(const Message& message) {
    for (int k = 1; k < n_; ++k) to(peer(k)).send_message(&message, sizeof message);
  }

  void hear(int from_rank, Hello& hello) {
    from(from_rank).recv_message(&hello, sizeof hello);
    if (hello.count != call_.count || hello.dtype != static_cast<std::uint8_t>(call_.dtype) ||
        hello.op != static_cast<std::uint8_t>(call_.op))
      throw CollectiveMismatch(
          fmt::format("{}: rank {}: collective mismatch: rank {} all-reduces {} elements of "
                      "dtype {} with op {} where rank {} all-reduces {}",
                      call_.describe(), r_, from_rank, hello.count, hello.dtype, hello.op, r_,
                      call_.count),
          fmt::format("rank {} all-reduces {} elements where rank {} all-reduces {}", from_rank,
                      hello.count, r_, call_.count));
  }

  Word expect_end(int from_rank) {
    Word word;
    from(from_rank).recv_message(&word, sizeof word);
    if (word.value != kDone && word.value != kFailed)
      throw PeerError(fmt::format("{}: rank {}: rank {} sent step {} of the single copy where the "
                                  "end of its reads and writes was due",
                                  call_.describe(), r_, from_rank, word.value),
                      from_rank);
    return word;
  }

  // Every peer's "done" (a peer that is gone raises here, named by its connection); then, where
  // any rank's copy failed, what every rank does alike: the ring out of place; in place an error
  // naming the lowest rank whose copy failed (its own Error there, PeerError naming it elsewhere,
  // so that whichever rank tells the others first, they hear of that rank).
  bool ends() {
    std::vector<std::tuple<int, int, int>> failed;  // (rank, errno, the peer it failed on)
    bool intact_everywhere = intact();
    for (int k = 1; k < n_; ++k, ++ends_heard_) {
      const Word word = expect_end(peer(-k));
      if (word.value == kFailed)
        failed.emplace_back(peer(-k), static_cast<int>(word.err), word.peer);
      intact_everywhere = intact_everywhere && word.redo == 1;
    }
    if (err_ != 0) failed.emplace_back(r_, err_, failed_peer_);
    if (failed.empty()) {
      calls_served.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    record_.usable = false;
    std::sort(failed.begin(), failed.end());
    for (const auto& [rank, err, of] : failed)
      if (of >= 0 && of != r_ && gone(of, err))
        throw PeerError(
            fmt::format("{}: rank {}: rank {}'s process {} is gone (exited or crashed): "
                        "rank {} could not read or write its memory ({})",
                        call_.describe(), r_, of, theirs_[idx(of)].pid, rank, std::strerror(err)),
            of);
    std::string who;
    for (const auto& [rank, err, of] : failed)
      who += fmt::format("{}rank {} could not read or write rank {}'s memory ({})",
                         who.empty() ? "" : "; ", rank, of, std::strerror(err));
    const std::string what = fmt::format("{}: rank {}: {}", call_.describe(), r_, who);
    if (intact_everywhere) {
      base::log().warn(
          "{}: the call runs again as the ring through the slots, as will every "
          "later one",
          what);
      return false;
    }
    const std::string undone =
        what +
        "; a rank ran in place, its input partly overwritten: the call cannot run again "
        "and its output is undefined";
    const int blamed = std::get<0>(failed.front());
    if (blamed == r_) throw Error(undone);
    throw PeerError(undone, blamed);
  }

  // Whether rank `other`'s process is gone, the cause of a copy that failed with `err`. ESRCH gives
  // it a moment: a killed process loses its memory before it is a zombie.
  bool gone(int other, int err) const {
    const auto pid = static_cast<int>(theirs_[idx(other)].pid);
    const auto until = std::chrono::steady_clock::now() +
                       (err == ESRCH ? kDyingWait : std::chrono::milliseconds(0));
    while (base::process_alive(pid)) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  // The inputs this rank's peers read are still the call's: it can run again.
  bool intact() const { return in_ != out_ && staged_.empty(); }

  // Stops this rank's copies: the peer whose memory it could not read or write, and why.
  void fail(int other, int err) {
    if (err_ != 0) return;
    err_ = err;
    failed_peer_ = other;
  }

  // Leaving on an error: the word goes first (no peer starts another write into this rank), then
  // a short wait for the "done" of the peers that may be writing, so that none still is when the
  // caller gets its buffers back. A peer whose hello is still unread here, or that is gone, ends
  // the wait for it (its next message is not a "done", or none comes).
  void leave() noexcept {
    nonce_ = 0;
    const auto until = std::chrono::steady_clock::now() + kLeaveWait;
    for (int k = 1 + ends_heard_; k < n_; ++k) {
      try {
        Word word;
        while (std::chrono::steady_clock::now() < until) {
          if (!from(peer(-k)).try_recv_message(&word, sizeof word))
            sched_yield();
          else if (word.value == kDone || word.value == kFailed)
            break;
        }
      } catch (...) {  // gone, or sent something else: nothing more to wait for from it
      }
    }
  }

  // Reads every peer's word: 0, or the errno of the first that failed (first_unread_ its rank).
  int check_words() {
    for (int k = 1; k < n_; ++k) {
      const Hello& h = theirs_[idx(peer(k))];
      // The first call also writes the word back as it is: a filter may refuse writes alone.
      const int err =
          check_peer_word(static_cast<pid_t>(h.pid), h.nonce_address, h.nonce, !record_.checked);
      if (err != 0) {
        first_unread_ = peer(k);
        return err;
      }
    }
    return 0;
  }

  // The first call: whether every rank read and wrote every peer's word, from every rank's
  // verdict (`err`: this rank's errno, 0 where it could).
  bool agree(int err) {
    say(Word{err == 0 ? 1u : 0u, static_cast<std::uint32_t>(err)});
    std::string refused = err == 0 ? ""
                                   : fmt::format("rank {} ({}, of rank {}'s memory)", r_,
                                                 std::strerror(err), first_unread_);
    for (int k = 1; k < n_; ++k) {
      Word theirs;
      from(peer(-k)).recv_message(&theirs, sizeof theirs);
      if (theirs.value != 1)
        refused += fmt::format("{}rank {} ({})", refused.empty() ? "" : ", ", peer(-k),
                               std::strerror(static_cast<int>(theirs.err)));
    }
    record_.checked = true;
    record_.usable = refused.empty();
    if (!record_.usable)
      base::log().warn(
          "{}: rank {}: not every rank of this host can read and write its peers' memory "
          "(process_vm_readv, process_vm_writev): refused on {}: the single-copy all-reduce runs "
          "the ring through the slots",
          call_.describe(), r_, refused);
    return record_.usable;
  }

  // False where the read failed (fail() has the peer and why).
  bool read(int other, std::uint64_t address, std::size_t offset_elems, void* into,
            std::size_t count) {
    const Hello& h = theirs_[idx(other)];
    const WorkTimer timed(engine_, Engine::Work::peer_memory, count * elem_);
    const int err = base::read_process_memory(
        static_cast<pid_t>(h.pid), reinterpret_cast<const void*>(address + offset_elems * elem_),
        into, count * elem_);
    if (err != 0) fail(other, err);
    return err == 0;
  }

  // Block r of every input folded into block r of the output, a piece at a time: this rank's
  // input first, then each peer's in rank order. Each finished piece goes at once into every
  // peer's output, the next peer first (each peer receives the blocks in a different order),
  // while it is still in this core's cache: written after the whole block, beyond the cache each
  // piece came back from memory. 2 ranks over shm, cores far apart, 5 alternating launches each:
  // in place 64 MiB 15.6 -> 11.1 ms, 16 MiB 2.53 -> 2.27 ms (medians); out of place no change
  // beyond the launches' spread.
  void reduce_and_write_own_block() {
    const auto [first, count] = block(r_);
    std::byte* out = out_ + first * elem_;
    const std::byte* mine = in_ + first * elem_;
    const std::size_t piece = std::max<std::size_t>(1, piece_bytes(engine_) / elem_);
    if (n_ > 1 && record_.scratch.size() < piece * elem_) record_.scratch.resize(piece * elem_);
    std::byte* scratch = record_.scratch.data();
    for (std::size_t done = 0; done < count; done += piece) {
      const std::size_t m = std::min(piece, count - done);
      std::byte* to = out + done * elem_;
      bool folded = false;
      for (int p = 0; p < n_; ++p) {
        if (p == r_) continue;
        if (!read(p, theirs_[idx(p)].in_address, first + done, scratch, m)) return;
        const WorkTimer timed(engine_, Engine::Work::own_memory, m * elem_);
        kernels::reduce(to, folded ? to : mine + done * elem_, scratch, m, call_.dtype, call_.op);
        folded = true;
      }
      if (!folded || call_.op == ReduceOp::avg) {
        const WorkTimer timed(engine_, Engine::Work::own_memory, m * elem_);
        if (!folded && to != mine + done * elem_) kernels::copy(to, mine + done * elem_, m * elem_);
        if (call_.op == ReduceOp::avg) kernels::divide(to, to, m, call_.dtype, n_);
      }
      if (!write_piece(first + done, m)) return;
    }
  }

  // Elements [at, at + m) of the output into every peer's output, the next peer first; false
  // where a write failed (fail() has the peer and why).
  bool write_piece(std::size_t at, std::size_t m) {
    for (int k = 1; k < n_; ++k) {
      const int to_rank = peer(k);
      const Hello& h = theirs_[idx(to_rank)];
      // The peer may have left the call since its hello (another rank failed): its word goes
      // when it leaves, and nothing more is written into memory it may have reused.
      int err = check_peer_word(static_cast<pid_t>(h.pid), h.nonce_address, h.nonce, false);
      if (err == 0) {
        const WorkTimer timed(engine_, Engine::Work::peer_memory, m * elem_);
        err = base::write_process_memory(static_cast<pid_t>(h.pid),
                                         reinterpret_cast<void*>(h.out_address + at * elem_),
                                         out_ + at * elem_, m * elem_);
      }
      if (err != 0) {
        fail(to_rank, err);
        return false;
      }
    }
    return true;
  }

  Engine& engine_;
  Record& record_;
  const Collective& call_;
  const int n_, r_;
  const std::size_t elem_;
  std::size_t per_block_ = 0;
  const std::byte* in_;
  std::byte* out_;
  std::vector<std::byte> staged_;
  std::vector<Hello> theirs_;
  int first_unread_ = -1;
  int err_ = 0;           // this rank's failed read or write (an errno), or 0
  int failed_peer_ = -1;  // ... of this peer's memory
  int ends_heard_ = 0;    // the peers whose "done" is here (peer(-1) first)
  // Kept in memory for the call (a peer reads it, and writes it back as it is); cleared when this
  // rank leaves the call, however it leaves, so that no peer writes into its buffers after.
  volatile std::uint64_t nonce_ = fresh_nonce();
};

}  // namespace

void single_copy_all_reduce(Engine& engine, const Collective& call) {
  if (SingleCopyAllReduce(engine, call).run()) return;
  // Some rank cannot read or write its peers (every rank learnt it in the same call): the ring.
  const SelectionInputs& in = engine.selector().inputs();
  const std::size_t bytes = call.bytes();
  engine.set_slicing(ring_slice(in, bytes, false), ring_round_slices(in, bytes, false));
  ring_all_reduce(engine, call);
}

std::uint64_t single_copy_all_reduce_calls() {
  return SingleCopyAllReduce::served();
}

}  // namespace loom::algorithms
