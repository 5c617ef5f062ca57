// The two directions between PyTorch's stores and Loom's: the c10d::Store a backend is given,
// seen as a loom::Store (Loom bootstraps on it), and a loom::Store seen as a c10d::Store (the
// rendezvous under loomrun, whose store speaks Loom's protocol).
#pragma once

#include <loom/store.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "torch_compat.hpp"

#include <chrono>
#include <memory>

namespace loom_torch {

// PrefixStores over a LoomBackedStore become loom::PrefixStores over its Loom store; any other
// store is called through c10d's interface (errors become StoreError or TimeoutError).
std::shared_ptr<loom::Store> loom_store_of(const c10::intrusive_ptr<c10d::Store>& store);

class LoomBackedStore : public c10d::Store {
 public:
  LoomBackedStore(std::shared_ptr<loom::Store> store, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
#if LOOM_TORCH_STORE_CLONE
  c10::intrusive_ptr<c10d::Store> clone() override;
#endif

  const std::shared_ptr<loom::Store>& loom_store() const {
    return store_;
  }

 private:
  std::shared_ptr<loom::Store> store_;
};

}  // namespace loom_torch
