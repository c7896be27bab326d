// The eval breaker for the engine's own evaluation loop (eval_loop.hpp), in C because the
// interpreter's atomics (pycore_atomic.h) are C11 and not C++.
#define Py_BUILD_CORE 1
#include "eval_pending.h"

#include <Python.h>
#include <internal/pycore_interp.h>
#include <internal/pycore_pystate.h>

int sealtrace_breaker_set(PyThreadState* tstate) {
  return _Py_atomic_load_relaxed(&tstate->interp->ceval.eval_breaker) != 0;
}

int sealtrace_handle_pending(PyThreadState* tstate) {
  struct _ceval_state* ceval = &tstate->interp->ceval;
  if (!_Py_atomic_load_relaxed(&ceval->eval_breaker)) return 0;
  // Signal handlers and pending calls (they run on the main thread only).
  if (Py_MakePendingCalls() < 0) return -1;
  // Another thread asked for the GIL: hand it over, as the interpreter's loop does.
  if (_Py_atomic_load_relaxed(&ceval->gil_drop_request)) {
    PyThreadState* saved = PyEval_SaveThread();
    PyEval_RestoreThread(saved);
  }
  // An exception another thread set for this one (PyThreadState_SetAsyncExc).
  if (tstate->async_exc != NULL) {
    PyObject* exc = tstate->async_exc;
    tstate->async_exc = NULL;
    PyErr_SetNone(exc);
    Py_DECREF(exc);
    return -1;
  }
  return 0;
}

PyObject* sealtrace_import_func(PyThreadState* tstate) { return tstate->interp->import_func; }
