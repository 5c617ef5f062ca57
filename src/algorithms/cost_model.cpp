// The link model (see cost_model.hpp); docs/tuning.md gives the measurements behind each rule.
#include "algorithms/cost_model.hpp"

#include <cmath>

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
  // while the peer works (docs/tuning.md, "Slices within a core's cache").
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
  if (r.cma_gbps > 0) m.cma_us_per_byte = 1.0 / (r.cma_gbps * 1e3), any = true;
  if (r.cma_fresh_gbps > 0) m.cma_fresh_us_per_byte = 1.0 / (r.cma_fresh_gbps * 1e3), any = true;
  tcp.shares_cores = tcp_on_loopback;
  if (tcp_on_loopback && r.loopback_us > 0 && r.loopback_gbps > 0) {
    tcp.alpha_us = r.loopback_us;
    // One stream overlaps its sender's copy into the kernel with its receiver's copy out, on two
    // cores; in a collective every rank makes both copies of its bytes.
    tcp.beta_us_per_byte = 2.0 / (r.loopback_gbps * 1e3) + 0.5 * reduce_per_byte;
    tcp.slice_us = r.loopback_us;
    // The kernel copies each slice into a socket buffer and out of it on the same host: a slice
    // that outgrows the core's cache is copied from memory.
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

int doubling_rounds(int n) {
  int rounds = 0;
  for (int k = 1; k < n; k *= 2) ++rounds;
  return rounds;
}

std::size_t slice_for(const SelectionInputs& in, const LinkCost& over, double unit, int stages,
                      SliceUse use) {
  constexpr double kMin = 16 * 1024;
  // Over TCP within a host the cache's cap and the ranks' turns hold for reduced slices; slices
  // that are only copied keep the pipeline's rule there.
  LinkCost link = over;
  if (link.shares_cores && !use.reduced) link.shares_cores = false, link.slice_cap_bytes = 0;
  const bool fills_segments =
      use.fill_segments && over.segment_bytes > 0 && (in.oversubscribed() || link.shares_cores);
  // TCP within a host copies through the kernel on the cores its ranks share, and they take
  // their turns in a core's cache: each rank's share of the cap (SliceUse::cache_per_rank).
  // Where slices fill segments the share stops at one: a slice hands a core over whatever its
  // size (docs/tuning.md, "The share of a core's cache").
  const bool shared_cap = use.cache_per_rank || !fills_segments;
  const double least_share =
      fills_segments && use.cache_per_rank ? std::max(kMin, over.segment_bytes) : kMin;
  const double cap =
      link.shares_cores && link.slice_cap_bytes > 0 && shared_cap
          ? std::max(least_share, link.slice_cap_bytes / std::max(1, in.ranks_per_core))
          : link.slice_cap_bytes;
  const double slot = cap > 0 ? std::min(to_d(in.slot_bytes), cap) : to_d(in.slot_bytes);
  // There the kernel streams a frame as it is written and the receiver copies it out as it
  // arrives, so with a core per rank a unit that fits a slot goes as one frame; larger units,
  // whose frames would leave the cache, take the cap.
  if (link.shares_cores && link.slice_cap_bytes > 0 && !in.oversubscribed() &&
      unit <= to_d(in.slot_bytes))
    return in.slot_bytes;
  // Ranks outnumbering cores hand slots over through the scheduler: a slice costs a wake-up.
  const double per_slice = link.slice_us + (in.oversubscribed() ? in.costs.wake_us : 0.0);
  // Stages wait where a NIC or the kernel moves the bytes, and where ranks outnumber cores
  // (they do not all work at every step): small slices start the next stage sooner. But TCP
  // within a host whose ranks outnumber its cores waits for the cores its peers use, so small
  // slices fill no pipeline and each costs a message.
  const bool pipelined =
      link.shares_cores ? !in.oversubscribed() : link.stages_wait || in.oversubscribed();
  const double best =
      pipelined ? std::sqrt(unit * per_slice / (std::max(1, stages - 1) * link.beta_us_per_byte))
                : slot;
  auto s = static_cast<std::size_t>(std::clamp(best, std::min(kMin, slot), slot));
  // Where ranks outnumber cores a frame's last few bytes in a segment of their own cost a wake-up
  // (LinkCost::segment_bytes): slices fill whole segments. With a core per rank the reduced
  // slices pay it too (docs/tuning.md, "Whole segments").
  if (fills_segments && to_d(s) > over.segment_bytes)
    s = static_cast<std::size_t>(std::floor(to_d(s) / over.segment_bytes) * over.segment_bytes);
  return s / 4096 * 4096 >= 4096 ? s / 4096 * 4096 : s;
}

std::size_t pipeline_slice(const SelectionInputs& in, TransportKind link, double unit, int stages) {
  return slice_for(in, in.costs.of(link), unit, stages);
}

// Its receiver, woken for the first segments, has left the core when the last arrives. Where the
// ranks working at once have a core each the rest comes while the receiver spins (docs/tuning.md,
// "Frames that spill a segment").
double hops_per_message(const SelectionInputs& in, const LinkCost& m, double bytes,
                        std::size_t slice, int working) {
  if (m.segment_bytes <= 0 || bytes <= 0 || !in.crowded(working)) return 1.0;
  // A last segment under half full costs the hop; one at least half full ran as fast as a
  // whole one.
  const auto spills = [&](double frame) {
    const double tail = std::fmod(frame, m.segment_bytes);
    return frame > m.segment_bytes && tail > 0 && tail < m.segment_bytes / 2 ? 1.0 : 0.0;
  };
  const double frame = slice == 0 ? bytes : std::min(bytes, to_d(slice));
  const double full = std::floor(bytes / frame), last = bytes - full * frame;
  return 1.0 + full * spills(frame) + spills(last);
}

// As a spilled segment is (docs/tuning.md, "Frames that spill a segment").
double extra_frames(const SelectionInputs& in, const LinkCost& m, double bytes, std::size_t slice,
                    int working) {
  if (m.segment_bytes <= 0 || bytes <= 0 || slice == 0 || !in.crowded(working)) return 0.0;
  return std::max(0.0, std::ceil(bytes / to_d(slice)) - 1.0);
}

// The reductions beyond the ring's half are charged as before: they are the rank's own work, a
// small share. Over shared memory a wait is a load, and one-shot's messages arrive at once;
// between hosts a NIC moves the bytes (docs/tuning.md, "Ranks taking turns at a core").
double on_shared_cores(const SelectionInputs& in, const LinkCost& m, double path, double per_rank) {
  if (!m.shares_cores || !in.oversubscribed()) return path;
  return std::max(path, per_rank * std::max(1, in.ranks_per_core));
}

}  // namespace loom::algorithms
