// Values whose handling runs no Python code. The loop tags an instruction itself only where C
// alone runs it: a __del__, a weak reference's callback, or a __hash__ or __eq__ of the
// program's would run Python code between the instruction's two halves, where only the tracer's
// events may see it. These checks say where that cannot happen; they never run Python code.
#pragma once

#include <Python.h>

namespace sealtrace {

// A number, a string, bytes, True, False or None: C alone runs what operators do with it, and
// freeing it runs no Python code.
inline bool plain_value(PyObject* v) {
  return PyLong_CheckExact(v) || PyFloat_CheckExact(v) || PyUnicode_CheckExact(v) ||
         PyBool_Check(v) || v == Py_None || PyBytes_CheckExact(v);
}

// Whether freeing `v`, its last reference gone, runs no Python code (quiet_values.cpp).
bool frees_quietly(PyObject* v, int depth);

// Whether dropping a reference to `v` runs no Python code (a __del__, a weakref's callback):
// another reference remains, it is a plain value, or freeing it frees nothing else that could
// (frees_quietly, `depth` attributes deep).
inline bool drops_quietly(PyObject* v, int depth = 2) {
  return Py_REFCNT(v) > 1 || plain_value(v) || (depth > 0 && frees_quietly(v, depth));
}

// A dict key whose hashing and comparing run no Python code: an exact str or int.
inline bool plain_key(PyObject* key) { return PyUnicode_CheckExact(key) || PyLong_CheckExact(key); }

// Whether a store into the exact dict `dict` under `key` (a plain_key) replaces nothing or a value
// that drops quietly; false where the lookup fails.
bool replaces_quietly(PyObject* dict, PyObject* key);

}  // namespace sealtrace
