// TcpStore client: synchronous requests over one connection, guarded by a mutex.
#include <unistd.h>

#include <array>
#include <mutex>

#include <fmt/format.h>

#include "base/auth.hpp"
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
// Requests that do not wait still get a bound, so a hung server cannot hang a rank.
constexpr std::chrono::milliseconds kRequestTimeout = std::chrono::seconds(60);
// Server-side waits answer before the client gives up on the connection.
constexpr std::chrono::milliseconds kReplyGrace = std::chrono::seconds(10);
}  // namespace

class TcpStore::Impl {
 public:
  Impl(std::string host, std::uint16_t port, std::chrono::milliseconds timeout, std::string secret)
      : host_(std::move(host)), port_(port), secret_(std::move(secret)) {
    connect(Deadline(timeout));
  }
  ~Impl() {
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& host() const { return host_; }
  std::uint16_t port() const { return port_; }
  const std::string& secret() const { return secret_; }

  // Sends one request and returns the reply's payload; raises TimeoutError on a timeout status.
  std::vector<std::uint8_t> call(const char* what, const std::string& key, WireWriter& request,
                                 std::chrono::milliseconds reply_timeout) {
    std::lock_guard lock(mu_);
    if (fd_ < 0) connect(Deadline(kRequestTimeout));
    auto& body = request.buffer();
    std::uint32_t len = static_cast<std::uint32_t>(body.size());
    std::vector<std::uint8_t> frame(4 + body.size());
    std::memcpy(frame.data(), &len, 4);
    std::memcpy(frame.data() + 4, body.data(), body.size());
    Deadline deadline(reply_timeout);
    IoResult r = base::write_exact(fd_, frame.data(), frame.size(), deadline);
    std::uint32_t reply_len = 0;
    if (r == IoResult::ok) r = base::read_exact(fd_, &reply_len, 4, deadline);
    if (r == IoResult::ok && (reply_len == 0 || reply_len > kMaxMessageBytes)) {
      drop();
      throw StoreError(fmt::format("store {}('{}'): reply length {} from {}:{} is invalid", what,
                                   key, reply_len, host_, port_));
    }
    std::vector<std::uint8_t> reply(reply_len);
    if (r == IoResult::ok) r = base::read_exact(fd_, reply.data(), reply_len, deadline);
    if (r != IoResult::ok) {
      drop();  // the reply may still arrive later: this connection can no longer be trusted
      std::string msg =
          fmt::format("store {}('{}') on {}:{}: {}", what, key, host_, port_, base::describe(r));
      if (r == IoResult::timeout) throw TimeoutError(msg);
      throw StoreError(msg);
    }
    auto status = static_cast<Status>(reply[0]);
    reply.erase(reply.begin());
    if (status == Status::timeout)
      throw TimeoutError(
          fmt::format("store {}('{}') on {}:{}: timed out", what, key, host_, port_));
    if (status == Status::error) {
      WireReader er(reply.data(), reply.size());
      std::string why = er.str();
      drop();
      throw StoreError(
          fmt::format("store {}('{}') on {}:{}: server refused: {}", what, key, host_, port_, why));
    }
    return reply;
  }

 private:
  void connect(const Deadline& deadline) {
    std::string error;
    fd_ = base::connect_tcp(host_, port_, deadline, error);
    if (fd_ < 0)
      throw TimeoutError(fmt::format("store: cannot connect to {}:{}: {}", host_, port_, error));
    try {
      authenticate();
    } catch (...) {
      drop();
      throw;
    }
  }
  // The server's challenge, this client's response, the server's proof: see core/auth.hpp.
  void authenticate() {
    const Deadline deadline(kRequestTimeout);
    auto fail = [&](const std::string& why) {
      return StoreError(fmt::format("store: {}:{}: authentication failed: {}", host_, port_, why));
    };
    std::array<std::uint8_t, base::Challenge::kBytes> raw{};
    if (auto r = base::read_exact(fd_, raw.data(), raw.size(), deadline); r != IoResult::ok)
      throw fail("no challenge from the server: " + base::describe(r));
    auto challenge = base::Challenge::decode(raw.data(), raw.size());
    if (!challenge) throw fail("the server's challenge is not Loom's (not a Loom store?)");
    base::Handshake handshake("loom-store", secret_);
    auto reply = handshake.respond(*challenge, {});
    if (!reply.error.empty()) throw fail(reply.error);
    if (auto r = base::write_exact(fd_, reply.bytes.data(), reply.bytes.size(), deadline);
        r != IoResult::ok)
      throw fail(base::describe(r));
    std::vector<std::uint8_t> proof(handshake.proof_bytes());
    if (auto r = base::read_exact(fd_, proof.data(), proof.size(), deadline); r != IoResult::ok)
      throw fail("the server rejected this client's secret (" + base::describe(r) + ")");
    if (!handshake.verify_proof(proof.data(), proof.size(), {}))
      throw fail("the server does not know the job secret");
  }
  void drop() {
    ::close(fd_);
    fd_ = -1;
  }

  std::mutex mu_;
  std::string host_;
  std::uint16_t port_;
  std::string secret_;
  int fd_ = -1;
};

namespace {
void put_key(WireWriter& w, const std::string& key) {
  if (key.size() > kMaxKeyBytes)
    throw InvalidArgument(
        fmt::format("store: key of {} bytes exceeds {}", key.size(), kMaxKeyBytes));
  w.str(key);
}
std::uint32_t clamp_ms(std::chrono::milliseconds t) {
  return static_cast<std::uint32_t>(std::clamp<long long>(t.count(), 0, 0x7fffffff));
}
}  // namespace

TcpStore::TcpStore(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout,
                   std::optional<std::string> secret)
    : impl_(std::make_unique<Impl>(host, port, timeout, secret ? *secret : base::job_secret())) {}
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
  impl_->call("set", key, w, kRequestTimeout);
}

Bytes TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  WireWriter w;
  w.u8(static_cast<std::uint8_t>(Op::get));
  put_key(w, key);
  w.u32(clamp_ms(timeout));
  auto reply = impl_->call("get", key, w, timeout + kReplyGrace);
  WireReader r(reply.data(), reply.size());
  return r.blob();
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  WireWriter w;
  w.u8(static_cast<std::uint8_t>(Op::add));
  put_key(w, key);
  w.i64(delta);
  auto reply = impl_->call("add", key, w, kRequestTimeout);
  WireReader r(reply.data(), reply.size());
  return r.i64();
}

Bytes TcpStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  WireWriter w;
  w.u8(static_cast<std::uint8_t>(Op::compare_set));
  put_key(w, key);
  w.blob(expected);
  w.blob(desired);
  auto reply = impl_->call("compare_set", key, w, kRequestTimeout);
  WireReader r(reply.data(), reply.size());
  return r.blob();
}

bool TcpStore::remove(const std::string& key) {
  WireWriter w;
  w.u8(static_cast<std::uint8_t>(Op::remove));
  put_key(w, key);
  auto reply = impl_->call("remove", key, w, kRequestTimeout);
  WireReader r(reply.data(), reply.size());
  return r.u8() != 0;
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  WireWriter w;
  w.u8(static_cast<std::uint8_t>(Op::wait));
  w.u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) put_key(w, k);
  w.u32(clamp_ms(timeout));
  impl_->call("wait", keys.empty() ? "" : keys[0], w, timeout + kReplyGrace);
}

std::vector<bool> TcpStore::check(const std::vector<std::string>& keys) {
  WireWriter w;
  w.u8(static_cast<std::uint8_t>(Op::check));
  w.u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) put_key(w, k);
  auto reply = impl_->call("check", keys.empty() ? "" : keys[0], w, kRequestTimeout);
  WireReader r(reply.data(), reply.size());
  std::vector<bool> out;
  for (std::size_t i = 0; i < keys.size(); ++i) out.push_back(r.u8() != 0);
  return out;
}

// ---- PrefixStore --------------------------------------------------------------------------------

std::shared_ptr<Store> TcpStore::clone() const {
  return std::make_shared<TcpStore>(impl_->host(), impl_->port(), kRequestTimeout, impl_->secret());
}

std::shared_ptr<Store> PrefixStore::clone() const {
  auto base = base_->clone();
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
