// A store that passes everything through and remembers every key set through it (and through
// its clones): to check which keys the components of a job write.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loom/store.hpp"

namespace loom::testing {

class RecordingStore final : public Store {
 public:
  explicit RecordingStore(std::shared_ptr<Store> inner);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool remove(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::vector<bool> check(const std::vector<std::string>& keys) override;
  std::shared_ptr<Store> clone() const override;
  using Store::set;

  // Every key set so far, in order, repeats included.
  std::vector<std::string> keys_set() const;

 private:
  struct Log {
    std::mutex mu;
    std::vector<std::string> keys;
  };
  RecordingStore(std::shared_ptr<Store> inner, std::shared_ptr<Log> log);
  std::shared_ptr<Store> inner_;
  std::shared_ptr<Log> log_;
};

// The keys of `all` (every rank's keys_set(), joined) set more than once, except those that
// `rewritten` accepts (keys a component updates by design).
std::vector<std::string> keys_set_twice(const std::vector<std::string>& all,
                                        bool (*rewritten)(const std::string& key));

}  // namespace loom::testing
