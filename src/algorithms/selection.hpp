// Which algorithm runs a call, as data: a table of algorithms (collective, name, whether it can
// take the call, its predicted cost, its slice, how to run it), an alpha-beta cost model per kind
// of link, and the user's overrides (LOOM_ALGO). UCC's score map is the idea: every candidate
// that fits gets a cost, the lowest wins, a rule names one for an operation and a size range.
//
// Everything a choice depends on is the same on every rank of a communicator (the topology
// exchange gives every rank every host's ranks, cores and RDMA port), so both ends of every
// connection choose alike.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/collective.hpp"
#include "base/config.hpp"
#include "transports/transport.hpp"

namespace loom::algorithms {

class Engine;

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

// What the init probe measured on a host (core/machine_probe.cpp); 0: not measured.
struct MachineRates {
  double copy_gbps = 0;      // memcpy of 4 MiB (beyond a core's cache, within the shared one)
  double reduce_gbps = 0;    // f32 sum of 1 MiB (a += b), bytes of output per second
  double handover_us = 0;    // one way between two threads that spin on a shared word
  double wake_us = 0;        // one way between two threads that sleep on a futex
  double loopback_us = 0;    // 8 bytes one way over TCP loopback
  double loopback_gbps = 0;  // one TCP loopback stream
  // Two threads exchanging 1 MiB through a FIFO of slots, each copying in and reducing what it
  // receives (the shared-memory ring at 2 ranks), fitted to slices * slice_us + bytes / rate.
  double slice_us = 0;        // one slice: its hand-overs and the slot's bookkeeping
  double pipe_gbps = 0;       // bytes one side sends per second, each copied in and reduced across
  double core_cache_kib = 0;  // a core's level-2 cache
  double segment_bytes = 0;   // a TCP frame's payload that fits one loopback segment

  // "copy=41.2 reduce=20.1 ..." (a rank's topology record carries it); decode() reads any
  // field it knows and leaves the rest 0.
  std::string encode() const;
  static MachineRates decode(std::string_view text);
  // Field by field, the better (the ranks of a host probe at once and disturb each other: the
  // least disturbed figure is the machine's) or the worse (hosts: the slowest bounds a call).
  static MachineRates better(const MachineRates& a, const MachineRates& b);
  static MachineRates worse(const MachineRates& a, const MachineRates& b);
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

struct Algorithm {
  Kind collective;
  std::string_view name;
  // Why it cannot take a call of `bytes` (nullptr: it can).
  const char* (*unfit)(const SelectionInputs&, std::size_t bytes, bool device);
  // Predicted time in microseconds.
  double (*cost)(const SelectionInputs&, std::size_t bytes, bool device);
  // How much one slot carries (0: whole slots).
  std::size_t (*slice)(const SelectionInputs&, std::size_t bytes, bool device);
  void (*run)(Engine&, const Collective&);
};

// Every algorithm Loom has.
const std::vector<Algorithm>& algorithm_table();

// Whether a rule may set the algorithm's slice ("ring@256K"): it pipelines through the slots in
// slices of any size.
bool takes_any_slice(const Algorithm& algorithm);

// "allreduce", "reducescatter", ...: the names LOOM_ALGO rules use.
std::string_view rule_name(Kind kind);

class Selector {
 public:
  // Parses the overrides: InvalidArgument naming the bad rule.
  explicit Selector(SelectionInputs inputs);

  struct Choice {
    const Algorithm* algorithm;
    std::size_t slice;
    double predicted_us;
    bool forced;  // a LOOM_ALGO rule named it
    bool tuned;   // a rule of the tuning table named it
    // Slices a round of the ring all-reduce carries per block (0: half the FIFO's slots;
    // Engine::round_slices).
    std::size_t round_slices = 0;
  };
  // windows: the communicator has shared host windows (Communicator::alloc), so the algorithms
  // that read the peers' buffers in place may take a host call.
  Choice choose(Kind kind, std::size_t bytes, bool device, bool windows = false) const;
  const SelectionInputs& inputs() const { return inputs_; }
  // InvalidArgument, as the constructor raises it, when LOOM_ALGO rules `text` do not parse.
  static void check_rules(std::string_view text) { parse_rules(text, "configuration: LOOM_ALGO"); }

 private:
  struct Rule {
    Kind collective;
    const Algorithm* algorithm;
    std::size_t from;   // bytes, inclusive
    std::size_t to;     // bytes, exclusive
    std::size_t slice;  // 0: the algorithm's own
  };
  // "[operation:]algorithm[@slice][:from-to],...": InvalidArgument naming `source` and the rule.
  static std::vector<Rule> parse_rules(std::string_view text, std::string_view source);
  SelectionInputs inputs_;
  std::vector<Rule> rules_;        // LOOM_ALGO
  std::vector<Rule> tuned_rules_;  // the tuning table's
};

// The slice for `unit` bytes pipelined through `stages` hops of `link` (an algorithm that chooses
// per phase); the same on every rank for the same arguments.
std::size_t pipeline_slice(const SelectionInputs& inputs, transport::TransportKind link,
                           double unit, int stages);

// The slices the ring moves each block in per round, out of a FIFO of `slots` (ring_passes.cpp):
// half of them, so the next round's can fill while this round's drain. The model's slices fill
// whole rounds of it (selection.cpp).
inline std::size_t ring_round_slots(int slots) {
  return static_cast<std::size_t>(slots / 2 > 1 ? slots / 2 : 1);
}

// Runs `call` with the algorithm its communicator's selector chooses.
void select_and_run(Engine& engine, const Collective& call);

}  // namespace loom::algorithms
