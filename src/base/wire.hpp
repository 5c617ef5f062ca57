// Bounds-checked encoding for store and handshake messages: every read is checked against the
// bytes actually received before it is used.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.hpp"

namespace loom::base {

class WireWriter {
 public:
  void u8(std::uint8_t v) { buf_.push_back(v); }
  void u32(std::uint32_t v) { raw(&v, 4); }
  void i64(std::int64_t v) { raw(&v, 8); }
  void bytes(const void* p, std::size_t n) {
    u32(static_cast<std::uint32_t>(n));
    raw(p, n);
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  void blob(const std::vector<std::uint8_t>& b) { bytes(b.data(), b.size()); }
  std::vector<std::uint8_t>& buffer() { return buf_; }

 private:
  void raw(const void* p, std::size_t n) {
    auto* c = static_cast<const std::uint8_t*>(p);
    buf_.insert(buf_.end(), c, c + n);
  }
  std::vector<std::uint8_t> buf_;
};

// Raised (as StoreError) when a message is shorter than its fields claim.
class WireReader {
 public:
  WireReader(const std::uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}
  std::uint8_t u8() { return take<std::uint8_t>(); }
  std::uint32_t u32() { return take<std::uint32_t>(); }
  std::int64_t i64() { return take<std::int64_t>(); }
  std::vector<std::uint8_t> blob() {
    std::uint32_t n = u32();
    need(n);
    std::vector<std::uint8_t> out(p_, p_ + n);
    p_ += n;
    return out;
  }
  std::string str() {
    auto b = blob();
    return std::string(b.begin(), b.end());
  }
  bool done() const { return p_ == end_; }

 private:
  template <typename T>
  T take() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  void need(std::size_t n) const {
    if (static_cast<std::size_t>(end_ - p_) < n)
      throw StoreError("malformed message: a field runs past the end of the message");
  }
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

}  // namespace loom::base
