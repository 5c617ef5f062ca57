// Which algorithm runs a call. All-reduce has three, scored by an alpha-beta cost model per
// transport (UCC's score map is the idea: every candidate gets a cost, the lowest that fits wins):
//
//   algorithm            hops               bytes through each rank's busiest link
//   ring                 2(n-1)             2(n-1)/n * S
//   recursive_doubling   log2 p (+2 if n>p) S per hop
//   one_shot             1                  (n-1) * S
//   hierarchical         2(L-1) local       2(L-1)/L * S local
//   (H hosts x L ranks)  + 2(H-1) network   + 2(H-1)/H * S through each host's network link
//
// time = hops * alpha + bytes * beta. alpha is one hop's latency, beta the inverse bandwidth of a
// link: for TCP on this kind of machine a hop costs tens of microseconds (wake-ups dominate), for
// shared memory well under one. recursive_doubling and one_shot post whole buffers before they
// receive, so they take buffers up to half a connection's FIFO. LOOM_ALGO names one explicitly.
// The other collectives have one algorithm each.
//
// The slice (how much each slot carries) is chosen per call too. A unit of B bytes pipelined
// through k stages in slices of S takes (k + B/S - 1)(sigma + S beta), sigma the cost of one
// slot hand-over: small slices fill the pipeline sooner, large ones pay sigma less often; the
// best is S = sqrt(B sigma / ((k-1) beta)), kept between 16 KiB and the slot size. Measured here (2
// ranks, shm): 256 KiB all-reduces went from about 3 to 9 GB/s busbw with 32 KiB slices instead of
// one 512 KiB slot.
#include <algorithm>
#include <atomic>
#include <cmath>

#include <fmt/format.h>

#include "algorithms/algorithms.hpp"
#include "base/logging.hpp"

namespace loom::algorithms {

namespace {

struct CostModel {
  const char* transport;
  double alpha_us;
  double beta_us_per_byte;
  double slice_us;  // handing one slot to the peer and it taking it
};
constexpr CostModel kTcp{"tcp", 30.0, 1.0 / 1500.0, 30.0};  // ~1.5 GB/s per loopback stream
constexpr CostModel kShm{"shm", 0.5, 1.0 / 5000.0, 2.0};    // a few GB/s per copy
// Ranks outnumbering cores hand slots over through the scheduler: a slice costs a switch.
constexpr double kOversubscribedSliceFactor = 10.0;

struct Candidate {
  const char* name;
  double cost_us;
  bool fits;
  void (*run)(Engine&, const Collective&);
  const char* unfit = " (too large)";  // why it cannot run, for the log
};

double ring_cost(const CostModel& m, int n, double bytes) {
  return 2.0 * (n - 1) * m.alpha_us + 2.0 * (n - 1) / n * bytes * m.beta_us_per_byte;
}

double recursive_doubling_cost(const CostModel& m, int n, double bytes) {
  int p = 1, hops = 0;
  while (p * 2 <= n) p *= 2, ++hops;
  if (p != n) hops += 2;
  return hops * (m.alpha_us + bytes * m.beta_us_per_byte);
}

double one_shot_cost(const CostModel& m, int n, double bytes) {
  return m.alpha_us + (n - 1) * bytes * m.beta_us_per_byte;
}

// The local phases run over shared memory unless TCP is forced; the network phase's L rings
// share each host's link, so its bytes count once per host.
double hierarchical_cost(const Engine& engine, double bytes) {
  const double hosts = static_cast<double>(engine.hosts().size());
  const double local = static_cast<double>(engine.hosts().front().size());
  const CostModel& near = engine.config().transport == "tcp" ? kTcp : kShm;
  return 2.0 * (local - 1) * (near.alpha_us + bytes / local * near.beta_us_per_byte) +
         2.0 * (hosts - 1) * (kTcp.alpha_us + bytes / hosts * kTcp.beta_us_per_byte);
}

// The slice for `unit` bytes crossing `stages` pipeline stages (see the top of the file).
std::size_t slice_bytes(const CostModel& m, double unit, int stages, const base::Config& config) {
  constexpr double kMin = 16 * 1024;
  const double slot =
      static_cast<double>(config.buffer_bytes / static_cast<std::size_t>(config.slots));
  // Every rank must choose the same slice: nothing here may depend on this rank alone.
  const double per_slice =
      m.slice_us * (config.any_host_oversubscribed ? kOversubscribedSliceFactor : 1.0);
  const double best = std::sqrt(unit * per_slice / (std::max(1, stages - 1) * m.beta_us_per_byte));
  const double s = std::clamp(best, std::min(kMin, slot), slot);
  return static_cast<std::size_t>(s) / 4096 * 4096 >= 4096
             ? static_cast<std::size_t>(s) / 4096 * 4096
             : static_cast<std::size_t>(s);
}

}  // namespace

std::size_t pipeline_slice(bool shared_memory, double unit, int stages,
                           const base::Config& config) {
  return slice_bytes(shared_memory ? kShm : kTcp, unit, stages, config);
}

namespace {

const CostModel& model_of(const Engine& engine) {
  return engine.all_peers_shared_memory() ? kShm : kTcp;
}

// Logs each (algorithm, size class) choice once, so INFO shows what ran without flooding. A flag
// table rather than a locked set: this runs on every call, on the latency path.
void log_choice(const Collective& call, const CostModel& model, int chosen,
                const Candidate* candidates, int count, std::size_t slice) {
  static std::atomic<bool> seen[4][65];
  const std::size_t bytes = call.count * size_of(call.dtype);
  const int size_class = bytes == 0 ? 0 : 64 - __builtin_clzll(bytes);  // bit width
  if (seen[chosen][size_class].load(std::memory_order_relaxed) ||
      seen[chosen][size_class].exchange(true, std::memory_order_relaxed))
    return;
  std::string table;
  for (int i = 0; i < count; ++i)
    table +=
        candidates[i].cost_us >= 1e299
            ? fmt::format("{}{} n/a", i ? ", " : "", candidates[i].name)
            : fmt::format("{}{} {:.1f} us{}", i ? ", " : "", candidates[i].name,
                          candidates[i].cost_us, candidates[i].fits ? "" : candidates[i].unfit);
  base::log().info("{}: {} in slices of {} KiB for {} B over {}; model: {}", to_string(call.kind),
                   candidates[chosen].name, slice >> 10, bytes, model.transport, table);
}

using AllReduce = void (*)(Engine&, const Collective&);
constexpr AllReduce kAllReduces[] = {ring_all_reduce, recursive_doubling_all_reduce,
                                     one_shot_all_reduce, hierarchical_all_reduce};

void choose_all_reduce(Engine& engine, const Collective& call) {
  // A loop of calls of one size decides once (the inputs are fixed per communicator).
  Engine::Plan& plan = engine.all_reduce_plan();
  const bool device = call.device >= 0;
  if (plan.count == call.count && plan.dtype == call.dtype && plan.device == device &&
      plan.algorithm >= 0) {
    engine.set_slice_bytes(plan.slice);
    return kAllReduces[plan.algorithm](engine, call);
  }
  const int n = engine.size();
  const double bytes = static_cast<double>(call.count * size_of(call.dtype));
  const CostModel& model = model_of(engine);
  const bool small =
      n > 1 && bytes <= static_cast<double>(recursive_doubling_max_bytes(engine.config()));
  const Candidate candidates[] = {
      {"ring", ring_cost(model, n, bytes), true, kAllReduces[0]},
      {"recursive_doubling", recursive_doubling_cost(model, n, bytes), small, kAllReduces[1]},
      // It keeps a host copy of the input: host buffers only.
      {"one_shot", one_shot_cost(model, n, bytes), small && !device, kAllReduces[2],
       device ? " (host buffers only)" : " (too large)"},
      // Chosen by the model only where ranks span hosts with several ranks each; LOOM_ALGO may
      // name it for any even layout (one host: a local reduce-scatter and all-gather).
      {"hierarchical",
       engine.hosts().size() > 1 && engine.hosts().front().size() > 1 && engine.hosts_even()
           ? hierarchical_cost(engine, bytes)
           : 1e300,
       engine.hosts_even(), kAllReduces[3], " (hosts run different numbers of ranks)"},
  };
  constexpr int kCount = 4;
  int chosen = 0;
  const std::string& forced = engine.config().algorithm;
  if (forced.empty()) {
    for (int i = 1; i < kCount; ++i)
      if (candidates[i].fits && candidates[i].cost_us < candidates[chosen].cost_us) chosen = i;
  } else {
    int named = -1;
    for (int i = 0; i < kCount; ++i)
      if (forced == candidates[i].name) named = i;
    if (named < 0)
      throw InvalidArgument(fmt::format(
          "{}: LOOM_ALGO={} is not an all-reduce algorithm (ring, recursive_doubling, one_shot, "
          "hierarchical)",
          call.describe(), forced));
    chosen = candidates[named].fits ? named : 0;  // beyond its size limit the ring runs regardless
  }
  // The pipelined unit and its stages: the ring moves a 1/n chunk through 2(n-1) hops; the
  // others move the whole buffer, copied in by the sender while the receiver reduces it.
  std::size_t slice = 0;  // up to 16 KiB: whole slots, and no arithmetic on the latency path
  // GPU buffers: whole slots, since each slice waits for its kernel to finish.
  if (bytes <= 16 * 1024 || chosen == 3 || device) {  // hierarchical: a slice per phase, its own
  } else if (chosen == 0) {
    slice = slice_bytes(model, bytes / n, 2 * (n - 1), engine.config());
  } else {
    // These post the whole buffer before they receive: it must fit half the FIFO's slots.
    const std::size_t elem = size_of(call.dtype);
    const std::size_t half = static_cast<std::size_t>(std::max(1, engine.config().slots / 2));
    const std::size_t fitting = (call.count + half - 1) / half * elem;
    slice = std::max(slice_bytes(model, bytes, 2, engine.config()), fitting);
  }
  engine.set_slice_bytes(slice);
  log_choice(call, model, chosen, candidates, kCount, slice);
  plan = Engine::Plan{call.count, call.dtype, chosen, slice, device};
  candidates[chosen].run(engine, call);
}

// The one-algorithm collectives: only the slice to choose.
void choose_slice(Engine& engine, const Collective& call) {
  const int n = engine.size();
  const double block = static_cast<double>(call.count * size_of(call.dtype));
  int stages = n - 1;  // reduce-scatter, all-gather: a block crosses n-1 hops
  if (call.kind == Kind::broadcast || call.kind == Kind::reduce) stages = n - 1;  // the chain
  if (call.kind == Kind::send || call.kind == Kind::recv) stages = 2;  // copy in, copy out
  engine.set_slice_bytes(
      slice_bytes(model_of(engine), block, std::max(2, stages), engine.config()));
}

}  // namespace

void select_and_run(Engine& engine, const Collective& call) {
  if (call.kind != Kind::all_reduce && call.kind != Kind::barrier && call.device < 0)
    choose_slice(engine, call);
  switch (call.kind) {
    case Kind::all_reduce:
      return choose_all_reduce(engine, call);
    case Kind::reduce_scatter:
      return ring_reduce_scatter(engine, call);
    case Kind::all_gather:
      return ring_all_gather(engine, call);
    case Kind::broadcast:
      return pipelined_broadcast(engine, call);
    case Kind::reduce:
      return pipelined_reduce(engine, call);
    case Kind::barrier:
      return dissemination_barrier(engine, call);
    case Kind::send:
    case Kind::recv:
      return point_to_point(engine, call);
  }
  throw InvalidArgument(fmt::format("{}: no algorithm for this call", call.describe()));
}

}  // namespace loom::algorithms
