// The settings every rank of a communicator must share: the transport, the algorithm rules and
// trials that choose each call's schedule, the geometry of the connections' slots. A rank that
// differs would run another schedule, or shape its connections otherwise, and its peers would
// fail with a misleading mismatch, hang until the timeout or, where two schedules move the same
// bytes, reduce wrong data. So init compares them (they travel in the topology record) and a
// split compares what its child may change; every rank raises InvalidArgument naming the setting.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/config.hpp"
#include "core/topology.hpp"
#include "loom/store.hpp"

namespace loom::core {

// This rank's settings as one line of "key=value" fields, tab-separated (no newline in it).
std::string settings_line(const base::Config& config);
// The line of a rank whose own settings were invalid (`why`: the error they raised there): it
// joins its peers only to tell them, and every rank then raises InvalidArgument naming it and its
// error, where the others waited for it until their timeout.
std::string refused_line(std::string_view why);

// Empty when every rank's line is the same; else the first setting that differs, by the name a
// user sets it with, and which ranks have which value, e.g. "LOOM_ALGO (Options::algorithm)
// differs between ranks: '' on rank 0; 'allreduce:ring' on rank 1; it must be the same on
// every rank" (`among` names who must agree). Line i is rank numbers[i]'s (empty numbers: rank
// i's), on host hosts[i]: the settings that shape only what runs within a host (the CUDA
// switches) are compared within each host (empty hosts: all on one). Values are compared as
// resolved and written: "ring" and "allreduce:ring" differ. Before any setting: the ranks whose
// line is a refused_line (with their errors), then those whose line has no setting this build
// knows (another version of Loom); `consequence` ends a refusal's text.
std::string settings_disagreement(const std::vector<std::string>& lines,
                                  const std::vector<int>& numbers = {},
                                  const std::vector<std::string>& hosts = {},
                                  std::string_view among = "every rank",
                                  std::string_view consequence = "every rank stops");

// When the topology's settings lines disagree, every rank raises InvalidArgument ("init: rank
// r: ..."). Rank 0, where this process serves the store (`hosts_store`), first waits (bounded by
// `timeout`, at most 30 s) until every other rank has read the records, so that it does not take
// the store away from them; elsewhere every rank raises at once.
void check_settings_agree(Store& store, int rank, const Topology& topology,
                          std::chrono::milliseconds timeout, bool hosts_store);

// A rank whose own settings raised `why` at init (Config::resolve, the LOOM_ALGO rules):
// publishes its topology record with a refused_line, so that the other ranks raise on reading
// the records rather than wait for it until their timeout, and leaves as check_settings_agree's
// ranks do: at once, except rank 0 where this process serves the store (`hosts_store`), which
// keeps it until the others have read the records (within 30 s, or the timeout if shorter;
// whether they come or not). The caller then raises.
void refuse_at_init(Store& store, int rank, int size, const std::string& worker_id,
                    std::string_view why, std::chrono::milliseconds timeout, bool hosts_store);

// A member of create_group whose own options were invalid (`why`): its slot in the group's key
// space (`space`) says so, and every other member raises InvalidArgument naming it.
void publish_group_refusal(Store& space, int group_rank, std::string_view why);
// A member of create_group that stops before it publishes its settings (its parent halted,
// `why`): its slot says so, and every other member raises PeerError naming the rank `why` names.
void publish_group_stop(Store& space, int group_rank, const Error& why);
// create_group's members compare their child's settings in the group's key space (`space`)
// before any of them builds its part: each publishes `line` (settings_line) as member
// `group_rank`, then reads the others'. Returns the disagreement, naming the members by their
// ranks in the parent (`members`; `hosts` theirs), or empty where every member's line is the
// same. Waits for the members within `timeout`; between rounds of 500 ms it calls `check` with
// the members (parent ranks) not come yet, which raises where one of them cannot come (it died)
// or the parent has stopped: the slots still empty are then marked, so that no member builds the
// child without this one. At the timeout it marks the slots still empty and raises TimeoutError
// naming their members. A member that comes later, or reads a marked slot, raises too
// (TimeoutError for a timeout's mark, PeerError naming the rank at fault for a stop's), and
// every member has counted the group (the next create_group of the same ranks meets). The
// rounds' requests go over a bounded clone of `space` where it has one: a store host that freezes
// or dies holds a round a second beyond its wait at most, so `check` still ends the wait when the
// parent halts; a store that does not answer until the timeout raises StoreError.
std::string group_settings_disagreement(Store& space, int group_rank,
                                        const std::vector<int>& members,
                                        const std::vector<std::string>& hosts,
                                        const std::string& line, std::chrono::milliseconds timeout,
                                        const std::function<void(const std::vector<int>&)>& check);

// A split compares its child's settings over the parent's all-gather of colors: a number per
// setting (its value's FNV-1a hash, the same in every build), kSettingsFields of them.
inline constexpr std::size_t kSettingsFields = 9;
std::vector<std::int64_t> settings_fingerprint(const base::Config& config);
// Another rank's line as far as its fingerprint `theirs` tells: this rank's value of each
// setting whose hash matches, "(another value)" for one that does not. Every member then finds
// a difference between any two members, except in a per-host setting between two others on
// another host: no child can have that, since it keeps its parent's CUDA switches (for_child),
// which init found alike within each host.
std::string line_from_fingerprint(const base::Config& mine, const std::int64_t* theirs);

}  // namespace loom::core
