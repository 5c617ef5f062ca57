// TcpStore client: each request goes out on a connection of its own, taken from a small pool of
// idle ones (or made), so that one thread's long wait does not hold up other threads' calls.
#include <poll.h>
#include <unistd.h>

#include <array>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "base/auth.hpp"
#include "base/errors.hpp"
#include "base/socket_io.hpp"
#include "base/tcp_connect.hpp"
#include "base/wire.hpp"
#include "loom/store.hpp"
#include "store/store_protocol.hpp"

namespace loom {

using namespace store::protocol;
using base::Deadline;
using base::IoResult;
using base::WireReader;
using base::WireWriter;

namespace {
// Server-side waits answer before the client gives up on the connection.
constexpr std::chrono::milliseconds kReplyGrace = std::chrono::seconds(10);
// Idle connections kept for later calls; more concurrent calls open more, then close them.
constexpr std::size_t kMaxIdleConnections = 4;

// The wait the server is asked for: at most 2^31 - 1 ms, so the client's own bound (that plus
// kReplyGrace) cannot overflow.
std::uint32_t clamp_ms(std::chrono::milliseconds t) {
  return static_cast<std::uint32_t>(std::clamp<long long>(t.count(), 0, 0x7fffffff));
}

// Runs a decoder of the server's reply; a malformed reply is a StoreError naming the call.
template <typename Context, typename Decode>
auto decoded(const Context& context, Decode&& decode) -> decltype(decode()) {
  try {
    return decode();
  } catch (const StoreError& e) {
    throw StoreError(fmt::format("{}: {}", context(), e.what()));
  }
}
}  // namespace

class LOOM_INTERNAL TcpStore::Impl {
 public:
  // retry_refused: whether a reconnection that the host refuses is tried again until the
  // request's deadline (the first connection always is: the server may not be up yet).
  // reply_grace: how long after a server-side wait's end the client still waits for its reply.
  Impl(std::string host, std::uint16_t port, std::chrono::milliseconds timeout, std::string secret,
       std::chrono::milliseconds request_timeout, bool retry_refused = true,
       std::chrono::milliseconds reply_grace = kReplyGrace)
      : host_(std::move(host)),
        port_(port),
        secret_(std::move(secret)),
        request_timeout_(request_timeout),
        retry_refused_(retry_refused),
        reply_grace_(reply_grace) {
    idle_.push_back(connect(Deadline(timeout), true));
  }
  ~Impl() {
    for (int fd : idle_) ::close(fd);
  }
  const std::string& host() const { return host_; }
  std::uint16_t port() const { return port_; }
  const std::string& secret() const { return secret_; }
  // Requests that do not wait still get a bound, so a hung server cannot hang a rank.
  std::chrono::milliseconds request_timeout() const { return request_timeout_; }
  // The client's bound on a request that asks the server to wait up to `wait`.
  std::chrono::milliseconds reply_timeout_for(std::chrono::milliseconds wait) const {
    return std::chrono::milliseconds(clamp_ms(wait)) + reply_grace_;
  }

  // Sends one request and returns the server's OK reply; raises TimeoutError on a timeout status.
  Reply call(const char* what, const std::string& key, const std::vector<std::uint8_t>& body,
             std::chrono::milliseconds reply_timeout) {
    const auto context = [&] {
      return fmt::format("store {}('{}') on {}:{}", what, key, host_, port_);
    };
    // A call that must connect again names itself in the connection's failure.
    Connection conn(*this, [&] {
      try {
        return acquire();
      } catch (const Error& e) {
        rethrow_with_context(e, context());
      }
    }());
    std::uint32_t len = static_cast<std::uint32_t>(body.size());
    std::vector<std::uint8_t> frame(4 + body.size());
    std::memcpy(frame.data(), &len, 4);
    std::memcpy(frame.data() + 4, body.data(), body.size());
    Deadline deadline(reply_timeout);
    IoResult r = base::write_exact(conn.fd, frame.data(), frame.size(), deadline);
    std::uint32_t reply_len = 0;
    if (r == IoResult::ok) r = base::read_exact(conn.fd, &reply_len, 4, deadline);
    if (r == IoResult::ok && (reply_len == 0 || reply_len > kMaxMessageBytes))
      throw StoreError(fmt::format("{}: reply length {} is invalid", context(), reply_len));
    std::vector<std::uint8_t> bytes(reply_len);
    if (r == IoResult::ok) r = base::read_exact(conn.fd, bytes.data(), reply_len, deadline);
    // On any failure the connection closes: a late reply must not answer a later request.
    if (r != IoResult::ok) {
      std::string msg = fmt::format("{}: {}", context(), base::describe(r));
      if (r == IoResult::timeout) throw TimeoutError(msg);
      throw StoreError(msg);
    }
    Reply reply = decoded(context, [&] { return parse_reply(bytes.data(), bytes.size()); });
    switch (reply.status) {
      case Status::ok:
        conn.release();
        return reply;
      case Status::timeout:
        conn.release();
        throw TimeoutError(fmt::format("{}: timed out", context()));
      case Status::error:
        break;
    }
    std::string why = decoded(context, [&] { return reply_error(reply); });
    throw StoreError(fmt::format("{}: server refused: {}", context(), why));
  }

 private:
  // A connection for one call; it goes back to the pool only after a whole reply was read.
  struct Connection {
    Connection(Impl& impl, int fd) : impl(impl), fd(fd) {}
    ~Connection() {
      if (fd >= 0) ::close(fd);
    }
    void release() { impl.release(std::exchange(fd, -1)); }
    Impl& impl;
    int fd;
  };

  // An idle connection, unless the server has closed it meanwhile; else a new one.
  int acquire() {
    for (;;) {
      int fd = -1;
      {
        std::lock_guard lock(mu_);
        if (idle_.empty()) break;
        fd = idle_.back();
        idle_.pop_back();
      }
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) == 0) return fd;  // nothing pending: neither EOF nor stray bytes
      ::close(fd);
    }
    return connect(Deadline(request_timeout_), retry_refused_);
  }
  void release(int fd) {
    std::lock_guard lock(mu_);
    if (idle_.size() < kMaxIdleConnections) {
      idle_.push_back(fd);
      return;
    }
    ::close(fd);
  }

  // A server with too many connections awaiting authentication closes new ones before its
  // challenge: those are tried again until the deadline.
  int connect(const Deadline& deadline, bool retry_refused) {
    auto pause = std::chrono::milliseconds(5);
    for (;;) {
      std::string error;
      const int fd = base::connect_tcp(host_, port_, deadline, error, retry_refused);
      if (fd < 0)
        throw TimeoutError(fmt::format("store: cannot connect to {}:{}: {}", host_, port_, error));
      bool turned_away = false;
      try {
        turned_away = !authenticate(fd);
      } catch (...) {
        ::close(fd);
        throw;
      }
      if (!turned_away) return fd;
      ::close(fd);
      if (deadline.expired())
        throw TimeoutError(fmt::format(
            "store: cannot connect to {}:{}: the server closed every connection before its "
            "challenge (too many connections awaiting authentication)",
            host_, port_));
      std::this_thread::sleep_for(
          std::min(pause, std::chrono::milliseconds(deadline.remaining_ms(1000))));
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
    }
  }
  // The server's challenge, this client's response, the server's proof: see base/auth.hpp.
  // False when the server closed the connection before its challenge.
  bool authenticate(int fd) {
    const Deadline deadline(request_timeout_);
    auto fail = [&](const std::string& why) {
      return StoreError(fmt::format("store: {}:{}: authentication failed: {}", host_, port_, why));
    };
    std::array<std::uint8_t, base::Challenge::kBytes> raw{};
    if (auto r = base::read_exact(fd, raw.data(), raw.size(), deadline); r != IoResult::ok) {
      if (r == IoResult::closed) return false;
      // The kernel queues a connection whatever the server does with it: one never served means
      // a server that cannot accept (out of file descriptors) or does not run (frozen).
      if (r == IoResult::timeout)
        throw fail(fmt::format(
            "no challenge from the server in {} ms: the connection was queued but never served "
            "(is the server's process out of file descriptors, as its log would say, or frozen?)",
            request_timeout_.count()));
      throw fail("no challenge from the server: " + base::describe(r));
    }
    auto challenge = base::Challenge::decode(raw.data(), raw.size());
    if (!challenge) throw fail("the server's challenge is not Loom's (not a Loom store?)");
    base::Handshake handshake("loom-store", secret_);
    auto reply = handshake.respond(*challenge, {});
    if (!reply.error.empty()) throw fail(reply.error);
    if (auto r = base::write_exact(fd, reply.bytes.data(), reply.bytes.size(), deadline);
        r != IoResult::ok)
      throw fail(base::describe(r));
    std::vector<std::uint8_t> proof(handshake.proof_bytes());
    if (auto r = base::read_exact(fd, proof.data(), proof.size(), deadline); r != IoResult::ok)
      throw fail("the server rejected this client's secret (" + base::describe(r) + ")");
    if (!handshake.verify_proof(proof.data(), proof.size(), {}))
      throw fail("the server does not know the job secret");
    return true;
  }

  std::mutex mu_;  // guards idle_
  std::vector<int> idle_;
  std::string host_;
  std::uint16_t port_;
  std::string secret_;
  std::chrono::milliseconds request_timeout_;
  bool retry_refused_;
  std::chrono::milliseconds reply_grace_;
};

namespace {
void put_key(WireWriter& w, const std::string& key) {
  if (key.size() > kMaxKeyBytes)
    throw InvalidArgument(
        fmt::format("store: key of {} bytes exceeds {}", key.size(), kMaxKeyBytes));
  w.str(key);
}
std::string context_of(const char* what, const std::string& key, const TcpStore& store) {
  return fmt::format("store {}('{}') on {}:{}", what, key, store.host(), store.port());
}
}  // namespace

TcpStore::TcpStore(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout,
                   std::optional<std::string> secret, std::chrono::milliseconds request_timeout)
    : impl_(std::make_unique<Impl>(host, port, timeout, secret ? *secret : base::job_secret(),
                                   request_timeout)) {}
TcpStore::TcpStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpStore::~TcpStore() = default;
const std::string& TcpStore::host() const {
  return impl_->host();
}
std::uint16_t TcpStore::port() const {
  return impl_->port();
}

void TcpStore::set(const std::string& key, const Bytes& value) {
  WireWriter w;
  w.u8(static_cast<std::uint8_t>(Op::set));
  put_key(w, key);
  w.blob(value);
  auto reply = impl_->call("set", key, w.buffer(), impl_->request_timeout());
  decoded([&] { return context_of("set", key, *this); }, [&] { return reply_empty(reply); });
}

Bytes TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  WireWriter w;
  w.u8(static_cast<std::uint8_t>(Op::get));
  put_key(w, key);
  w.u32(clamp_ms(timeout));
  auto reply = impl_->call("get", key, w.buffer(), impl_->reply_timeout_for(timeout));
  return decoded([&] { return context_of("get", key, *this); }, [&] { return reply_value(reply); });
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  WireWriter w;
  w.u8(static_cast<std::uint8_t>(Op::add));
  put_key(w, key);
  w.i64(delta);
  auto reply = impl_->call("add", key, w.buffer(), impl_->request_timeout());
  return decoded([&] { return context_of("add", key, *this); },
                 [&] { return reply_integer(reply); });
}

Bytes TcpStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  WireWriter w;
  w.u8(static_cast<std::uint8_t>(Op::compare_set));
  put_key(w, key);
  w.blob(expected);
  w.blob(desired);
  auto reply = impl_->call("compare_set", key, w.buffer(), impl_->request_timeout());
  return decoded([&] { return context_of("compare_set", key, *this); },
                 [&] { return reply_value(reply); });
}

bool TcpStore::remove(const std::string& key) {
  WireWriter w;
  w.u8(static_cast<std::uint8_t>(Op::remove));
  put_key(w, key);
  auto reply = impl_->call("remove", key, w.buffer(), impl_->request_timeout());
  return decoded([&] { return context_of("remove", key, *this); },
                 [&] { return reply_flag(reply); });
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  WireWriter w;
  w.u8(static_cast<std::uint8_t>(Op::wait));
  w.u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) put_key(w, k);
  w.u32(clamp_ms(timeout));
  const std::string first = keys.empty() ? "" : keys[0];
  auto reply = impl_->call("wait", first, w.buffer(), impl_->reply_timeout_for(timeout));
  decoded([&] { return context_of("wait", first, *this); }, [&] { return reply_empty(reply); });
}

std::vector<bool> TcpStore::check(const std::vector<std::string>& keys) {
  WireWriter w;
  w.u8(static_cast<std::uint8_t>(Op::check));
  w.u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) put_key(w, k);
  const std::string first = keys.empty() ? "" : keys[0];
  auto reply = impl_->call("check", first, w.buffer(), impl_->request_timeout());
  return decoded([&] { return context_of("check", first, *this); },
                 [&] { return reply_flags(reply, keys.size()); });
}

// ---- PrefixStore --------------------------------------------------------------------------------

std::shared_ptr<Store> TcpStore::clone() const {
  return std::make_shared<TcpStore>(impl_->host(), impl_->port(), impl_->request_timeout(),
                                    impl_->secret(), impl_->request_timeout());
}
// A watcher's connection: a store host that refuses it is gone (it was up: this one's original
// connected), and waiting out the deadline would only hold the watcher's owner (a rank on its way
// out after a failure joins it). A request that waits gives up `request_timeout` after its wait.
std::shared_ptr<Store> TcpStore::clone_bounded(std::chrono::milliseconds request_timeout) const {
  return std::shared_ptr<TcpStore>(new TcpStore(
      std::make_unique<Impl>(impl_->host(), impl_->port(), request_timeout, impl_->secret(),
                             request_timeout, false, request_timeout)));
}

std::shared_ptr<Store> PrefixStore::clone() const {
  auto base = base_->clone();
  return base ? std::make_shared<PrefixStore>(prefix_, std::move(base)) : nullptr;
}
std::shared_ptr<Store> PrefixStore::clone_bounded(std::chrono::milliseconds request_timeout) const {
  auto base = base_->clone_bounded(request_timeout);
  return base ? std::make_shared<PrefixStore>(prefix_, std::move(base)) : nullptr;
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {}
void PrefixStore::set(const std::string& k, const Bytes& v) {
  base_->set(key(k), v);
}
Bytes PrefixStore::get(const std::string& k, std::chrono::milliseconds t) {
  return base_->get(key(k), t);
}
std::int64_t PrefixStore::add(const std::string& k, std::int64_t d) {
  return base_->add(key(k), d);
}
Bytes PrefixStore::compare_set(const std::string& k, const Bytes& e, const Bytes& d) {
  return base_->compare_set(key(k), e, d);
}
bool PrefixStore::remove(const std::string& k) {
  return base_->remove(key(k));
}
void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) {
  std::vector<std::string> full;
  for (const auto& k : keys) full.push_back(key(k));
  base_->wait(full, t);
}
std::vector<bool> PrefixStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  for (const auto& k : keys) full.push_back(key(k));
  return base_->check(full);
}

}  // namespace loom
