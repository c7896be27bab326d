// The tracer's hooks into the interpreter (hooks.hpp).
#include "hooks.hpp"

#include <utility>

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
// 18 types known when attaching, then room for the C types of objects that remember what
// filled them (fills.hpp), hooked the first time one is filled.
constexpr int kHooks = 34;
Hook g_hooks[kHooks];
int g_used = 0;  // hooks in use: the first g_used entries

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
  PyTypeObject* types[kHooks] = {
      &PyList_Type,     &PyDict_Type,      &PyTuple_Type, &PyCell_Type,     &PyBaseObject_Type,
      &PyFunction_Type, &PyGen_Type,       &PyCoro_Type,  &PyAsyncGen_Type, &PyType_Type,
      &PySet_Type,      &PyFrozenSet_Type, &PyODict_Type, &PyByteArray_Type};
  // Room for `count` types found at run time (collections' deque and defaultdict).
  constexpr int kFixed = 14;
  constexpr int kKnown = 18;
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
}

bool hook_type(PyTypeObject* type) {
  if (hooked(type->tp_dealloc)) return true;
  if (g_used >= kHooks) return false;
  Hook& h = g_hooks[g_used++];
  h.type = type;
  h.original = type->tp_dealloc;
  type->tp_dealloc = h.hook;
  return true;
}

void remove_hooks() {
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

int trampoline(PyObject*, PyFrameObject* frame, int what, PyObject* arg) {
  Tracer* t = g_tracer;
  return t == nullptr ? 0 : t->on_event(frame, what, arg);
}
}  // namespace sealtrace
