// What the loop's instruction bodies share with CPython 3.11's own loop (instruction_bodies.hpp).
#include "instruction_bodies.hpp"

#include "eval_pending.h"

namespace sealtrace {

namespace {

PyObject* power(PyObject* a, PyObject* b) { return PyNumber_Power(a, b, Py_None); }
PyObject* inplace_power(PyObject* a, PyObject* b) { return PyNumber_InPlacePower(a, b, Py_None); }

}  // namespace

const BinaryFn kBinaryOps[kBinaryOpCount] = {PyNumber_Add,
                                             PyNumber_And,
                                             PyNumber_FloorDivide,
                                             PyNumber_Lshift,
                                             PyNumber_MatrixMultiply,
                                             PyNumber_Multiply,
                                             PyNumber_Remainder,
                                             PyNumber_Or,
                                             power,
                                             PyNumber_Rshift,
                                             PyNumber_Subtract,
                                             PyNumber_TrueDivide,
                                             PyNumber_Xor,
                                             PyNumber_InPlaceAdd,
                                             PyNumber_InPlaceAnd,
                                             PyNumber_InPlaceFloorDivide,
                                             PyNumber_InPlaceLshift,
                                             PyNumber_InPlaceMatrixMultiply,
                                             PyNumber_InPlaceMultiply,
                                             PyNumber_InPlaceRemainder,
                                             PyNumber_InPlaceOr,
                                             inplace_power,
                                             PyNumber_InPlaceRshift,
                                             PyNumber_InPlaceSubtract,
                                             PyNumber_InPlaceTrueDivide,
                                             PyNumber_InPlaceXor};

void format_check_arg(PyObject* exc, const char* format, PyObject* name) {
  const char* text = PyUnicode_AsUTF8(name);
  if (text == nullptr) return;
  PyErr_Format(exc, format, text);
  if (exc != PyExc_NameError) return;
  // The name, for the suggestions a traceback prints.
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value != nullptr && PyErr_GivenExceptionMatches(value, PyExc_NameError)) {
    auto* err = reinterpret_cast<PyNameErrorObject*>(value);
    if (err->name == nullptr) err->name = Py_NewRef(name);
  }
  PyErr_Restore(type, value, tb);
}

void unbound(PyCodeObject* co, int index) {
  if (PyErr_Occurred()) return;
  PyObject* name = PyTuple_GET_ITEM(co->co_localsplusnames, index);
  if (index < co->co_nplaincellvars + co->co_nlocals) {
    format_check_arg(PyExc_UnboundLocalError, kUnboundLocal, name);
  } else {
    format_check_arg(PyExc_NameError, kUnboundFree, name);
  }
}

bool exception_handler(PyCodeObject* co, int index, int& level, int& handler, bool& lasti) {
  const auto* p = reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(co->co_exceptiontable));
  const auto* end = p + PyBytes_GET_SIZE(co->co_exceptiontable);
  auto varint = [&p]() {
    int v = *p & 63;
    while (*p & 64) {
      ++p;
      v = (v << 6) | (*p & 63);
    }
    ++p;
    return v;
  };
  while (p < end) {
    const int start = varint();
    if (start > index) return false;
    const int size = varint();
    if (start + size > index) {
      handler = varint();
      const int depth_lasti = varint();
      level = depth_lasti >> 1;
      lasti = (depth_lasti & 1) != 0;
      return true;
    }
    while (p < end && (*p & 128) == 0) ++p;  // the next entry starts with bit 7 set
  }
  return false;
}

bool do_raise(PyObject* exc, PyObject* cause) {
  if (exc == nullptr) {
    PyObject* value = PyErr_GetHandledException();
    if (value == nullptr || value == Py_None) {
      Py_XDECREF(value);
      PyErr_SetString(PyExc_RuntimeError, "No active exception to reraise");
      return false;
    }
    PyObject* type = Py_NewRef(PyExceptionInstance_Class(value));
    PyErr_Restore(type, value, PyException_GetTraceback(value));
    return true;
  }
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  if (PyExceptionClass_Check(exc)) {
    type = exc;
    value = PyObject_CallNoArgs(exc);
    if (value == nullptr) goto raise_error;
    if (!PyExceptionInstance_Check(value)) {
      PyErr_Format(PyExc_TypeError,
                   "calling %R should have returned an instance of BaseException, not %R", type,
                   Py_TYPE(value));
      goto raise_error;
    }
  } else if (PyExceptionInstance_Check(exc)) {
    value = exc;
    type = Py_NewRef(PyExceptionInstance_Class(exc));
  } else {
    Py_DECREF(exc);
    PyErr_SetString(PyExc_TypeError, "exceptions must derive from BaseException");
    goto raise_error;
  }
  if (cause != nullptr) {
    PyObject* fixed = nullptr;
    if (PyExceptionClass_Check(cause)) {
      fixed = PyObject_CallNoArgs(cause);
      if (fixed == nullptr) goto raise_error;
      Py_DECREF(cause);
    } else if (PyExceptionInstance_Check(cause)) {
      fixed = cause;
    } else if (cause == Py_None) {
      Py_DECREF(cause);
    } else {
      PyErr_SetString(PyExc_TypeError, "exception causes must derive from BaseException");
      goto raise_error;
    }
    PyException_SetCause(value, fixed);
  }
  PyErr_SetObject(type, value);
  Py_DECREF(value);
  Py_DECREF(type);
  return false;
raise_error:
  Py_XDECREF(value);
  Py_XDECREF(type);
  Py_XDECREF(cause);
  return false;
}

bool except_type_valid(PyObject* right) {
  constexpr const char* kMessage =
      "catching classes that do not inherit from BaseException is not allowed";
  if (PyTuple_Check(right)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(right); ++i) {
      if (!PyExceptionClass_Check(PyTuple_GET_ITEM(right, i))) {
        PyErr_SetString(PyExc_TypeError, kMessage);
        return false;
      }
    }
  } else if (!PyExceptionClass_Check(right)) {
    PyErr_SetString(PyExc_TypeError, kMessage);
    return false;
  }
  return true;
}

bool unpack(PyObject* v, int count, PyObject** top) { return unpack(v, count, -1, top); }

// ceval.c's unpack_iterable: `before` items, then (after >= 0) a list of the rest but the last
// `after`, then those; each written downwards from `top`, the first item highest.
bool unpack(PyObject* v, int before, int after, PyObject** top) {
  PyObject* it = PyObject_GetIter(v);
  if (it == nullptr) {
    if (PyErr_ExceptionMatches(PyExc_TypeError) && Py_TYPE(v)->tp_iter == nullptr &&
        !PySequence_Check(v)) {
      PyErr_Format(PyExc_TypeError, "cannot unpack non-iterable %.200s object",
                   Py_TYPE(v)->tp_name);
    }
    return false;
  }
  PyObject** sp = top;
  int i = 0;
  for (; i < before; ++i) {
    PyObject* w = PyIter_Next(it);
    if (w == nullptr) {
      if (!PyErr_Occurred()) {
        if (after == -1) {
          PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected %d, got %d)",
                       before, i);
        } else {
          PyErr_Format(PyExc_ValueError,
                       "not enough values to unpack (expected at least %d, got %d)", before + after,
                       i);
        }
      }
      goto fail;
    }
    *--sp = w;
  }
  if (after == -1) {
    PyObject* w = PyIter_Next(it);
    if (w == nullptr) {
      if (PyErr_Occurred()) goto fail;
      Py_DECREF(it);
      return true;
    }
    Py_DECREF(w);
    PyErr_Format(PyExc_ValueError, "too many values to unpack (expected %d)", before);
    goto fail;
  }
  {
    PyObject* rest = PySequence_List(it);
    if (rest == nullptr) goto fail;
    *--sp = rest;
    ++i;
    const Py_ssize_t n = PyList_GET_SIZE(rest);
    if (n < after) {
      PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected at least %d, got %zd)",
                   before + after, before + n);
      goto fail;
    }
    // The last `after` items leave the list for the stack (the list's references move).
    for (int j = after; j > 0; --j, ++i) *--sp = PyList_GET_ITEM(rest, n - j);
    Py_SET_SIZE(rest, n - after);
    Py_DECREF(it);
    return true;
  }
fail:
  for (; i > 0; --i, ++sp) Py_DECREF(*sp);
  Py_DECREF(it);
  return false;
}

PyObject* import_name(_PyInterpreterFrame* f, PyObject* name, PyObject* fromlist, PyObject* level) {
  static PyObject* dunder_import = PyUnicode_InternFromString("__import__");
  PyObject* import = PyDict_GetItemWithError(f->f_builtins, dunder_import);
  if (import == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ImportError, "__import__ not found");
    return nullptr;
  }
  PyObject* locals = f->f_locals == nullptr ? Py_None : f->f_locals;
  if (import == sealtrace_import_func(PyThreadState_GET())) {
    const int ilevel = _PyLong_AsInt(level);
    if (ilevel == -1 && PyErr_Occurred()) return nullptr;
    return PyImport_ImportModuleLevelObject(name, f->f_globals, locals, fromlist, ilevel);
  }
  Py_INCREF(import);
  PyObject* args[5] = {name, f->f_globals, locals, fromlist, level};
  PyObject* res = PyObject_Vectorcall(import, args, 5, nullptr);
  Py_DECREF(import);
  return res;
}

PyObject* lookup(PyObject* mapping, PyObject* name) {
  if (PyDict_CheckExact(mapping)) return Py_XNewRef(PyDict_GetItemWithError(mapping, name));
  PyObject* v = PyObject_GetItem(mapping, name);
  if (v == nullptr && PyErr_ExceptionMatches(PyExc_KeyError)) PyErr_Clear();
  return v;
}

}  // namespace sealtrace
