// All-to-all on one host, each large block in one copy: the sender tells its receiver where the
// block is (one small message), the receiver reads it straight out of the sender's input with
// process_vm_readv and says when it is done (a second message), so that no rank returns, and
// lets its input change, while a peer may still read it. The slots copy every byte twice (into
// the slot, out of it); this copies it once. Blocks the model prices cheaper through the slots
// (Engine::reads: small ones, or the uneven call's that it does not read) go through them in
// pairwise steps; both ends of a block decide alike from its size, which they share.
//
// Each message carries the sender's pid and a random word it keeps in memory for the call; a
// reader checks that word first, so a pid that names another process (ranks in different pid
// namespaces) is a failed read, never wrong data. A failed read is sent back in the done message:
// that block then goes through the slots in the same call, and every later block between the two
// ranks, either way (both learned it in the same call).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "algorithms/algorithms.hpp"
#include "algorithms/all_to_all_blocks.hpp"
#include "algorithms/peer_word.hpp"
#include "algorithms/primitives.hpp"
#include "algorithms/waiter.hpp"
#include "base/logging.hpp"
#include "base/process_memory.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace loom::algorithms {
namespace {

struct Hello {
  std::uint64_t pid = 0;
  std::uint64_t nonce = 0;
  std::uint64_t nonce_address = 0;  // where the sender keeps `nonce` until the call's end
  std::uint64_t block_address = 0;  // the sender's block for the receiver
  std::uint64_t block_count = 0;    // its elements
};
struct Done {
  std::uint32_t read_errno = 0;  // 0: the receiver read the block
  std::uint32_t pad = 0;
};

// The peers a single-copy read failed with, either way, across the communicator's calls: both
// ends learned it in the same call, and their blocks go through the slots from then on.
struct Refusals {
  std::vector<bool> by_peer;
  bool refused(int peer) const {
    return static_cast<std::size_t>(peer) < by_peer.size() &&
           by_peer[static_cast<std::size_t>(peer)];
  }
  void refuse(int peer, int size) {
    if (by_peer.size() <= static_cast<std::size_t>(peer))
      by_peer.resize(static_cast<std::size_t>(size), false);
    by_peer[static_cast<std::size_t>(peer)] = true;
  }
};

// One call's blocks between this rank and its peers, and how each travels.
class SingleCopy {
 public:
  SingleCopy(Engine& engine, const Collective& call)
      : engine_(engine),
        refusals_(engine.records().get<Refusals>()),
        call_(call),
        blocks_(call),
        n_(engine.size()),
        r_(engine.rank()),
        elem_(size_of(call.dtype)),
        in_(static_cast<const std::byte*>(call.in)),
        out_(static_cast<std::byte*>(call.out)) {
    // Overlapping: the peers read a copy, since this rank overwrites its input.
    if (blocks_.buffers_overlap(n_)) {
      staged_.assign(in_, in_ + blocks_.input_end(n_) * elem_);
      in_ = staged_.data();
    }
  }

  void run() {
    blocks_.check_kept(r_);
    // Connections in pairwise's order (rank r+k's first, then rank r-k's) on every rank.
    for (int k = 1; k < n_; ++k) engine_.connection(peer(k)), engine_.connection(peer(-k));
    say_hello();
    const auto [own_from, own_count] = blocks_.sent_to(r_);
    {
      const WorkTimer timed(engine_, Engine::Work::own_memory, own_count * elem_);
      kernels::copy(out_ + blocks_.received_from(r_).first * elem_, in_ + own_from * elem_,
                    own_count * elem_);
    }
    through_slots([&](int to) { return !reads(to, blocks_.sent_to(to).second); },
                  [&](int from) { return !reads(from, blocks_.received_from(from).second); });
    read_blocks();
    collect_dones();
    if (failed_out_.empty() && failed_in_.empty()) return;
    // Both ends of each failed block know it: it goes through the slots now, and every later
    // block between them.
    through_slots([&](int to) { return contains(failed_out_, to); },
                  [&](int from) { return contains(failed_in_, from); });
    for (int p : failed_out_) refusals_.refuse(p, n_);
    for (int p : failed_in_) refusals_.refuse(p, n_);
  }

 private:
  int peer(int k) const { return positive_mod(r_ + k, n_); }
  static bool contains(const std::vector<int>& v, int x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  }
  // Whether the block of `count` elements between this rank and `other` is read in place.
  bool reads(int other, std::size_t count) const {
    return count > 0 && engine_.reads().reads(count * elem_) && !refusals_.refused(other);
  }
  Primitives to(int other) { return Primitives(engine_, nullptr, &engine_.connection(other)); }
  Primitives from(int other) { return Primitives(engine_, &engine_.connection(other), nullptr); }

  // Messages go out before any is awaited (each connection has room for one), in ring order.
  void say_hello() {
    for (int k = 1; k < n_; ++k) {
      const int to_rank = peer(k);
      const auto [first, count] = blocks_.sent_to(to_rank);
      if (!reads(to_rank, count)) continue;
      const Hello hello{static_cast<std::uint64_t>(::getpid()), nonce_,
                        reinterpret_cast<std::uint64_t>(kept_),
                        reinterpret_cast<std::uint64_t>(in_ + first * elem_), count};
      to(to_rank).send_message(&hello, sizeof hello);
      awaiting_done_.push_back(to_rank);
    }
  }

  // Pairwise steps over the blocks `out(to)` and `in(from)` say go through the slots (an empty
  // block as an empty message, so that counts that disagree are a mismatch, not a wait).
  template <class Out, class In>
  void through_slots(Out&& out, In&& in) {
    for (int k = 1; k < n_; ++k) {
      const int to_rank = peer(k), from_rank = peer(-k);
      const bool sends = out(to_rank), receives = in(from_rank);
      if (!sends && !receives) continue;
      const auto [send_at, send_count] = blocks_.sent_to(to_rank);
      const auto [recv_at, recv_count] = blocks_.received_from(from_rank);
      Primitives(engine_, &engine_.connection(from_rank), &engine_.connection(to_rank))
          .send_recv_sides(in_ + send_at * elem_, send_count, sends, out_ + recv_at * elem_,
                           recv_count, receives);
    }
  }

  // Each block read as soon as its sender's message is here, whatever the order, and its done
  // message sent at once: the sender may return as soon as its last reader is done.
  void read_blocks() {
    std::vector<int> pending;
    for (int k = 1; k < n_; ++k)
      if (reads(peer(-k), blocks_.received_from(peer(-k)).second)) pending.push_back(peer(-k));
    Waiter waiter(engine_);
    waiter.cap_sleep_ms(1);  // a message on another connection than the one slept on
    while (!pending.empty()) {
      bool moved = false;
      waiter.until(
          [&] {
            for (auto it = pending.begin(); it != pending.end();) {
              Hello hello;
              if (!from(*it).try_recv_message(&hello, sizeof hello)) {
                ++it;
                continue;
              }
              read_one(*it, hello);
              it = pending.erase(it);
              moved = true;
            }
            return moved || pending.empty();
          },
          pending.front(), "the address of a block from");
    }
  }

  void read_one(int from_rank, const Hello& hello) {
    const auto [at, expected] = blocks_.received_from(from_rank);
    if (hello.block_count != expected)
      throw CollectiveMismatch(
          fmt::format("{}: rank {}: collective mismatch: rank {} sends {} elements to rank {}, "
                      "which expects {} from it",
                      call_.describe(), r_, from_rank, hello.block_count, r_, expected),
          fmt::format("rank {} sends {} elements where rank {} expects {}", from_rank,
                      hello.block_count, r_, expected));
    const auto pid = static_cast<pid_t>(hello.pid);
    int err = check_peer_word(pid, hello.nonce_address, hello.nonce, false);
    if (err == 0) {
      const WorkTimer timed(engine_, Engine::Work::peer_memory, expected * elem_);
      err = base::read_process_memory(pid, reinterpret_cast<const void*>(hello.block_address),
                                      out_ + at * elem_, expected * elem_);
    }
    const Done done{static_cast<std::uint32_t>(err), 0};
    to(from_rank).send_message(&done, sizeof done);
    if (err != 0) failed(failed_in_, from_rank, err);
  }

  // Every reader of this rank's input is done with it once its message arrives.
  void collect_dones() {
    for (int to_rank : awaiting_done_) {
      Done theirs;
      from(to_rank).recv_message(&theirs, sizeof theirs);
      if (theirs.read_errno != 0) failed(failed_out_, to_rank, static_cast<int>(theirs.read_errno));
    }
  }

  void failed(std::vector<int>& list, int other, int err) {
    list.push_back(other);
    base::log().warn(
        "{}: a read of rank {}'s memory by rank {} failed ({}): their blocks move through the "
        "slots from now on",
        call_.describe(), &list == &failed_in_ ? other : r_, &list == &failed_in_ ? r_ : other,
        std::strerror(err));
  }

  Engine& engine_;
  Refusals& refusals_;
  const Collective& call_;
  const AllToAllBlocks blocks_;
  const int n_, r_;
  const std::size_t elem_;
  const std::byte* in_;
  std::byte* out_;
  std::vector<std::byte> staged_;
  const std::uint64_t nonce_ = fresh_nonce();
  const volatile std::uint64_t* kept_ = &nonce_;
  std::vector<int> awaiting_done_;  // peers this rank's blocks are read by
  std::vector<int> failed_out_;     // peers that could not read this rank's block
  std::vector<int> failed_in_;      // peers whose block this rank could not read
};

}  // namespace

void single_copy_all_to_all(Engine& engine, const Collective& call) {
  SingleCopy(engine, call).run();
}

}  // namespace loom::algorithms
