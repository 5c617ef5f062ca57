// The rendezvous store server on Asio: one thread, one io_context, a session per client.
#include <array>
#include <list>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <asio.hpp>

#include "base/auth.hpp"
#include "base/logging.hpp"
#include "base/wire.hpp"
#include "loom/store.hpp"
#include "store/store_protocol.hpp"

namespace loom {

using namespace store::protocol;
using base::WireWriter;

namespace {
// A client that has not authenticated within this time is dropped.
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
}  // namespace

class StoreServer::Impl {
 public:
  Impl(asio::ip::tcp::acceptor::protocol_type proto, int fd, std::string secret)
      : acceptor_(io_, proto, fd), secret_(std::move(secret)) {
    start();
  }
  Impl(const std::string& host, std::uint16_t port, std::string secret)
      : acceptor_(io_), secret_(std::move(secret)) {
    asio::ip::tcp::resolver resolver(io_);
    auto endpoint = *resolver.resolve(host, std::to_string(port)).begin();
    acceptor_.open(endpoint.endpoint().protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(endpoint.endpoint());
    acceptor_.listen(1024);
    start();
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
    Session(Impl& server, asio::ip::tcp::socket socket)
        : server_(server),
          socket_(std::move(socket)),
          handshake_("loom-store", server.secret_),
          timer_(server.io_) {
      asio::error_code ec;
      auto ep = socket_.remote_endpoint(ec);
      peer_ = ec ? "unknown" : fmt::format("{}:{}", ep.address().to_string(), ep.port());
    }
    // Challenge, response, proof (core/auth.hpp); requests are read only after that.
    void authenticate() {
      timer_.expires_after(kHandshakeTimeout);
      timer_.async_wait([self = shared_from_this()](asio::error_code ec) {
        if (!ec) self->reject("did not authenticate in time");
      });
      auto challenge = std::make_shared<std::array<std::uint8_t, base::Challenge::kBytes>>(
          handshake_.challenge().encode());
      asio::async_write(socket_, asio::buffer(*challenge),
                        [self = shared_from_this(), challenge](asio::error_code ec, std::size_t) {
                          if (!ec) self->read_response();
                        });
    }
    void read_request() {
      asio::async_read(socket_, asio::buffer(header_),
                       [self = shared_from_this()](asio::error_code ec, std::size_t) {
                         if (!ec) self->on_header();
                       });
    }
    void respond(Status status, const std::vector<std::uint8_t>& payload) {
      auto out = std::make_shared<std::vector<std::uint8_t>>();
      std::uint32_t len = static_cast<std::uint32_t>(payload.size() + 1);
      out->resize(4);
      std::memcpy(out->data(), &len, 4);
      out->push_back(static_cast<std::uint8_t>(status));
      out->insert(out->end(), payload.begin(), payload.end());
      asio::async_write(socket_, asio::buffer(*out),
                        [self = shared_from_this(), out](asio::error_code ec, std::size_t) {
                          if (!ec) self->read_request();
                        });
    }
    void fail(const std::string& why) {
      base::log().warn("store server: closing connection from {}: {}", peer_, why);
      WireWriter w;
      w.str(why);
      auto out = std::make_shared<std::vector<std::uint8_t>>();
      std::uint32_t len = static_cast<std::uint32_t>(w.buffer().size() + 1);
      out->resize(4);
      std::memcpy(out->data(), &len, 4);
      out->push_back(static_cast<std::uint8_t>(Status::error));
      out->insert(out->end(), w.buffer().begin(), w.buffer().end());
      asio::async_write(socket_, asio::buffer(*out),
                        [self = shared_from_this(), out](asio::error_code, std::size_t) {
                          asio::error_code ignored;
                          self->socket_.close(ignored);
                        });
    }

   private:
    void read_response() {
      response_.resize(handshake_.response_bytes());
      asio::async_read(socket_, asio::buffer(response_),
                       [self = shared_from_this()](asio::error_code ec, std::size_t) {
                         if (!ec) self->on_response();
                       });
    }
    void on_response() {
      std::string why;
      auto proof = handshake_.check_response(response_.data(), response_.size(), {}, &why);
      if (!proof) return reject(why);
      auto out = std::make_shared<std::vector<std::uint8_t>>(std::move(*proof));
      asio::async_write(socket_, asio::buffer(*out),
                        [self = shared_from_this(), out](asio::error_code ec, std::size_t) {
                          if (ec) return;
                          self->timer_.cancel();
                          self->read_request();
                        });
    }
    // Nothing is said to a client that failed the handshake: the connection just closes.
    void reject(const std::string& why) {
      base::log().warn("store server: rejected a connection from {}: {}", peer_, why);
      asio::error_code ignored;
      timer_.cancel();
      socket_.close(ignored);
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
                         if (!ec) self->server_.handle(self, self->body_);
                       });
    }
    Impl& server_;
    asio::ip::tcp::socket socket_;
    base::Handshake handshake_;
    asio::steady_timer timer_;
    std::vector<std::uint8_t> response_;
    std::string peer_;
    std::array<std::uint8_t, 4> header_{};
    std::vector<std::uint8_t> body_;
    friend class Impl;
  };

  void start() {
    port_ = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }

  void accept() {
    acceptor_.async_accept([this](asio::error_code ec, asio::ip::tcp::socket socket) {
      if (ec) return;  // acceptor closed
      socket.set_option(asio::ip::tcp::no_delay(true));
      std::make_shared<Session>(*this, std::move(socket))->authenticate();
      accept();
    });
  }

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
          std::int64_t value = 0;
          if (auto it = data_.find(key); it != data_.end()) value = parse_int(it->second, key);
          value += req.delta;
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

  void answer(PendingWait& p) {
    WireWriter w;
    if (p.want_value) w.blob(data_.at(p.keys[0]));
    p.session->respond(Status::ok, w.buffer());
  }

  void park(const std::shared_ptr<Session>& session, std::vector<std::string> keys, bool want_value,
            std::uint32_t timeout_ms) {
    PendingWait p{session, std::move(keys), want_value, nullptr};
    if (ready(p.keys)) {
      answer(p);
      return;
    }
    auto it = pending_.insert(pending_.end(), std::move(p));
    it->timer = std::make_unique<asio::steady_timer>(io_, std::chrono::milliseconds(timeout_ms));
    it->timer->async_wait([this, it](asio::error_code ec) {
      if (ec) return;  // cancelled: answered already
      it->session->respond(Status::timeout, {});
      pending_.erase(it);
    });
  }

  void notify(const std::string& key) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      bool involved = std::find(it->keys.begin(), it->keys.end(), key) != it->keys.end();
      if (involved && ready(it->keys)) {
        it->timer->cancel();
        answer(*it);
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }

  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  std::string secret_;
  std::thread thread_;
  std::uint16_t port_ = 0;
  std::map<std::string, std::vector<std::uint8_t>> data_;
  std::list<PendingWait> pending_;
};

StoreServer::StoreServer(const std::string& host, std::uint16_t port,
                         std::optional<std::string> secret)
    : impl_(std::make_unique<Impl>(host, port, secret ? *secret : base::job_secret())) {}
StoreServer::StoreServer(int listening_fd, std::optional<std::string> secret) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(listening_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  impl_ =
      std::make_unique<Impl>(ss.ss_family == AF_INET6 ? asio::ip::tcp::v6() : asio::ip::tcp::v4(),
                             listening_fd, secret ? *secret : base::job_secret());
}
StoreServer::~StoreServer() = default;
std::uint16_t StoreServer::port() const {
  return impl_->port();
}

}  // namespace loom
