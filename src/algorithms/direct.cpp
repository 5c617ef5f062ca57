// Device buffers of the ranks of one host, read and written where they are (CUDA IPC), instead
// of streaming through slots.
//
// Each rank tells each peer it works with, in one small message over the host connection, how
// to map the buffers the peer touches and how to wait for its "ready" signal (recorded after the
// work its stream queued before the call). If any rank's buffers cannot be shared, every rank
// learns it from the same messages and the call goes through the slots instead. Then the GPU
// orders itself: the engine's stream waits for every peer's ready signal, queues the copies (copy
// engines) and reductions (kernels), records "done" and waits for every peer's done signal (sent
// in a second message) before the call's end. The host waits for nothing but the messages, and
// the user's stream is ordered after the call through the runtime's end event.
//
// all_reduce is two-shot: rank r reduces block r of every input and writes it into block r of
// every output (in place too: block r is read and written by rank r alone, reads first).
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "algorithms/algorithms.hpp"
#include "algorithms/peer_memory.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {
namespace {

struct Hello {
  std::uint8_t in_shared = 0;
  std::uint8_t out_shared = 0;
  std::uint8_t pad[6] = {};
  PeerMemory::Range in;
  PeerMemory::Range out;
  PeerMemory::Signal ready;
};
struct Done {
  PeerMemory::Signal done;
};

// What of a rank's buffers its peers touch in this call: bytes of `in`, bytes of `out` (0: none).
struct Exposed {
  std::size_t in = 0;
  std::size_t out = 0;
};
Exposed exposed(const Collective& c, int rank, int size) {
  const std::size_t bytes = c.count * size_of(c.dtype);
  switch (c.kind) {
    case Kind::all_reduce:
      return {bytes, bytes};  // peers read blocks of the input and write blocks of the output
    case Kind::reduce_scatter:
      return {bytes * static_cast<std::size_t>(size), 0};
    case Kind::all_gather:
    case Kind::reduce:
      return {bytes, 0};
    case Kind::broadcast:
      return {rank == c.root ? bytes : 0, 0};
    case Kind::send:
    case Kind::recv:
    case Kind::barrier:
      break;
  }
  return {};
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
        out_(static_cast<std::size_t>(engine.size()), nullptr) {
    in_[me()] = c_.in;
    out_[me()] = c_.out;
  }

  // Agrees with every partner on the direct path; false (on every rank alike) when some rank's
  // buffers cannot be shared.
  bool agree() {
    const Exposed mine = exposed(c_, e_.rank(), e_.size());
    Hello hello;
    if (mine.in > 0)
      if (auto r = memory_.share(c_.in, mine.in)) hello.in_shared = 1, hello.in = *r;
    if (mine.out > 0)
      if (auto r = memory_.share(c_.out, mine.out)) hello.out_shared = 1, hello.out = *r;
    bool all = (mine.in == 0 || hello.in_shared) && (mine.out == 0 || hello.out_shared);
    hello.ready = memory_.record(PeerMemory::Point::ready);
    std::vector<Hello> theirs(peers_.size());
    exchange(hello, theirs);
    for (std::size_t i = 0; i < peers_.size(); ++i) {
      const Exposed need = exposed(c_, peers_[i], e_.size());
      all &= (need.in == 0 || theirs[i].in_shared) && (need.out == 0 || theirs[i].out_shared);
    }
    if (!all) return false;
    for (std::size_t i = 0; i < peers_.size(); ++i) {
      const auto p = static_cast<std::size_t>(peers_[i]);
      if (theirs[i].in_shared) in_[p] = memory_.map(peers_[i], theirs[i].in);
      if (theirs[i].out_shared) out_[p] = memory_.map(peers_[i], theirs[i].out);
      memory_.wait(peers_[i], theirs[i].ready);
    }
    return true;
  }

  void work() {
    switch (c_.kind) {
      case Kind::all_reduce:
        return all_reduce();
      case Kind::reduce_scatter:
        return reduce_blocks(out_[me()], e_.rank(), c_.count, true);
      case Kind::all_gather:
        for (int j = 0; j < e_.size(); ++j)
          copy(at(out_[me()], static_cast<std::size_t>(j) * c_.count), in_[idx(j)], c_.count);
        return;
      case Kind::broadcast:
        return copy(out_[me()], in_[idx(c_.root)], c_.count);
      case Kind::reduce:
        if (e_.rank() == c_.root) reduce_blocks(out_[me()], -1, c_.count, false);
        return;
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
    exchange(done, theirs);
    for (std::size_t i = 0; i < peers_.size(); ++i) memory_.wait(peers_[i], theirs[i].done);
  }

 private:
  std::size_t me() const { return static_cast<std::size_t>(e_.rank()); }
  static std::size_t idx(int rank) { return static_cast<std::size_t>(rank); }
  std::size_t elem() const { return size_of(c_.dtype); }
  const void* at(const void* p, std::size_t elems) const {
    return static_cast<const std::byte*>(p) + elems * elem();
  }
  void* at(void* p, std::size_t elems) const { return static_cast<std::byte*>(p) + elems * elem(); }

  // Every partner gets `mine`; theirs[i] is partner i's. Messages go out before any is awaited:
  // each connection has room for them.
  template <typename Message>
  void exchange(const Message& mine, std::vector<Message>& theirs) {
    for (int peer : peers_) {
      transport::Connection& conn = e_.host_connection(peer);
      Primitives(e_, nullptr, &conn).send_message(&mine, sizeof(Message));
    }
    for (std::size_t i = 0; i < peers_.size(); ++i) {
      transport::Connection& conn = e_.host_connection(peers_[i]);
      Primitives(e_, &conn, nullptr).recv_message(&theirs[i], sizeof(Message));
    }
  }

  void copy(void* dst, const void* src, std::size_t count) {
    if (dst != src && count > 0) e_.data().copy(dst, src, count * elem());
  }

  // dst[0, len) = op over ranks j of in_j[first + ...], this rank's input first (in place, dst
  // may be this rank's input there); `block` >= 0 is the block whose elements start at
  // block * len in every input (reduce_scatter), -1 means the whole buffer (reduce).
  void reduce_blocks(void* dst, int block, std::size_t len, bool scatter) {
    const std::size_t first = scatter ? static_cast<std::size_t>(block) * len : 0;
    reduce_into(dst, nullptr, first, len);
  }

  // dst (and dst2 when not null) = the reduction over every rank's input at element `first`,
  // `len` elements: a chain of two-input reductions, this rank's input first, the division of
  // avg fused into the last one.
  void reduce_into(void* dst, void* dst2, std::size_t first, std::size_t len) {
    if (len == 0) return;
    const int n = e_.size();
    const ReduceOp op = c_.op;
    if (n == 1) {  // avg over one rank divides by 1
      copy(dst, at(in_[me()], first), len);
      if (dst2) copy(dst2, at(in_[me()], first), len);
      return;
    }
    const void* acc = at(in_[me()], first);
    int step = 0;
    for (int j = 0; j < n; ++j) {
      if (j == e_.rank()) continue;
      const bool last = ++step == n - 1;
      const void* other = at(in_[idx(j)], first);
      if (last)
        e_.data().reduce_copy(dst, dst2, acc, other, len, c_.dtype, op, n);
      else
        e_.data().reduce(dst, acc, other, len, c_.dtype, op);
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

  Engine& e_;
  const Collective& c_;
  PeerMemory& memory_;
  std::vector<int> peers_;
  std::vector<const void*> in_;  // by rank: mapped here (this rank's own: its pointer)
  std::vector<void*> out_;
};

}  // namespace

bool direct_device_call(Engine& engine, const Collective& call) {
  PeerMemory* memory = engine.peer_memory();
  // Collectives only: every rank runs the same call, so the messages of call k meet on every
  // connection. A send waiting for its receiver's messages could deadlock against a receiver
  // whose engine runs its own send first (the slots never make a sender wait for the receiver).
  const bool collective = call.kind != Kind::send && call.kind != Kind::recv;
  if (memory == nullptr || !collective || call.kind == Kind::barrier) return false;
  auto peers = partners(engine);
  if (!peers) return false;
  DirectCall direct(engine, *memory, std::move(*peers));
  if (!direct.agree()) return false;
  direct.work();
  direct.finish();
  return true;
}

}  // namespace loom::algorithms
