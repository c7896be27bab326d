// Values whose handling runs no Python code (quiet_values.hpp): the checks that look into an
// instance or a dict.
#include "quiet_values.hpp"

#include "fields.h"

namespace sealtrace {

// An instance of a class of the program's own (its attributes in a dict, no __slots__, no C base
// but object) with no __del__ and no weak reference to it, whose attributes drop quietly too:
// freeing it runs no Python code (the attribute a loop replaces, `p = p.moved(1)`).
bool frees_quietly(PyObject* v, int depth) {
  PyTypeObject* tp = Py_TYPE(v);
  constexpr unsigned long kPlainClass = Py_TPFLAGS_HEAPTYPE | Py_TPFLAGS_MANAGED_DICT;
  if ((tp->tp_flags & kPlainClass) != kPlainClass || tp->tp_finalize != nullptr ||
      tp->tp_del != nullptr || tp->tp_itemsize != 0) {
    return false;
  }
  const Py_ssize_t weaklist = tp->tp_weaklistoffset;
  const auto plain_size =
      static_cast<Py_ssize_t>(sizeof(PyObject) + (weaklist != 0 ? sizeof(PyObject*) : 0));
  if (tp->tp_basicsize != plain_size) return false;  // __slots__, or a C base's fields
  if (weaklist != 0 &&
      *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(v) + weaklist) != nullptr) {
    return false;
  }
  constexpr int kMaxFields = 16;
  PyObject* fields[kMaxFields];
  const int n = sealtrace_instance_values(v, fields, kMaxFields);
  if (n < 0) return false;
  for (int k = 0; k < n; ++k) {
    if (!drops_quietly(fields[k], depth - 1)) return false;
  }
  return true;
}

bool replaces_quietly(PyObject* dict, PyObject* key) {
  PyObject* old = PyDict_GetItemWithError(dict, key);
  if (old == nullptr && PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    return false;
  }
  return old == nullptr || drops_quietly(old);
}

}  // namespace sealtrace
