#include "recording_store.hpp"

#include <map>

namespace loom::testing {

RecordingStore::RecordingStore(std::shared_ptr<Store> inner)
    : RecordingStore(std::move(inner), std::make_shared<Log>()) {}
RecordingStore::RecordingStore(std::shared_ptr<Store> inner, std::shared_ptr<Log> log)
    : inner_(std::move(inner)), log_(std::move(log)) {}

void RecordingStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard lock(log_->mu);
    log_->keys.push_back(key);
  }
  inner_->set(key, value);
}
Bytes RecordingStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return inner_->get(key, timeout);
}
std::int64_t RecordingStore::add(const std::string& key, std::int64_t delta) {
  return inner_->add(key, delta);
}
Bytes RecordingStore::compare_set(const std::string& key, const Bytes& expected,
                                  const Bytes& desired) {
  return inner_->compare_set(key, expected, desired);
}
bool RecordingStore::remove(const std::string& key) {
  return inner_->remove(key);
}
void RecordingStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  inner_->wait(keys, timeout);
}
std::vector<bool> RecordingStore::check(const std::vector<std::string>& keys) {
  return inner_->check(keys);
}
std::shared_ptr<Store> RecordingStore::clone() const {
  auto inner = inner_->clone();
  if (!inner) return nullptr;
  return std::shared_ptr<Store>(new RecordingStore(std::move(inner), log_));
}

std::vector<std::string> RecordingStore::keys_set() const {
  std::lock_guard lock(log_->mu);
  return log_->keys;
}

std::vector<std::string> keys_set_twice(const std::vector<std::string>& all,
                                        bool (*rewritten)(const std::string& key)) {
  std::map<std::string, int> times;
  for (const auto& k : all) ++times[k];
  std::vector<std::string> twice;
  for (const auto& [k, n] : times)
    if (n > 1 && !rewritten(k)) twice.push_back(k);
  return twice;
}

}  // namespace loom::testing
