// The settings every rank of a communicator must share: the transport, the algorithm rules and
// trials that choose each call's schedule, the geometry of the connections' slots. A rank that
// differs would run another schedule, or shape its connections otherwise, and its peers would
// fail with a misleading mismatch, hang until the timeout or, where two schedules move the same
// bytes, reduce wrong data. So init compares them (they travel in the topology record) and a
// split compares what its child may change; every rank raises InvalidArgument naming the setting.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/config.hpp"
#include "loom/store.hpp"

namespace loom::core {

// This rank's settings as one line of "key=value" fields, tab-separated (no newline in it).
std::string settings_line(const base::Config& config);

// Empty when every rank's line is the same; else the first setting that differs, by the name a
// user sets it with, and which ranks have which value, e.g. "LOOM_ALGO (Options::algorithm)
// differs between ranks: '' on rank 0; 'allreduce:ring' on rank 1; ...". Line i is rank
// numbers[i]'s (empty numbers: rank i's).
std::string settings_disagreement(const std::vector<std::string>& lines,
                                  const std::vector<int>& numbers = {});

// When the lines disagree, every rank raises InvalidArgument ("init: <who>: ..."), after every
// rank has read them (a store round the ranks meet at, bounded by `timeout`): the rank hosting
// the store must not take it away while another still reads the records.
void check_settings_agree(Store& store, int rank, const std::vector<std::string>& lines,
                          std::chrono::milliseconds timeout);

// A split compares its child's settings over the parent's all-gather of colors: a number per
// setting (its value's hash), kSettingsFields of them.
inline constexpr std::size_t kSettingsFields = 9;
std::vector<std::int64_t> settings_fingerprint(const base::Config& config);
// Another rank's line as far as its fingerprint `theirs` tells: this rank's value of each
// setting whose hash matches, "(another value)" for one that does not.
std::string line_from_fingerprint(const base::Config& mine, const std::int64_t* theirs);

}  // namespace loom::core
