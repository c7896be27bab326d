// The tracer's hooks into the interpreter (hooks.hpp).
#define Py_BUILD_CORE 1
#include "hooks.hpp"

#include <internal/pycore_frame.h>

#include <utility>
#include <vector>

#include "quiet.h"
#include "tracer.hpp"

namespace sealtrace {

Tracer* g_tracer = nullptr;
std::uint64_t g_generation = 0;
Py_ssize_t g_extra_index = -1;
destructor g_subtype_dealloc = nullptr;

void free_code_info(void* info) { delete static_cast<CodeInfo*>(info); }

namespace {

// Deallocation hooks: an object's slot tags die with it, before its address can be reused.
struct Hook {
  PyTypeObject* type;
  destructor original;
  destructor hook;
};
// 19 types known when attaching, then room for the built-in exception types with a
// deallocation of their own (OSError's, AttributeError's, StopIteration's...: about ten) and
// for the C types of objects that remember what filled them (fills.hpp), hooked the first time
// one is filled (hook_type).
constexpr int kKnown = 19;
constexpr int kHooks = kKnown + 32;
Hook g_hooks[kHooks];
int g_used = 0;                     // hooks in use: the first g_used entries
constexpr int kExceptionHook = 14;  // BaseException's
// Types hooked through an entry made for another type with the same deallocation function
// (remove_hooks restores them; an entry's own type is restored with the entry): the built-in
// exception types that deallocate through BaseException's (Exception, ValueError, ...) or
// another's (FileNotFoundError through OSError's), so raised objects' attributes are tracked
// and the tracer forgets an exception it follows by address when it is freed.
std::vector<PyTypeObject*> g_shared_types;

// Hooks `type` through the entry (past the known types') for its deallocation function, made
// for it if there is none yet; false when no entry is left.
bool hook_through_entry(PyTypeObject* type) {
  Hook* h = nullptr;
  for (int i = kKnown; i < g_used && h == nullptr; ++i) {
    if (g_hooks[i].type != nullptr && g_hooks[i].original == type->tp_dealloc) h = &g_hooks[i];
  }
  if (h != nullptr) {
    g_shared_types.push_back(type);
  } else if (g_used < kHooks) {
    h = &g_hooks[g_used++];
    h->type = type;
    h->original = type->tp_dealloc;
  } else {
    return false;
  }
  type->tp_dealloc = h->hook;
  return true;
}

void hook_exception_subtypes(PyTypeObject* type, destructor original, destructor hook, int depth) {
  QuietScope quiet;
  PyObject* subs =
      PyObject_CallMethod(reinterpret_cast<PyObject*>(type), "__subclasses__", nullptr);
  if (subs == nullptr) {
    PyErr_Clear();
    return;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(subs); ++i) {
    auto* sub = reinterpret_cast<PyTypeObject*>(PyList_GET_ITEM(subs, i));
    if ((sub->tp_flags & Py_TPFLAGS_HEAPTYPE) != 0) continue;  // subtype_dealloc walks up
    if (sub->tp_dealloc == original) {
      sub->tp_dealloc = hook;
      g_shared_types.push_back(sub);
    } else if (!hooked(sub->tp_dealloc)) {
      hook_through_entry(sub);  // a function of its own (OSError_dealloc, ...)
    }
    if (depth < 8) hook_exception_subtypes(sub, original, hook, depth + 1);
  }
  Py_DECREF(subs);
}

template <int N>
void hooked_dealloc(PyObject* obj) {
  if (g_tracer != nullptr) g_tracer->on_dealloc(obj);
  g_hooks[N].original(obj);
}

template <int... N>
void fill_hook_functions(std::integer_sequence<int, N...>) {
  ((g_hooks[N].hook = &hooked_dealloc<N>), ...);
}

}  // namespace

void install_hooks(PyTypeObject* const* extra, int count) {
  PyTypeObject* types[kHooks] = {&PyList_Type,
                                 &PyDict_Type,
                                 &PyTuple_Type,
                                 &PyCell_Type,
                                 &PyBaseObject_Type,
                                 &PyFunction_Type,
                                 &PyGen_Type,
                                 &PyCoro_Type,
                                 &PyAsyncGen_Type,
                                 &PyType_Type,
                                 &PySet_Type,
                                 &PyFrozenSet_Type,
                                 &PyODict_Type,
                                 &PyByteArray_Type,
                                 reinterpret_cast<PyTypeObject*>(PyExc_BaseException),
                                 nullptr,
                                 nullptr,
                                 nullptr,
                                 nullptr};
  // Room for `count` types found at run time (collections' deque and defaultdict).
  constexpr int kFixed = 15;
  for (int i = 0; i < count && kFixed + i < kKnown; ++i) types[kFixed + i] = extra[i];
  fill_hook_functions(std::make_integer_sequence<int, kHooks>{});
  for (int i = 0; i < kHooks; ++i) {
    g_hooks[i].type = types[i];
    if (types[i] == nullptr) continue;
    if (types[i]->tp_dealloc != g_hooks[i].hook) {
      g_hooks[i].original = types[i]->tp_dealloc;
      types[i]->tp_dealloc = g_hooks[i].hook;
    }
  }
  g_used = kKnown;
  if (g_shared_types.empty()) {
    const Hook& h = g_hooks[kExceptionHook];
    hook_exception_subtypes(h.type, h.original, h.hook, 0);
  }
}

bool hook_type(PyTypeObject* type) { return hooked(type->tp_dealloc) || hook_through_entry(type); }

void remove_hooks() {
  for (PyTypeObject* t : g_shared_types) {
    for (const auto& h : g_hooks) {
      if (h.type != nullptr && t->tp_dealloc == h.hook) t->tp_dealloc = h.original;
    }
  }
  g_shared_types.clear();
  for (auto& h : g_hooks) {
    if (h.type != nullptr && h.type->tp_dealloc == h.hook) h.type->tp_dealloc = h.original;
  }
}

bool hooked(destructor d) {
  for (int i = 0; i < g_used; ++i) {
    if (g_hooks[i].type != nullptr && g_hooks[i].hook == d) return true;
  }
  return false;
}

bool opcode_events_on(PyFrameObject* frame) {
  if (frame->f_trace_lines != 0) {
    frame->f_trace_lines = 0;
    frame->f_trace_opcodes = 1;
  }
  return frame->f_trace_opcodes != 0;
}

int trampoline(PyObject*, PyFrameObject* frame, int what, PyObject* arg) {
  Tracer* t = g_tracer;
  return t == nullptr ? 0 : t->on_event(frame, what, arg);
}
}  // namespace sealtrace
