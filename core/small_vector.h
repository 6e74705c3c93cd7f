// small_vector<T, N>: a vector that keeps up to N elements inside itself and only
// allocates beyond that. For the short lists every graph node has (its inputs, their
// dtypes, its output dtypes): a graph of 10^5 nodes would otherwise make 3 * 10^5 tiny
// allocations, each paying the allocator's overhead.
//
//   small_vector<dtype, 4> types;
//   types.push_back(dtype::float32);      // no allocation
//   for (dtype t : types) ...;             // and the rest of a vector's reading interface
//
// Only for trivially copyable T (copies are memcpy). Thread safety: as std::vector.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <vector>

namespace troupe {

template <class T, std::size_t N>
class small_vector {
  static_assert(std::is_trivially_copyable_v<T>, "small_vector holds trivially copyable types only");

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;
  using size_type = std::size_t;

  small_vector() {}
  small_vector(std::initializer_list<T> values) { assign(values.begin(), values.end()); }
  explicit small_vector(const std::vector<T>& values) { assign(values.begin(), values.end()); }
  small_vector(const small_vector& other) { assign(other.begin(), other.end()); }
  small_vector& operator=(const small_vector& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  small_vector(small_vector&& other) noexcept { take(other); }
  small_vector& operator=(small_vector&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  ~small_vector() { release(); }

  template <class It>
  void assign(It first, It last) {
    clear();
    for (; first != last; ++first) push_back(*first);
  }

  T* data() { return on_heap() ? heap_ : inline_; }
  const T* data() const { return on_heap() ? heap_ : inline_; }
  size_type size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T& operator[](size_type i) { return data()[i]; }
  const T& operator[](size_type i) const { return data()[i]; }
  T& front() { return data()[0]; }
  const T& front() const { return data()[0]; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }

  void clear() { size_ = 0; }
  void push_back(const T& value) {
    const T copy = value;  // `value` may be one of ours, which grow() moves
    if (size_ == capacity_) grow(2 * static_cast<size_type>(capacity_));
    data()[size_++] = copy;
  }
  void resize(size_type n, const T& value = T()) {
    if (n > capacity_) grow(std::max(n, 2 * static_cast<size_type>(capacity_)));
    for (size_type i = size_; i < n; ++i) data()[i] = value;
    size_ = static_cast<std::uint32_t>(n);
  }

  std::vector<T> to_vector() const { return std::vector<T>(begin(), end()); }

  friend bool operator==(const small_vector& a, const small_vector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  // Inline while capacity_ is N; on the heap (capacity_ > N) after growing.
  bool on_heap() const { return capacity_ > N; }
  void grow(size_type n) {
    T* bigger = new T[n];
    std::memcpy(bigger, data(), size_ * sizeof(T));
    release();
    heap_ = bigger;
    capacity_ = static_cast<std::uint32_t>(n);
  }
  void release() {
    if (on_heap()) delete[] heap_;
    capacity_ = N;
  }
  void take(small_vector& other) {
    size_ = other.size_;
    if (other.on_heap()) {
      heap_ = other.heap_;
      capacity_ = other.capacity_;
      other.capacity_ = N;
    } else {
      std::memcpy(inline_, other.inline_, size_ * sizeof(T));
    }
    other.size_ = 0;
  }

  union {
    T inline_[N];
    T* heap_;
  };
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = N;
};

}  // namespace troupe
