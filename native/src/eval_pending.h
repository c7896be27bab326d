// What the interpreter's loop does between instructions when its eval breaker is set
// (signals, pending calls, a request for the GIL, an asynchronous exception), for the
// engine's own loop: 0, or -1 with an exception set.
#pragma once

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

int sealtrace_handle_pending(PyThreadState* tstate);
// Whether the eval breaker is set: sealtrace_handle_pending would do something.
int sealtrace_breaker_set(PyThreadState* tstate);
// The interpreter's own __import__ (borrowed): IMPORT_NAME calls the import system directly
// when the builtin has not been replaced.
PyObject* sealtrace_import_func(PyThreadState* tstate);

#ifdef __cplusplus
}
#endif
