// An instance's attributes, read without changing the instance.
//
// `obj.__dict__` (and vars(), and object.__getattribute__(obj, "__dict__")) makes CPython 3.11
// build a dict for an instance that kept its attributes inline, and attach it for good: the
// instance then stores its attributes differently, and the program allocates differently from
// then on. Summarising a value while a query runs must never do that (quiet.h says why).
#pragma once

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

// A new reference: the instance's own __dict__ if it has one, a new dict of its inline
// attributes if it keeps them inline, or None.
PyObject* sealtrace_instance_fields(PyObject* obj);

// A borrowed reference to the instance's __dict__ if it has one already (never builds one);
// NULL otherwise.
PyObject* sealtrace_instance_dict(PyObject* obj);

// The instance's own attribute `name` (an exact str), borrowed, or NULL when it has none; read
// from its __dict__ or its inline values without building either and without running Python
// code. *known is 0 where that cannot be told so (a __dict__ that is not an exact dict).
PyObject* sealtrace_instance_attr(PyObject* obj, PyObject* name, int* known);

// The instance's own attribute values (borrowed), read from its __dict__ or its inline values
// into out; their number, or -1 where there are more than max or they cannot be read so.
int sealtrace_instance_values(PyObject* obj, PyObject** out, int max);

// Whether one of the instance's attributes (or a class's namespace entries) is `value` itself.
int sealtrace_instance_holds(PyObject* obj, PyObject* value);

#ifdef __cplusplus
}
#endif
