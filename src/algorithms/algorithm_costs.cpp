// Each algorithm's price on the link model (cost_model.hpp); docs/tuning.md gives the
// measurements behind each rule.
//
//   all-reduce           hops               bytes through each rank's busiest link
//   ring                 2(n-1)             2(n-1)/n * S
//   recursive_doubling   log2 p (+2 if n>p) S per hop
//   halving_doubling     2 log2 p (+2)      2(p-1)/p * S (+2 S if n>p)
//   one_shot             1                  (n-1) * S
//   hierarchical         2(L-1) local       2(L-1)/L * S local
//   (H hosts x L ranks)  + 2(H-1) network   + 2(H-1)/H * S through each host's network link
//
// time = hops * alpha + bytes * beta (TCP within a host whose ranks outnumber its cores:
// on_shared_cores). recursive_doubling and one_shot post whole buffers before they receive, so
// they take buffers up to half a connection's FIFO.
#include "algorithms/algorithm_costs.hpp"

#include <algorithm>
#include <cmath>

#include "algorithms/power_of_two_fold.hpp"

namespace loom::algorithms {

namespace {

// The ranks working at once while the n - p ranks beyond a power of two fold in or out: they and
// their partners.
int fold_working(const SelectionInputs& in, int p) {
  return 2 * (in.size - p);
}

// The buffers that folding the n - p ranks beyond a power of two in and out puts on the call's
// path. Over loopback TCP beta prices both copies of a byte, its sender's and its receiver's,
// which an exchange makes on each rank; a fold only sends on one rank and only receives on the
// other, and with a core each they copy at once: half a buffer each way (docs/tuning.md,
// "Folds"). The work the ranks share, on_shared_cores, keeps both copies.
double fold_path_buffers(const SelectionInputs& in, const LinkCost& m, int p) {
  if (p == in.size) return 0.0;
  return m.shares_cores && !in.crowded(fold_working(in, p)) ? 1.0 : 2.0;
}

// The ring moves each block in rounds of half the FIFO's slots (ring_passes.cpp), and every
// round pays the ring's hand-overs whatever it carries: a last round left a fraction of a chunk
// pays them for that fraction. Over shared memory, where the slice that spares that round stays
// within the cache's cap, the block goes in whole rounds of it (docs/tuning.md, "Whole rounds").
std::size_t whole_rounds(const SelectionInputs& in, std::size_t bytes, std::size_t slice) {
  const LinkCost& m = in.bottleneck();
  if (m.stages_wait || m.shares_cores || slice == 0) return slice;
  const double cap = m.slice_cap_bytes > 0 ? std::min(m.slice_cap_bytes, to_d(in.slot_bytes))
                                           : to_d(in.slot_bytes);
  const double per_round = to_d(ring_round_slots(in.slots));
  const double block = std::ceil(to_d(bytes) / in.size);
  const double rounds = std::floor(block / (per_round * to_d(slice)));
  if (rounds < 1 || block <= rounds * per_round * to_d(slice)) return slice;
  // The slice that carries the block in `rounds` rounds, in whole pages as slice_for's are.
  const double wider = std::ceil(block / (rounds * per_round) / 4096) * 4096;
  return wider <= cap ? static_cast<std::size_t>(wider) : slice;
}

// Beta prices the ring's bytes, half of which are reduced: what an algorithm that reduces every
// byte it receives pays on top, per byte (the other half of a host reduction; a GPU's reduction is
// not the bound).
double whole_reduction_extra_us_per_byte(const SelectionInputs& in, bool device) {
  return device ? 0.0 : 0.5 * in.costs.reduce_us_per_byte;
}

// Ranks outnumbering cores: a slot handed to a peer that is not running waits for a switch.
double switch_us(const SelectionInputs& in, const LinkCost& link) {
  return in.oversubscribed() ? link.slice_us + in.costs.wake_us : 0.0;
}

// Two rounds of a small message to every peer (where the buffers are; done), then the rank's
// own copies and reductions, each byte once: `copies` and `reductions` are the bytes of output
// of each. Oversubscribed, no switch is counted: the all-reduce algorithms it competes with count
// none per hop either (docs/tuning.md, "In place").
double in_place_cost(const SelectionInputs& in, double copies, double reductions) {
  const LinkCost& m = in.costs.of(in.local);
  return 2.0 * (in.size - 1) * m.alpha_us + copies * in.costs.copy_us_per_byte +
         reductions * in.costs.reduce_us_per_byte;
}

double n_minus_1(const SelectionInputs& in) {
  return static_cast<double>(std::max(1, in.size - 1));
}

}  // namespace

// ---- all-reduce

double ring_cost(const SelectionInputs& in, std::size_t bytes, bool device) {
  const LinkCost& m = in.bottleneck();
  const int n = in.size;
  const double hops = 2.0 * (n - 1) *
                      hops_per_message(in, m, to_d(bytes) / n, ring_slice(in, bytes, device), n),
               blocks = 2.0 * (n - 1) / n;
  return on_shared_cores(in, m, hops, hops) * m.alpha_us +
         on_shared_cores(in, m, blocks, blocks) * to_d(bytes) * m.beta_us_per_byte;
}

// Over loopback TCP with a core per rank, a block larger than a slot goes in whole-slot frames,
// one a round, while the ranks' inputs and outputs fill at most half the last-level cache: the
// step beyond "a unit that fits a slot goes as one frame" (slice_for; docs/tuning.md, "One frame
// a round"). Both ends of every hop must cut the same rounds: loopback puts every rank on one
// host, whose cache they all read.
std::size_t ring_round_slices(const SelectionInputs& in, std::size_t bytes, bool device) {
  const LinkCost& m = in.bottleneck();
  if (device || !m.shares_cores || m.slice_cap_bytes <= 0 || in.oversubscribed()) return 0;
  const bool beyond_slot = to_d(bytes) / in.size > to_d(in.slot_bytes);
  return beyond_slot && !in.beyond_cache(2.0 * 2.0 * to_d(bytes), in.size) ? 1 : 0;
}

std::size_t ring_slice(const SelectionInputs& in, std::size_t bytes, bool device) {
  // GPU buffers: whole slots, since each slice waits for the GPU. Up to 16 KiB: whole slots,
  // and no arithmetic on the latency path.
  if (device || bytes <= 16 * 1024) return 0;
  if (ring_round_slices(in, bytes, device) != 0) return in.slot_bytes;
  return whole_rounds(in, bytes,
                      slice_for(in, in.bottleneck(), to_d(bytes) / in.size, 2 * (in.size - 1),
                                {.reduced = true, .cache_per_rank = false}));
}

double recursive_doubling_cost(const SelectionInputs& in, std::size_t bytes, bool device) {
  const LinkCost& m = in.bottleneck();
  int p = 1, hops = 0;
  while (p * 2 <= in.size) p *= 2, ++hops;
  // Every hop but the last of a non-power of two reduces the whole buffer.
  const int reducing = hops + (p != in.size ? 1 : 0);
  // Messages received: p at every hop; each of the n-p others receives one, and so does its
  // partner.
  const double messages_per_rank = (to_d(p) * hops + 2.0 * (in.size - p)) / in.size;
  // A message's hops, averaged over the path: p ranks work at each exchange, 2(n-p) at a fold.
  const std::size_t slice = whole_buffer_slice(in, bytes, device);
  const int folds = p != in.size ? 2 : 0;
  const auto message_hops = [&](int working) {
    return hops_per_message(in, m, to_d(bytes), slice, working) +
           extra_frames(in, m, to_d(bytes), slice, working);
  };
  const double frames =
      (hops * message_hops(p) + folds * message_hops(fold_working(in, p))) / (hops + folds);
  const double buffers = hops + fold_path_buffers(in, m, p);
  hops += folds;
  // Bytes as messages: a whole buffer each (folds: fold_path_buffers).
  return on_shared_cores(in, m, hops, messages_per_rank) * frames * m.alpha_us +
         on_shared_cores(in, m, buffers, messages_per_rank) * to_d(bytes) * m.beta_us_per_byte +
         reducing * to_d(bytes) * whole_reduction_extra_us_per_byte(in, device);
}

std::size_t whole_buffer_slice(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device || bytes <= 16 * 1024) return 0;
  const std::size_t half = ring_round_slots(in.slots);
  // Cut to whole segments, a buffer just over one would end in a short frame (docs/tuning.md,
  // "Frames that spill a segment").
  return std::max(
      slice_for(in, in.bottleneck(), to_d(bytes), 2, {.reduced = true, .fill_segments = false}),
      (bytes + half - 1) / half);
}

double halving_doubling_cost(const SelectionInputs& in, std::size_t bytes, bool device) {
  const LinkCost& m = in.bottleneck();
  int p = 1, steps = 0;
  while (p * 2 <= in.size) p *= 2, ++steps;
  const bool folds = p != in.size;
  // Halving and doubling: 2 log2 p messages carrying 2(p-1)/p of the buffer; folding in and out
  // adds a whole buffer each way. A message costs its frames' hops where they are handed over one
  // by one (hops_per_message).
  const std::size_t slice = half_buffer_slice(in, bytes, device);
  double step_hops = 0;
  for (int k = 1; k <= steps; ++k)
    step_hops += 2.0 * hops_per_message(in, m, to_d(bytes) / (1 << k), slice, p);
  const double fold_hops =
      folds ? 2.0 * hops_per_message(in, m, to_d(bytes), slice, fold_working(in, p)) : 0.0;
  const double hops = step_hops + fold_hops;
  const double buffers = 2.0 * (p - 1) / p + fold_path_buffers(in, m, p);
  // Averaged over the ranks (the n-p others receive one message and one buffer).
  const double messages_per_rank = (to_d(p) * step_hops + (in.size - p) * fold_hops) / in.size;
  const double buffers_per_rank = (to_d(p) * 2.0 * (p - 1) / p + 2.0 * (in.size - p)) / in.size;
  // Its first step reduces half the buffer at once where the ring reduces a block (1/n) a step.
  // Where the kernel or a NIC moves the bytes, that step's footprint is the half; over shared
  // memory the ranks copy every byte themselves, the half they read and the half they write: the
  // buffer. Once that footprint outgrows the share of a core's L2 (8 slice caps; unmeasured, a
  // slot) each rank on the core has, its reductions and copies run from the shared cache or
  // memory: charged its bytes once more. Over loopback TCP the share is the cache over the others
  // on the core (docs/tuning.md, "Halving-doubling's footprint").
  const double cache = m.slice_cap_bytes > 0 ? 8 * m.slice_cap_bytes : to_d(in.slot_bytes);
  const int sharing = m.shares_cores ? in.ranks_per_core - 1 : in.ranks_per_core;
  const double share = cache / std::max(1, sharing);
  const double footprint = m.stages_wait ? to_d(bytes) / 2 : to_d(bytes);
  const double spill = !device && footprint > share ? 1.0 : 0.0;
  // Half of what it moves is reduced, as in the ring, but for the folded buffer.
  return on_shared_cores(in, m, hops, messages_per_rank) * m.alpha_us +
         (on_shared_cores(in, m, buffers, buffers_per_rank) + spill) * to_d(bytes) *
             m.beta_us_per_byte +
         (folds ? 1 : 0) * to_d(bytes) * whole_reduction_extra_us_per_byte(in, device);
}

// Its steps exchange halves of the buffer and less, each after the one before: pipelined over one
// hop. Its p exchanging ranks share the cores' caches where they outnumber the cores; where they
// have a core each they take the ring's whole cap (docs/tuning.md, "The share of a core's cache").
std::size_t half_buffer_slice(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device || bytes <= 16 * 1024) return 0;
  return slice_for(in, in.bottleneck(), to_d(bytes) / 2, 2,
                   {.reduced = true, .cache_per_rank = in.crowded(power_of_two_below(in.size))});
}

double one_shot_cost(const SelectionInputs& in, std::size_t bytes, bool device) {
  const LinkCost& m = in.bottleneck();
  const double hops = on_shared_cores(in, m, 1, in.size - 1);
  const double buffers = on_shared_cores(in, m, in.size - 1, in.size - 1);
  // Each rank reduces every byte it receives.
  const double reduction =
      (in.size - 1) * to_d(bytes) * whole_reduction_extra_us_per_byte(in, device);
  return hops * m.alpha_us + buffers * to_d(bytes) * m.beta_us_per_byte + reduction;
}

// Chosen by the model only where ranks span hosts with several ranks each.
double hierarchical_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  if (in.hosts.size() < 2 || in.hosts.front().size() < 2) return kNever;
  const double hosts = static_cast<double>(in.hosts.size());
  const double local = static_cast<double>(in.hosts.front().size());
  const LinkCost& near = in.costs.of(in.local);
  const LinkCost& far = in.costs.of(in.remote);
  return 2.0 * (local - 1) * (near.alpha_us + to_d(bytes) / local * near.beta_us_per_byte) +
         2.0 * (hosts - 1) * (far.alpha_us + to_d(bytes) / hosts * far.beta_us_per_byte);
}

std::size_t no_slice(const SelectionInputs&, std::size_t, bool) {
  return 0;
}

// ---- the one-algorithm collectives

double chain_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const LinkCost& m = in.bottleneck();
  return (in.size - 1) * m.alpha_us + to_d(bytes) * m.beta_us_per_byte;
}
std::size_t chain_slice(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device) return 0;
  return slice_for(in, in.bottleneck(), to_d(bytes), std::max(2, in.size - 1));
}
std::size_t uneven_slice(const SelectionInputs& in, std::size_t bytes, bool device) {
  return chain_slice(in, bytes / static_cast<std::size_t>(std::max(1, in.size)), device);
}
double barrier_cost(const SelectionInputs& in, std::size_t, bool) {
  return doubling_rounds(in.size) * in.bottleneck().alpha_us;
}
double p2p_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const LinkCost& m = in.bottleneck();
  return m.alpha_us + to_d(bytes) * m.beta_us_per_byte;
}
// Copy in, copy out.
std::size_t p2p_slice(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device) return 0;
  return slice_for(in, in.bottleneck(), to_d(bytes), 2);
}

// ---- all-gather: every other rank's block reaches each rank. The ring takes n-1 hops; Bruck's
// ceil(log2 n) rounds, not pipelined, and a rotation copy at the end. Oversubscribed, each hop or
// round waits for a peer to be switched in.

double ring_gather_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const LinkCost& m = in.bottleneck();
  return (in.size - 1) * (m.alpha_us + switch_us(in, m) + to_d(bytes) * m.beta_us_per_byte);
}
double bruck_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const LinkCost& m = in.bottleneck();
  return doubling_rounds(in.size) * (m.alpha_us + switch_us(in, m)) +
         (in.size - 0.5) * to_d(bytes) * m.beta_us_per_byte;
}

// ---- gather, scatter, all-to-all. The root's link carries n-1 blocks either way; the tree saves
// hops but copies through its ranks' host memory.

double tree_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const LinkCost& m = in.bottleneck();
  return doubling_rounds(in.size) * m.alpha_us + (in.size - 1) * to_d(bytes) * m.beta_us_per_byte;
}
double linear_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const LinkCost& m = in.bottleneck();
  return (in.size - 1) * (m.alpha_us + to_d(bytes) * m.beta_us_per_byte);
}
// Ranks outnumbering the cores of one host over shared memory, where every rank works at every
// step (the all-to-all): each core runs this many ranks' copies.
double core_turns(const SelectionInputs& in) {
  return in.oversubscribed() && in.one_host() && in.local == transport::TransportKind::shm
             ? static_cast<double>(in.ranks_per_core)
             : 1.0;
}

// Pairwise through the slots: each block crosses one hop, copied in and out. With a core per rank
// the receiver copies out while the sender copies in (beta: the pipe's rate). Where ranks
// outnumber the cores of a host over shared memory, every rank's two copies of each byte run on
// the cores the ranks share, each core running core_turns ranks' copies, and every step waits for
// its partner to be switched in: a switch a step at least, one about every half slot beyond (the
// receiver drains while the sender fills). Measured, 4 ranks on 2 cores (docs/tuning.md,
// "All-to-all where ranks outnumber cores").
double pairwise_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const LinkCost& m = in.bottleneck();
  const double handovers = to_d(bytes) / (to_d(in.slot_bytes) / 2.0);
  const double turns = core_turns(in);
  if (turns > 1.0)
    return (in.size - 1) * (m.alpha_us + 2.0 * to_d(bytes) * in.costs.copy_us_per_byte * turns +
                            std::max(1.0, handovers) * switch_us(in, m));
  return (in.size - 1) *
         (m.alpha_us + to_d(bytes) * m.beta_us_per_byte + handovers * switch_us(in, m));
}
// Two rounds of messages to every peer (where the blocks are; done), then a read system call per
// block, each byte copied once by the kernel. Where ranks outnumber cores, at the rate the probe
// measured for that copy (process_vm_readv pins every page before it copies: on a Xeon 0.55-0.7x
// memcpy's speed), on the cores the ranks share as pairwise's copies are; unmeasured, the slots'
// beta. With a core each the slots' two copies overlap on two cores: 2 ranks, 1-64 MiB, the reads
// took 1.05-1.25x pairwise's time on a Zen 4 whose kernel copied at half memcpy's speed, hence at
// least 1.2x the slots' beta there (the probe reads its own pages, which no other core holds).
// Where the host's buffers outgrow the last-level cache, the slots' copies stream past it
// (all_to_all.cpp) and the kernel's cannot: the factor only has to make the slots win there
// (docs/tuning.md, "The single copy"). (in.size is the host's ranks: the single copy runs on one
// host only.)
namespace {

constexpr double kReadCallUs = 5.0;

// The kernel's copy of pages this core wrote itself, per byte, as the probe measured it
// (unmeasured: the slots' beta).
double own_pages_us_per_byte(const SelectionInputs& in) {
  return in.costs.cma_us_per_byte > 0 ? in.costs.cma_us_per_byte
                                      : in.costs.of(in.local).beta_us_per_byte;
}

// The kernel's copy out of a peer's memory, per byte.
double kernel_read_us_per_byte(const SelectionInputs& in) {
  constexpr double kKernelCopyFactor = 1.2;
  const LinkCost& m = in.costs.of(in.local);
  const double measured = own_pages_us_per_byte(in);
  // With a core per rank, the read of a peer's freshly written pages as the probe measured it;
  // without that figure, the Zen 4's floor over the slots' beta.
  const double fresh = in.costs.cma_fresh_us_per_byte;
  return in.oversubscribed() ? measured
         : fresh > 0         ? fresh
                             : std::max(measured, kKernelCopyFactor * m.beta_us_per_byte);
}

}  // namespace

double single_copy_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  constexpr double kBeyondCacheFactor = 2.0;
  const LinkCost& m = in.costs.of(in.local);
  // Each rank's in and out: n blocks each.
  const double factor =
      in.beyond_cache(2.0 * in.size * to_d(bytes), in.size) ? kBeyondCacheFactor : 1.0;
  const double copy = to_d(bytes) * kernel_read_us_per_byte(in) * factor * core_turns(in);
  return (in.size - 1) * (2.0 * m.alpha_us + switch_us(in, m) + kReadCallUs + copy);
}

// The single-copy all-reduce (single_copy_all_reduce.cpp): two rounds of a small message to every
// peer (where the buffers are; done), then each rank's copies, all made by the kernel: it reads
// its block of every peer's input and writes its finished block into every peer's output
// (2(n-1)/n of the buffer, at least a system call per peer each way), and folds its block (n-1
// reductions of S/n, the pieces read into its cache). The reads at the rate of lines another core
// has just written (a training step's fresh gradients); the writes at the rate of pages this
// core wrote itself, since no other core touches a rank's block between its fold and its writes.
// Where ranks outnumber cores, all of it at the own-pages rate, the ranks on a core taking turns
// at it; a round waits for its peers to be switched in. Measured on 2 cores, 2 ranks
// (docs/tuning.md, "The single-copy all-reduce"): 1.1-1.8x the ring from 256 KiB to 64 MiB in
// place, and out of place up to 32 MiB (1.0-1.4x), but 0.87x there at 64 MiB, where every rank's
// input and output outgrow the caches (the kernel's copies cannot stream past them): where they
// fill half the last-level cache it pays the single copy's factor, which leaves those sizes to
// the ring.
double single_copy_all_reduce_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  constexpr double kBeyondCacheFactor = 2.0;
  const LinkCost& m = in.costs.of(in.local);
  const double peers = n_minus_1(in), block = to_d(bytes) / in.size;
  const double copies = peers * block * (kernel_read_us_per_byte(in) + own_pages_us_per_byte(in));
  const double folds = peers * block * in.costs.reduce_us_per_byte;
  const double factor =
      in.beyond_cache(2.0 * 2.0 * to_d(bytes), in.size) ? kBeyondCacheFactor : 1.0;
  return 2.0 * (peers * m.alpha_us + switch_us(in, m)) + 2.0 * peers * kReadCallUs +
         (copies + folds) * factor * core_turns(in);
}
// all_to_all_v, whose ranks share no size (its blocks differ): the single copy reads each block
// it prices cheaper than the slots (single_copy_reads) and sends the others through them, so it
// costs the cheaper of the two; at the size every rank shares (0), pairwise's, and it comes
// before pairwise in the table, which a tie leaves to the earlier row.
double single_copy_v_cost(const SelectionInputs& in, std::size_t bytes, bool device) {
  return std::min(single_copy_cost(in, bytes, device), pairwise_cost(in, bytes, device));
}

ReadRange single_copy_reads(const SelectionInputs& in) {
  ReadRange range{SIZE_MAX, SIZE_MAX};
  for (std::size_t b = 4096; b <= (std::size_t{1} << 30); b *= 2) {
    const bool reads = single_copy_cost(in, b, false) < pairwise_cost(in, b, false);
    if (reads && range.from == SIZE_MAX) range.from = b;
    if (!reads && range.from != SIZE_MAX) {
      range.to = b;
      break;
    }
  }
  return range;
}

// ---- in place in the peers' buffers

// Device buffers through the peers' memory: the host sends two small messages and waits for
// none of the work, which the GPU orders itself (copy engines and kernels at its own rate), so
// the host's price is nothing; wherever the peers' memory is mapped, the direct path wins.
double direct_device_cost(const SelectionInputs&, std::size_t, bool) {
  return 0.0;
}
// Rank r reduces block r of every input (n-1 reductions of S/n) and writes it to the other
// outputs (two ranks: the reduction writes both).
double direct_all_reduce_cost(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device) return direct_device_cost(in, bytes, device);
  const double block = to_d(bytes) / in.size;
  return in_place_cost(in, in.size > 2 ? n_minus_1(in) * block : 0.0, n_minus_1(in) * block);
}
double direct_reduce_cost(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device) return direct_device_cost(in, bytes, device);
  return in_place_cost(in, 0.0, n_minus_1(in) * to_d(bytes));
}
// Every block but the rank's own copied in. All-to-all copies its own block too, but so do
// pairwise and the single copy, whose prices count only the peers' blocks (docs/tuning.md,
// "In place").
double direct_gather_cost(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device) return direct_device_cost(in, bytes, device);
  return in_place_cost(in, n_minus_1(in) * to_d(bytes), 0.0);
}
double direct_copy_cost(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device) return direct_device_cost(in, bytes, device);
  return in_place_cost(in, to_d(bytes), 0.0);
}

}  // namespace loom::algorithms
