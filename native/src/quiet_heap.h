// The quiet heap: memory for sealtrace's own work inside a replayed program, apart from every
// heap the program allocates from (pymalloc's arenas and the C library's malloc).
//
// A program's objects must sit at the same addresses in every pass of a query (quiet.h says
// why), so what a pass keeps, and the engine's own per-question tables, can live neither in
// pymalloc's pools nor in malloc's: a block there moves where the program's next large object
// (a class, a big dict's table) goes. The quiet heap is one address range reserved once, when
// the engine module is loaded, and carved into power-of-two blocks with free lists. Blocks are
// told apart from others by address, so whoever frees one (pymalloc's free hands blocks it did
// not allocate to the raw allocator, which the engine wraps) returns it here.
//
// Not thread-safe: used with the GIL held, from the thread that replays the program.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Reserves the range (once); false if the system refused it (then the heap hands out
// malloc's blocks and quiet scopes only keep the program's pools and free lists apart).
int sealtrace_heap_init(void);
void* sealtrace_heap_alloc(size_t size);
void* sealtrace_heap_realloc(void* ptr, size_t size);
void sealtrace_heap_free(void* ptr);
int sealtrace_heap_owns(const void* ptr);

#ifdef __cplusplus
}

#include <cstddef>
#include <functional>
#include <new>
#include <unordered_set>
#include <vector>

namespace sealtrace {

// An allocator for the engine's per-question tables (edges, captured counters, taint).
template <class T>
struct QuietAllocator {
  using value_type = T;
  QuietAllocator() noexcept = default;
  template <class U>
  QuietAllocator(const QuietAllocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    void* p = sealtrace_heap_alloc(n * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept { sealtrace_heap_free(p); }
  template <class U>
  bool operator==(const QuietAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const QuietAllocator<U>&) const noexcept {
    return false;
  }
};

template <class T>
using QuietVector = std::vector<T, QuietAllocator<T>>;
template <class T>
using QuietSet = std::unordered_set<T, std::hash<T>, std::equal_to<T>, QuietAllocator<T>>;

}  // namespace sealtrace
#endif
