// Communicator::shrink: the survivors of a failure agree, through the store, on who goes on.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/logging.hpp"
#include "base/process_memory.hpp"
#include "core/communicator_impl.hpp"
#include "core/shrink_decision.hpp"
#include "store/keys.hpp"

namespace loom {

int Communicator::Impl::local_pid(int r) const {
  const int pid = topology_.pid_of_rank[static_cast<std::size_t>(r)];
  return topology_.same_host(r, rank_) && pid > 0 ? pid : 0;
}

// A rank left out that still runs (frozen, or too late to join) would keep its launcher waiting
// after the survivors end. loomrun (--on-failure shrink) looks in two places for the workers it
// should stop. On this host: a folder it names in LOOM_LEFT_OUT_DIR, where a survivor leaves a
// file named after such a rank's pid (the first file made is the one). On any host: the store
// it gave the workers, where a key names each left-out rank by what loomrun calls it
// (LOOM_WORKER_ID, unique to the worker and its attempt), set by the first member alone; a rank
// on a host with no survivor is reached only that way.
void Communicator::Impl::report_left_out(const std::vector<int>& members) const {
  const std::string& dir = config_.failure.left_out_dir;
  const bool names_in_store = members.front() == rank_;
  for (int r = 0; r < size_; ++r) {
    if (std::binary_search(members.begin(), members.end(), r)) continue;
    const auto i = static_cast<std::size_t>(r);
    if (const std::string& worker = topology_.worker_id_of_rank[i];
        names_in_store && worker != "-") {
      try {
        launcher_store_->set(store::keys::launcher_left_out(worker), Bytes{1});
      } catch (const Error& e) {
        base::log().warn("shrink: cannot tell the launcher in the store that {} was left out: {}",
                         who(r), e.what());
      }
    }
    const int pid = local_pid(r);
    if (dir.empty() || pid == 0 || !base::process_alive(pid)) continue;
    const std::string path = fmt::format("{}/{}", dir, pid);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::close(fd);
      base::log().warn("shrink: {} was left out and still runs (pid {}): told the launcher", who(r),
                       pid);
    } else if (errno != EEXIST) {
      base::log().warn("shrink: cannot tell the launcher that {} was left out ({}: {})", who(r),
                       path, std::strerror(errno));
    }
  }
}

// The launcher's nodes among the members: a worker's name starts with its loomrun's word. On a
// network cut, the part that can reach the store shrinks to itself while loomrun restarts the
// rest on a store taken over; below the job's minimum that part must not go on too. Every member
// decides alike: from the members and the minimum that the first to decide recorded, and the
// topology every rank exchanged at init.
void Communicator::Impl::require_enough_nodes(const std::vector<int>& members,
                                              int min_nodes) const {
  if (min_nodes <= 1) return;
  std::vector<std::string> nodes;
  for (int r : members) {
    const std::string& worker = topology_.worker_id_of_rank[static_cast<std::size_t>(r)];
    if (worker == "-") {  // not every rank was started by loomrun: no count to trust
      base::log().warn(
          "shrink: {}: LOOM_MIN_NODES={} is not checked: {} has no LOOM_WORKER_ID (started "
          "outside loomrun, or its environment was cleared on the way); the survivors go on "
          "whatever nodes they run on (docs/reliability.md)",
          who(rank_), min_nodes, who(r));
      return;
    }
    nodes.push_back(worker.substr(0, worker.find('-')));
  }
  std::sort(nodes.begin(), nodes.end());
  const auto count = std::unique(nodes.begin(), nodes.end()) - nodes.begin();
  if (count < min_nodes)
    throw PeerError(fmt::format("shrink: {}: the survivors (ranks {}) run on {} of the launcher's "
                                "nodes, fewer than the job's minimum of {} (LOOM_MIN_NODES, "
                                "--nnodes MIN:MAX): cut off from the rest, they do not go on",
                                who(rank_), fmt::join(members, ","), count, min_nodes),
                    -1);
}

std::shared_ptr<Communicator::Impl> Communicator::Impl::shrink(std::chrono::milliseconds timeout,
                                                               const std::vector<int>& exclude) {
  if (timeout.count() <= 0)
    throw InvalidArgument(fmt::format("shrink: {}: the timeout must be positive", who(rank_)));
  // Ranks neither waited for nor members: those the caller names.
  std::vector<bool> excluded(static_cast<std::size_t>(size_), false);
  for (int r : exclude) {
    if (r < 0 || r >= size_ || r == rank_)
      throw InvalidArgument(fmt::format("shrink: {}: cannot exclude rank {} ({})", who(rank_), r,
                                        r == rank_ ? "this rank itself: an excluded rank does "
                                                     "not call shrink"
                                                   : fmt::format("outside [0, {})", size_)));
    excluded[static_cast<std::size_t>(r)] = true;
  }
  const std::uint64_t round = shrinks_++;  // the same on every survivor: shrinks are collective
  // The rank a failure record names is not waited for, unless it only aborted its communicator
  // (a watchdog's abort, then shrink): alive, it joins like any other.
  int known_failed = -1;
  if (auto record = failure_.halt().record(); record &&
                                              record->kind != base::AbortRecord::Kind::aborted &&
                                              record->failed >= 0 && record->failed < size_)
    known_failed = record->failed;

  store_->set(store::keys::shrink_joined(round, rank_), Bytes{1});
  // Per rank: it joined; it left on purpose (destroyed its communicator: it never will).
  std::vector<std::string> joined_keys;
  for (int r = 0; r < size_; ++r) joined_keys.push_back(store::keys::shrink_joined(round, r));
  for (int r = 0; r < size_; ++r) joined_keys.push_back(store::keys::departed(r));
  const std::string members_key = store::keys::shrink_members(round);

  // A rank that dies after the failure that halted this communicator (before or while shrinking)
  // is in no record; on this host its process tells. A rank elsewhere is waited for.
  auto gone = [&](int r) {
    const int pid = local_pid(r);
    return pid != 0 && !base::process_alive(pid);
  };

  // Wait until every rank not known to have failed has joined, or the deadline; whoever decides
  // first fixes the members for all.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> present;
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    const auto seen = store_->check(joined_keys);
    present.clear();
    bool all_expected = true;
    for (int r = 0; r < size_; ++r) {
      if (excluded[static_cast<std::size_t>(r)]) continue;
      if (seen[static_cast<std::size_t>(r)])
        present.push_back(r);
      else if (r != known_failed && !seen[static_cast<std::size_t>(size_ + r)] && !gone(r))
        all_expected = false;
    }
    if (all_expected || std::chrono::steady_clock::now() >= deadline) break;
    if (store_->check({members_key})[0]) break;  // decided elsewhere already
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  const core::ShrinkDecision decision = core::decode_shrink_decision(
      store_->compare_set(members_key, {},
                          core::encode(core::ShrinkDecision{config_.failure.min_nodes, present})),
      size_);
  const std::vector<int>& members = decision.members;

  const auto me = std::find(members.begin(), members.end(), rank_);
  if (me == members.end())
    throw PeerError(fmt::format("shrink: {}: joined after the survivors were fixed without it "
                                "(ranks {}; {} ms allowed)",
                                who(rank_), fmt::join(members, ","), timeout.count()),
                    -1);
  require_enough_nodes(members, decision.min_nodes);
  base::log().info("shrink: {} goes on as rank {} of {} (ranks {} here)", who(rank_),
                   me - members.begin(), members.size(), fmt::join(members, ","));
  if (whole_job_) report_left_out(members);
  // Every member derives the same token: no store round trip, and no two communicators share one.
  const std::uint64_t token =
      std::hash<std::string>{}(fmt::format("{:x}/shrink/{}", token_, round)) | 1;
  auto store = std::make_shared<PrefixStore>(store::keys::shrink_space(round), store_);
  auto child = std::make_shared<Impl>(*this, config_, std::move(store), members,
                                      static_cast<int>(me - members.begin()), token);
  child->whole_job_ = whole_job_;
  return child;
}

}  // namespace loom
