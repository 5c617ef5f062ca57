// Buffers of the ranks of one host, read and written where they are, instead of streaming
// through slots: device buffers through CUDA IPC, host buffers in the shared windows of
// Communicator::alloc (core/host_windows.hpp). On the host the signals carry nothing: a rank's
// buffers are ready when its call starts, and its done message is sent once its copies are.
//
// Each rank tells each peer, in one small message over the host connection, how to map the
// buffers the peers touch and how to wait for its "ready" signal (recorded after the work its
// stream queued before the call). If any rank's buffers cannot be shared, every rank learns it
// from the same messages and the call goes through the slots instead. Then the GPU orders itself:
// the engine's stream waits for every peer's ready signal, queues the copies (copy engines) and
// reductions (kernels), records "done" and waits for every peer's done signal (sent in a second
// message) before the call's end. The host waits for nothing but the messages, and the user's
// stream is ordered after the call through the runtime's end event.
//
// Every rank pulls what it needs into its own output, except all_reduce, which is two-shot: rank
// r reduces block r of every input and writes it into block r of every output (in place too:
// block r is read and written by rank r alone, reads first).
#include <algorithm>
#include <atomic>
#include <optional>

#include <fmt/format.h>

#include "algorithms/algorithms.hpp"
#include "algorithms/peer_memory.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {
namespace {

struct Hello {
  std::uint64_t in_bytes = 0;   // what the sender needed to share of its input (0: nothing)
  std::uint64_t out_bytes = 0;  // ... of its output
  std::uint8_t in_shared = 0;
  std::uint8_t out_shared = 0;
  std::uint8_t pad[6] = {};
  PeerMemory::Range in;
  PeerMemory::Range out;
  PeerMemory::Signal ready;
  // all_to_all_v: where the sender's block for the receiver is in its input, in elements.
  std::uint64_t block_offset = 0;
  std::uint64_t block_count = 0;
};
struct Done {
  PeerMemory::Signal done;
};

// The elements of `in` the uneven blocks reach: up to the end of the furthest.
std::size_t extent(const std::vector<std::size_t>& counts, const std::vector<std::size_t>& displs) {
  std::size_t end = 0;
  for (std::size_t j = 0; j < counts.size(); ++j)
    if (counts[j] > 0) end = std::max(end, displs[j] + counts[j]);
  return end;
}

// What of this rank's buffers its peers touch in this call: bytes of `in` and of `out`.
std::pair<std::size_t, std::size_t> exposed(const Collective& c, int rank, int size) {
  const std::size_t elem = size_of(c.dtype);
  const std::size_t bytes = c.count * elem;
  const auto n = static_cast<std::size_t>(size);
  switch (c.kind) {
    case Kind::all_reduce:
      return {bytes, bytes};  // peers read blocks of the input and write blocks of the output
    case Kind::reduce_scatter:
    case Kind::all_to_all:
      return {bytes * n, 0};
    case Kind::all_gather:
    case Kind::reduce:
    case Kind::gather:
      return {bytes, 0};
    case Kind::broadcast:
      return {rank == c.root ? bytes : 0, 0};
    case Kind::scatter:
      return {rank == c.root ? bytes * n : 0, 0};
    case Kind::all_to_all_v:
      return {extent(c.layout->send_counts, c.layout->send_displs) * elem, 0};
    case Kind::all_gather_v:
      return {c.layout->counts[static_cast<std::size_t>(rank)] * elem, 0};
    case Kind::reduce_scatter_v:
      return {extent(c.layout->counts, c.layout->displs) * elem, 0};
    case Kind::send:
    case Kind::recv:
    case Kind::barrier:
      break;
  }
  return {0, 0};
}

// The other ranks, when every rank is on this host; else the direct path cannot serve the call.
std::optional<std::vector<int>> partners(const Engine& e) {
  if (e.hosts().size() != 1) return std::nullopt;
  std::vector<int> peers;
  for (int r = 0; r < e.size(); ++r)
    if (r != e.rank()) peers.push_back(r);
  return peers;
}

class DirectCall {
 public:
  DirectCall(Engine& engine, PeerMemory& memory, std::vector<int> peers)
      : e_(engine),
        c_(engine.call()),
        memory_(memory),
        peers_(std::move(peers)),
        in_(static_cast<std::size_t>(engine.size()), nullptr),
        out_(static_cast<std::size_t>(engine.size()), nullptr),
        theirs_(peers_.size()),
        exposed_(exposed(c_, engine.rank(), engine.size())),
        // Buffers beyond the cache: copies stream past it rather than evict what the peers read.
        streaming_(engine.beyond_cache(std::max(exposed_.first, exposed_.second))) {
    in_[me()] = c_.in;
    out_[me()] = c_.out;
  }

  // Agrees with every partner on the direct path; false (on every rank alike) when some rank's
  // buffers cannot be shared.
  bool agree() {
    const auto [in_bytes, out_bytes] = exposed_;
    Hello hello;
    hello.in_bytes = in_bytes;
    hello.out_bytes = out_bytes;
    if (in_bytes > 0)
      if (auto r = memory_.share(c_.in, in_bytes)) hello.in_shared = 1, hello.in = *r;
    if (out_bytes > 0)
      if (auto r = memory_.share(c_.out, out_bytes)) hello.out_shared = 1, hello.out = *r;
    hello.ready = memory_.record(PeerMemory::Point::ready);
    exchange(
        [&](int peer) {
          Hello h = hello;
          if (c_.kind == Kind::all_to_all_v) {
            h.block_offset = c_.layout->send_displs[idx(peer)];
            h.block_count = c_.layout->send_counts[idx(peer)];
          }
          return h;
        },
        theirs_);
    auto shared = [](const Hello& h) {
      return (h.in_bytes == 0 || h.in_shared) && (h.out_bytes == 0 || h.out_shared);
    };
    bool all = shared(hello);
    for (const Hello& h : theirs_) all &= shared(h);
    if (!all) return false;
    for (std::size_t i = 0; i < peers_.size(); ++i) {
      const auto p = idx(peers_[i]);
      const Hello& h = theirs_[i];
      // What this rank touches of the peer's buffers: the call's own sizes, the same on every
      // rank (an all_to_all_v's input by the blocks checked as they are read).
      const auto [in_needed, out_needed] = exposed(c_, peers_[i], e_.size());
      if (h.in_bytes < (c_.kind == Kind::all_to_all_v ? 0 : in_needed) || h.out_bytes < out_needed)
        throw PeerError(fmt::format("{}: rank {}: rank {} shares {} and {} bytes of its buffers, "
                                    "where the call touches {} and {}",
                                    c_.describe(), e_.rank(), peers_[i], h.in_bytes, h.out_bytes,
                                    in_needed, out_needed),
                        peers_[i]);
      if (h.in_shared) in_[p] = memory_.map(peers_[i], h.in, h.in_bytes);
      if (h.out_shared) out_[p] = memory_.map(peers_[i], h.out, h.out_bytes);
      memory_.wait(peers_[i], h.ready);
    }
    return true;
  }

  void work() {
    const auto n = static_cast<std::size_t>(e_.size());
    switch (c_.kind) {
      case Kind::all_reduce:
        return all_reduce();
      case Kind::reduce_scatter:
        return reduce_into(out_[me()], nullptr, me() * c_.count, c_.count);
      case Kind::reduce_scatter_v:
        return reduce_into(out_[me()], nullptr, c_.layout->displs[me()], c_.layout->counts[me()]);
      case Kind::reduce:
        if (e_.rank() == c_.root) reduce_into(out_[me()], nullptr, 0, c_.count);
        return;
      case Kind::all_gather:
        for (std::size_t j = 0; j < n; ++j) copy(at(out_[me()], j * c_.count), in_[j], c_.count);
        return;
      case Kind::all_gather_v:
        for (std::size_t j = 0; j < n; ++j)
          if (c_.layout->counts[j] > 0)
            copy(at(out_[me()], c_.layout->displs[j]), in_[j], c_.layout->counts[j]);
        return;
      case Kind::broadcast:
        return copy(out_[me()], in_[idx(c_.root)], c_.count);
      case Kind::gather:
        if (e_.rank() == c_.root)
          for (std::size_t j = 0; j < n; ++j) copy(at(out_[me()], j * c_.count), in_[j], c_.count);
        return;
      case Kind::scatter:
        return copy(out_[me()], at(in_[idx(c_.root)], me() * c_.count), c_.count);
      case Kind::all_to_all:
        for (std::size_t j = 0; j < n; ++j)
          copy(at(out_[me()], j * c_.count), at(in_[j], me() * c_.count), c_.count);
        return;
      case Kind::all_to_all_v:
        return all_to_all_v();
      case Kind::send:
      case Kind::recv:
      case Kind::barrier:
        return;
    }
  }

  // Done with the peers' buffers: signal it and wait (on the GPU) until every peer is done with
  // this rank's.
  void finish() {
    Done done{memory_.record(PeerMemory::Point::done)};
    std::vector<Done> theirs(peers_.size());
    exchange([&](int) { return done; }, theirs);
    for (std::size_t i = 0; i < peers_.size(); ++i) memory_.wait(peers_[i], theirs[i].done);
  }

 private:
  std::size_t me() const { return idx(e_.rank()); }
  static std::size_t idx(int rank) { return static_cast<std::size_t>(rank); }
  std::size_t elem() const { return size_of(c_.dtype); }
  const void* at(const void* p, std::size_t elems) const {
    return static_cast<const std::byte*>(p) + elems * elem();
  }
  void* at(void* p, std::size_t elems) const { return static_cast<std::byte*>(p) + elems * elem(); }

  // Partner i gets mine(partners[i]); theirs[i] is partner i's. Messages go out before any is
  // awaited: each connection has room for them.
  template <typename Message, typename Mine>
  void exchange(Mine&& mine, std::vector<Message>& theirs) {
    for (int peer : peers_) {
      const Message m = mine(peer);
      Primitives(e_, nullptr, &e_.host_connection(peer)).send_message(&m, sizeof(Message));
    }
    for (std::size_t i = 0; i < peers_.size(); ++i)
      Primitives(e_, &e_.host_connection(peers_[i]), nullptr)
          .recv_message(&theirs[i], sizeof(Message));
  }

  void copy(void* dst, const void* src, std::size_t count) {
    if (dst == src || count == 0) return;
    if (streaming_)
      e_.data().copy_streaming(dst, src, count * elem());
    else
      e_.data().copy(dst, src, count * elem());
  }

  // dst (and dst2 when not null) = the reduction over every rank's input at element `first`,
  // `len` elements: a chain of two-input reductions, this rank's input first (so that dst may
  // be this rank's input there), the division of avg fused into the last one.
  void reduce_into(void* dst, void* dst2, std::size_t first, std::size_t len) {
    if (len == 0) return;
    const int n = e_.size();
    if (n == 1) {  // avg over one rank divides by 1
      copy(dst, at(in_[me()], first), len);
      if (dst2) copy(dst2, at(in_[me()], first), len);
      return;
    }
    const void* acc = at(in_[me()], first);
    int step = 0;
    for (int j = 0; j < n; ++j) {
      if (j == e_.rank()) continue;
      const void* other = at(in_[idx(j)], first);
      if (++step == n - 1)
        e_.data().reduce_copy(dst, dst2, acc, other, len, c_.dtype, c_.op, n);
      else
        e_.data().reduce(dst, acc, other, len, c_.dtype, c_.op);
      acc = dst;
    }
  }

  void all_reduce() {
    const auto n = static_cast<std::size_t>(e_.size());
    const std::size_t block = (c_.count + n - 1) / n;
    const std::size_t first = std::min(c_.count, me() * block);
    const std::size_t len = std::min(c_.count, first + block) - first;
    if (len == 0) return;
    void* mine = at(out_[me()], first);
    // Two ranks: one pass writes both outputs; more: this rank's output, then copies.
    void* second = n == 2 ? at(out_[idx(peers_.front())], first) : nullptr;
    reduce_into(mine, second, first, len);
    if (n > 2)
      for (int peer : peers_) copy(at(out_[idx(peer)], first), mine, len);
  }

  void all_to_all_v() {
    const Layout& l = *c_.layout;
    auto mismatch = [&](int from, std::size_t sent) {
      throw CollectiveMismatch(
          fmt::format("{}: rank {}: collective mismatch: rank {} sends {} elements to rank {}, "
                      "which expects {} from it",
                      c_.describe(), e_.rank(), from, sent, e_.rank(), l.counts[idx(from)]),
          fmt::format("rank {} sends {} elements where rank {} expects {}", from, sent, e_.rank(),
                      l.counts[idx(from)]));
    };
    if (l.send_counts[me()] != l.counts[me()]) mismatch(e_.rank(), l.send_counts[me()]);
    if (l.counts[me()] > 0)
      copy(at(out_[me()], l.displs[me()]), at(in_[me()], l.send_displs[me()]), l.counts[me()]);
    for (std::size_t i = 0; i < peers_.size(); ++i) {
      const int from = peers_[i];
      const Hello& h = theirs_[i];
      if (h.block_count != l.counts[idx(from)]) mismatch(from, h.block_count);
      const std::uint64_t shared = h.in_bytes / size_of(c_.dtype);
      if (h.block_offset > shared || h.block_count > shared - h.block_offset)
        throw PeerError(
            fmt::format("{}: rank {}: rank {} names a block of {} elements at {} "
                        "outside the {} it shares",
                        c_.describe(), e_.rank(), from, h.block_count, h.block_offset, shared),
            from);
      if (h.block_count > 0)
        copy(at(out_[me()], l.displs[idx(from)]), at(in_[idx(from)], h.block_offset),
             h.block_count);
    }
  }

  Engine& e_;
  const Collective& c_;
  PeerMemory& memory_;
  std::vector<int> peers_;
  std::vector<const void*> in_;  // by rank: mapped here (this rank's own: its pointer)
  std::vector<void*> out_;
  std::vector<Hello> theirs_;
  const std::pair<std::size_t, std::size_t> exposed_;  // bytes of in and out the peers touch
  const bool streaming_;
};

std::atomic<std::uint64_t> host_calls_served{0};

// The call in place through `memory`; false, on every rank alike, when some rank's buffers
// cannot be shared.
bool direct_call(Engine& engine, PeerMemory& memory, const Collective& call) {
  // Collectives only: every rank runs the same call, so the messages of call k meet on every
  // connection. A send waiting for its receiver's messages could deadlock against a receiver
  // whose engine runs its own send first (the slots never make a sender wait for the receiver).
  if (is_point_to_point(call.kind) || call.kind == Kind::barrier) return false;
  auto peers = partners(engine);
  if (!peers) return false;
  DirectCall direct(engine, memory, std::move(*peers));
  if (!direct.agree()) return false;
  direct.work();
  direct.finish();
  return true;
}

}  // namespace

void direct(Engine& engine, const Collective& call) {
  const bool device = call.device >= 0;
  PeerMemory* memory = device ? engine.peer_memory() : engine.host_windows();
  if (memory != nullptr && direct_call(engine, *memory, call)) {
    // The GPU orders itself: the host waits for none of its work.
    if (device)
      engine.leave_ordering_to_device();
    else
      host_calls_served.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Some rank's buffers cannot be shared (every rank learnt it from the same messages): what the
  // model would run without the peers' memory.
  const Selector::Choice other = engine.selector().choose(call.kind, call.bytes(), device, false);
  engine.set_slicing(other.slice, other.round_slices);
  engine.set_reads(other.reads);
  other.algorithm->run(engine, call);
}

std::uint64_t direct_host_calls() {
  return host_calls_served.load(std::memory_order_relaxed);
}

}  // namespace loom::algorithms
