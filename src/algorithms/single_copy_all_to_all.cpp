// All-to-all on one host in one copy: each rank tells every peer where its block for that peer
// is (one small message), reads the block it is owed straight out of the peer's input with
// process_vm_readv, and says when it is done (a second message), so that no rank returns, and
// lets its input change, while a peer may still read it. The slots copy every byte twice (into
// the slot, out of it); this copies it once and moves no data through the slots at all.
//
// Each message carries the sender's pid and a random word it keeps in memory for the call; a
// reader checks that word first, so a pid that names another process (ranks in different pid
// namespaces) is a failed read, never wrong data. If any rank's reads fail, every rank learns it
// from the done messages and the call (and every later one of this communicator) moves through
// the slots instead.
#include <unistd.h>

#include <algorithm>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "algorithms/algorithms.hpp"
#include "algorithms/all_to_all_blocks.hpp"
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
  std::uint64_t block_address = 0;  // the sender's block for the receiver
  std::uint64_t block_count = 0;    // its elements
};
struct Done {
  std::uint32_t read_errno = 0;  // 0: every read of the sender worked
  std::uint32_t pad = 0;
};

std::uint64_t fresh_nonce() {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  std::uint64_t n = 0;
  while (n == 0) n = generator();
  return n;
}

}  // namespace

void single_copy_all_to_all(Engine& engine, const Collective& call) {
  if (engine.single_copy_refused()) return pairwise_all_to_all(engine, call);
  const int n = engine.size(), r = engine.rank();
  const std::size_t elem = size_of(call.dtype);
  const AllToAllBlocks blocks(call);
  auto* out = static_cast<std::byte*>(call.out);
  const auto* in = static_cast<const std::byte*>(call.in);
  // Overlapping: the peers read a copy, since this rank overwrites its input.
  std::vector<std::byte> staged;
  if (blocks.buffers_overlap(n)) {
    staged.assign(in, in + blocks.input_end(n) * elem);
    in = staged.data();
  }
  blocks.check_kept(r);
  const auto [own_from, own_count] = blocks.sent_to(r);
  const std::size_t own_to = blocks.received_from(r).first;

  // Messages go out before any is awaited (each connection has room for one), in ring order.
  const std::uint64_t nonce = fresh_nonce();
  const volatile std::uint64_t* kept = &nonce;
  for (int k = 1; k < n; ++k) {
    const int to = positive_mod(r + k, n);
    const auto [first, count] = blocks.sent_to(to);
    const Hello hello{static_cast<std::uint64_t>(::getpid()), nonce,
                      reinterpret_cast<std::uint64_t>(kept),
                      reinterpret_cast<std::uint64_t>(in + first * elem), count};
    Primitives(engine, nullptr, &engine.connection(to)).send_message(&hello, sizeof hello);
  }
  kernels::copy(out + own_to * elem, in + own_from * elem, own_count * elem);
  Done done;
  for (int k = 1; k < n; ++k) {
    const int from = positive_mod(r - k, n);
    Hello hello;
    Primitives(engine, &engine.connection(from), nullptr).recv_message(&hello, sizeof hello);
    const auto [at, expected] = blocks.received_from(from);
    if (hello.block_count != expected)
      throw CollectiveMismatch(
          fmt::format("{}: rank {}: collective mismatch: rank {} sends {} elements to rank {}, "
                      "which expects {} from it",
                      call.describe(), r, from, hello.block_count, r, expected),
          fmt::format("rank {} sends {} elements where rank {} expects {}", from, hello.block_count,
                      r, expected));
    if (done.read_errno != 0 || expected == 0) continue;
    const auto pid = static_cast<pid_t>(hello.pid);
    std::uint64_t seen = 0;
    int err = base::read_process_memory(pid, reinterpret_cast<const void*>(hello.nonce_address),
                                        &seen, sizeof seen);
    if (err == 0 && seen != hello.nonce) err = ESRCH;  // another process under that pid
    if (err == 0)
      err = base::read_process_memory(pid, reinterpret_cast<const void*>(hello.block_address),
                                      out + at * elem, expected * elem);
    done.read_errno = static_cast<std::uint32_t>(err);
  }
  // Done: every peer's reads of this rank's input are over once its message arrives.
  for (int k = 1; k < n; ++k)
    Primitives(engine, nullptr, &engine.connection(positive_mod(r + k, n)))
        .send_message(&done, sizeof done);
  int refused_by = done.read_errno != 0 ? r : -1;
  std::uint32_t refusal = done.read_errno;
  for (int k = 1; k < n; ++k) {
    const int from = positive_mod(r - k, n);
    Done theirs;
    Primitives(engine, &engine.connection(from), nullptr).recv_message(&theirs, sizeof theirs);
    if (theirs.read_errno != 0 && (refused_by < 0 || from < refused_by))
      refused_by = from, refusal = theirs.read_errno;
  }
  if (refused_by < 0) return;
  // Every rank saw the same done messages, so every rank turns to the slots here.
  engine.refuse_single_copy();
  base::log().warn(
      "{}: rank {} could not read its peers' memory ({}): all-to-all moves through "
      "the slots from now on",
      call.describe(), refused_by, std::strerror(static_cast<int>(refusal)));
  Collective again = call;
  again.in = in;
  pairwise_all_to_all(engine, again);
}

}  // namespace loom::algorithms
