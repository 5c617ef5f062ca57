// Shared-memory segments: selected for peers on one host, and never left behind in /dev/shm.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "../support/child.hpp"
#include "../support/ranks.hpp"
#include "base/process_memory.hpp"
#include "store/keys.hpp"
#include "transports/shm/shm_transport.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using testing::dev_shm_used;
using testing::in_child;
using testing::own_dev_shm;
using testing::RankContext;
using testing::run_ranks_raw;
using testing::segments_of;
using transport::shm::ShmTransport;

// A store in a file of its own, removed with it.
struct ScratchStore {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               fmt::format("loom-shm-test-{}-{}", ::getpid(), counter()++);
  FileStore store{path.string()};
  ~ScratchStore() { std::filesystem::remove(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

base::LinkConfig small_config() {
  base::LinkConfig c;
  c.buffer_bytes = 64 << 10;
  c.slots = 2;
  return c;
}

// Plays rank 0, the creator, of the pair (0, 1) by hand: the segment, its header, and its name
// published in the store, for a ShmTransport of rank 1 to open.
struct HandMadeSegment {
  HandMadeSegment(Store& store, std::uint64_t token, const base::LinkConfig& config) {
    slot_bytes = config.slot_bytes();
    bytes = transport::shm::segment_bytes(slot_bytes, static_cast<std::size_t>(config.slots));
    name = fmt::format("/loom-{:016x}-0-1-{:032x}", token, ++serial);
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(::flock(fd, LOCK_SH), 0);  // held while the creator lives
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    header = new (base) transport::shm::SegmentHeader{};
    header->magic = transport::shm::kSegmentMagic;
    header->slot_bytes = slot_bytes;
    header->slots = static_cast<std::uint32_t>(config.slots);
    store.set(store::keys::shm_segment(store::keys::Space::shm, 0, 1), name);
  }
  ~HandMadeSegment() {
    ::munmap(base, bytes);
    ::close(fd);
    ::shm_unlink(name.c_str());
  }
  static inline unsigned serial = 0;
  std::string name;
  std::size_t slot_bytes = 0, bytes = 0;
  int fd = -1;
  void* base = nullptr;
  transport::shm::SegmentHeader* header = nullptr;
};

TEST(SharedMemory, IsChosenOnOneHostAndSegmentsAreGoneAfterNormalExit) {
  run_ranks_raw(4, [](RankContext& ctx) {
    {
      Communicator comm(ctx.store, ctx.rank, ctx.size);
      EXPECT_NE(comm.describe().find("shm to rank(s)"), std::string::npos) << comm.describe();
      std::vector<float> v(1 << 20, 1.0f);
      comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum);
      EXPECT_EQ(v[12345], 4.0f);
      // After the second barrier every rank has finished the first, and so mapped the segments
      // that the first one opened.
      comm.barrier();
      comm.barrier();
      // Every segment was unlinked as soon as both sides had mapped it.
      EXPECT_EQ(segments_of(*ctx.store), std::vector<std::string>{});
    }
    EXPECT_EQ(segments_of(*ctx.store), std::vector<std::string>{});
  });
}

TEST(SharedMemory, SegmentsAreGoneAfterAPeerIsKilled) {
  testing::RunOptions opts;
  opts.may_die = {1};
  run_ranks_raw(
      3,
      [](RankContext& ctx) {
        Options o;
        o.timeout = 20s;
        Communicator comm(ctx.store, ctx.rank, ctx.size, o);
        std::vector<float> v(1 << 18, 1.0f);
        comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum);
        if (ctx.rank == 1) {
          testing::die_by_sigkill(ctx);
        }
        EXPECT_THROW(comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum), PeerError);
        comm.destroy();
        EXPECT_EQ(segments_of(*ctx.store), std::vector<std::string>{});
      },
      opts);
}

TEST(SharedMemory, SegmentsAreGoneAfterAbort) {
  run_ranks_raw(3, [](RankContext& ctx) {
    Options o;
    o.timeout = 20s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    std::vector<float> v(1 << 18, 1.0f);
    comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum);
    auto start = std::chrono::steady_clock::now();
    if (ctx.rank == 1) {
      comm.abort();
      EXPECT_THROW(comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum), Aborted);
    } else {
      EXPECT_THROW(comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum), PeerError);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    comm.destroy();
    EXPECT_EQ(segments_of(*ctx.store), std::vector<std::string>{});
  });
}

TEST(SharedMemory, TransportTcpAndShmDisableKeepPeersOnTcp) {
  testing::RunOptions opts;
  opts.options.transport = "tcp";
  testing::run_ranks(
      2,
      [](Communicator& comm) {
        EXPECT_EQ(comm.describe().find("shm to"), std::string::npos) << comm.describe();
        float x = 1;
        comm.all_reduce(&x, 1, DataType::f32, ReduceOp::sum);
        EXPECT_EQ(x, 2.0f);
      },
      opts);
}

TEST(SharedMemory, DifferentHostIdsMeanNoSharedMemory) {
  run_ranks_raw(2, [](RankContext& ctx) {
    ::setenv("LOOM_HOST_ID", ctx.rank == 0 ? "host-a" : "host-b", 1);
    Communicator comm(ctx.store, ctx.rank, ctx.size);
    EXPECT_NE(comm.describe().find("tcp to rank(s)"), std::string::npos) << comm.describe();
    EXPECT_EQ(comm.describe().find("shm to"), std::string::npos) << comm.describe();
    float x = 1;
    comm.all_reduce(&x, 1, DataType::f32, ReduceOp::sum);
    EXPECT_EQ(x, 2.0f);
    Options forced;
    forced.transport = "shm";
    forced.store_prefix = "forced";
    EXPECT_THROW(Communicator(ctx.store, ctx.rank, ctx.size, forced), InvalidArgument);
  });
}

TEST(SharedMemory, EightRanksOnTwoCoresShareTheCpuInsteadOfSpinning) {
  run_ranks_raw(8, [](RankContext& ctx) {
    Communicator comm(ctx.store, ctx.rank, ctx.size);
    comm.barrier();
    rusage before{}, after{};
    ::getrusage(RUSAGE_SELF, &before);
    auto start = std::chrono::steady_clock::now();
    double x = 1;
    for (int i = 0; i < 1000; ++i) comm.all_reduce(&x, 1, DataType::f64, ReduceOp::max);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ::getrusage(RUSAGE_SELF, &after);
    auto seconds = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6;
    };
    const double cpu = seconds(after.ru_utime) - seconds(before.ru_utime) +
                       seconds(after.ru_stime) - seconds(before.ru_stime);
    const double cores = std::max(1u, std::thread::hardware_concurrency());
    const double share = wall * std::min(1.0, cores / ctx.size);
    // Bounded spinning: a rank uses about its share of the cores, never a whole core throughout.
    EXPECT_LT(cpu, 1.5 * share + 0.05) << "cpu " << cpu << " s over " << wall << " s wall";
    EXPECT_LT(wall, 60.0);
    EXPECT_EQ(x, 1.0);
  });
}

TEST(SharedMemory, APredictableNameTakenByAnotherProcessDoesNotStopTheJob) {
  run_ranks_raw(2, [](RankContext& ctx) {
    Options o;
    o.timeout = 20s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    std::string squatted;
    if (ctx.rank == 0) {
      // What another local user can derive from a name seen in /dev/shm: the job token.
      const Bytes token = ctx.store->get(
          "loom/" + store::keys::generation_prefix("", 1) + "/" + store::keys::job_token(), 10s);
      std::uint64_t t = 0;
      std::memcpy(&t, token.data(), sizeof(t));
      squatted = fmt::format("/loom-{:016x}-0-1", t);
      const int fd = ::shm_open(squatted.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      ASSERT_GE(fd, 0) << std::strerror(errno);
      ::close(fd);
    }
    std::vector<float> v(1 << 12, 1.0f);
    comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum);
    EXPECT_EQ(v[7], 2.0f);
    if (!squatted.empty()) ::shm_unlink(squatted.c_str());
  });
}

// Runs body(connection) in a child process with a /dev/shm of 1 MiB of its own (a mount
// namespace), over a new connection from rank 0 to rank 1 with 8 slots of 512 KiB (a segment of
// about 8 MiB, sparse); the child's exit code, 77 where mount namespaces are not permitted.
int with_small_dev_shm(const base::Pacing& pacing,
                       const std::function<int(transport::Connection&)>& body) {
  return in_child([&] {
    if (!own_dev_shm("1m")) return 77;
    ScratchStore scratch;
    const base::LinkConfig config;
    const int pid = static_cast<int>(::getpid());
    ShmTransport shm({scratch.store, 0, 2, 0x1234, config, pacing}, {pid, pid});
    base::Halt halt;
    transport::Connection& conn = shm.connect(1, base::Deadline(5s), halt);
    if (dev_shm_used() >= 64 * 1024) {
      std::fprintf(stderr, "a new connection holds %zu bytes of /dev/shm\n", dev_shm_used());
      return 1;
    }
    return body(conn);
  });
}

// A connection reserves the pages every message touches when it is made, and each slot's as its
// sender's messages first reach them: a communicator of small messages (a split's barrier) costs
// a few pages, and a /dev/shm too small for the slots is an error naming the segment at the slot
// that does not fit, never a SIGBUS.
TEST(SharedMemory, SlotsAreReservedWhenFirstFilledAndAFullDevShmIsAPeerErrorNamingTheSegment) {
  const std::size_t slot_bytes = 512 << 10;
  const int code = with_small_dev_shm(base::Pacing{}, [slot_bytes](transport::Connection& conn) {
    try {
      for (std::uint64_t k = 0; k < 8; ++k) {
        if (conn.try_acquire_send_slot() == nullptr) return 1;
        conn.post_send(slot_bytes, transport::Tag{k + 1, 0});
        if (dev_shm_used() < (k + 1) * slot_bytes) {
          std::fprintf(stderr, "slot %zu filled, but its pages are not reserved\n",
                       static_cast<std::size_t>(k));
          return 1;
        }
      }
      std::fprintf(stderr, "8 slots of 512 KiB fit a /dev/shm of 1 MiB\n");
      return 1;
    } catch (const PeerError& e) {
      const std::string what = e.what();
      const bool named = what.find("/loom-0000000000001234-0-1-") != std::string::npos &&
                         what.find("/dev/shm") != std::string::npos &&
                         what.find("cannot reserve") != std::string::npos;
      if (!named)
        std::fprintf(stderr, "the error does not name the segment and cause: %s\n", e.what());
      return named ? 0 : 1;
    }
  });
  if (code == 77) GTEST_SKIP() << "mount namespaces are not permitted here";
  EXPECT_EQ(code, 0);
}

// A slot's first message reserves the pages it reaches, not the whole slot (whose first fill
// once cost each of a small size's first calls as much as 512 KiB of pages); a larger message in
// the same slot reserves the rest. Where ranks outnumber the cores, so that no message is placed
// further along its slot (with spare cores, a first fill reserves that span too).
TEST(SharedMemory, ASlotsPagesAreReservedAsMessagesFirstReachThem) {
  const std::size_t slot_bytes = 512 << 10;
  base::Pacing oversubscribed;
  oversubscribed.oversubscribed = true;
  const int code = with_small_dev_shm(oversubscribed, [slot_bytes](transport::Connection& conn) {
    const std::size_t before = dev_shm_used();
    for (std::uint64_t k = 0; k < 8; ++k) {
      std::byte* slot = conn.try_acquire_send_slot(5000);
      if (slot == nullptr) return 1;
      std::memset(slot, 1, 5000);
      if (k == 7) break;  // the last slot stays acquired
      conn.post_send(5000, transport::Tag{k + 1, 0});
    }
    const std::size_t small = dev_shm_used() - before;
    if (small != 8 * 8192) {  // two pages a slot
      std::fprintf(stderr, "8 messages of 5000 bytes hold %zu bytes of /dev/shm\n", small);
      return 1;
    }
    std::byte* whole = conn.try_acquire_send_slot(slot_bytes);  // the same slot, grown
    if (whole == nullptr) return 1;
    std::memset(whole, 2, slot_bytes);
    conn.post_send(slot_bytes, transport::Tag{8, 0});
    const std::size_t grown = dev_shm_used() - before;
    if (grown != 7 * 8192 + slot_bytes) {
      std::fprintf(stderr, "a whole slot after 7 small messages: %zu bytes of /dev/shm\n", grown);
      return 1;
    }
    return 0;
  });
  if (code == 77) GTEST_SKIP() << "mount namespaces are not permitted here";
  EXPECT_EQ(code, 0);
}

TEST(SharedMemory, TheOpenerRefusesASegmentOfAnotherUser) {
  ScratchStore scratch;
  const base::LinkConfig config = small_config();
  HandMadeSegment segment(scratch.store, 0x5678, config);
  if (::fchown(segment.fd, 65534, 65534) != 0)
    GTEST_SKIP() << "cannot give the segment to another user: " << std::strerror(errno);
  const int pid = static_cast<int>(::getpid());
  const base::Pacing pacing;
  ShmTransport shm({scratch.store, 1, 2, 0x5678, config, pacing}, {pid, pid});
  base::Halt halt;
  try {
    shm.connect(0, base::Deadline(5s), halt);
    ADD_FAILURE() << "the opener mapped a segment of uid 65534";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to uid 65534"), std::string::npos) << e.what();
  }
}

TEST(SharedMemory, AConnectionKeepsTheLayoutTheOpenerCheckedWhateverTheHeaderSaysLater) {
  // The peer's process can rewrite the header between the opener's check and the connection's
  // construction: what the connection uses is what was checked, never a second read.
  const std::size_t slot_bytes = 4096, slots = 2;
  const std::size_t bytes = transport::shm::segment_bytes(slot_bytes, slots);
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(base, MAP_FAILED);
  auto* header = new (base) transport::shm::SegmentHeader{};
  header->magic = transport::shm::kSegmentMagic;
  header->slot_bytes = slot_bytes << 20;  // rewritten after the check
  header->slots = 64;
  transport::shm::ShmConnection conn(1, 0, static_cast<int>(::getpid()), base, bytes, slot_bytes,
                                     slots, 1, "test", -1);
  EXPECT_EQ(conn.slot_bytes(), slot_bytes);
  EXPECT_EQ(conn.slots(), slots);
  EXPECT_EQ(conn.host_regions().front().bytes, bytes);
}  // the connection unmaps the segment

// Both sides of one pair in this process, each with its own mapping of one memfd (a connection
// unmaps its segment when destroyed).
struct ConnectionPair {
  ConnectionPair(std::size_t slot_bytes, std::size_t slots, std::size_t placement_span) {
    bytes = transport::shm::segment_bytes(slot_bytes, slots);
    fd = ::memfd_create("loom-shm-pair", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
      throw std::runtime_error(std::string("memfd: ") + std::strerror(errno));
    void* low = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    void* high = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (low == MAP_FAILED || high == MAP_FAILED)
      throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
    new (low) transport::shm::SegmentHeader{};
    new (static_cast<std::byte*>(low) + transport::shm::kPage) transport::shm::FifoControl{};
    new (static_cast<std::byte*>(low) + 2 * transport::shm::kPage) transport::shm::FifoControl{};
    const int pid = static_cast<int>(::getpid());
    sender = std::make_unique<transport::shm::ShmConnection>(0, 1, pid, low, bytes, slot_bytes,
                                                             slots, 0, "pair", -1, placement_span);
    receiver = std::make_unique<transport::shm::ShmConnection>(
        1, 0, pid, high, bytes, slot_bytes, slots, 1, "pair", -1, placement_span);
  }
  ~ConnectionPair() { ::close(fd); }
  // Sends `n` bytes of `value` and receives them; where in the segment the receiver found them.
  std::size_t pass(std::size_t n, unsigned char value, std::uint64_t tag) {
    std::byte* out = sender->try_acquire_send_slot(n);
    if (out == nullptr) {
      ADD_FAILURE() << "no free send slot";
      return SIZE_MAX;
    }
    EXPECT_EQ(sender->try_acquire_send_slot(n), out) << "acquiring again moved the message";
    std::memset(out, value, n);
    sender->post_send(n, transport::Tag{tag, 0});
    auto in = receiver->try_recv_slot();
    if (!in) {
      ADD_FAILURE() << "the message of " << n << " bytes did not arrive";
      return SIZE_MAX;
    }
    const std::size_t at = static_cast<std::size_t>(in->data - base(*receiver));
    EXPECT_EQ(at, static_cast<std::size_t>(out - base(*sender)))
        << "the receiver looks elsewhere than the sender wrote";
    EXPECT_EQ(in->bytes, n);
    EXPECT_EQ(in->tag.word, tag);
    for (std::size_t i = 0; i < n; ++i)
      if (in->data[i] != std::byte{value}) {
        ADD_FAILURE() << "byte " << i << " of " << n << " is wrong";
        break;
      }
    receiver->release_recv_slot();
    return at;
  }
  static const std::byte* base(const transport::shm::ShmConnection& c) {
    return static_cast<const std::byte*>(c.host_regions().front().base);
  }
  std::size_t bytes = 0;
  int fd = -1;
  std::unique_ptr<transport::shm::ShmConnection> sender, receiver;
};

TEST(SharedMemory, SmallMessagesMoveAlongTheirSlotAndLargeOnesStartIt) {
  const std::size_t slot_bytes = 64 << 10, slots = 2, span = 32 << 10;
  ConnectionPair pair(slot_bytes, slots, span);
  const std::size_t slot0 = transport::shm::slot_offset(0, 0, slot_bytes, slots);
  const std::size_t slot1 = transport::shm::slot_offset(0, 1, slot_bytes, slots);
  std::uint64_t tag = 1;
  // 5000 bytes take two pages: slot 0 sees them at 0, 8, 16 and 24 KiB, then at 0 again; slot 1
  // sees 100 bytes at 0, 4, 8, 12 and 16 KiB.
  for (std::size_t use = 0; use < 5; ++use) {
    const std::size_t at0 = pair.pass(5000, static_cast<unsigned char>(tag), tag);
    ++tag;
    EXPECT_EQ(at0, slot0 + (use % 4) * 8192) << "use " << use << " of slot 0";
    const std::size_t at1 = pair.pass(100, static_cast<unsigned char>(tag), tag);
    ++tag;
    EXPECT_EQ(at1, slot1 + use * 4096) << "use " << use << " of slot 1";
  }
  // Slot 0's next place is 8 KiB: 30 KiB from there would pass the span, so it starts the slot.
  EXPECT_EQ(pair.pass(30 << 10, 7, tag), slot0);
  ++tag;
  EXPECT_EQ(pair.pass(slot_bytes, 8, tag), slot1);  // a whole slot
  ++tag;
  EXPECT_EQ(pair.pass(100, 9, tag), slot0);  // after 30 KiB at 0, 32 KiB is the span's end
  ++tag;
}

TEST(SharedMemory, WithoutASpanEveryMessageStartsItsSlot) {
  const std::size_t slot_bytes = 64 << 10, slots = 2;
  ConnectionPair pair(slot_bytes, slots, 0);
  for (std::uint64_t tag = 1; tag <= 6; ++tag)
    EXPECT_EQ(pair.pass(100, static_cast<unsigned char>(tag), tag),
              transport::shm::slot_offset(0, (tag - 1) % slots, slot_bytes, slots));
}

TEST(SharedMemory, APlacementPastTheSlotIsAPeerErrorNotARead) {
  const std::size_t slot_bytes = 64 << 10, slots = 2;
  ConnectionPair pair(slot_bytes, slots, 32 << 10);
  ASSERT_NE(pair.sender->try_acquire_send_slot(100), nullptr);
  pair.sender->post_send(100, transport::Tag{1, 0});
  // The peer's process rewrites the message's place after posting it.
  auto* low = reinterpret_cast<std::byte*>(pair.sender->host_regions().front().base);
  auto* control = reinterpret_cast<transport::shm::FifoControl*>(low + transport::shm::kPage);
  control->meta[0].offset = slot_bytes - 10;
  try {
    pair.receiver->try_recv_slot();
    ADD_FAILURE() << "a message placed past its slot was handed over";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt slot of 100 bytes at 65526"), std::string::npos)
        << e.what();
  }
}

TEST(SharedMemory, SegmentsLeftByAWholeJobKilledAreRemovedByTheNextJob) {
  const auto note =
      std::filesystem::temp_directory_path() / fmt::format("loom-shm-leftover-{}", ::getpid());
  testing::RunOptions killed;
  killed.may_die = {1, 2};
  // Ranks 1 and 2 form a job of their own (rank 0 only serves the store): rank 1 creates the
  // segment of their pair, then both die before rank 2 has mapped it.
  run_ranks_raw(
      3,
      [&note](RankContext& ctx) {
        if (ctx.rank == 0) {
          const std::string name = ctx.store->get_string("created", 30s);
          // A shared lock, as a creator holds: a sweep by any other job on this machine (tests
          // run side by side) leaves the segment alone until this check is done.
          const int held = ::open(("/dev/shm" + name).c_str(), O_RDONLY | O_CLOEXEC);
          ASSERT_GE(held, 0) << name;
          ASSERT_EQ(::flock(held, LOCK_SH), 0);
          ctx.store->set("held", "1");
          for (const char* key : {"pid/1", "pid/2"}) {
            const int pid = std::stoi(ctx.store->get_string(key, 30s));
            for (int i = 0; i < 3000 && base::process_alive(pid); ++i) ::usleep(10000);
            EXPECT_FALSE(base::process_alive(pid));
          }
          EXPECT_TRUE(std::filesystem::exists("/dev/shm" + name)) << "nothing was left over";
          std::ofstream(note) << name;
          ::close(held);
          return;
        }
        ctx.store->set(fmt::format("pid/{}", ctx.rank), std::to_string(::getpid()));
        Options o;
        o.transport.emplace("shm");
        o.store_prefix = "pair";
        o.timeout = 30s;
        Communicator comm(ctx.store, ctx.rank - 1, 2, o);
        ctx.store->add("done", 1);  // the harness's count of finished ranks
        if (ctx.rank == 2) {
          ctx.store->wait({"created"}, 30s);
          ::raise(SIGKILL);
        }
        float x = 1;
        Work pending = comm.all_reduce_async(&x, &x, 1, DataType::f32, ReduceOp::sum);
        // Published once the segment is whole, before its peer may map it. Looked for without
        // a blocking get: that would hold the store client the communicator publishes through.
        const std::string key = "pair/" + store::keys::generation_prefix("", 1) + "/" +
                                store::keys::shm_segment(store::keys::Space::shm, 0, 1);
        for (int i = 0; i < 3000 && !ctx.store->check({key}).front(); ++i) ::usleep(10000);
        const std::string name = ctx.store->get_string(key, 1s);
        ctx.store->set("created", name);
        ctx.store->wait({"held"}, 30s);
        ::raise(SIGKILL);
      },
      killed);
  std::string leftover;
  std::ifstream(note) >> leftover;
  std::filesystem::remove(note);
  ASSERT_FALSE(leftover.empty());
  run_ranks_raw(2, [&leftover](RankContext& ctx) {
    Communicator comm(ctx.store, ctx.rank, ctx.size);
    comm.barrier();
    EXPECT_FALSE(std::filesystem::exists("/dev/shm" + leftover)) << leftover << " is still there";
  });
  ::shm_unlink(leftover.c_str());
}

}  // namespace
}  // namespace loom
