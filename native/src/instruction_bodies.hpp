// What the loop's instruction bodies share with CPython 3.11's own loop (Python/ceval.c): its
// operator table, its error messages, and its helpers for names, raising, matching an except
// clause, unpacking, importing and finding an exception handler, with the same errors and
// messages. They only evaluate; no tracer is told anything here.
#pragma once

#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>

namespace sealtrace {

inline constexpr const char* kUnboundLocal =
    "cannot access local variable '%s' where it is not associated with a value";
inline constexpr const char* kUnboundFree =
    "cannot access free variable '%s' where it is not associated with a value in enclosing "
    "scope";
inline constexpr const char* kNameError = "name '%.200s' is not defined";

using BinaryFn = PyObject* (*)(PyObject*, PyObject*);
// BINARY_OP's oparg (dis._nb_ops): the operators, then their in-place forms.
inline constexpr int kBinaryOpCount = 26;
extern const BinaryFn kBinaryOps[kBinaryOpCount];

// Raises `exc` with `format` filled with the name (a NameError keeps the name, for the
// suggestions a traceback prints).
void format_check_arg(PyObject* exc, const char* format, PyObject* name);
// An unbound local or free variable's error, unless one is already set.
void unbound(PyCodeObject* co, int index);
// The exception table entry covering instruction `index` (3.11's varint format).
bool exception_handler(PyCodeObject* co, int index, int& level, int& handler, bool& lasti);
// `raise`, `raise exc`, `raise exc from cause`: true when it re-raises what is being handled
// (it unwinds without a new traceback entry); false with the exception set otherwise.
bool do_raise(PyObject* exc, PyObject* cause);
// Whether an except clause's type (or tuple of types) may be matched; a TypeError set if not.
bool except_type_valid(PyObject* right);
// UNPACK_SEQUENCE: `count` items, the first on top (written downwards from `top`).
bool unpack(PyObject* v, int count, PyObject** top);
// UNPACK_EX: `before` items, a list of the rest but the last `after`, then those (`after` -1:
// exactly `before` items, as UNPACK_SEQUENCE).
bool unpack(PyObject* v, int before, int after, PyObject** top);
// IMPORT_NAME through the frame's builtins' __import__.
PyObject* import_name(_PyInterpreterFrame* f, PyObject* name, PyObject* fromlist, PyObject* level);
// A name in a mapping that may not be a dict: a new reference, nullptr with no exception when
// it is not there.
PyObject* lookup(PyObject* mapping, PyObject* name);

}  // namespace sealtrace
