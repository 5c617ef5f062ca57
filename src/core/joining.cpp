// How a communicator comes to be: init joins through the store (a fresh key space, the job
// token, the topology exchange between the transport bundle's two steps); split, create_group and
// shrink make a child of an existing one, with the parent's hosts and settings, its own key space
// and connections; shrink's survivors first agree, through the store, on who goes on.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <random>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/errors.hpp"
#include "base/logging.hpp"
#include "base/process_memory.hpp"
#include "base/stable_hash.hpp"
#include "base/trace_internal.hpp"
#include "core/communicator_impl.hpp"
#include "core/failure_store.hpp"
#include "core/machine_probe.hpp"
#include "core/peer_links.hpp"
#include "core/settings_agreement.hpp"
#include "core/shrink_decision.hpp"
#include "core/transport_bundle.hpp"
#include "device/device.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "store/keys.hpp"

namespace loom {

namespace {

std::uint64_t random_token() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid());
}

}  // namespace

Communicator::Impl::Impl(std::shared_ptr<Store> store, int rank, int size, const Options& options,
                         const std::string& route_hint, bool hosts_store)
    : rank_(rank), size_(size), hosts_store_(hosts_store) {
  if (size < 1 || size > algorithms::kMaxWorldSize)
    throw InvalidArgument(
        fmt::format("init: world size {} is outside [1, {}]", size, algorithms::kMaxWorldSize));
  if (rank < 0 || rank >= size)
    throw InvalidArgument(fmt::format("init: rank {} is outside [0, {})", rank, size));
  if (!store) throw InvalidArgument(fmt::format("init: rank {}: store is null", rank));
  // A rank whose own settings are invalid still joins its peers, only to tell them (below):
  // otherwise they would wait for it until their timeout.
  std::string refused;
  try {
    config_ = base::Config::resolve(options, size);
    algorithms::Selector::check_rules(config_.selection.algorithm);
  } catch (const InvalidArgument& e) {
    refused = e.what();
    config_ = base::Config::for_joining(options, size);
  }
  base::set_log_rank(rank, size);
  base::set_trace_rank(rank, size);
  route_hint_ = route_hint;
  if (!refused.empty()) {
    // Where the store fails here the peers are left to their timeout; this rank's own error is
    // still the one it raises.
    try {
      join_key_space(store, options);
      core::refuse_at_init(*store_, rank_, size_, config_.failure.worker_id, refused,
                           config_.timeout, hosts_store_);
    } catch (const Error&) {
    }
    throw InvalidArgument(fmt::format("init: rank {}: {}", rank_, refused));
  }
  join_key_space(store, options);
  start(build_transports());
}

void Communicator::Impl::join_key_space(const std::shared_ptr<Store>& store,
                                        const Options& options) {
  // Each communicator built on the same store and prefix gets a fresh key space, so a second
  // communicator never reads the first one's addresses; each attempt of a restarted job counts
  // afresh, so a rank that died before joining in an earlier attempt cannot leave the ranks on
  // different generations.
  launcher_store_ = store;
  auto base = std::make_shared<PrefixStore>(options.store_prefix, store);
  const std::string attempt = config_.failure.restart_count < 0
                                  ? ""
                                  : fmt::format("attempt{}", config_.failure.restart_count);
  const std::int64_t generation = base->add(store::keys::generation(attempt, rank_), 1);
  store_ = std::make_shared<PrefixStore>(store::keys::generation_prefix(attempt, generation), base);

  std::uint64_t token = random_token();
  Bytes mine(reinterpret_cast<std::uint8_t*>(&token), reinterpret_cast<std::uint8_t*>(&token) + 8);
  Bytes agreed = store_->compare_set(store::keys::job_token(), {}, mine);
  if (agreed.size() != 8) throw StoreError("init: the job token in the store is malformed");
  std::memcpy(&token, agreed.data(), 8);
  token_ = token;
}

// A child of a split: the parent's settings and hosts, its own key space, token, connections.
Communicator::Impl::Impl(const Impl& parent, base::Config config, std::shared_ptr<Store> store,
                         std::vector<int> members, int rank, std::uint64_t token)
    : rank_(rank),
      size_(static_cast<int>(members.size())),
      config_(std::move(config)),
      store_(std::move(store)),
      launcher_store_(parent.launcher_store_),
      topology_(parent.topology_.of_ranks(members)),
      route_hint_(parent.route_hint_),
      token_(token),
      parent_ranks_(std::move(members)) {
  hosted_server = parent.hosted_server;
  inherit_store_host(parent);
  try {
    start(build_transports());
  } catch (const Error& e) {
    // The other members' children are being built, or built already, and wait for this one (its
    // address, its segments): the record ends their wait at their monitor's next look.
    try {
      core::publish_abort(*store_,
                          base::AbortRecord{base::AbortRecord::Kind::peer_failed, rank_, rank_,
                                            fmt::format("{} could not build its part of the new "
                                                        "communicator: {}",
                                                        who(rank_), e.what())});
    } catch (const Error&) {  // the store's silence is the others' to notice
    }
    throw;
  }
}

std::shared_ptr<Communicator::Impl> Communicator::Impl::split(int color, int key,
                                                              const base::Config& child_config,
                                                              const std::string& refused) {
  // Every rank's color, key, whether its options were invalid and the child's settings
  // (core/settings_agreement.hpp), through this communicator: the split is one of its calls.
  constexpr std::size_t n = 3 + core::kSettingsFields;
  std::vector<std::int64_t> mine = {color, key, refused.empty() ? 0 : 1};
  for (const std::int64_t f : core::settings_fingerprint(child_config)) mine.push_back(f);
  std::vector<std::int64_t> all(n * static_cast<std::size_t>(size_));
  run_own(algorithms::Kind::all_gather, mine.data(), all.data(), n, DataType::i64);
  const std::uint64_t split = splits_++;  // the same on every rank: splits are collective
  if (!refused.empty()) throw InvalidArgument(refused);
  if (color < 0) return nullptr;
  std::vector<int> members;
  for (int r = 0; r < size_; ++r)
    if (all[n * static_cast<std::size_t>(r)] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[n * static_cast<std::size_t>(a) + 1] < all[n * static_cast<std::size_t>(b) + 1];
  });
  // A member whose options were invalid raised its own error: its child cannot be built.
  std::vector<int> invalid;
  for (int r : members)
    if (all[n * static_cast<std::size_t>(r) + 2] != 0) invalid.push_back(r);
  if (!invalid.empty())
    throw InvalidArgument(fmt::format(
        "split: {}: the child of color {}: the options of rank(s) {} of the parent were "
        "invalid (each raised its own error); no member builds the child",
        who(rank_), color, fmt::join(invalid, ",")));
  // Members whose child settings differ would build connections of other shapes, or run other
  // schedules: every member raises instead, and the parent goes on.
  std::vector<std::string> lines, hosts;
  for (int r : members) {
    lines.push_back(
        core::line_from_fingerprint(child_config, &all[n * static_cast<std::size_t>(r) + 3]));
    hosts.push_back(topology_.host_of_rank[static_cast<std::size_t>(r)]);
  }
  if (auto why = core::settings_disagreement(lines, members, hosts,
                                             "every member of the child (ranks of the parent)");
      !why.empty())
    throw InvalidArgument(
        fmt::format("split: {}: the child of color {}: {}", who(rank_), color, why));
  const int rank =
      static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  // Every member derives the same token: no store round trip, and no two communicators share one.
  const std::uint64_t token =
      base::stable_hash(fmt::format("{:x}/{}/{}", token_, split, color)) | 1;
  auto store = std::make_shared<PrefixStore>(store::keys::split_space(split, color), store_);
  auto child = std::make_shared<Impl>(*this, child_config, std::move(store), std::move(members),
                                      rank, token);
  child->whole_job_ = false;
  return child;
}

Communicator::Impl::GroupSpace Communicator::Impl::group_space(const std::vector<int>& members) {
  std::vector<bool> seen(static_cast<std::size_t>(size_), false);
  for (int r : members) {
    if (r < 0 || r >= size_ || seen[static_cast<std::size_t>(r)])
      throw InvalidArgument(
          fmt::format("create_group: {}: rank {} is {} (ranks {})", who(rank_), r,
                      r < 0 || r >= size_ ? "outside the communicator" : "listed twice",
                      fmt::join(members, ",")));
    seen[static_cast<std::size_t>(r)] = true;
  }
  const auto me = std::find(members.begin(), members.end(), rank_);
  if (me == members.end())
    throw InvalidArgument(
        fmt::format("create_group: {}: not one of the ranks listed ({}): only "
                    "the members call it",
                    who(rank_), fmt::join(members, ",")));
  std::uint64_t n = 0;
  {
    std::lock_guard lock(groups_mu_);
    n = groups_made_[members]++;
  }
  const std::string list = fmt::format("{}", fmt::join(members, ","));
  const std::uint64_t digest = base::stable_hash(list);
  // Every member derives the same token: no store round trip, and no two communicators share one.
  const std::uint64_t token =
      base::stable_hash(fmt::format("{:x}/group/{}/{}", token_, list, n)) | 1;
  return {std::make_shared<PrefixStore>(store::keys::group_space(digest, n), store_), token,
          static_cast<int>(me - members.begin())};
}

std::shared_ptr<Communicator::Impl> Communicator::Impl::create_group(
    const std::vector<int>& members, const base::Config& child_config) {
  GroupSpace space = group_space(members);
  // Members whose child settings differ would shape their connections otherwise, or run other
  // schedules: they compare them first, and each raises instead (the parent goes on).
  std::vector<std::string> hosts;
  for (const int r : members) hosts.push_back(topology_.host_of_rank[static_cast<std::size_t>(r)]);
  const std::string context =
      fmt::format("create_group: {}: the group of ranks {}", who(rank_), fmt::join(members, ","));
  // Between rounds: the parent stopped, or a member on this host died before it came (its
  // process tells at once, where the parent's monitor would take its heartbeat timeout).
  auto check = [&](const std::vector<int>& absent) {
    raise_if_halted(context);
    for (const int r : absent)
      if (const int pid = local_pid(r); pid != 0 && !base::process_alive(pid))
        throw PeerError(
            fmt::format("{}: rank {} of the parent (pid {}, on this host) ended before it "
                        "called create_group",
                        context, r, pid),
            r);
  };
  // A parent already stopped: the others learn it from this member's slot.
  try {
    raise_if_halted(context);
  } catch (const Error& e) {
    try {
      core::publish_group_stop(*space.store, space.rank, e);
    } catch (const Error&) {  // the store failed too: this member's own error stands
    }
    throw;
  }
  std::string why;
  try {
    why = core::group_settings_disagreement(*space.store, space.rank, members, hosts,
                                            core::settings_line(child_config), child_config.timeout,
                                            check);
  } catch (const Error& e) {  // named with the group, where check() has not named it already
    if (e.kind() == ErrorKind::store && !std::string_view(e.what()).starts_with(context))
      throw StoreError(fmt::format("{}: comparing the members' settings: {}", context, e.what()));
    rethrow_with_context(e, context);
  }
  if (!why.empty()) throw InvalidArgument(fmt::format("{}: {}", context, why));
  auto child = std::make_shared<Impl>(*this, child_config, std::move(space.store), members,
                                      space.rank, space.token);
  child->whole_job_ = members.size() == static_cast<std::size_t>(size_) && whole_job_;
  return child;
}

void Communicator::Impl::refuse_group(const std::vector<int>& members, const std::string& why) {
  GroupSpace space;
  try {
    space = group_space(members);
  } catch (const InvalidArgument&) {  // no group to tell: the options' error is raised alone
    return;
  }
  try {
    core::publish_group_refusal(*space.store, space.rank, why);
  } catch (const Error&) {  // the others then time out naming this rank: its error stands here
  }
}

// A communicator made by split() has its parent's topology already: it skips the exchange.
transport::cudaipc::IpcTransport* Communicator::Impl::build_transports() {
  const bool child = !parent_ranks_.empty();
  // A child knows its hosts: where they are one, TCP may listen on loopback, else on the
  // parent's interface. The parent's LOCAL_WORLD_SIZE (its ranks on this host) would call a child
  // spanning hosts with no more ranks than that one host's.
  if (child) {
    config_.pacing.set_local_world_size(topology_.ranks_on_host_of(rank_));
    config_.pacing.local_world_size_given = true;
  }
  // RDMA is opened before the topology exchange, so that a port is advertised only when it
  // works here. A child opens it with its own token (its members derive theirs).
  core::TransportBundle bundle({*store_, rank_, size_, token_, route_hint_}, config_);
  listen_address_ = bundle.listen_address();
  // A child's peers take the RDMA ports its parent advertised: a member that cannot open its own
  // fails its part of the child (its peers learn so at once) rather than reach them by TCP while
  // they wait for it on RDMA.
  if (child && !bundle.has_rdma() && topology_.rdma_of_rank[static_cast<std::size_t>(rank_)] != "-")
    for (int r = 0; r < size_; ++r)
      if (!topology_.same_host(rank_, r) &&
          topology_.rdma_of_rank[static_cast<std::size_t>(r)] != "-")
        throw Error(fmt::format("{}: the parent reached other hosts by RDMA; the child cannot: {}",
                                who(rank_), bundle.rdma_why()));
  if (!child) {
    // Measured before the exchange, so that every rank models the same machine. TCP loopback
    // only matters when TCP runs within a host, which LOOM_TRANSPORT=tcp alone asks for.
    algorithms::MachineRates rates;
    if (size_ > 1 && config_.selection.probe_budget.count() > 0)
      rates = core::probe_machine(config_.selection.probe_budget, config_.transport == "tcp");
    // Rank 0's table decides for every rank (it travels in its topology record).
    topology_ = core::exchange_topology(
        *store_, rank_, size_, config_.timeout, config_.failure.worker_id, bundle.rdma_port(),
        rates, config_.selection.tuning_file, core::settings_line(config_));
    core::check_settings_agree(*store_, rank_, topology_, config_.timeout, hosts_store_);
  }
  // The spinning policy follows the ranks that really share this host's cores.
  config_.pacing.set_local_world_size(topology_.ranks_on_host_of(rank_));
  config_.pacing.any_host_oversubscribed = topology_.any_host_oversubscribed();
  core::TransportBundle::Finished made = bundle.finish(topology_, config_);
  core::log_rdma_choice(topology_, rank_, size_, bundle.rdma_port(), bundle.rdma_why());
  transport_ = std::move(made.table);
  transport_summary_ = core::describe_peers(*transport_, rank_, size_);
  return made.ipc;
}

// Communicator::shrink: the survivors of a failure agree, through the store, on who goes on.
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
  const int known_failed = failed_rank();

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
  const std::uint64_t token = base::stable_hash(fmt::format("{:x}/shrink/{}", token_, round)) | 1;
  auto store = std::make_shared<PrefixStore>(store::keys::shrink_space(round), store_);
  auto child = std::make_shared<Impl>(*this, config_, std::move(store), members,
                                      static_cast<int>(me - members.begin()), token);
  child->whole_job_ = whole_job_;
  return child;
}

}  // namespace loom
