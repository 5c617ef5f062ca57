#include "stores.hpp"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <string_view>

namespace loom_torch {

namespace {

// PrefixStore keeps its prefix protected; a pointer to the member, taken through a subclass,
// reads it without constructing anything.
struct PrefixOf : c10d::PrefixStore {
  static const std::string& of(const c10d::PrefixStore& store) {
    return store.*(&PrefixOf::prefix_);
  }
};

std::string_view message_of(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

bool says_timeout(std::string_view message) {
  for (std::string_view word : {"timeout", "Timeout", "timed out", "Timed out"})
    if (message.find(word) != std::string_view::npos) return true;
  return false;
}

// c10d's errors as Loom's: TimeoutError when the store says a wait timed out, else StoreError.
template <typename F>
auto calling(const char* what, const std::string& key, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const loom::Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string_view cause = message_of(e);
    const std::string message = std::string("torch store: ") + what + " '" + key +
                                "': " + std::string(cause.substr(0, cause.find('\n')));
    if (says_timeout(cause)) throw loom::TimeoutError(message);
    throw loom::StoreError(message);
  }
}

class TorchStore : public loom::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const loom::Bytes& value) override {
    calling("set", key, [&] { store_->set(key, value); });
  }
  loom::Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    return calling("get", key, [&] {
      store_->wait({key}, std::max(timeout, std::chrono::milliseconds(1)));
      return store_->get(key);
    });
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return calling("add", key, [&] { return store_->add(key, delta); });
  }
  loom::Bytes compare_set(const std::string& key, const loom::Bytes& expected,
                          const loom::Bytes& desired) override {
    return calling("compare_set", key, [&] { return store_->compareSet(key, expected, desired); });
  }
  bool remove(const std::string& key) override {
    return calling("delete", key, [&] { return store_->deleteKey(key); });
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    calling("wait", keys.empty() ? std::string() : keys.front(),
            [&] { store_->wait(keys, std::max(timeout, std::chrono::milliseconds(1))); });
  }
  std::vector<bool> check(const std::vector<std::string>& keys) override {
    // c10d answers whether all exist; Loom asks about each.
    std::vector<bool> present;
    present.reserve(keys.size());
    for (const std::string& key : keys)
      present.push_back(calling("check", key, [&] { return store_->check({key}); }));
    return present;
  }
  // A second connection for Loom's health monitor, where the store can make one.
  std::shared_ptr<loom::Store> clone() const override {
    try {
      if (auto copy = clone_of(store_)) return std::make_shared<TorchStore>(std::move(copy));
    } catch (const std::exception&) {
    }
    return nullptr;
  }

 private:
  static c10::intrusive_ptr<c10d::Store> clone_of(const c10::intrusive_ptr<c10d::Store>& store) {
#if LOOM_TORCH_STORE_CLONE
    return store->clone();
#else
    if (auto* prefix = dynamic_cast<c10d::PrefixStore*>(store.get())) {
      auto base = clone_of(prefix->getUnderlyingStore());
      if (!base) return {};
      return c10::make_intrusive<c10d::PrefixStore>(PrefixOf::of(*prefix), std::move(base));
    }
    if (auto* tcp = dynamic_cast<c10d::TCPStore*>(store.get())) {
      c10d::TCPStoreOptions options;
      options.port = tcp->getPort();
      options.isServer = false;
      options.waitWorkers = false;
      options.timeout = tcp->getTimeout();
      return c10::make_intrusive<c10d::TCPStore>(tcp->getHost(), options);
    }
    return {};
#endif
  }

  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace

std::shared_ptr<loom::Store> loom_store_of(const c10::intrusive_ptr<c10d::Store>& store) {
  if (auto* prefix = dynamic_cast<c10d::PrefixStore*>(store.get())) {
    auto base = loom_store_of(prefix->getUnderlyingStore());
    if (!dynamic_cast<TorchStore*>(base.get()))
      return std::make_shared<loom::PrefixStore>(PrefixOf::of(*prefix), std::move(base));
  } else if (auto* backed = dynamic_cast<LoomBackedStore*>(store.get())) {
    return backed->loom_store();
  }
  return std::make_shared<TorchStore>(store);
}

// ---- LoomBackedStore ----------------------------------------------------------------------------

namespace {
std::chrono::milliseconds loom_timeout(std::chrono::milliseconds timeout) {
  // c10d's zero timeout waits for ever.
  return timeout.count() > 0 ? timeout : std::chrono::hours(24 * 365);
}
}  // namespace

LoomBackedStore::LoomBackedStore(std::shared_ptr<loom::Store> store,
                                 std::chrono::milliseconds timeout)
    : c10d::Store(timeout), store_(std::move(store)) {}

void LoomBackedStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  store_->set(key, value);
}
std::vector<uint8_t> LoomBackedStore::compareSet(const std::string& key,
                                                 const std::vector<uint8_t>& expected,
                                                 const std::vector<uint8_t>& desired) {
  return store_->compare_set(key, expected, desired);
}
std::vector<uint8_t> LoomBackedStore::get(const std::string& key) {
  return store_->get(key, loom_timeout(timeout_));
}
int64_t LoomBackedStore::add(const std::string& key, int64_t value) {
  return store_->add(key, value);
}
bool LoomBackedStore::deleteKey(const std::string& key) {
  return store_->remove(key);
}
bool LoomBackedStore::check(const std::vector<std::string>& keys) {
  for (bool present : store_->check(keys))
    if (!present) return false;
  return true;
}
int64_t LoomBackedStore::getNumKeys() {
  TORCH_CHECK(false, "Loom's store does not count its keys (getNumKeys)");
}
void LoomBackedStore::wait(const std::vector<std::string>& keys) {
  store_->wait(keys, loom_timeout(timeout_));
}
void LoomBackedStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  store_->wait(keys, loom_timeout(timeout));
}
#if LOOM_TORCH_STORE_CLONE
c10::intrusive_ptr<c10d::Store> LoomBackedStore::clone() {
  auto copy = store_->clone();
  TORCH_CHECK(copy, "this Loom store cannot open a second connection (clone)");
  return c10::make_intrusive<LoomBackedStore>(std::move(copy), timeout_);
}
#endif

}  // namespace loom_torch
