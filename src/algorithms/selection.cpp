// The algorithm table and its cost model (see selection.hpp).
//
//   all-reduce           hops               bytes through each rank's busiest link
//   ring                 2(n-1)             2(n-1)/n * S
//   recursive_doubling   log2 p (+2 if n>p) S per hop
//   halving_doubling     2 log2 p (+2)      2(p-1)/p * S (+2 S if n>p)
//   one_shot             1                  (n-1) * S
//   hierarchical         2(L-1) local       2(L-1)/L * S local
//   (H hosts x L ranks)  + 2(H-1) network   + 2(H-1)/H * S through each host's network link
//
// time = hops * alpha + bytes * beta (TCP within a host whose ranks outnumber its cores: see
// on_shared_cores). recursive_doubling and one_shot post whole buffers before they receive, so
// they take buffers up to half a connection's FIFO.
//
// The slice (how much each slot carries) is chosen per call too. A unit of B bytes pipelined
// through k stages in slices of S takes (k + B/S - 1)(sigma + S beta), sigma the cost of one
// slot hand-over: small slices fill the pipeline sooner, large ones pay sigma less often; the
// best is S = sqrt(B sigma / ((k-1) beta)), kept between 16 KiB and the slot size.
#include "algorithms/selection.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "algorithms/algorithms.hpp"
#include "algorithms/engine.hpp"
#include "algorithms/power_of_two_fold.hpp"
#include "base/config.hpp"
#include "base/logging.hpp"

namespace loom::algorithms {

using transport::TransportKind;

CostModel CostModel::defaults() {
  CostModel m{};
  m.by_kind[static_cast<std::size_t>(TransportKind::shm)] = {0.5, 1.0 / 5000.0, 2.0, false, 0};
  m.by_kind[static_cast<std::size_t>(TransportKind::tcp)] = {30.0, 1.0 / 1500.0, 30.0};
  m.by_kind[static_cast<std::size_t>(TransportKind::ibverbs)] = {5.0, 1.0 / 10000.0, 5.0};
  m.by_kind[static_cast<std::size_t>(TransportKind::cudaipc)] = {10.0, 1.0 / 200000.0, 10.0};
  return m;
}

namespace {

// The rates in the order encode() writes them, with their names.
constexpr std::array<std::pair<const char*, double MachineRates::*>, 10> kRateFields = {{
    {"copy_gbps", &MachineRates::copy_gbps},
    {"reduce_gbps", &MachineRates::reduce_gbps},
    {"handover_us", &MachineRates::handover_us},
    {"wake_us", &MachineRates::wake_us},
    {"loopback_us", &MachineRates::loopback_us},
    {"loopback_gbps", &MachineRates::loopback_gbps},
    {"slice_us", &MachineRates::slice_us},
    {"pipe_gbps", &MachineRates::pipe_gbps},
    {"core_cache_kib", &MachineRates::core_cache_kib},
    {"segment_bytes", &MachineRates::segment_bytes},
}};

// Rates are better larger, times smaller; 0 is "not measured" and loses to any figure.
bool is_time(double MachineRates::*field) {
  return field == &MachineRates::handover_us || field == &MachineRates::wake_us ||
         field == &MachineRates::loopback_us || field == &MachineRates::slice_us;
}
MachineRates pick(const MachineRates& a, const MachineRates& b, bool better) {
  MachineRates r;
  for (const auto& [name, field] : kRateFields) {
    const double x = a.*field, y = b.*field;
    if (x <= 0 || y <= 0) {
      r.*field = std::max(x, y);
      continue;
    }
    const bool x_better = is_time(field) ? x < y : x > y;
    r.*field = x_better == better ? x : y;
  }
  return r;
}

}  // namespace

std::string MachineRates::encode() const {
  std::string out;
  for (const auto& [name, field] : kRateFields)
    out += fmt::format("{}{}={:.6g}", out.empty() ? "" : " ", name, this->*field);
  return out;
}

MachineRates MachineRates::decode(std::string_view text) {
  MachineRates r;
  while (!text.empty()) {
    const auto space = text.find(' ');
    const std::string_view item = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view{} : text.substr(space + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    for (const auto& [name, field] : kRateFields) {
      if (item.substr(0, eq) != name) continue;
      const std::string value(item.substr(eq + 1));
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (end != value.c_str() && *end == '\0' && std::isfinite(v) && v > 0) r.*field = v;
    }
  }
  return r;
}

MachineRates MachineRates::better(const MachineRates& a, const MachineRates& b) {
  return pick(a, b, true);
}
MachineRates MachineRates::worse(const MachineRates& a, const MachineRates& b) {
  return pick(a, b, false);
}

// Shared memory: a rank copies each byte it sends into a slot, and copies out (gathering) or
// reduces (reducing) each byte it receives; an all-reduce reduces half of its bytes. A hop is one
// hand-over of a slot's flag, a slice two (filled, then released). TCP over loopback: the
// stream's rate plus the reduction, a hop its latency.
CostModel CostModel::measured(const MachineRates& r, bool tcp_on_loopback) {
  CostModel m = defaults();
  LinkCost& shm = m.by_kind[static_cast<std::size_t>(TransportKind::shm)];
  LinkCost& tcp = m.by_kind[static_cast<std::size_t>(TransportKind::tcp)];
  bool any = false;
  const double reduce_per_byte = r.reduce_gbps > 0 ? 1.0 / (r.reduce_gbps * 1e3) : 0.0;
  if (r.copy_gbps > 0 && r.reduce_gbps > 0) {
    shm.beta_us_per_byte = 1.5 / (r.copy_gbps * 1e3) + 0.5 * reduce_per_byte;
    m.copy_us_per_byte = 1.0 / (r.copy_gbps * 1e3);
    m.reduce_us_per_byte = reduce_per_byte;
    any = true;
  }
  if (r.handover_us > 0) {
    shm.alpha_us = r.handover_us;
    shm.slice_us = 2.0 * r.handover_us;
    any = true;
  }
  // The pipe ran the ring's own work across cores, slots and all: where it was measured, its
  // figures replace those built from the parts. Its bytes were each copied in and reduced; the
  // ring's are copied in, then half reduced and half copied out, which the parts' ratio carries.
  // A hop hands one slot over with its bookkeeping: half a slice's two.
  if (r.slice_us > 0) {
    shm.slice_us = r.slice_us;
    shm.alpha_us = std::max(shm.alpha_us, 0.5 * r.slice_us);
    any = true;
  }
  // A core holds about eight slices' worth at once: the one it copies in (its source and its
  // slot), the one it reduces (the peer's slot, its input and output), and the next of each
  // while the peer works. 2-8 ranks on a 1 MiB L2 measured fastest at 128 KiB (loom-tune).
  if (r.core_cache_kib > 0) shm.slice_cap_bytes = r.core_cache_kib * 1024 / 8, any = true;
  if (r.pipe_gbps > 0) {
    const double per_byte = 1.0 / (r.pipe_gbps * 1e3);
    shm.beta_us_per_byte =
        r.copy_gbps > 0 && r.reduce_gbps > 0
            ? per_byte * shm.beta_us_per_byte / (m.copy_us_per_byte + m.reduce_us_per_byte)
            : per_byte;
    any = true;
  }
  if (r.wake_us > 0) m.wake_us = r.wake_us, any = true;
  tcp.shares_cores = tcp_on_loopback;
  if (tcp_on_loopback && r.loopback_us > 0 && r.loopback_gbps > 0) {
    tcp.alpha_us = r.loopback_us;
    // One stream overlaps its sender's copy into the kernel with its receiver's copy out, on two
    // cores; in a collective every rank makes both copies of its bytes (2 ranks on 2 cores: the
    // ring at 64 MiB moved 3.1 GB/s against the probe's 7.5).
    tcp.beta_us_per_byte = 2.0 / (r.loopback_gbps * 1e3) + 0.5 * reduce_per_byte;
    tcp.slice_us = r.loopback_us;
    // The kernel copies each slice into a socket buffer and out of it on the same host: a slice
    // that outgrows the core's cache is copied from memory (2 ranks: 128 KiB slices 1.3x
    // faster than 512 KiB at 64 MiB on a 1 MiB L2).
    if (r.core_cache_kib > 0) tcp.slice_cap_bytes = r.core_cache_kib * 1024 / 8;
    tcp.segment_bytes = r.segment_bytes;
    any = true;
  }
  if (any)
    m.source = tcp_on_loopback ? "measured at init" : "measured at init (shm; tcp: defaults)";
  return m;
}

bool SelectionInputs::hosts_even() const {
  for (const auto& h : hosts)
    if (h.size() != hosts.front().size()) return false;
  return !hosts.empty();
}

namespace {

constexpr double kNever = 1e300;

// Rounds of doubling distance that reach n ranks: ceil(log2 n).
int doubling_rounds(int n) {
  int rounds = 0;
  for (int k = 1; k < n; k *= 2) ++rounds;
  return rounds;
}

double to_d(std::size_t bytes) {
  return static_cast<double>(bytes);
}

// How an algorithm uses its slices (slice_for).
struct SliceUse {
  // Each slice is reduced against the caller's input as it arrives (the all-reduce).
  bool reduced = false;
  // Pipelined slices fill whole segments where ranks outnumber cores (LinkCost::segment_bytes).
  bool fill_segments = true;
  // The ranks sharing a core share its cache's cap over loopback TCP. The ring's do not: with its
  // slices filling whole segments, 4 and 8 ranks on 2 cores at 4-64 MiB ran 1.1-1.3x faster in
  // the whole cap's 124 KiB (two segments) than in the share's 60 KiB (4 ranks) and 32 KiB
  // (8 ranks), 3 ranks 1.03-1.12x (alternating launches, 5-8 each); halving-doubling's halves,
  // exchanged between partners, ran 0.85-0.94x in 124 KiB at 4 ranks and 1-4 MiB, and keep the
  // share (no less than a segment: slice_for). The share was measured where a slice of the whole
  // cap (128 KiB) spilled a segment.
  bool cache_per_rank = true;
};

// The slice for `unit` bytes crossing `stages` pipeline stages over `over`.
std::size_t slice_for(const SelectionInputs& in, const LinkCost& over, double unit, int stages,
                      SliceUse use = {}) {
  constexpr double kMin = 16 * 1024;
  // Over TCP within a host the cache's cap and the ranks' turns were measured on the all-reduce.
  // Slices that are only copied keep the pipeline's rule there: an all-gather and a broadcast ran
  // 1.1-1.6x faster in 256-512 KiB slices than in the cap's 64-128 KiB (loom-tune, 2-4 ranks).
  LinkCost link = over;
  if (link.shares_cores && !use.reduced) link.shares_cores = false, link.slice_cap_bytes = 0;
  const bool fills_segments =
      use.fill_segments && over.segment_bytes > 0 && (in.oversubscribed() || link.shares_cores);
  // TCP within a host copies through the kernel on the cores its ranks share, and they take
  // their turns in a core's cache (4 ranks on 2 cores: 64 KiB slices 1.3x faster than 128 KiB,
  // two segments and 154 bytes; SliceUse::cache_per_rank). Where slices fill segments the share
  // stops at one: a slice hands a core over whatever its size. On a 512 KiB L2, whose share is
  // 32 KiB at 4 ranks and 16 KiB at 8, halving-doubling in 60 KiB slices ran faster at 4 ranks
  // from 256 KiB to 1 MiB in 12 of 13 alternating launches (1.08-1.41x) and 1.3-1.9x at 8 ranks
  // at 256 and 512 KiB (3 each); on a 1 MiB L2 the share at 4 ranks is that segment already.
  const bool shared_cap = use.cache_per_rank || !fills_segments;
  const double least_share =
      fills_segments && use.cache_per_rank ? std::max(kMin, over.segment_bytes) : kMin;
  const double cap =
      link.shares_cores && link.slice_cap_bytes > 0 && shared_cap
          ? std::max(least_share, link.slice_cap_bytes / std::max(1, in.ranks_per_core))
          : link.slice_cap_bytes;
  const double slot = cap > 0 ? std::min(to_d(in.slot_bytes), cap) : to_d(in.slot_bytes);
  // There the kernel streams a frame as it is written and the receiver copies it out as it
  // arrives, so with a core per rank a unit that fits a slot goes as one frame (2 ranks,
  // 256 KiB-1 MiB: 1.15-1.3x faster than 128 KiB slices); larger units, whose frames would
  // leave the cache, take the cap.
  if (link.shares_cores && link.slice_cap_bytes > 0 && !in.oversubscribed() &&
      unit <= to_d(in.slot_bytes))
    return in.slot_bytes;
  // Ranks outnumbering cores hand slots over through the scheduler: a slice costs a wake-up.
  const double per_slice = link.slice_us + (in.oversubscribed() ? in.costs.wake_us : 0.0);
  // Stages wait where a NIC or the kernel moves the bytes, and where ranks outnumber cores
  // (they do not all work at every step): small slices start the next stage sooner. But TCP
  // within a host whose ranks outnumber its cores waits for the cores its peers use, so small
  // slices fill no pipeline and each costs a message (3 and 4 ranks on 2 cores, 512 KiB to
  // 32 MiB: slices of 16-40 KiB 1.1-1.8x slower than the cap's).
  const bool pipelined =
      link.shares_cores ? !in.oversubscribed() : link.stages_wait || in.oversubscribed();
  const double best =
      pipelined ? std::sqrt(unit * per_slice / (std::max(1, stages - 1) * link.beta_us_per_byte))
                : slot;
  auto s = static_cast<std::size_t>(std::clamp(best, std::min(kMin, slot), slot));
  // Where ranks outnumber cores a frame's last few bytes in a segment of their own cost a wake-up
  // (LinkCost::segment_bytes): slices fill whole segments. 4 ranks on 2 cores, the ring at
  // 4-64 MiB: 60 KiB slices (one segment) 1.05-1.15x faster than 64 KiB (a segment and 77 bytes),
  // and at 16 MiB than 56 KiB as well (8 and 6 paired launches). With a core per rank the reduced
  // slices pay it too: 2 ranks on a 512 KiB L2 (a cap of 64 KiB), the ring at 2-64 MiB in 60 KiB
  // slices ran 1.1-1.3x faster than in 64 KiB (5 alternating launches).
  if (fills_segments && to_d(s) > over.segment_bytes)
    s = static_cast<std::size_t>(std::floor(to_d(s) / over.segment_bytes) * over.segment_bytes);
  return s / 4096 * 4096 >= 4096 ? s / 4096 * 4096 : s;
}

// The hops a message of `bytes` in slices of `slice` (0: one frame) costs: one, and over loopback
// TCP where the `working` ranks outnumber the cores one more for each frame that ends in a partly
// filled segment: its receiver, woken for the first segments, has left the core when the last
// arrives (LinkCost::segment_bytes). 4 ranks on 2 cores, recursive doubling (medians of 5
// launches): 60 KiB as one frame of one segment 165 us, 64 KiB as one frame of a segment and 77
// bytes 214 us, where halving-doubling's halves (one segment each) take 137 us; at 256 KiB its four
// 64 KiB frames 781 us, halving-doubling's 354 us. Where the ranks working at once have a core each
// (recursive doubling's exchange between 2 of 3 ranks on 2 cores) the rest comes while the
// receiver spins: recursive doubling 1.3x halving-doubling at 64 KiB there.
double hops_per_message(const SelectionInputs& in, const LinkCost& m, double bytes,
                        std::size_t slice, int working) {
  if (m.segment_bytes <= 0 || bytes <= 0 || !in.crowded(working)) return 1.0;
  // A last segment under half full: 77, 154 and 4 KiB beyond whole segments cost the hop; 32, 56
  // and 60 KiB beyond one (the ring's slices of 96, 120 and 124 KiB at 4 ranks on 2 cores) ran as
  // fast as or faster than one segment's 60 KiB.
  const auto spills = [&](double frame) {
    const double tail = std::fmod(frame, m.segment_bytes);
    return frame > m.segment_bytes && tail > 0 && tail < m.segment_bytes / 2 ? 1.0 : 0.0;
  };
  const double frame = slice == 0 ? bytes : std::min(bytes, to_d(slice));
  const double full = std::floor(bytes / frame), last = bytes - full * frame;
  return 1.0 + full * spills(frame) + spills(last);
}

// The frames after the first of a whole buffer that recursive doubling posts at once in slices of
// `slice` (0: one frame), where the `working` ranks outnumber the cores over loopback TCP: each is
// a hand-over of its own, as a spilled segment is (hops_per_message). Alternating launches on
// 2 cores with 512 KiB of L2 (whose share gives 32 KiB frames at 4 ranks, 16 KiB at 8):
// 4 ranks at 32 KiB (one frame) 115-125 us, at 40 KiB (32 + 8 KiB) 250-300 us, at 64 KiB 240-300
// us against halving-doubling's 155-215; 8 ranks at 16 KiB (one frame) 395-430 us against
// halving-doubling's 490-605, at 32 KiB 610-700 against 485-570. Halving-doubling's steps in
// several frames showed no such step (4 ranks, 32 to 40 KiB: 170 to 190 us), nor did recursive
// doubling at 3 ranks, whose exchanges run between 2 ranks with a core each.
double extra_frames(const SelectionInputs& in, const LinkCost& m, double bytes, std::size_t slice,
                    int working) {
  if (m.segment_bytes <= 0 || bytes <= 0 || slice == 0 || !in.crowded(working)) return 0.0;
  return std::max(0.0, std::ceil(bytes / to_d(slice)) - 1.0);
}

// ---- all-reduce

// The buffers these post whole before they receive: half the FIFO's slots must hold them.
std::size_t half_fifo(const SelectionInputs& in) {
  return in.slot_bytes * static_cast<std::size_t>(std::max(1, in.slots / 2));
}

const char* fits_always(const SelectionInputs&, std::size_t, bool) {
  return nullptr;
}

// How many hops (or whole buffers) of a call's critical path its time counts. Over TCP within a
// host whose ranks outnumber its cores, the ranks sharing a core take turns at their messages and
// the kernel's copies: the call takes what a rank receives on average times the ranks on a core,
// where that is more. 3 and 4 ranks on 2 cores, at 8 B: the ring (4 and 6 messages a rank) took
// 6-9x and 2.7x recursive doubling's time, one-shot (2 and 3) twice, though it has the fewest
// hops. The reductions beyond the ring's half are charged as before: they are the rank's own
// work, a small share. Over shared memory a wait is a load, and one-shot's messages arrive at
// once; between hosts a NIC moves the bytes.
double on_shared_cores(const SelectionInputs& in, const LinkCost& m, double path, double per_rank) {
  if (!m.shares_cores || !in.oversubscribed()) return path;
  return std::max(path, per_rank * std::max(1, in.ranks_per_core));
}

std::size_t ring_slice(const SelectionInputs& in, std::size_t bytes, bool device);
std::size_t whole_buffer_slice(const SelectionInputs& in, std::size_t bytes, bool device);
std::size_t half_buffer_slice(const SelectionInputs& in, std::size_t bytes, bool device);

// The ranks working at once while the n - p ranks beyond a power of two fold in or out: they and
// their partners.
int fold_working(const SelectionInputs& in, int p) {
  return 2 * (in.size - p);
}

// The buffers that folding the n - p ranks beyond a power of two in and out puts on the call's
// path. Over loopback TCP beta prices both copies of a byte, its sender's and its receiver's,
// which an exchange makes on each rank; a fold only sends on one rank and only receives on the
// other, and with a core each they copy at once: half a buffer each way. 3 ranks on 2 cores,
// paired launches: halving-doubling 1.13-1.34x the ring at 512 KiB-2 MiB, which the model had
// priced slower with whole folds. (The work the ranks share, on_shared_cores, keeps both copies.)
double fold_path_buffers(const SelectionInputs& in, const LinkCost& m, int p) {
  if (p == in.size) return 0.0;
  return m.shares_cores && !in.crowded(fold_working(in, p)) ? 1.0 : 2.0;
}

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
// step beyond "a unit that fits a slot goes as one frame" (slice_for). 2 ranks on 2 cores (Zen 4,
// 1 MiB L2, 32 MiB L3), configurations alternating call by call in one launch, 3-4 launches a
// size: 1.5 MiB 1.09-1.15x the cap's 124 KiB slices four a round, 2 MiB 1.04-1.18x, 3 MiB
// 1.05-1.06x, 4 MiB 1.02-1.04x, 6 MiB 0.98-0.99x, 16 and 64 MiB 0.92-0.97x (with the host
// 1.4-4x slower later, 1.01-1.08x at 1.5-3 MiB); at 2 MiB rounds of two 512 KiB frames ran
// 0.76-0.94x the four slices, and one 248 or 124 KiB slice a round slower than one whole-slot
// frame in every launch. Both ends of every hop must cut the same rounds: loopback puts every
// rank on one host, whose cache they all read.
std::size_t ring_round_slices(const SelectionInputs& in, std::size_t bytes, bool device) {
  const LinkCost& m = in.bottleneck();
  if (device || !m.shares_cores || m.slice_cap_bytes <= 0 || in.oversubscribed()) return 0;
  const bool beyond_slot = to_d(bytes) / in.size > to_d(in.slot_bytes);
  return beyond_slot && !in.beyond_cache(2.0 * 2.0 * to_d(bytes), in.size) ? 1 : 0;
}

// The ring moves each block in rounds of half the FIFO's slots (ring_passes.cpp), and every
// round pays the ring's hand-overs whatever it carries: a last round left a fraction of a chunk
// pays them for that fraction. Over shared memory, where the slice that spares that round stays
// within the cache's cap, the block goes in whole rounds of it. 4 ranks on 2 cores (Zen 4, 1 MiB
// L2) at 2 MiB: 128 KiB slices (one round) faster than the square root's 88 KiB (a round and 40%
// of another) in 11 of 14 alternating launches, median 1.38x; 8 ranks at 4 MiB, 64 KiB (two
// whole rounds) against 56 KiB, median 1.12x in 5 (docs/results/shm-footprint-2026-12-02.md).
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

std::size_t ring_slice(const SelectionInputs& in, std::size_t bytes, bool device) {
  // GPU buffers: whole slots, since each slice waits for the GPU. Up to 16 KiB: whole slots,
  // and no arithmetic on the latency path.
  if (device || bytes <= 16 * 1024) return 0;
  if (ring_round_slices(in, bytes, device) != 0) return in.slot_bytes;
  return whole_rounds(in, bytes,
                      slice_for(in, in.bottleneck(), to_d(bytes) / in.size, 2 * (in.size - 1),
                                {.reduced = true, .cache_per_rank = false}));
}

const char* small_only(const SelectionInputs& in, std::size_t bytes, bool) {
  return in.size > 1 && bytes <= half_fifo(in) ? nullptr : "too large";
}
// Beta prices the ring's bytes, half of which are reduced: what an algorithm that reduces every
// byte it receives pays on top, per byte (the other half of a host reduction; a GPU's reduction is
// not the bound).
double whole_reduction_extra_us_per_byte(const SelectionInputs& in, bool device) {
  return device ? 0.0 : 0.5 * in.costs.reduce_us_per_byte;
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
// The whole buffer in each slice, at least so many that it fits half the FIFO.
std::size_t whole_buffer_slice(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device || bytes <= 16 * 1024) return 0;
  const std::size_t half = static_cast<std::size_t>(std::max(1, in.slots / 2));
  // Cut to whole segments, a buffer just over one would end in a short frame (60 + 4 KiB at
  // 64 KiB: 245 us at 4 ranks on 2 cores, against 214 us as one frame).
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
  // memory: charged its bytes once more. Paired launches, 4 and 8 ranks on 2 cores, against the
  // ring or recursive doubling the model chose before: 1.1-1.9x faster while it fits (TCP
  // 4 ranks 256 KiB-1 MiB, 8 ranks 64-256 KiB; shared memory 4 ranks 64-512 KiB, 8 ranks
  // 64 KiB; 8 ranks at 256 KiB 0.9x), 0.9x at the next size. Over loopback TCP, against the ring
  // in whole segments, the fall came later: at 3 and 4 ranks (2 a core) from 2 to 4 MiB (a
  // footprint of 2 MiB, 1.2-1.6x faster before, 0.85-1.1x after), at 8 (4 a core) from 512 KiB
  // to 1 MiB; the share there is the cache over the others on the core, fitted to those points.
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
// Host buffers: its device path has not run on a GPU.
const char* host_only(const SelectionInputs&, std::size_t, bool device) {
  return device ? "host buffers only" : nullptr;
}
// Its steps exchange halves of the buffer and less, each after the one before: pipelined over one
// hop. Its p exchanging ranks share the cores' caches where they outnumber the cores; at 3 ranks
// on 2 cores the two exchanging have a core each and take the ring's whole cap: 1 MiB in 60 KiB
// slices 1.2-1.4x faster than in the share's 32 KiB (5 and 4 alternating launches, 512 KiB L2).
std::size_t half_buffer_slice(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device || bytes <= 16 * 1024) return 0;
  return slice_for(in, in.bottleneck(), to_d(bytes) / 2, 2,
                   {.reduced = true, .cache_per_rank = in.crowded(power_of_two_below(in.size))});
}

// It keeps a host copy of the input.
const char* small_host_only(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device) return "host buffers only";
  return small_only(in, bytes, device);
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

// Chosen by the model only where ranks span hosts with several ranks each; a rule may name it
// for any even layout (one host: a local reduce-scatter and all-gather).
const char* even_hosts(const SelectionInputs& in, std::size_t, bool) {
  return in.hosts_even() ? nullptr : "hosts run different numbers of ranks";
}
double hierarchical_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  if (in.hosts.size() < 2 || in.hosts.front().size() < 2) return kNever;
  const double hosts = static_cast<double>(in.hosts.size());
  const double local = static_cast<double>(in.hosts.front().size());
  const LinkCost& near = in.costs.of(in.local);
  const LinkCost& far = in.costs.of(in.remote);
  return 2.0 * (local - 1) * (near.alpha_us + to_d(bytes) / local * near.beta_us_per_byte) +
         2.0 * (hosts - 1) * (far.alpha_us + to_d(bytes) / hosts * far.beta_us_per_byte);
}
// Each phase sets its own.
std::size_t no_slice(const SelectionInputs&, std::size_t, bool) {
  return 0;
}

// ---- the one-algorithm collectives: a block of `bytes` crossing n-1 hops (reduce-scatter and
// all-gather: every rank's block; broadcast and reduce: the chain)

double chain_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const LinkCost& m = in.bottleneck();
  return (in.size - 1) * m.alpha_us + to_d(bytes) * m.beta_us_per_byte;
}
std::size_t chain_slice(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device) return 0;
  return slice_for(in, in.bottleneck(), to_d(bytes), std::max(2, in.size - 1));
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

// ---- gather, scatter, all-to-all: `bytes` is one rank's block (all_to_all_v: none, since no
// size is the same on every rank; it moves whole slots)

// The root's link carries n-1 blocks either way; the tree saves hops but copies through its
// ranks' host memory: small host blocks only.
// Host buffers whose n blocks of `bytes` take at most `limit` bytes.
const char* host_blocks_within(const SelectionInputs& in, std::size_t bytes, bool device,
                               std::size_t limit) {
  if (device) return "host buffers only";
  return bytes * static_cast<std::size_t>(in.size) <= limit ? nullptr : "too large";
}
const char* small_tree(const SelectionInputs& in, std::size_t bytes, bool device) {
  return host_blocks_within(in, bytes, device, 64 * 1024);
}
double tree_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const LinkCost& m = in.bottleneck();
  return doubling_rounds(in.size) * m.alpha_us + (in.size - 1) * to_d(bytes) * m.beta_us_per_byte;
}
double linear_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const LinkCost& m = in.bottleneck();
  return (in.size - 1) * (m.alpha_us + to_d(bytes) * m.beta_us_per_byte);
}
// Ranks outnumbering cores: a slot handed to a peer that is not running waits for a switch.
double switch_us(const SelectionInputs& in, const LinkCost& link) {
  return in.oversubscribed() ? link.slice_us + in.costs.wake_us : 0.0;
}
// Pairwise through the slots: each block crosses one hop, copied in and out; oversubscribed, a
// switch about every half slot (the receiver drains while the sender fills).
double pairwise_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const LinkCost& m = in.bottleneck();
  const double handovers = to_d(bytes) / (to_d(in.slot_bytes) / 2.0);
  return (in.size - 1) *
         (m.alpha_us + to_d(bytes) * m.beta_us_per_byte + handovers * switch_us(in, m));
}
// Host buffers, every rank on one host over shared memory (the in-place algorithms' messages,
// and the single copy's, go through it).
const char* one_host_shm(const SelectionInputs& in, std::size_t, bool device) {
  if (device) return "host buffers only";
  if (!in.one_host() || in.local != TransportKind::shm) return "ranks on one host over shm only";
  return nullptr;
}
// ... where the kernel also lets every rank read its peers' memory.
const char* one_host_readable(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (const char* why = one_host_shm(in, bytes, device)) return why;
  if (!in.reads_peers) return "process_vm_readv is refused on some rank";
  return nullptr;
}
// Two rounds of messages to every peer (oversubscribed: a switch), a read system call per block,
// each byte copied once by the kernel. That copy runs at about half memcpy's speed (measured on
// Zen 4 and in bench/compare), so it costs what the slots' two copies do: where every rank has
// a core the slots, whose copies stay in cache, win at every size; oversubscribed, the reads
// save the slots' switches.
//
// Where the host's buffers outgrow the last-level cache, the slots' copies stream past it
// (all_to_all.cpp) and the kernel's cannot: measured, 4 ranks on 2 cores, 16 MiB per rank, the
// reads took 5.6-6.2 ms and the streaming slots 4.6-6.0, and in one harness run the slots were
// 1.06x vader where the reads had been 0.79x. The factor only has to make the slots win there.
// (in.size is the host's ranks: the single copy runs on one host only.)
double single_copy_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  constexpr double kReadCallUs = 5.0;
  constexpr double kKernelCopyFactor = 1.2;  // measured: 2 ranks, 1-64 MiB, 1.05-1.25x pairwise
  constexpr double kBeyondCacheFactor = 2.0;
  const LinkCost& m = in.costs.of(in.local);
  // Each rank's in and out: n blocks each.
  const double factor = in.beyond_cache(2.0 * in.size * to_d(bytes), in.size) ? kBeyondCacheFactor
                        : in.oversubscribed()                                 ? 1.0
                                                                              : kKernelCopyFactor;
  const double copy = to_d(bytes) * m.beta_us_per_byte * factor;
  return (in.size - 1) * (2.0 * m.alpha_us + switch_us(in, m) + kReadCallUs + copy);
}

// ---- in place in the peers' buffers (Communicator::alloc's windows, one host over shm)

// Two rounds of a small message to every peer (where the buffers are; done), then the rank's
// own copies and reductions, each byte once: `copies` and `reductions` are the bytes of output
// of each. Oversubscribed, no switch is counted: the all-reduce algorithms it competes with count
// none per hop either, and with it the model kept 4 ranks on 2 cores off this path at 64-256 KiB,
// where it measured 14-28 us against their 90-230.
double in_place_cost(const SelectionInputs& in, double copies, double reductions) {
  const LinkCost& m = in.costs.of(in.local);
  return 2.0 * (in.size - 1) * m.alpha_us + copies * in.costs.copy_us_per_byte +
         reductions * in.costs.reduce_us_per_byte;
}
double n_minus_1(const SelectionInputs& in) {
  return static_cast<double>(std::max(1, in.size - 1));
}
// Rank r reduces block r of every input (n-1 reductions of S/n) and writes it to the other
// outputs (two ranks: the reduction writes both).
double direct_all_reduce_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const double block = to_d(bytes) / in.size;
  return in_place_cost(in, in.size > 2 ? n_minus_1(in) * block : 0.0, n_minus_1(in) * block);
}
double direct_reduce_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  return in_place_cost(in, 0.0, n_minus_1(in) * to_d(bytes));
}
// Every block but the rank's own copied in. All-to-all copies its own block too, but so do
// pairwise and the single copy, whose prices count only the peers' blocks: counting it here alone
// kept 2 ranks at 1 MiB on pairwise, at 1.31x vader where in place measured 2x.
double direct_gather_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  return in_place_cost(in, n_minus_1(in) * to_d(bytes), 0.0);
}
double direct_copy_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  return in_place_cost(in, to_d(bytes), 0.0);
}

// All-gather, `bytes` one rank's block: every other rank's block reaches each rank. The ring
// takes n-1 hops; Bruck's ceil(log2 n) rounds, not pipelined, and a rotation copy at the end.
// Oversubscribed, each hop or round waits for a peer to be switched in.
double ring_gather_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const LinkCost& m = in.bottleneck();
  return (in.size - 1) * (m.alpha_us + switch_us(in, m) + to_d(bytes) * m.beta_us_per_byte);
}
const char* small_host_blocks(const SelectionInputs& in, std::size_t bytes, bool device) {
  return host_blocks_within(in, bytes, device, 1024 * 1024);
}
double bruck_cost(const SelectionInputs& in, std::size_t bytes, bool) {
  const LinkCost& m = in.bottleneck();
  return doubling_rounds(in.size) * (m.alpha_us + switch_us(in, m)) +
         (in.size - 0.5) * to_d(bytes) * m.beta_us_per_byte;
}

// The uneven calls: the blocks' average crosses the ring.
std::size_t uneven_slice(const SelectionInputs& in, std::size_t bytes, bool device) {
  return chain_slice(in, bytes / static_cast<std::size_t>(std::max(1, in.size)), device);
}

std::optional<std::size_t> parse_bytes(std::string_view text) {
  if (text.empty()) return std::nullopt;
  return base::parse_size(std::string(text));
}

}  // namespace

std::size_t pipeline_slice(const SelectionInputs& in, TransportKind link, double unit, int stages) {
  return slice_for(in, in.costs.of(link), unit, stages);
}

const std::vector<Algorithm>& algorithm_table() {
  static const std::vector<Algorithm> table = {
      {Kind::all_reduce, "ring", fits_always, ring_cost, ring_slice, ring_all_reduce},
      {Kind::all_reduce, "recursive_doubling", small_only, recursive_doubling_cost,
       whole_buffer_slice, recursive_doubling_all_reduce},
      {Kind::all_reduce, "halving_doubling", host_only, halving_doubling_cost, half_buffer_slice,
       halving_doubling_all_reduce},
      {Kind::all_reduce, "one_shot", small_host_only, one_shot_cost, whole_buffer_slice,
       one_shot_all_reduce},
      {Kind::all_reduce, "hierarchical", even_hosts, hierarchical_cost, no_slice,
       hierarchical_all_reduce},
      {Kind::reduce_scatter, "ring", fits_always, chain_cost, chain_slice, ring_reduce_scatter},
      {Kind::all_gather, "ring", fits_always, ring_gather_cost, chain_slice, ring_all_gather},
      {Kind::all_gather, "bruck", small_host_blocks, bruck_cost, no_slice, bruck_all_gather},
      {Kind::broadcast, "chain", fits_always, chain_cost, chain_slice, pipelined_broadcast},
      {Kind::reduce, "chain", fits_always, chain_cost, chain_slice, pipelined_reduce},
      {Kind::barrier, "dissemination", fits_always, barrier_cost, no_slice, dissemination_barrier},
      {Kind::send, "direct", fits_always, p2p_cost, p2p_slice, point_to_point},
      {Kind::recv, "direct", fits_always, p2p_cost, p2p_slice, point_to_point},
      {Kind::gather, "binomial", small_tree, tree_cost, no_slice, binomial_gather},
      {Kind::gather, "linear", fits_always, linear_cost, p2p_slice, linear_gather},
      {Kind::scatter, "binomial", small_tree, tree_cost, no_slice, binomial_scatter},
      {Kind::scatter, "linear", fits_always, linear_cost, p2p_slice, linear_scatter},
      {Kind::all_to_all, "pairwise", fits_always, pairwise_cost, p2p_slice, pairwise_all_to_all},
      {Kind::all_to_all, "single_copy", one_host_readable, single_copy_cost, p2p_slice,
       single_copy_all_to_all},
      {Kind::all_to_all_v, "pairwise", fits_always, pairwise_cost, no_slice, pairwise_all_to_all},
      {Kind::all_to_all_v, "single_copy", one_host_readable, single_copy_cost, no_slice,
       single_copy_all_to_all},
      {Kind::all_gather_v, "ring", fits_always, chain_cost, uneven_slice, ring_all_gather},
      // Chosen only for calls of a communicator with shared windows (choose()'s `windows`).
      {Kind::all_reduce, "direct", one_host_shm, direct_all_reduce_cost, no_slice,
       direct_host_call},
      {Kind::reduce_scatter, "direct", one_host_shm, direct_reduce_cost, no_slice,
       direct_host_call},
      {Kind::all_gather, "direct", one_host_shm, direct_gather_cost, no_slice, direct_host_call},
      {Kind::broadcast, "direct", one_host_shm, direct_copy_cost, no_slice, direct_host_call},
      {Kind::reduce, "direct", one_host_shm, direct_reduce_cost, no_slice, direct_host_call},
      {Kind::gather, "direct", one_host_shm, direct_gather_cost, no_slice, direct_host_call},
      {Kind::scatter, "direct", one_host_shm, direct_copy_cost, no_slice, direct_host_call},
      {Kind::all_to_all, "direct", one_host_shm, direct_gather_cost, no_slice, direct_host_call},
      {Kind::reduce_scatter_v, "ring", fits_always, chain_cost, uneven_slice, ring_reduce_scatter},
  };
  return table;
}

bool takes_any_slice(const Algorithm& a) {
  // These pipeline through the slots in slices of any size; the others size their own (whole
  // buffers that must fit half the FIFO) or send whole slots.
  return a.slice == ring_slice || a.slice == chain_slice || a.slice == p2p_slice ||
         a.slice == uneven_slice || a.slice == half_buffer_slice;
}

std::string_view rule_name(Kind kind) {
  switch (kind) {
    case Kind::all_reduce:
      return "allreduce";
    case Kind::reduce_scatter:
      return "reducescatter";
    case Kind::all_gather:
      return "allgather";
    case Kind::broadcast:
      return "broadcast";
    case Kind::reduce:
      return "reduce";
    case Kind::barrier:
      return "barrier";
    case Kind::send:
      return "send";
    case Kind::recv:
      return "recv";
    case Kind::gather:
      return "gather";
    case Kind::scatter:
      return "scatter";
    case Kind::all_to_all:
      return "alltoall";
    case Kind::all_to_all_v:
      return "alltoallv";
    case Kind::all_gather_v:
      return "allgatherv";
    case Kind::reduce_scatter_v:
      return "reducescatterv";
  }
  return "?";
}

// Rules: "[operation:]algorithm[@slice][:from-to]" separated by commas; an operation left out is
// the previous rule's (all-reduce for the first); sizes take K, M, G; either end may be left open.
// "ring" alone forces the ring all-reduce at every size; "ring@256K" in slices of 256 KiB.
std::vector<Selector::Rule> Selector::parse_rules(std::string_view text, std::string_view source) {
  std::vector<Rule> rules;
  Kind collective = Kind::all_reduce;
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    auto bad = [&](const std::string& why) {
      return InvalidArgument(fmt::format("{}='{}': rule '{}': {}", source, text, item, why));
    };
    std::vector<std::string_view> fields;
    for (std::size_t from = 0;;) {
      const auto colon = item.find(':', from);
      fields.push_back(item.substr(from, colon - from));
      if (colon == std::string_view::npos) break;
      from = colon + 1;
    }
    if (fields.size() > 3 || item.empty())
      throw bad("expected [operation:]algorithm[@slice][:from-to]");
    // The first field names an operation when another field follows and it is not an algorithm.
    std::size_t next = 0;
    if (fields.size() >= 2) {
      bool is_operation = false;
      for (Kind k : kAllKinds)
        if (fields[0] == rule_name(k)) collective = k, is_operation = true;
      if (is_operation)
        next = 1;
      else if (fields.size() == 3)
        throw bad(fmt::format("'{}' is not an operation", fields[0]));
    }
    std::string_view name = fields[next];
    std::size_t slice = 0;
    if (const auto at = name.find('@'); at != std::string_view::npos) {
      const auto v = parse_bytes(name.substr(at + 1));
      if (!v || *v < 4096)
        throw bad(fmt::format("'{}' is not a slice of 4K or more", name.substr(at + 1)));
      slice = *v;
      name = name.substr(0, at);
    }
    const Algorithm* algorithm = nullptr;
    std::string known;
    for (const Algorithm& a : algorithm_table()) {
      if (a.collective != collective) continue;
      known += fmt::format("{}{}", known.empty() ? "" : ", ", a.name);
      if (a.name == name) algorithm = &a;
    }
    if (algorithm == nullptr)
      throw bad(fmt::format("'{}' is not a {} algorithm ({})", name, rule_name(collective), known));
    if (slice != 0 && !takes_any_slice(*algorithm))
      throw bad(fmt::format("{} {} chooses its own slice", rule_name(collective), name));
    std::size_t from = 0, to = SIZE_MAX;
    if (next + 1 < fields.size()) {
      const std::string_view range = fields[next + 1];
      const auto dash = range.find('-');
      if (dash == std::string_view::npos)
        throw bad("a size range is from-to (either end may be left out)");
      const std::string_view lo = range.substr(0, dash), hi = range.substr(dash + 1);
      if (!lo.empty()) {
        auto v = parse_bytes(lo);
        if (!v) throw bad(fmt::format("'{}' is not a size", lo));
        from = *v;
      }
      if (!hi.empty()) {
        auto v = parse_bytes(hi);
        if (!v) throw bad(fmt::format("'{}' is not a size", hi));
        to = *v;
      }
      if (from >= to) throw bad("the range is empty");
    }
    rules.push_back(Rule{collective, algorithm, from, to, slice});
  }
  return rules;
}

Selector::Selector(SelectionInputs inputs) : inputs_(std::move(inputs)) {
  rules_ = parse_rules(inputs_.overrides, "configuration: LOOM_ALGO");
  // A table a later version wrote, or one edited by hand, may not parse: the model chooses.
  try {
    tuned_rules_ = parse_rules(inputs_.tuned, "tuning table " + inputs_.tuned_from);
  } catch (const InvalidArgument& e) {
    base::log().warn("{}; the cost model chooses instead", e.what());
    tuned_rules_.clear();
  }
}

Selector::Choice Selector::choose(Kind kind, std::size_t bytes, bool device, bool windows) const {
  // The in-place algorithms need the windows, and a rank whose call is outside them falls back
  // to this choice without them.
  auto usable = [&](const Algorithm& a) {
    return a.unfit(inputs_, bytes, device) == nullptr && (windows || a.run != direct_host_call);
  };
  const Algorithm* best = nullptr;
  double best_cost = kNever;
  for (const Algorithm& a : algorithm_table()) {
    if (a.collective != kind || !usable(a)) continue;
    const double cost = a.cost(inputs_, bytes, device);
    if (best == nullptr || cost < best_cost) best = &a, best_cost = cost;
  }
  // A rule names the algorithm for a range of sizes: the user's (LOOM_ALGO) first, then the
  // tuning table's, which was measured on host buffers outside the windows. A named algorithm
  // that cannot take this call leaves it to the model.
  auto rule_for = [&](const std::vector<Rule>& rules) -> const Rule* {
    for (const Rule& rule : rules)
      if (rule.collective == kind && bytes >= rule.from && bytes < rule.to)
        return usable(*rule.algorithm) ? &rule : nullptr;
    return nullptr;
  };
  const Rule* rule = rule_for(rules_);
  const bool forced = rule != nullptr;
  const bool tuned = !forced && !device && !windows && (rule = rule_for(tuned_rules_)) != nullptr;
  if (rule != nullptr) best = rule->algorithm, best_cost = best->cost(inputs_, bytes, device);
  std::size_t slice = best->slice(inputs_, bytes, device);
  std::size_t round_slices =
      best->slice == ring_slice ? ring_round_slices(inputs_, bytes, device) : 0;
  // A rule's slice replaces a pipelining choice, never "whole slots" (0: small or device calls),
  // and its rounds are the FIFO's.
  if (rule != nullptr && rule->slice != 0 && slice != 0)
    slice = std::min(rule->slice, inputs_.slot_bytes), round_slices = 0;
  return Choice{best, slice, best_cost, forced, tuned, round_slices};
}

namespace {

// What the logs group calls by: the collective, the algorithm's place in the table, and the
// size's bit width (0 for 0 bytes; k for 2^(k-1) up to 2^k - 1 bytes).
struct CallClass {
  std::uint32_t kind;
  std::uint32_t algorithm;
  std::uint32_t size_class;
  CallClass(Kind k, const Algorithm* a, std::size_t bytes)
      : kind(static_cast<std::uint32_t>(k)),
        algorithm(static_cast<std::uint32_t>(a - algorithm_table().data())),
        size_class(bytes == 0 ? 0 : static_cast<std::uint32_t>(64 - __builtin_clzll(bytes))) {}
  std::size_t lowest_bytes() const {
    return size_class == 0 ? 0 : std::size_t{1} << (size_class - 1);
  }
  std::size_t highest_bytes() const { return size_class == 0 ? 0 : 2 * lowest_bytes() - 1; }
};

// Logs each call class's choice once, so INFO shows what ran without flooding; a flag table
// rather than a locked set, since this runs on every call.
void log_choice(const Selector& selector, const Collective& call, const Selector::Choice& c,
                std::size_t bytes, bool windows) {
  static std::atomic<bool> seen[16][64][65];
  const CallClass cls(call.kind, c.algorithm, bytes);
  auto& flag = seen[cls.kind & 15][cls.algorithm & 63][cls.size_class];
  if (flag.load(std::memory_order_relaxed) || flag.exchange(true, std::memory_order_relaxed))
    return;
  std::string table;
  const auto& in = selector.inputs();
  for (const Algorithm& a : algorithm_table()) {
    if (a.collective != call.kind) continue;
    const char* unfit = a.unfit(in, bytes, call.device >= 0);
    if (unfit == nullptr && !windows && a.run == direct_host_call) unfit = "no shared windows";
    const double cost = a.cost(in, bytes, call.device >= 0);
    table += fmt::format("{}{} ", table.empty() ? "" : ", ", a.name);
    table += cost >= kNever ? "n/a" : fmt::format("{:.1f} us", cost);
    if (unfit) table += fmt::format(" ({})", unfit);
  }
  base::log().info("{}: {}{} in slices of {} KiB{} for {} B over {}; model: {}",
                   to_string(call.kind), c.algorithm->name,
                   c.forced  ? " (LOOM_ALGO)"
                   : c.tuned ? " (tuning table)"
                             : "",
                   c.slice >> 10,
                   c.round_slices != 0 ? fmt::format(", {} a round", c.round_slices) : "", bytes,
                   transport::to_string(in.bottleneck_kind()), table);
}

// At DEBUG, each call class's predicted time against this rank's measured one, at its 1st, 10th,
// 100th, ... call: where the model is wrong, and by how much.
void record_time(Engine& engine, const Collective& call, const Engine::Plan& plan,
                 std::chrono::duration<double, std::micro> took) {
  const CallClass cls(call.kind, plan.algorithm, plan.bytes);
  Engine::ClassTimes& t =
      engine.class_times()[cls.kind << 16 | cls.algorithm << 8 | cls.size_class];
  t.calls += 1;
  t.predicted_us += plan.predicted_us;
  t.measured_us += took.count();
  t.fastest_us = t.calls == 1 ? took.count() : std::min(t.fastest_us, took.count());
  std::uint64_t power = 1;
  while (power * 10 <= t.calls) power *= 10;
  if (t.calls != power) return;
  const double calls = static_cast<double>(t.calls);
  base::log().debug(
      "{} {} of {}-{} B: predicted {:.1f} us, measured {:.1f} us (fastest {:.1f}) on this rank, "
      "mean of {} call(s); cost model {}",
      to_string(call.kind), plan.algorithm->name, cls.lowest_bytes(), cls.highest_bytes(),
      t.predicted_us / calls, t.measured_us / calls, t.fastest_us, t.calls,
      engine.selector().inputs().costs.source);
}

}  // namespace

void select_and_run(Engine& engine, const Collective& call) {
  const std::size_t bytes = call.bytes();
  const bool device = call.device >= 0;
  const bool windows = !device && engine.host_windows() != nullptr;
  // A loop of calls of one kind and size decides once (the inputs are fixed per communicator).
  Engine::Plan& plan = engine.plan();
  if (plan.kind != call.kind || plan.bytes != bytes || plan.device != device ||
      plan.windows != windows || plan.algorithm == nullptr) {
    const Selector::Choice choice = engine.selector().choose(call.kind, bytes, device, windows);
    log_choice(engine.selector(), call, choice, bytes, windows);
    plan = Engine::Plan{call.kind,
                        bytes,
                        device,
                        windows,
                        choice.algorithm,
                        choice.slice,
                        choice.round_slices,
                        choice.predicted_us};
  }
  engine.set_slice_bytes(plan.slice);
  engine.set_round_slices(plan.round_slices);
  if (!base::log().should_log(spdlog::level::debug)) {
    plan.algorithm->run(engine, call);
    return;
  }
  const auto started = std::chrono::steady_clock::now();
  plan.algorithm->run(engine, call);
  record_time(engine, call, plan, std::chrono::steady_clock::now() - started);
}

}  // namespace loom::algorithms
