// What the init probe measured on a host (core/machine_probe.cpp), and how a rank's topology
// record carries it: the inputs of the measured cost model (cost_model.hpp).
#pragma once

#include <string>
#include <string_view>

namespace loom::algorithms {

// 0: not measured.
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
  // Bytes per second the kernel copies out of a process's memory (process_vm_readv, 4 MiB, as
  // the single-copy all-to-all reads a peer's block): it pins each page before it copies.
  double cma_gbps = 0;
  // The same read of 512 KiB that another core has just written, as a peer's block is when that
  // peer has a core of its own (the pages' lines come from that core's cache).
  double cma_fresh_gbps = 0;

  // "copy=41.2 reduce=20.1 ..." (a rank's topology record carries it); decode() reads any
  // field it knows and leaves the rest 0.
  std::string encode() const;
  static MachineRates decode(std::string_view text);
  // Field by field, the better (the ranks of a host probe at once and disturb each other: the
  // least disturbed figure is the machine's) or the worse (hosts: the slowest bounds a call).
  static MachineRates better(const MachineRates& a, const MachineRates& b);
  static MachineRates worse(const MachineRates& a, const MachineRates& b);
};

}  // namespace loom::algorithms
