// Rendezvous key-value store: how ranks find each other.
#pragma once

#include "loom/export.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/loom.hpp"

namespace loom {

using Bytes = std::vector<std::uint8_t>;

// Every call takes a timeout and raises TimeoutError when it passes, StoreError on failure.
class LOOM_API Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Waits until the key exists, then returns its value.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Adds delta to the integer stored at key (0 when absent) and returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // Sets key to desired if its value equals expected (an empty expected means "absent");
  // returns the value stored afterwards.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;
  // Returns whether the key existed.
  virtual bool remove(const std::string& key) = 0;
  // Waits until every key exists.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Which of the keys exist now, without waiting.
  virtual std::vector<bool> check(const std::vector<std::string>& keys) = 0;
  // A second, independent connection to the same store, for another thread (the communicator's
  // health monitor); null when this store cannot make one.
  virtual std::shared_ptr<Store> clone() const { return nullptr; }
  // The same, with requests that do not wait for a key giving up after `request_timeout`, and
  // those that do (get, wait) `request_timeout` after their own timeout: a watcher must notice a
  // stopped store within that time (and a refused reconnection gives up at once: the watcher asks
  // again on its next round). Null when this store cannot bound its requests so (by default):
  // a caller then uses clone(), or this store, unbounded.
  virtual std::shared_ptr<Store> clone_bounded(std::chrono::milliseconds request_timeout) const {
    (void)request_timeout;
    return nullptr;
  }

  void set(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key, std::chrono::milliseconds timeout) {
    Bytes b = get(key, timeout);
    return std::string(b.begin(), b.end());
  }
};

// Client of a StoreServer over TCP. Thread-safe: each call has a connection of its own (idle ones
// are kept for later calls), so a long wait does not hold up other threads' calls. Retries the
// connection until `timeout` passes, so clients may start before the server (and a server busy
// with unauthenticated connections may turn it away for a while). Each connection authenticates
// with the job secret
// (`secret`, else LOOM_SECRET or LOOM_SECRET_FILE) in an HMAC-SHA256 challenge-response, and
// checks that the server knows it too; without a secret on both sides nothing is checked.
class LOOM_API TcpStore : public Store {
 public:
  // timeout: how long to keep trying to connect; request_timeout: how long a request that does not
  // wait for a key (and a reconnection) may take before TimeoutError.
  TcpStore(const std::string& host, std::uint16_t port,
           std::chrono::milliseconds timeout = std::chrono::seconds(300),
           std::optional<std::string> secret = std::nullopt,
           std::chrono::milliseconds request_timeout = std::chrono::seconds(60));
  ~TcpStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool remove(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::vector<bool> check(const std::vector<std::string>& keys) override;
  std::shared_ptr<Store> clone() const override;
  std::shared_ptr<Store> clone_bounded(std::chrono::milliseconds request_timeout) const override;
  using Store::set;
  const std::string& host() const;
  std::uint16_t port() const;

  class Impl;

 private:
  explicit TcpStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A store in a shared file (file:///path): for launches where ranks share a file system but no
// rank can host a server. Uses an advisory lock on `<path>.lock`; waits poll the file. An
// operation waits at most `timeout` for the lock (get and wait: their own timeout), then raises
// TimeoutError naming the file. Both files must be this user's and not writable by others; they
// are not authenticated otherwise (docs/failures.md, "The stores"). The log is compacted as it
// grows.
class LOOM_API FileStore : public Store {
 public:
  explicit FileStore(std::string path,
                     std::chrono::milliseconds timeout = std::chrono::seconds(60));
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool remove(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::vector<bool> check(const std::vector<std::string>& keys) override;
  std::shared_ptr<Store> clone() const override;
  std::shared_ptr<Store> clone_bounded(std::chrono::milliseconds request_timeout) const override;
  using Store::set;

 private:
  std::string path_;
  std::chrono::milliseconds timeout_;
};

// Every key is seen through `prefix + "/"`; lets several communicators share one store.
class LOOM_API PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool remove(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::vector<bool> check(const std::vector<std::string>& keys) override;
  std::shared_ptr<Store> clone() const override;
  std::shared_ptr<Store> clone_bounded(std::chrono::milliseconds request_timeout) const override;
  using Store::set;

 private:
  std::string key(const std::string& k) const { return prefix_ + "/" + k; }
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

// The store server, serving on its own thread until destroyed. Clients must prove they know the
// job secret (`secret`, else LOOM_SECRET or LOOM_SECRET_FILE); one that does not is logged with
// its address and closed before any request of it is read.
class LOOM_API StoreServer {
 public:
  // Binds host:port (port 0 picks a free one).
  StoreServer(const std::string& host, std::uint16_t port,
              std::optional<std::string> secret = std::nullopt);
  // Serves on an already listening socket (ownership moves to the server).
  explicit StoreServer(int listening_fd, std::optional<std::string> secret = std::nullopt);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  std::uint16_t port() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
