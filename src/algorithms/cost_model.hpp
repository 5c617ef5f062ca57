// The alpha-beta cost model: what a hop, a byte and a slice cost on each kind of link, and the
// inputs every choice of a communicator depends on. The algorithms' own prices are built on it
// (algorithm_costs.hpp); docs/tuning.md gives the measurements behind each rule.
//
// A unit of B bytes pipelined through k stages in slices of S takes (k + B/S - 1)(sigma + S beta),
// sigma the cost of one slot hand-over: small slices fill the pipeline sooner, large ones pay
// sigma less often; the best is S = sqrt(B sigma / ((k-1) beta)), kept between 16 KiB and the
// slot size.
//
// Everything a choice depends on is the same on every rank of a communicator (the topology
// exchange gives every rank every host's ranks, cores and RDMA port), so both ends of every
// connection choose alike.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/machine_rates.hpp"
#include "transports/transport.hpp"

namespace loom::algorithms {

// One kind of link in the alpha-beta model: a hop's latency, the inverse of its bandwidth, and
// the cost of handing one slot over (a pipelined unit pays it per slice).
struct LinkCost {
  double alpha_us;
  double beta_us_per_byte;
  double slice_us;
  // Whether a stage waits while the one before it moves a slice (a NIC or the kernel moves the
  // bytes: small slices start the next stage sooner). Over shared memory each rank copies its own
  // bytes, so every rank works at every step whatever the slice: the largest slice that stays in
  // a core's cache (slice_cap_bytes, 0: the slot) wins. Where stages wait, the ranks sharing a
  // core share that cap.
  bool stages_wait = true;
  double slice_cap_bytes = 0;
  // TCP between ranks of one host: the kernel's copies run on the cores the ranks share, so
  // ranks outnumbering cores take turns at them (CostModel::measured sets it).
  bool shares_cores = false;
  // The payload one segment carries there (0: not measured). Where ranks outnumber cores a frame
  // that ends in a partly filled segment costs another hop: its receiver, woken by the first
  // segments, is off the core when the last arrives. The pipelined slices fill whole segments
  // (slice_for), and the model charges the frames that do not (hops_per_message).
  double segment_bytes = 0;
};

// Link costs by transport kind.
struct CostModel {
  std::array<LinkCost, 4> by_kind;
  // One slot hand-over through the scheduler (a sleeping peer woken), paid per slice when ranks
  // outnumber cores.
  double wake_us = 20.0;
  // One copy and one two-input reduction on the host, per byte of output: what a rank pays for
  // the bytes it moves in place (direct.cpp), with no slot in between.
  double copy_us_per_byte = 1.0 / 8000.0;
  double reduce_us_per_byte = 1.0 / 6000.0;
  // The kernel's copy out of a peer's memory (process_vm_readv), per byte (0: not measured; the
  // single copy is then priced on the shared-memory link's beta).
  double cma_us_per_byte = 0;
  // The same of pages another core has just written (0: not measured).
  double cma_fresh_us_per_byte = 0;
  // Where the figures come from: "defaults" or "measured at init".
  std::string source = "defaults";
  const LinkCost& of(transport::TransportKind kind) const {
    return by_kind[static_cast<std::size_t>(kind)];
  }
  // Conservative figures for a 2-core machine: wake-ups dominate TCP's latency.
  static CostModel defaults();
  // The model on measured rates. Shared memory from the copy and reduction rates and the
  // hand-over; TCP from loopback when `tcp_on_loopback` (every rank on one host), else its
  // defaults (links between hosts are not probed). A figure left unmeasured keeps its default.
  static CostModel measured(const MachineRates& rates, bool tcp_on_loopback);
};

// What every choice of a communicator depends on.
struct SelectionInputs {
  int size = 1;
  // The ranks of each host, hosts ordered by their lowest rank, ranks ascending.
  std::vector<std::vector<int>> hosts;
  transport::TransportKind local = transport::TransportKind::shm;   // within a host
  transport::TransportKind remote = transport::TransportKind::tcp;  // between hosts (the worst)
  CostModel costs = CostModel::defaults();
  std::size_t slot_bytes = 512 << 10;
  int slots = 8;
  int ranks_per_core = 1;    // the most ranks sharing a core (and its cache) on any host
  int cores = 0;             // the fewest processors of any host (0: not known)
  bool reads_peers = false;  // every rank may read its peers' memory (process_vm_readv)
  std::size_t cache_bytes = std::size_t{32} << 20;  // the last-level cache a host's ranks share
  std::string overrides;                            // LOOM_ALGO
  bool trials = true;  // LOOM_TRIALS (0: no trials; Selector::measures_rival)
  // Rules of the same form from the tuning table (loom-tune), below LOOM_ALGO: they choose
  // for host buffers outside the windows; `tuned_from` names the table for messages.
  std::string tuned;
  std::string tuned_from;

  bool one_host() const { return hosts.size() <= 1; }
  // Some host runs more ranks than cores: hand-overs cost more.
  bool oversubscribed() const { return ranks_per_core > 1; }
  // Whether `working` ranks of a host, working at once, outnumber its cores (cores not known:
  // whether any host is oversubscribed).
  bool crowded(int working) const { return cores > 0 ? working > cores : oversubscribed(); }
  // Whether buffers of `bytes` on each of `ranks` ranks of a host outgrow its last-level cache.
  bool beyond_cache(double bytes, int ranks) const {
    return bytes * std::max(1, ranks) >= static_cast<double>(cache_bytes);
  }
  // The link that bounds an algorithm spanning every rank.
  const LinkCost& bottleneck() const { return costs.of(one_host() ? local : remote); }
  transport::TransportKind bottleneck_kind() const { return one_host() ? local : remote; }
  // Whether every host runs the same number of ranks.
  bool hosts_even() const;
};

// A cost no call pays: the algorithm does not apply.
inline constexpr double kNever = 1e300;

inline double to_d(std::size_t bytes) {
  return static_cast<double>(bytes);
}

// Rounds of doubling distance that reach n ranks: ceil(log2 n).
int doubling_rounds(int n);

// The slices the ring moves each block in per round, out of a FIFO of `slots` (ring_passes.cpp):
// half of them, so the next round's can fill while this round's drain. The model's slices fill
// whole rounds of it, and the buffers posted whole before anything is received must fit it.
inline std::size_t ring_round_slots(int slots) {
  return static_cast<std::size_t>(slots / 2 > 1 ? slots / 2 : 1);
}
// The bytes of those slots: the most a rank posts before it receives.
inline std::size_t half_fifo(const SelectionInputs& in) {
  return in.slot_bytes * ring_round_slots(in.slots);
}

// How an algorithm uses its slices (slice_for).
struct SliceUse {
  // Each slice is reduced against the caller's input as it arrives (the all-reduce).
  bool reduced = false;
  // Pipelined slices fill whole segments where ranks outnumber cores (LinkCost::segment_bytes).
  bool fill_segments = true;
  // The ranks sharing a core share its cache's cap over loopback TCP (the ring's slices take the
  // whole cap: docs/tuning.md, "The share of a core's cache").
  bool cache_per_rank = true;
};

// The slice for `unit` bytes crossing `stages` pipeline stages over `over`.
std::size_t slice_for(const SelectionInputs& in, const LinkCost& over, double unit, int stages,
                      SliceUse use = {});

// The slice for `unit` bytes pipelined through `stages` hops of `link` (an algorithm that chooses
// per phase); the same on every rank for the same arguments.
std::size_t pipeline_slice(const SelectionInputs& inputs, transport::TransportKind link,
                           double unit, int stages);

// The hops a message of `bytes` in slices of `slice` (0: one frame) costs: one, and over loopback
// TCP where the `working` ranks outnumber the cores one more for each frame that ends in a segment
// under half full (LinkCost::segment_bytes).
double hops_per_message(const SelectionInputs& in, const LinkCost& m, double bytes,
                        std::size_t slice, int working);

// The frames after the first of a whole buffer posted at once in slices of `slice` (0: one frame)
// where the `working` ranks outnumber the cores over loopback TCP: each is a hand-over of its own.
double extra_frames(const SelectionInputs& in, const LinkCost& m, double bytes, std::size_t slice,
                    int working);

// How many hops (or whole buffers) of a call's critical path its time counts: over TCP within a
// host whose ranks outnumber its cores, the ranks sharing a core take turns at their messages and
// the kernel's copies, so the call takes what a rank receives on average (`per_rank`) times the
// ranks on a core where that is more than `path`.
double on_shared_cores(const SelectionInputs& in, const LinkCost& m, double path, double per_rank);

}  // namespace loom::algorithms
