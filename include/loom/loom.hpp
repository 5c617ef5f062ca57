// Loom: collective communication for CPU processes over pluggable transports.
//
// Public API. This header includes only the standard library: transports, logging and kernels stay
// behind the Communicator's pimpl.
#pragma once

#include "loom/export.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

struct CUstream_st;  // CUDA's stream: cudaStream_t is CUstream_st*

namespace loom {

class Store;

// A CUDA stream (a cudaStream_t) for calls on GPU buffers, without the CUDA headers; nullptr is
// CUDA's default stream.
using CudaStream = CUstream_st*;

enum class DataType : std::uint8_t { f32, f64, f16, bf16, i8, u8, i32, u32, i64, u64 };
enum class ReduceOp : std::uint8_t { sum, prod, min, max, avg };

LOOM_API std::size_t size_of(DataType dtype);
LOOM_API std::string_view to_string(DataType dtype);
LOOM_API std::string_view to_string(ReduceOp op);
// Accepts short and long names: "f32", "float32", "float", "bf16", "bfloat16", "i32", "int32", ...
LOOM_API std::optional<DataType> parse_data_type(std::string_view name);
LOOM_API std::optional<ReduceOp> parse_reduce_op(std::string_view name);

// ---- Errors -------------------------------------------------------------------------------------
// Every message names the operation, the rank, the peer (where one is involved) and the cause.
// kind() says which subclass an error is, for code that must not depend on message text.
enum class ErrorKind : std::uint8_t {
  internal,          // Error itself: a failure with no more specific kind
  invalid_argument,  // InvalidArgument
  timeout,           // TimeoutError
  peer,              // PeerError
  mismatch,          // CollectiveMismatch
  aborted,           // Aborted
  store,             // StoreError
};
LOOM_API std::string_view to_string(ErrorKind kind);

class LOOM_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : Error(what, ErrorKind::internal) {}
  ErrorKind kind() const { return kind_; }

 protected:
  Error(const std::string& what, ErrorKind kind) : std::runtime_error(what), kind_(kind) {}

 private:
  ErrorKind kind_;
};
// Bad arguments; raised before any communication, the communicator stays usable.
class LOOM_API InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& what) : Error(what, ErrorKind::invalid_argument) {}
};
// A wait passed its deadline (LOOM_TIMEOUT or the timeout given to Work::wait).
class LOOM_API TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& what) : Error(what, ErrorKind::timeout) {}
};
// A peer closed its connection, died or sent something that breaks the protocol.
class LOOM_API PeerError : public Error {
 public:
  explicit PeerError(const std::string& what, int peer = -1)
      : Error(what, ErrorKind::peer), peer_(peer) {}
  // The rank at fault, or -1 when it is not known.
  int peer() const { return peer_; }

 private:
  int peer_ = -1;
};
// Ranks issued different collectives at the same position in their sequence.
class LOOM_API CollectiveMismatch : public Error {
 public:
  // detail: the two calls, as one sentence ("rank 1 called ... while rank 0 called ...").
  explicit CollectiveMismatch(const std::string& what, std::string detail = {})
      : Error(what, ErrorKind::mismatch), detail_(detail.empty() ? what : std::move(detail)) {}
  const std::string& detail() const { return detail_; }

 private:
  std::string detail_;
};
// The call was cut short, or refused, because Communicator::abort() was called.
class LOOM_API Aborted : public Error {
 public:
  explicit Aborted(const std::string& what) : Error(what, ErrorKind::aborted) {}
};
// Rendezvous store failures (connection, protocol).
class LOOM_API StoreError : public Error {
 public:
  explicit StoreError(const std::string& what) : Error(what, ErrorKind::store) {}
};

// ---- Options ------------------------------------------------------------------------------------
// Every field left unset takes its value from the LOOM_* environment, then from the default.
struct LOOM_API Options {
  std::optional<std::chrono::milliseconds> timeout;  // LOOM_TIMEOUT (seconds), default 300 s
  std::optional<std::string> socket_ifname;          // LOOM_SOCKET_IFNAME
  std::optional<int> sockets_per_peer;               // LOOM_NSOCKS, default 2
  std::optional<std::size_t> buffer_bytes;           // LOOM_BUFFSIZE per connection, default 4 MiB
  std::optional<int> slots;                          // LOOM_SLOTS per connection, default 8
  std::optional<std::string> algorithm;              // LOOM_ALGO: force an algorithm ("ring", ...)
  std::optional<std::string> transport;              // LOOM_TRANSPORT: "auto", "tcp" or "shm"
  // LOOM_TUNE_FILE: the tuning table loom-tune writes, whose rules choose below `algorithm`;
  // default $XDG_CACHE_HOME/loom/tune.txt (~/.cache/...); "off" or "": the cost model alone.
  std::optional<std::string> tuning_file;
  // The job secret authenticating data connections, and the store init() hosts or joins:
  // LOOM_SECRET, else LOOM_SECRET_FILE's contents.
  std::optional<std::string> secret;
  std::string store_prefix = "loom";  // key namespace of this communicator
};

// ---- Work ---------------------------------------------------------------------------------------
// Handle on an asynchronous operation. Operations of one communicator complete in issue order.
class LOOM_API Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> state);

  // True when finished; rethrows the operation's error if it failed.
  bool test() const;
  // Blocks until finished; rethrows its error. Raises TimeoutError if `timeout` passes first (the
  // operation itself continues and can be waited for again).
  void wait(std::chrono::milliseconds timeout = std::chrono::hours(24 * 365)) const;

 private:
  std::shared_ptr<State> state_;
};

// ---- The cost model ----------------------------------------------------------------------------
// The calls estimate() asks about (LOOM_ALGO rules name them "allreduce", "alltoall", ...).
// Numbered from 1: every message carries the number of the call it belongs to.
enum class Operation : std::uint8_t {
  all_reduce = 1,
  reduce_scatter,
  all_gather,
  broadcast,
  reduce,
  barrier,
  send,
  recv,
  gather,
  scatter,
  all_to_all,
  all_to_all_v,
  all_gather_v,
  reduce_scatter_v,
};

// What a call would run, and the time the cost model predicts for it.
struct LOOM_API Estimate {
  std::string algorithm;        // "ring", "recursive_doubling", "pairwise", ...
  std::size_t slice_bytes = 0;  // what each slot hand-over carries (0: whole slots)
  double microseconds = 0;      // predicted time of the call
  bool forced = false;          // a LOOM_ALGO rule chose it, not the model
  bool tuned = false;           // a rule of the tuning table (loom-tune) chose it
  // Where the model's figures come from: "measured at init" (the init probe, LOOM_PROBE_US),
  // or "defaults" where it did not run.
  std::string model;
};

// ---- Communicator -------------------------------------------------------------------------------
// A group of `size` ranks. Collectives must be issued by every rank in the same order.
// Buffers passed to an _async call must stay valid until its Work completes.
//
// GPU buffers: every collective and send/recv takes device (or managed) memory as well as host
// memory; the pointers say which (all of one call's buffers must be on one side, on one device,
// and every rank of a host must pass the same kind). `stream` orders a call on device buffers:
// it starts after the work queued on the stream before the call, and work queued on the stream
// after the call waits for it to finish: a blocking call returns once the result is in place,
// an _async call at once (the stream, not the host, waits). Needs a build with CUDA; a stream
// with host buffers is an InvalidArgument.
class LOOM_API Communicator {
 public:
  // Joins the group through `store`; returns when every rank has joined or raises TimeoutError
  // naming the ranks that did not.
  Communicator(std::shared_ptr<Store> store, int rank, int size, Options options = {});
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();

  int rank() const;
  int size() const;

  // out[i] = op over ranks of in[i]; in == out is in place.
  void all_reduce(const void* in, void* out, std::size_t count, DataType dtype, ReduceOp op,
                  CudaStream stream = nullptr);
  void all_reduce(void* buf, std::size_t count, DataType dtype, ReduceOp op,
                  CudaStream stream = nullptr) {
    all_reduce(buf, buf, count, dtype, op, stream);
  }
  // in holds size()*count elements; rank r receives the reduction of block r into out (count).
  // In place when out == in + rank*count*size_of(dtype).
  void reduce_scatter(const void* in, void* out, std::size_t count, DataType dtype, ReduceOp op,
                      CudaStream stream = nullptr);
  // in holds count elements; out receives size()*count, block r from rank r.
  // In place when in == out + rank*count*size_of(dtype).
  void all_gather(const void* in, void* out, std::size_t count, DataType dtype,
                  CudaStream stream = nullptr);
  // Root's in is copied to every rank's out (in is read on the root only).
  void broadcast(const void* in, void* out, std::size_t count, DataType dtype, int root,
                 CudaStream stream = nullptr);
  void broadcast(void* buf, std::size_t count, DataType dtype, int root,
                 CudaStream stream = nullptr) {
    broadcast(buf, buf, count, dtype, root, stream);
  }
  // The reduction lands in root's out; out is ignored on other ranks.
  void reduce(const void* in, void* out, std::size_t count, DataType dtype, ReduceOp op, int root,
              CudaStream stream = nullptr);
  // Rank `root` receives size()*count elements into out, block r from rank r (out is used on
  // the root only). In place on the root when in == out + root*count*size_of(dtype).
  void gather(const void* in, void* out, std::size_t count, DataType dtype, int root,
              CudaStream stream = nullptr);
  // Root's in holds size()*count elements (read on the root only); rank r receives block r into
  // out. In place on the root when out == in + root*count*size_of(dtype).
  void scatter(const void* in, void* out, std::size_t count, DataType dtype, int root,
               CudaStream stream = nullptr);
  // in and out hold size()*count elements: block j of rank r's in becomes block r of rank j's
  // out. Not in place.
  void all_to_all(const void* in, void* out, std::size_t count, DataType dtype,
                  CudaStream stream = nullptr);
  // Uneven blocks (counts and displacements in elements, one entry per rank): send_counts[j]
  // elements at in + send_displs[j] go to rank j, which receives them at out + its
  // recv_displs[r]; rank j's recv_counts[r] must equal rank r's send_counts[j] (else
  // CollectiveMismatch). Not in place.
  void all_to_all_v(const void* in, std::span<const std::size_t> send_counts,
                    std::span<const std::size_t> send_displs, void* out,
                    std::span<const std::size_t> recv_counts,
                    std::span<const std::size_t> recv_displs, DataType dtype,
                    CudaStream stream = nullptr);
  // Rank r contributes counts[r] elements; every rank receives rank j's at out + displs[j].
  // counts and displs are the same on every rank. In place when in == out + displs[rank].
  void all_gather_v(const void* in, void* out, std::span<const std::size_t> counts,
                    std::span<const std::size_t> displs, DataType dtype,
                    CudaStream stream = nullptr);
  // Block j of in has counts[j] elements at displs[j]; rank r receives the reduction over ranks
  // of block r (counts[r] elements) into out. counts and displs are the same on every rank. In
  // place when out == in + displs[rank].
  void reduce_scatter_v(const void* in, void* out, std::span<const std::size_t> counts,
                        std::span<const std::size_t> displs, DataType dtype, ReduceOp op,
                        CudaStream stream = nullptr);
  void barrier();
  void send(const void* buf, std::size_t count, DataType dtype, int peer,
            CudaStream stream = nullptr);
  void recv(void* buf, std::size_t count, DataType dtype, int peer, CudaStream stream = nullptr);

  Work all_reduce_async(const void* in, void* out, std::size_t count, DataType dtype, ReduceOp op,
                        CudaStream stream = nullptr);
  Work reduce_scatter_async(const void* in, void* out, std::size_t count, DataType dtype,
                            ReduceOp op, CudaStream stream = nullptr);
  Work all_gather_async(const void* in, void* out, std::size_t count, DataType dtype,
                        CudaStream stream = nullptr);
  Work broadcast_async(const void* in, void* out, std::size_t count, DataType dtype, int root,
                       CudaStream stream = nullptr);
  Work reduce_async(const void* in, void* out, std::size_t count, DataType dtype, ReduceOp op,
                    int root, CudaStream stream = nullptr);
  Work gather_async(const void* in, void* out, std::size_t count, DataType dtype, int root,
                    CudaStream stream = nullptr);
  Work scatter_async(const void* in, void* out, std::size_t count, DataType dtype, int root,
                     CudaStream stream = nullptr);
  Work all_to_all_async(const void* in, void* out, std::size_t count, DataType dtype,
                        CudaStream stream = nullptr);
  // The counts and displacements are copied: they need not outlive the call.
  Work all_to_all_v_async(const void* in, std::span<const std::size_t> send_counts,
                          std::span<const std::size_t> send_displs, void* out,
                          std::span<const std::size_t> recv_counts,
                          std::span<const std::size_t> recv_displs, DataType dtype,
                          CudaStream stream = nullptr);
  Work all_gather_v_async(const void* in, void* out, std::span<const std::size_t> counts,
                          std::span<const std::size_t> displs, DataType dtype,
                          CudaStream stream = nullptr);
  Work reduce_scatter_v_async(const void* in, void* out, std::span<const std::size_t> counts,
                              std::span<const std::size_t> displs, DataType dtype, ReduceOp op,
                              CudaStream stream = nullptr);
  Work barrier_async();
  Work send_async(const void* buf, std::size_t count, DataType dtype, int peer,
                  CudaStream stream = nullptr);
  Work recv_async(void* buf, std::size_t count, DataType dtype, int peer,
                  CudaStream stream = nullptr);

  // Collective over this communicator (every rank calls it, in the same place of its sequence
  // of calls): ranks that pass the same color form a new communicator, ordered by key, then by
  // their rank here (MPI_Comm_split, ncclCommSplit). A negative color joins none: nullopt. The
  // new communicator has its own key space in the store, connections, sequence numbers,
  // failure records and monitor; its errors name each rank's rank here too. It may outlive
  // this one, and may be split again.
  std::optional<Communicator> split(int color, int key);
  // The same, with the child's settings changed where `options` sets them (ncclCommSplit's
  // config): algorithm, timeout, buffer_bytes, slots, sockets_per_peer. The child keeps its
  // parent's transport, interface, secret, key space and tuning table: setting those is an
  // InvalidArgument. The members of one child pass the same options (the timeout may differ):
  // members that differ all raise InvalidArgument naming the setting, and this one goes on. A
  // rank whose options are invalid raises its own InvalidArgument after the split's exchange, and
  // the other members of its child raise InvalidArgument naming it.
  std::optional<Communicator> split(int color, int key, const Options& options);
  // Collective over the ranks listed alone (MPI_Comm_create_group): they form a communicator,
  // ranked in the order listed; the other ranks do not call it. Every member passes the same
  // list; the child is as split()'s (its own key space, connections, monitor), with `options`
  // as split() takes them. A list that does not name this rank, names a rank twice or one
  // outside [0, size()) is an InvalidArgument. The members compare the child's settings through
  // the store before any builds its part: where one member's options are invalid, or the
  // members' settings differ (as split() compares them), every member raises InvalidArgument
  // naming the member and the setting, and this communicator goes on. So it blocks until every
  // member has called it: members of groups that overlap make them in the same order. A member
  // that does not call it within the child's timeout (the first member's to end) leaves the
  // others a TimeoutError naming it (and raises one too if it calls later, so that the next
  // create_group of the same ranks meets); one that dies first, a PeerError naming it, as soon
  // as a member on its host sees its process gone (about half a second) or the parent's health
  // monitor reports it (a Store without clone() has none: the timeout). A member that stops so
  // (or whose parent stopped) marks the members still absent: they raise PeerError if they call
  // later, naming the rank at fault.
  Communicator create_group(std::span<const int> ranks, const Options& options = {});

  // Host memory that every rank of this host maps (MPI_Win_allocate_shared; ncclMemAlloc with
  // ncclCommRegister). Collective: every rank calls it, in the same place of its sequence of
  // calls, each with its own size. A collective whose buffers lie in such memory on every rank
  // may read and write the peers' buffers where they are, each byte copied or reduced once,
  // instead of streaming through the slots (the cost model chooses, per call: estimate() names
  // that choice "direct" only when asked with `shared`). Which buffers must lie in it: all_reduce
  // both; reduce_scatter, all_gather, reduce, gather and all_to_all the input; broadcast and
  // scatter the root's input. Where ranks span hosts or talk TCP it is plain memory, and calls
  // on it run as on any other. Page-aligned and zeroed (0 bytes: one page); valid until free()
  // or until the communicator itself is gone. Raises Error when this rank cannot make it.
  void* alloc(std::size_t bytes);
  // alloc() with an owner: this rank's memory stays mapped while the returned pointer or a copy
  // of it lives, even after free() or after this communicator is gone (from then on it is
  // plain memory of this process that no call reads in place). For memory that may outlive the
  // communicator, as DistributedDataParallel's gradient buckets may (its gradients are views
  // into them). free() takes its get() as alloc()'s pointer.
  std::shared_ptr<void> alloc_shared(std::size_t bytes);
  // Collective: releases memory from alloc(). Every rank passes its pointer from the same
  // alloc() call, else every rank raises InvalidArgument and nothing is freed. After destroy()
  // it releases this rank's memory alone.
  void free(void* p);

  // After a failure (ncclCommShrink): a communicator of the ranks that call shrink() on this
  // one, renumbered in their order here, with its own key space, connections and monitor; its
  // errors name each rank's rank here too. Every survivor calls it; it returns as soon as every
  // rank not known to have failed has joined (a rank on this host whose process is gone counts
  // as failed), else after `timeout` with those that joined by then. A rank that joins after the
  // members were fixed without it gets PeerError. It works on a healthy communicator as well (every
  // rank joins). The store must still answer: a job whose store died with its host cannot shrink.
  // Where loomrun sets LOOM_MIN_NODES (--nnodes MIN), survivors on fewer of its nodes get
  // PeerError: a part cut off from the rest does not go on as a job of its own.
  Communicator shrink(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // The same where the survivors know who goes (ncclCommShrink's exclude list, torch's
  // shrink_group): the ranks in `exclude` are neither waited for nor members, whether they failed
  // or not; every other rank calls it with the same list. A list naming this rank or a rank
  // outside [0, size()) is an InvalidArgument, raised before anything is exchanged.
  Communicator shrink(std::span<const int> exclude,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // The time a later call may wait for its peers (LOOM_TIMEOUT; Options::timeout): calls already
  // running keep theirs. Raises InvalidArgument unless positive.
  void set_timeout(std::chrono::milliseconds timeout);

  // Waits for pending work, closes connections. Later calls raise InvalidArgument.
  void destroy();
  // Ends the communicator at once, from any thread, without waiting: the running and queued
  // calls and every later one raise Aborted, and the connections are closed, so that peers
  // waiting on this rank fail with PeerError instead of at their timeout.
  void abort();

  // What a call of `op` over `bytes` (its count times the element size, count as that call
  // takes it: the whole buffer for all_reduce, one rank's block for all_gather) would run, and
  // the cost model's prediction of its time; device: on GPU buffers. The same on every rank,
  // and what the call itself runs, except where the communicator measures the model's two
  // cheapest algorithms on a size's first calls (the all-reduce across hosts, the all-to-all on
  // one host with more ranks than cores; docs/tuning.md): there it is the model's choice, which
  // the trial may replace. The model's figures are measured when the communicator is
  // created (LOOM_PROBE_US) and logged against the measured times at LOOM_DEBUG=DEBUG.
  // shared: the call's buffers lie in memory from alloc() (see there).
  Estimate estimate(Operation op, std::size_t bytes, bool device = false,
                    bool shared = false) const;

  // Host name, transport and settings, for logs and tools.
  std::string describe() const;
  // "shm 4x1": the transport and shape (ranks per host x hosts; empty shape when hosts differ)
  // under which the tuning table keeps this communicator's entry (loom-tune).
  std::string tuning_key() const;

 private:
  class Impl;
  friend Communicator init(Options options);
  explicit Communicator(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// Builds a communicator from the launcher's environment: loomrun and torchrun-style variables
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK, LOCAL_WORLD_SIZE), or LOOM_INIT_METHOD
// (env://, tcp://host:port, file:///path) with RANK and WORLD_SIZE.
LOOM_API Communicator init(Options options = {});

}  // namespace loom
