// The rendezvous store server on Asio: one thread, one io_context, a session per client.
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <asio.hpp>

#include "base/auth.hpp"
#include "base/logging.hpp"
#include "base/wire.hpp"
#include "loom/store.hpp"
#include "store/handshake_admission.hpp"
#include "store/listen_socket.hpp"
#include "store/rate_limited_log.hpp"
#include "store/store_protocol.hpp"

namespace loom {

using namespace store::protocol;
using base::WireWriter;
using store::HandshakeAdmission;
using store::RateLimitedLog;

namespace {
// A client that has not authenticated within this time is dropped.
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
// Unauthenticated connections: at most this many in all and from one address.
constexpr HandshakeAdmission::Limits kHandshakeLimits{512, 64, std::chrono::seconds(1)};
// After accept fails for want of descriptors or memory, sessions get this long to free some.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
// Connections accepted in one go before the other sessions get a turn.
constexpr int kAcceptBatch = 64;
constexpr int kListenBacklog = 1024;
// Replies a client may leave unread while it sends more requests.
constexpr std::size_t kMaxQueuedReplies = 64;

// Errors of the connection being accepted, not of the listener (accept(2), "Error handling").
bool error_of_that_connection(int err) {
  switch (err) {
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case EPERM:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
      return true;
    default:
      return false;
  }
}

std::string address_of(const sockaddr_storage& ss) {
  char host[NI_MAXHOST] = {0};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&ss), sizeof(ss), host, sizeof(host), nullptr,
                    0, NI_NUMERICHOST) != 0)
    return "unknown";
  return host;
}

std::uint16_t port_of(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return 0;
}
}  // namespace

class LOOM_INTERNAL StoreServer::Impl {
 public:
  Impl(int listening_fd, std::string secret)
      : acceptor_(io_), backoff_(io_), secret_(std::move(secret)) {
    store::raise_descriptor_limit_once();
    store::make_close_on_exec_and_nonblocking(listening_fd);
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(listening_fd, reinterpret_cast<sockaddr*>(&ss), &len);
    asio::error_code ec;
    acceptor_.assign(ss.ss_family == AF_INET6 ? asio::ip::tcp::v6() : asio::ip::tcp::v4(),
                     listening_fd, ec);
    if (ec) {
      ::close(listening_fd);
      throw StoreError(fmt::format("store server: cannot serve on descriptor {}: {}", listening_fd,
                                   ec.message()));
    }
    port_ = port_of(ss);
    wait_for_connections();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~Impl() {
    asio::post(io_, [this] {
      asio::error_code ec;
      acceptor_.close(ec);
      io_.stop();
    });
    thread_.join();
  }
  std::uint16_t port() const { return port_; }

 private:
  class Session;
  struct PendingWait {
    std::shared_ptr<Session> session;
    std::vector<std::string> keys;
    bool want_value;  // GET answers with the value, WAIT with nothing
    std::unique_ptr<asio::steady_timer> timer;
  };

  class Session : public std::enable_shared_from_this<Session> {
   public:
    Session(Impl& server, asio::ip::tcp::socket socket, std::string peer, std::uint64_t id)
        : server_(server),
          socket_(std::move(socket)),
          handshake_("loom-store", server.secret_),
          timer_(server.io_),
          peer_(std::move(peer)),
          id_(id) {}
    ~Session() {
      if (state_ == State::handshaking) server_.handshake_over(id_);
    }
    const std::string& peer() const { return peer_; }

    // Challenge, response, proof (base/auth.hpp); requests are read only after that.
    void authenticate() {
      timer_.expires_after(kHandshakeTimeout);
      // The handler may run after the handshake ended in the same reactor pass: the state says.
      timer_.async_wait([self = shared_from_this()](asio::error_code ec) {
        if (!ec && self->state_ == State::handshaking) self->reject("did not authenticate in time");
      });
      auto challenge = std::make_shared<std::array<std::uint8_t, base::Challenge::kBytes>>(
          handshake_.challenge().encode());
      asio::async_write(socket_, asio::buffer(*challenge),
                        [self = shared_from_this(), challenge](asio::error_code ec, std::size_t) {
                          if (ec) return self->close();
                          self->read_response();
                        });
    }
    // Ends the session at once; idempotent. A wait it had parked is withdrawn.
    void close() {
      if (state_ == State::closed) return;
      if (state_ == State::handshaking) server_.handshake_over(id_);
      state_ = State::closed;
      if (wait_id_ != 0) server_.withdraw_wait(std::exchange(wait_id_, 0));
      asio::error_code ignored;
      timer_.cancel();
      socket_.close(ignored);
    }
    void respond(Status status, const std::vector<std::uint8_t>& payload) {
      replies_.push_back(encode_reply(status, payload));
      if (replies_.size() == 1) write_replies();
    }
    // The request waits for keys. The read of the next request is already outstanding, so a
    // client that goes away withdraws the wait and frees its descriptor at once.
    void park(std::uint64_t wait_id) { wait_id_ = wait_id; }
    void finish_wait(Status status, const std::vector<std::uint8_t>& payload) {
      wait_id_ = 0;
      respond(status, payload);
    }
    void fail(const std::string& why) {
      server_.request_errors_.warn("store server: closing connection from {}: {}", peer_, why);
      if (wait_id_ != 0) server_.withdraw_wait(std::exchange(wait_id_, 0));
      WireWriter w;
      w.str(why);
      close_after_replies_ = true;
      respond(Status::error, w.buffer());
    }

   private:
    enum class State { handshaking, serving, closed };

    void read_response() {
      response_.resize(handshake_.response_bytes());
      asio::async_read(socket_, asio::buffer(response_),
                       [self = shared_from_this()](asio::error_code ec, std::size_t) {
                         if (ec) return self->close();
                         self->on_response();
                       });
    }
    void on_response() {
      if (state_ != State::handshaking) return;
      std::string why;
      auto proof = handshake_.check_response(response_.data(), response_.size(), {}, &why);
      if (!proof) return reject(why);
      auto out = std::make_shared<std::vector<std::uint8_t>>(std::move(*proof));
      asio::async_write(socket_, asio::buffer(*out),
                        [self = shared_from_this(), out](asio::error_code ec, std::size_t) {
                          if (ec || self->state_ != State::handshaking) return self->close();
                          self->state_ = State::serving;
                          self->server_.handshake_over(self->id_);
                          self->timer_.cancel();
                          self->read_request();
                        });
    }
    // Replies go out one at a time, in order; the next request may be read meanwhile.
    void write_replies() {
      asio::async_write(socket_, asio::buffer(replies_.front()),
                        [self = shared_from_this()](asio::error_code ec, std::size_t) {
                          if (ec) return self->close();
                          self->replies_.pop_front();
                          if (!self->replies_.empty()) return self->write_replies();
                          if (self->close_after_replies_) self->close();
                        });
    }
    // Nothing is said to a client that failed the handshake: the connection just closes.
    void reject(const std::string& why) {
      server_.rejections_.warn("store server: rejected a connection from {}: {}", peer_, why);
      close();
    }
    void read_request() {
      asio::async_read(socket_, asio::buffer(header_),
                       [self = shared_from_this()](asio::error_code ec, std::size_t) {
                         if (ec) return self->close();  // the client went away
                         if (self->close_after_replies_) return;
                         if (self->wait_id_ != 0)
                           return self->fail("a request arrived while a wait was pending");
                         if (self->replies_.size() >= kMaxQueuedReplies) {
                           self->server_.request_errors_.warn(
                               "store server: closing connection from {}: {} replies unread",
                               self->peer_, self->replies_.size());
                           return self->close();
                         }
                         self->on_header();
                       });
    }
    void on_header() {
      std::uint32_t len;
      std::memcpy(&len, header_.data(), 4);
      if (len == 0 || len > kMaxMessageBytes) {
        fail(fmt::format("request length {} outside [1, {}]", len, kMaxMessageBytes));
        return;
      }
      body_.resize(len);
      asio::async_read(socket_, asio::buffer(body_),
                       [self = shared_from_this()](asio::error_code ec, std::size_t) {
                         if (ec) return self->close();
                         self->server_.handle(self, self->body_);
                         if (self->state_ == State::serving && !self->close_after_replies_)
                           self->read_request();
                       });
    }

    Impl& server_;
    asio::ip::tcp::socket socket_;
    base::Handshake handshake_;
    asio::steady_timer timer_;
    std::vector<std::uint8_t> response_;
    std::string peer_;
    std::uint64_t id_;
    State state_ = State::handshaking;
    std::uint64_t wait_id_ = 0;                      // the parked wait, 0 when none
    std::deque<std::vector<std::uint8_t>> replies_;  // the front one is being written
    bool close_after_replies_ = false;               // after an error reply
    std::array<std::uint8_t, 4> header_{};
    std::vector<std::uint8_t> body_;
  };

  // ---- accepting -------------------------------------------------------------------------------

  void wait_for_connections() {
    acceptor_.async_wait(asio::socket_base::wait_read, [this](asio::error_code ec) {
      if (!acceptor_.is_open() || ec == asio::error::operation_aborted) return;
      if (ec) {
        accept_errors_.warn("store server: waiting for connections: {}", ec.message());
        return back_off();
      }
      accept_ready();
    });
  }

  // accept4 rather than Asio's accept: the socket is close-on-exec from its creation, and every
  // error is seen. No error stops the server: a failed connection is skipped, and a shortage of
  // descriptors or memory backs off so that sessions can end and free some.
  void accept_ready() {
    for (int i = 0; i < kAcceptBatch; ++i) {
      sockaddr_storage from{};
      socklen_t len = sizeof(from);
      const int fd = ::accept4(acceptor_.native_handle(), reinterpret_cast<sockaddr*>(&from), &len,
                               SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        admit(fd, from);
        continue;
      }
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) break;
      if (error_of_that_connection(err)) continue;
      accept_errors_.warn("store server: accept on port {}: {}; retrying in {} ms", port_,
                          std::strerror(err), kAcceptBackoff.count());
      return back_off();
    }
    wait_for_connections();
  }

  void back_off() {
    backoff_.expires_after(kAcceptBackoff);
    backoff_.async_wait([this](asio::error_code ec) {
      if (!ec) wait_for_connections();
    });
  }

  void admit(int fd, const sockaddr_storage& from) {
    const std::string source = address_of(from);
    const auto now = HandshakeAdmission::Clock::now();
    const auto decision = admission_.decide(source, now);
    if (!decision.admit) {
      ::close(fd);
      refusals_.warn(
          "store server: refused a connection from {}: {} connections await "
          "authentication ({} from that address)",
          source, admission_.size(), admission_.from(source));
      return;
    }
    if (decision.evict) {
      auto victim = handshaking_.find(*decision.evict);
      if (auto session = victim == handshaking_.end() ? nullptr : victim->second.lock()) {
        evictions_.warn(
            "store server: dropped a connection from {} that had not authenticated, "
            "to make room for a new one",
            session->peer());
        session->close();
      }
      handshake_over(*decision.evict);
    }
    asio::error_code ec;
    asio::ip::tcp::socket socket(io_);
    socket.assign(from.ss_family == AF_INET6 ? asio::ip::tcp::v6() : asio::ip::tcp::v4(), fd, ec);
    if (ec) {
      ::close(fd);
      return;
    }
    socket.set_option(asio::ip::tcp::no_delay(true), ec);
    const std::uint64_t id = ++last_session_id_;
    auto session = std::make_shared<Session>(*this, std::move(socket),
                                             fmt::format("{}:{}", source, port_of(from)), id);
    admission_.add(id, source, now);
    handshaking_[id] = session;
    session->authenticate();
  }

  void handshake_over(std::uint64_t id) {
    admission_.remove(id);
    handshaking_.erase(id);
  }

  // ---- requests --------------------------------------------------------------------------------

  void handle(const std::shared_ptr<Session>& session, const std::vector<std::uint8_t>& body) {
    try {
      Request req = parse_request(body.data(), body.size());
      const std::string& key = req.keys.empty() ? std::string() : req.keys.front();
      WireWriter w;
      switch (req.op) {
        case Op::set:
          data_[key] = std::move(req.value);
          session->respond(Status::ok, {});
          notify(key);
          return;
        case Op::get:
        case Op::wait:
          park(session, std::move(req.keys), req.op == Op::get, req.timeout_ms);
          return;
        case Op::add: {
          std::int64_t old = 0, value = 0;
          if (auto it = data_.find(key); it != data_.end()) old = parse_int(it->second, key);
          if (__builtin_add_overflow(old, req.delta, &value))
            throw StoreError(fmt::format("add on key '{}': {} + {} overflows a 64-bit integer", key,
                                         old, req.delta));
          std::string text = std::to_string(value);
          data_[key] = std::vector<std::uint8_t>(text.begin(), text.end());
          w.i64(value);
          session->respond(Status::ok, w.buffer());
          notify(key);
          return;
        }
        case Op::compare_set: {
          auto it = data_.find(key);
          bool changed = false;
          if (it == data_.end() ? req.expected.empty() : it->second == req.expected) {
            data_[key] = std::move(req.value);
            changed = true;
          }
          auto now = data_.find(key);
          w.blob(now == data_.end() ? std::vector<std::uint8_t>{} : now->second);
          session->respond(Status::ok, w.buffer());
          if (changed) notify(key);
          return;
        }
        case Op::remove:
          w.u8(data_.erase(key) ? 1 : 0);
          session->respond(Status::ok, w.buffer());
          return;
        case Op::check:
          for (const auto& k : req.keys) w.u8(data_.count(k) ? 1 : 0);
          session->respond(Status::ok, w.buffer());
          return;
      }
    } catch (const std::exception& e) {
      session->fail(e.what());
    }
  }

  static std::int64_t parse_int(const std::vector<std::uint8_t>& v, const std::string& key) {
    std::string s(v.begin(), v.end());
    try {
      std::size_t pos = 0;
      std::int64_t x = std::stoll(s, &pos);
      if (pos == s.size()) return x;
    } catch (const std::exception&) {
    }
    throw StoreError(fmt::format("add on key '{}' whose value is not an integer", key));
  }

  bool ready(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!data_.count(k)) return false;
    return true;
  }

  std::vector<std::uint8_t> answer_of(const PendingWait& p) const {
    WireWriter w;
    if (p.want_value) w.blob(data_.at(p.keys[0]));
    return std::move(w.buffer());
  }

  // Waits are keyed by id: a timer whose expiry was already queued when the wait was answered
  // (Asio can no longer cancel it) finds its id gone and does nothing.
  void park(const std::shared_ptr<Session>& session, std::vector<std::string> keys, bool want_value,
            std::uint32_t timeout_ms) {
    PendingWait p{session, std::move(keys), want_value, nullptr};
    if (ready(p.keys)) {
      session->respond(Status::ok, answer_of(p));
      return;
    }
    const std::uint64_t id = ++last_wait_id_;
    p.timer = std::make_unique<asio::steady_timer>(io_, std::chrono::milliseconds(timeout_ms));
    p.timer->async_wait([this, id](asio::error_code ec) {
      if (ec) return;
      auto it = pending_.find(id);
      if (it == pending_.end()) return;  // answered or withdrawn in the meantime
      auto waiter = std::move(it->second.session);
      pending_.erase(it);
      waiter->finish_wait(Status::timeout, {});
    });
    pending_.emplace(id, std::move(p));
    session->park(id);
  }

  void withdraw_wait(std::uint64_t id) { pending_.erase(id); }

  void notify(const std::string& key) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      auto& p = it->second;
      bool involved = std::find(p.keys.begin(), p.keys.end(), key) != p.keys.end();
      if (involved && ready(p.keys)) {
        auto waiter = std::move(p.session);
        auto reply = answer_of(p);
        it = pending_.erase(it);
        waiter->finish_wait(Status::ok, reply);
      } else {
        ++it;
      }
    }
  }

  // Sessions leave these when Asio destroys the last handlers, with the io_context: declared first.
  HandshakeAdmission admission_{kHandshakeLimits};
  std::map<std::uint64_t, std::weak_ptr<Session>> handshaking_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer backoff_;
  std::string secret_;
  std::thread thread_;
  std::uint16_t port_ = 0;
  std::map<std::string, std::vector<std::uint8_t>> data_;
  std::map<std::uint64_t, PendingWait> pending_;
  std::uint64_t last_wait_id_ = 0;
  std::uint64_t last_session_id_ = 0;
  RateLimitedLog accept_errors_, refusals_, evictions_, rejections_, request_errors_;
};

StoreServer::StoreServer(const std::string& host, std::uint16_t port,
                         std::optional<std::string> secret) {
  std::string key = secret ? *secret : base::job_secret();
  impl_ = std::make_unique<Impl>(store::listen_tcp(host, port, kListenBacklog), std::move(key));
}
StoreServer::StoreServer(int listening_fd, std::optional<std::string> secret)
    : impl_(std::make_unique<Impl>(listening_fd, secret ? *secret : base::job_secret())) {}
StoreServer::~StoreServer() = default;
std::uint16_t StoreServer::port() const {
  return impl_->port();
}

}  // namespace loom
