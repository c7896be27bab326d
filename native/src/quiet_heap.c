// The quiet heap (quiet_heap.h): one reserved address range carved into 64 KiB slabs. A slab
// holds blocks of one small size class (16 bytes to 32 KiB, four classes per doubling); larger
// blocks take runs of whole slabs. Freed blocks go on their class's free list; freed runs give
// their pages back to the system and wait, by size, to be reused.
#include "quiet_heap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#define SLAB_BITS 16
#define SLAB ((size_t)1 << SLAB_BITS)
#define SMALL_MAX ((size_t)32 << 10)
#define CLASSES 64
#define RUN_LISTS 48
#define LARGE 0xFF

static char* g_base;  // the first slab
static size_t g_slabs;
static size_t g_next;     // the next slab never used
static uint8_t* g_class;  // per slab: its size class, LARGE for the head of a run, 0 unused
static uint32_t* g_span;  // per slab heading a run: its length in slabs
static int g_state;       // 0 not tried, 1 reserved, -1 refused
static void* g_free[CLASSES];
static char* g_carve[CLASSES];  // the slab a class is carving blocks from, and where
static char* g_carve_end[CLASSES];
static void* g_runs[RUN_LISTS];  // freed runs of 2**i slabs (a run's first word links them)

// Size classes: multiples of 16 up to 128, then four steps per doubling.
static size_t class_size(unsigned c) {
  if (c <= 8) return (size_t)c * 16;
  unsigned doubling = (c - 9) / 4 + 7;  // 128 << ...
  unsigned step = (c - 9) % 4 + 1;
  return ((size_t)1 << doubling) + step * ((size_t)1 << (doubling - 2));
}

static unsigned class_of(size_t size) {
  if (size <= 128) return size <= 16 ? 1 : (unsigned)((size + 15) / 16);
  unsigned c = 9;
  while (class_size(c) < size) ++c;
  return c;
}

// Under an address-space limit (the sandbox sets one), reserve an eighth of it.
static size_t reservation(void) {
  size_t want = (size_t)8 << 30;
  struct rlimit lim;
  if (getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    size_t eighth = (size_t)lim.rlim_cur / 8;
    if (eighth < want) want = eighth;
  }
  return want & ~(SLAB - 1);
}

int sealtrace_heap_init(void) {
  if (g_state != 0) return g_state == 1;
  g_state = -1;
  size_t size = reservation();
  if (size < 64 * SLAB) return 0;
  void* p = mmap(NULL, size + SLAB, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return 0;
  char* base = (char*)(((uintptr_t)p + SLAB - 1) & ~(uintptr_t)(SLAB - 1));
  size_t slabs = size / SLAB;
  // The slab table sits in the first slabs of the range.
  size_t table = slabs * (sizeof(uint8_t) + sizeof(uint32_t));
  size_t table_slabs = (table + SLAB - 1) / SLAB;
  g_class = (uint8_t*)base;
  g_span = (uint32_t*)(base + slabs);
  g_base = base;
  g_slabs = slabs;
  g_next = table_slabs;
  g_state = 1;
  return 1;
}

int sealtrace_heap_owns(const void* ptr) {
  return g_state == 1 && (const char*)ptr >= g_base && (const char*)ptr < g_base + g_slabs * SLAB;
}

static size_t slab_of(const void* ptr) { return (size_t)((const char*)ptr - g_base) >> SLAB_BITS; }

static unsigned log2_ceil(size_t n) {
  unsigned i = 0;
  while (((size_t)1 << i) < n) ++i;
  return i;
}

static void* take_run(size_t slabs) {
  unsigned i = log2_ceil(slabs);
  if (i >= RUN_LISTS) return NULL;
  size_t n = (size_t)1 << i;
  char* run = (char*)g_runs[i];
  if (run != NULL) {
    g_runs[i] = *(void**)run;
  } else {
    if (g_next + n > g_slabs) return NULL;
    run = g_base + g_next * SLAB;
    g_next += n;
  }
  size_t s = slab_of(run);
  g_class[s] = LARGE;
  g_span[s] = (uint32_t)n;
  return run;
}

void* sealtrace_heap_alloc(size_t size) {
  if (!sealtrace_heap_init()) return malloc(size == 0 ? 1 : size);
  void* out = NULL;
  if (size <= SMALL_MAX) {
    unsigned c = class_of(size);
    size_t bytes = class_size(c);
    out = g_free[c];
    if (out != NULL) {
      g_free[c] = *(void**)out;
    } else {
      if (g_carve[c] == NULL || g_carve[c] + bytes > g_carve_end[c]) {
        if (g_next >= g_slabs) return malloc(size);
        char* slab = g_base + g_next * SLAB;
        g_class[g_next++] = (uint8_t)c;
        g_carve[c] = slab;
        g_carve_end[c] = slab + SLAB;
      }
      out = g_carve[c];
      g_carve[c] += bytes;
    }
  } else {
    out = take_run((size + SLAB - 1) / SLAB);
    if (out == NULL) return malloc(size);
  }
  return out;
}

static size_t usable(const void* ptr) {
  size_t s = slab_of(ptr);
  if (g_class[s] == LARGE) return (size_t)g_span[s] * SLAB;
  return class_size(g_class[s]);
}

void sealtrace_heap_free(void* ptr) {
  if (ptr == NULL) return;
  if (!sealtrace_heap_owns(ptr)) {
    free(ptr);
    return;
  }
  size_t s = slab_of(ptr);
  if (g_class[s] == LARGE) {
    size_t n = g_span[s];
    if (n > 1) madvise((char*)ptr + SLAB, (n - 1) * SLAB, MADV_DONTNEED);
    unsigned i = log2_ceil(n);
    *(void**)ptr = g_runs[i];
    g_runs[i] = ptr;
    return;
  }
  unsigned c = g_class[s];
  *(void**)ptr = g_free[c];
  g_free[c] = ptr;
}

void* sealtrace_heap_realloc(void* ptr, size_t size) {
  if (ptr == NULL) return sealtrace_heap_alloc(size);
  if (!sealtrace_heap_owns(ptr)) return realloc(ptr, size == 0 ? 1 : size);
  size_t have = usable(ptr);
  if (size <= have && size >= have / 4) return ptr;
  void* moved = sealtrace_heap_alloc(size);
  if (moved == NULL) return NULL;
  memcpy(moved, ptr, size < have ? size : have);
  sealtrace_heap_free(ptr);
  return moved;
}
