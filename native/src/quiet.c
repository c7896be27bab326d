// A quiet scope (quiet.h): set the program's allocator pools, free lists and young
// generation aside while sealtrace's own code runs, and put them back as they were. C, not
// C++: the interpreter's internal state headers use C11 atomics.
#define Py_BUILD_CORE 1
#include "quiet.h"

#include <Python.h>
#include <internal/pycore_gc.h>
#include <internal/pycore_interp.h>
#include <internal/pycore_pystate.h>
#include <pthread.h>
#include <string.h>

#include "quiet_heap.h"

static struct {
  int depth;
  int routed;
  PyMemAllocatorEx obj;
  PyMemAllocatorEx mem;
  int enabled;
  int counts[NUM_GENERATIONS];
  PyGC_Head young;  // the head of the program's young generation while a scope runs
  struct _Py_tuple_state tuples;
  struct _Py_list_state lists;
  PyDictObject* dicts[PyDict_MAXFREELIST];
  int dicts_free;
  PyDictKeysObject* keys[PyDict_MAXFREELIST];
  int keys_free;
  struct _Py_float_state floats;
  PySliceObject* slice;
  struct _Py_context_state contexts;
  struct _Py_async_gen_state async_gens;
} g_saved;

// Inside a scope, new blocks come from the quiet heap; a block is released by the allocator the
// program uses, which hands blocks it did not allocate to the raw allocator, which the engine
// wraps once and for all: the quiet heap's blocks go back to it, whoever frees them.
static PyMemAllocatorEx g_raw;
static int g_raw_wrapped;
static pthread_t g_owner;

static int in_scope(void) { return g_saved.depth > 0 && pthread_equal(pthread_self(), g_owner); }

static void* quiet_calloc_any(size_t nelem, size_t elsize) {
  if (elsize != 0 && nelem > (size_t)-1 / elsize) return NULL;
  void* p = sealtrace_heap_alloc(nelem * elsize);
  if (p != NULL) memset(p, 0, nelem * elsize);
  return p;
}

static void* raw_malloc(void* ctx, size_t size) {
  (void)ctx;
  return in_scope() ? sealtrace_heap_alloc(size) : g_raw.malloc(g_raw.ctx, size);
}
static void* raw_calloc(void* ctx, size_t nelem, size_t elsize) {
  (void)ctx;
  return in_scope() ? quiet_calloc_any(nelem, elsize) : g_raw.calloc(g_raw.ctx, nelem, elsize);
}
static void* raw_realloc(void* ctx, void* ptr, size_t size) {
  (void)ctx;
  if (ptr != NULL && sealtrace_heap_owns(ptr)) return sealtrace_heap_realloc(ptr, size);
  if (ptr == NULL && in_scope()) return sealtrace_heap_alloc(size);
  return g_raw.realloc(g_raw.ctx, ptr, size);
}
static void raw_free(void* ctx, void* ptr) {
  (void)ctx;
  if (ptr != NULL && sealtrace_heap_owns(ptr)) {
    sealtrace_heap_free(ptr);
  } else {
    g_raw.free(g_raw.ctx, ptr);
  }
}

static void* quiet_malloc(void* ctx, size_t size) {
  (void)ctx;
  return sealtrace_heap_alloc(size);
}
static void* quiet_calloc(void* ctx, size_t nelem, size_t elsize) {
  (void)ctx;
  return quiet_calloc_any(nelem, elsize);
}
static void* quiet_realloc_obj(void* ctx, void* ptr, size_t size) {
  (void)ctx;
  if (ptr == NULL) return sealtrace_heap_alloc(size);
  if (sealtrace_heap_owns(ptr)) return sealtrace_heap_realloc(ptr, size);
  return g_saved.obj.realloc(g_saved.obj.ctx, ptr, size);
}
static void quiet_free_obj(void* ctx, void* ptr) {
  (void)ctx;
  g_saved.obj.free(g_saved.obj.ctx, ptr);
}
static void* quiet_realloc_mem(void* ctx, void* ptr, size_t size) {
  (void)ctx;
  if (ptr == NULL) return sealtrace_heap_alloc(size);
  if (sealtrace_heap_owns(ptr)) return sealtrace_heap_realloc(ptr, size);
  return g_saved.mem.realloc(g_saved.mem.ctx, ptr, size);
}
static void quiet_free_mem(void* ctx, void* ptr) {
  (void)ctx;
  g_saved.mem.free(g_saved.mem.ctx, ptr);
}

static void list_init(PyGC_Head* head) {
  head->_gc_prev = (uintptr_t)head;
  head->_gc_next = (uintptr_t)head;
}

static int list_empty(PyGC_Head* head) { return _PyGCHead_NEXT(head) == head; }

// Append every object of `from` to `to`; `from` is left empty.
static void list_merge(PyGC_Head* from, PyGC_Head* to) {
  if (!list_empty(from)) {
    PyGC_Head* to_tail = _PyGCHead_PREV(to);
    PyGC_Head* from_head = _PyGCHead_NEXT(from);
    PyGC_Head* from_tail = _PyGCHead_PREV(from);
    _PyGCHead_SET_NEXT(to_tail, from_head);
    _PyGCHead_SET_PREV(from_head, to_tail);
    _PyGCHead_SET_NEXT(from_tail, to);
    _PyGCHead_SET_PREV(to, from_tail);
  }
  list_init(from);
}

static void set_free_lists_aside(PyInterpreterState* interp) {
  memcpy(&g_saved.tuples, &interp->tuple, sizeof(interp->tuple));
  memset(&interp->tuple, 0, sizeof(interp->tuple));
  memcpy(&g_saved.lists, &interp->list, sizeof(interp->list));
  interp->list.numfree = 0;
  struct _Py_dict_state* d = &interp->dict_state;
  memcpy(g_saved.dicts, d->free_list, sizeof(d->free_list));
  g_saved.dicts_free = d->numfree;
  d->numfree = 0;
  memcpy(g_saved.keys, d->keys_free_list, sizeof(d->keys_free_list));
  g_saved.keys_free = d->keys_numfree;
  d->keys_numfree = 0;
  memcpy(&g_saved.floats, &interp->float_state, sizeof(interp->float_state));
  interp->float_state.numfree = 0;
  interp->float_state.free_list = NULL;
  // The one-slice cache, and the contexts' and async generators' free lists: GC objects whose
  // reuse skips the allocation the young generation counts. A slice the scope took from the
  // program's cache, or left in it, moved the program's next collection by one allocation
  // (a capture that described a list, `list(value)[:n]`, made a finalizer run elsewhere).
  g_saved.slice = interp->slice_cache;
  interp->slice_cache = NULL;
  memcpy(&g_saved.contexts, &interp->context, sizeof(interp->context));
  memset(&interp->context, 0, sizeof(interp->context));
#if _PyAsyncGen_MAXFREELIST > 0
  // Only the entries in use (the lists are long and usually empty).
  struct _Py_async_gen_state* a = &interp->async_gen;
  g_saved.async_gens.value_numfree = a->value_numfree;
  memcpy(g_saved.async_gens.value_freelist, a->value_freelist,
         sizeof(a->value_freelist[0]) * (size_t)a->value_numfree);
  a->value_numfree = 0;
  g_saved.async_gens.asend_numfree = a->asend_numfree;
  memcpy(g_saved.async_gens.asend_freelist, a->asend_freelist,
         sizeof(a->asend_freelist[0]) * (size_t)a->asend_numfree);
  a->asend_numfree = 0;
#endif
}

// What the scope freed into the free lists is released; the program's lists come back.
static void restore_free_lists(PyInterpreterState* interp) {
#if PyTuple_NFREELISTS > 0
  for (int i = 0; i < PyTuple_NFREELISTS; ++i) {
    PyTupleObject* t = interp->tuple.free_list[i];
    while (t != NULL) {
      PyTupleObject* next = (PyTupleObject*)t->ob_item[0];
      PyObject_GC_Del((PyObject*)t);
      t = next;
    }
  }
#endif
  memcpy(&interp->tuple, &g_saved.tuples, sizeof(interp->tuple));
  for (int i = 0; i < interp->list.numfree; ++i) PyObject_GC_Del(interp->list.free_list[i]);
  memcpy(&interp->list, &g_saved.lists, sizeof(interp->list));
  struct _Py_dict_state* d = &interp->dict_state;
  for (int i = 0; i < d->numfree; ++i) PyObject_GC_Del(d->free_list[i]);
  for (int i = 0; i < d->keys_numfree; ++i) PyObject_Free(d->keys_free_list[i]);
  memcpy(d->free_list, g_saved.dicts, sizeof(d->free_list));
  d->numfree = g_saved.dicts_free;
  memcpy(d->keys_free_list, g_saved.keys, sizeof(d->keys_free_list));
  d->keys_numfree = g_saved.keys_free;
  PyFloatObject* f = interp->float_state.free_list;
  while (f != NULL) {
    PyFloatObject* next = (PyFloatObject*)Py_TYPE(f);
    PyObject_Free(f);
    f = next;
  }
  memcpy(&interp->float_state, &g_saved.floats, sizeof(interp->float_state));
  if (interp->slice_cache != NULL) PyObject_GC_Del(interp->slice_cache);
  interp->slice_cache = g_saved.slice;
#if PyContext_MAXFREELIST > 0
  for (PyContext* c = interp->context.freelist; c != NULL;) {
    PyContext* next = c->ctx_prev;
    PyObject_GC_Del(c);
    c = next;
  }
#endif
  memcpy(&interp->context, &g_saved.contexts, sizeof(interp->context));
#if _PyAsyncGen_MAXFREELIST > 0
  struct _Py_async_gen_state* a = &interp->async_gen;
  for (int i = 0; i < a->value_numfree; ++i) PyObject_GC_Del(a->value_freelist[i]);
  for (int i = 0; i < a->asend_numfree; ++i) PyObject_GC_Del(a->asend_freelist[i]);
  a->value_numfree = g_saved.async_gens.value_numfree;
  memcpy(a->value_freelist, g_saved.async_gens.value_freelist,
         sizeof(a->value_freelist[0]) * (size_t)a->value_numfree);
  a->asend_numfree = g_saved.async_gens.asend_numfree;
  memcpy(a->asend_freelist, g_saved.async_gens.asend_freelist,
         sizeof(a->asend_freelist[0]) * (size_t)a->asend_numfree);
#endif
}

void sealtrace_quiet_enter(void) {
  if (g_saved.depth++ != 0) return;
  PyInterpreterState* interp = _PyInterpreterState_GET();
  // Decided once: wrapping the raw allocator makes the allocators' name unknown.
  static int routable = -1;
  if (routable < 0) {
    const char* name = _PyMem_GetCurrentAllocatorName();
    routable = name != NULL && strcmp(name, "pymalloc") == 0 && sealtrace_heap_init();
  }
  g_saved.routed = routable;
  g_owner = pthread_self();
  if (g_saved.routed && !g_raw_wrapped) {
    PyMem_GetAllocator(PYMEM_DOMAIN_RAW, &g_raw);
    PyMemAllocatorEx raw = {NULL, raw_malloc, raw_calloc, raw_realloc, raw_free};
    PyMem_SetAllocator(PYMEM_DOMAIN_RAW, &raw);
    g_raw_wrapped = 1;
  }
  if (g_saved.routed) {
    PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &g_saved.obj);
    PyMem_GetAllocator(PYMEM_DOMAIN_MEM, &g_saved.mem);
    PyMemAllocatorEx obj = {NULL, quiet_malloc, quiet_calloc, quiet_realloc_obj, quiet_free_obj};
    PyMemAllocatorEx mem = {NULL, quiet_malloc, quiet_calloc, quiet_realloc_mem, quiet_free_mem};
    PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &obj);
    PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &mem);
  }
  set_free_lists_aside(interp);
  struct _gc_runtime_state* gc = &interp->gc;
  // Inside a collection too (a finalizer or a weakref callback the collector called, while
  // it holds the garbage in lists of its own): the young generation then holds what was
  // made since the collection began, and what the scope makes would join it and count
  // towards the next one (a checkpoint taken inside a finalizer moved the program's later
  // collections).
  g_saved.enabled = gc->enabled;
  gc->enabled = 0;
  for (int i = 0; i < NUM_GENERATIONS; ++i) g_saved.counts[i] = gc->generations[i].count;
  list_init(&g_saved.young);
  list_merge(gc->generation0, &g_saved.young);
}

void sealtrace_quiet_exit(void) {
  if (--g_saved.depth != 0) return;
  PyInterpreterState* interp = _PyInterpreterState_GET();
  restore_free_lists(interp);
  struct _gc_runtime_state* gc = &interp->gc;
  // What the scope made and still holds is sealtrace's: never collected with the program's.
  list_merge(gc->generation0, &gc->permanent_generation.head);
  list_merge(&g_saved.young, gc->generation0);
  for (int i = 0; i < NUM_GENERATIONS; ++i) gc->generations[i].count = g_saved.counts[i];
  gc->enabled = g_saved.enabled;
  if (g_saved.routed) {
    PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &g_saved.obj);
    PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &g_saved.mem);
  }
}
