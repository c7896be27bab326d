#include "fastpath_internal.h"

/* -- the per-call path ---------------------------------------------------------------- */

FP_DEFINE PyObject *s_callee, *s_event, *s_drain, *s_failed, *s_args_digest, *s_flush_names;
FP_DEFINE _Thread_local ThreadRec fp_thread;

void hold_records(CallPath* self) {
  unsigned long me = PyThread_get_thread_ident();
  if (self->records_owner == me) {
    self->records_depth += 1;
    return;
  }
  /* Held by a thread that ran Python code while framing (a callee's first NAME, a value the
   * Python runtime encodes): let it finish. */
  for (int spins = 0; self->records_owner != 0; spins++) {
    Py_BEGIN_ALLOW_THREADS;
    if (spins < 100) {
      sched_yield();
    } else {
      struct timespec pause = {0, 50000};
      nanosleep(&pause, NULL);
    }
    Py_END_ALLOW_THREADS;
  }
  self->records_owner = me;
  self->records_depth = 1;
}

void release_records(CallPath* self) {
  if (self->records_owner == PyThread_get_thread_ident() && --self->records_depth == 0) {
    self->records_owner = 0;
    /* A signal's handler that ran while this thread framed a record (_defer_signal): trip it
     * again, to run at the interpreter's next check, the record now whole. */
    for (int signum = 1; self->signals_deferred != 0 && signum < 64; signum++) {
      uint64_t bit = (uint64_t)1 << signum;
      if (self->signals_deferred & bit) {
        self->signals_deferred &= ~bit;
        (void)PyErr_SetInterruptEx(signum);
      }
    }
  }
}

static PyObject* callpath_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  (void)args;
  (void)kwargs; /* the subclass's __init__ takes them */
  CallPath* self = (CallPath*)type->tp_alloc(type, 0);
  if (self == NULL) return NULL;
  self->buf = PyByteArray_FromStringAndSize(NULL, 0);
  self->heads = PyDict_New();
  self->recent = PyDict_New();
  self->recent_enum = PyDict_New();
  if (self->buf == NULL || self->heads == NULL || self->recent == NULL ||
      self->recent_enum == NULL) {
    Py_DECREF(self);
    return NULL;
  }
  return (PyObject*)self;
}

static int callpath_traverse(CallPath* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(self->buf);
  Py_VISIT(self->heads);
  Py_VISIT(self->recent);
  Py_VISIT(self->recent_enum);
  Py_VISIT(self->head_of);
  for (int i = 0; i < HEAD_CACHE; i++) {
    Py_VISIT(self->head_names[i]);
    Py_VISIT(self->head_values[i]);
  }
  return 0;
}

static int callpath_clear(CallPath* self) {
  Py_CLEAR(self->buf);
  Py_CLEAR(self->heads);
  Py_CLEAR(self->recent);
  Py_CLEAR(self->recent_enum);
  Py_CLEAR(self->head_of);
  forget_heads(self);
  return 0;
}

static void callpath_dealloc(CallPath* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  callpath_clear(self);
  PyMem_Free(self->scratch.data);
  PyMem_Free(self->text.data);
  type->tp_free((PyObject*)self);
  Py_DECREF(type);
}

/* What call and invoke do once the real call has returned `result`; returns it. Or, with
 * no result, what they do for the bytes data[0:size] returned (recv_into's twin reads into
 * the caller's buffer, and records what recv would have returned); returns None then. */
static PyObject* record_result_held(CallPath* self, PyObject* name, Key* key, PyObject* result,
                                    const char* data, Py_ssize_t size);

PyObject* record_result(CallPath* self, PyObject* name, Key* key, PyObject* result,
                        const char* data, Py_ssize_t size) {
  hold_records(self);
  PyObject* done = record_result_held(self, name, key, result, data, size);
  release_records(self);
  return done;
}

static PyObject* record_result_held(CallPath* self, PyObject* name, Key* key, PyObject* result,
                                    const char* data, Py_ssize_t size) {
  if (result == NULL) {
    result = Py_NewRef(Py_None);
  } else if (PyBytes_CheckExact(result)) {
    data = PyBytes_AS_STRING(result);
    size = PyBytes_GET_SIZE(result);
  }
  if (!self->live) return result; /* the recording ended inside the call */
  if (!PyUnicode_CheckExact(name)) {
    PyErr_SetString(PyExc_TypeError, "a callee's name must be a str");
    return recording_failed(self, result);
  }
  if (start_record(self, name, key) < 0) return recording_failed(self, result);
  if (put_byte(&self->scratch, STATUS_RETURNED) < 0) return recording_failed(self, result);
  Py_ssize_t inserted = 0;
  int status = data != NULL ? put_payload(&self->scratch, data, size, &inserted)
                            : encode(&self->scratch, result, 0, 0);
  if (status == FAILED) return recording_failed(self, result);
  if (status == DEFERRED) { /* Python's _event encodes it (as bytes, for data) */
    PyObject* value = PyBytes_CheckExact(result) || data == NULL
                          ? Py_NewRef(result)
                          : PyBytes_FromStringAndSize(data, size);
    PyObject* head = value != NULL ? record_head(self) : NULL;
    int deferred = head != NULL ? defer(self, KIND_CALL, name, key, Py_None, value, head) : -1;
    Py_XDECREF(head);
    Py_XDECREF(value);
    return deferred < 0 ? recording_failed(self, result) : result;
  }
  if (append_record(self, KIND_CALL, self->scratch.size, data, inserted) < 0)
    return recording_failed(self, result);
  return result;
}

/* call(name, key, fn): RecordRuntime.call. */
static PyObject* callpath_call(CallPath* self, PyObject* const* args, Py_ssize_t nargs) {
  if (check_count(nargs, 3, "call") < 0) return NULL;
  PyObject *name = args[0], *fn = args[2];
  Key key = KEY_OF(args[1]);
  if (!recorded_here(self)) return PyObject_CallNoArgs(fn);
  open_call();
  PyObject* result = PyObject_CallNoArgs(fn);
  close_call(self);
  if (result == NULL) return record_raised(self, KIND_CALL, name, &key, Py_None);
  return record_returned(self, name, &key, result);
}

static PyObject* record_output_held(CallPath* self, PyObject* name, Key* key, PyObject* data,
                                    PyObject* result);

/* What output does once the real call has returned `result`. */
static PyObject* record_output(CallPath* self, PyObject* name, Key* key, PyObject* data,
                               PyObject* result) {
  hold_records(self);
  PyObject* done = record_output_held(self, name, key, data, result);
  release_records(self);
  return done;
}

static PyObject* record_output_held(CallPath* self, PyObject* name, Key* key, PyObject* data,
                                    PyObject* result) {
  if (!self->live) return result;
  int fast =
      PyUnicode_CheckExact(name) &&
      (data == Py_None || (PyBytes_CheckExact(data) && PyBytes_GET_SIZE(data) < BLOB_THRESHOLD));
  if (fast) {
    if (start_record(self, name, key) < 0) return recording_failed(self, result);
    const char* payload = data == Py_None ? "" : PyBytes_AS_STRING(data);
    Py_ssize_t size = data == Py_None ? 0 : PyBytes_GET_SIZE(data), inserted;
    int status = put_payload(&self->scratch, payload, size, &inserted);
    Py_ssize_t split = self->scratch.size;
    if (status == ENCODED)
      status = put_byte(&self->scratch, STATUS_RETURNED) < 0 ? FAILED
                                                             : encode(&self->scratch, result, 0, 0);
    if (status == FAILED) return recording_failed(self, result);
    if (status == ENCODED) {
      if (append_record(self, KIND_OUTPUT, split, payload, inserted) < 0)
        return recording_failed(self, result);
      return result;
    }
  }
  if (defer(self, KIND_OUTPUT, name, key, data, result, NULL) < 0)
    return recording_failed(self, result);
  return result;
}

/* What a part of obj is (parts_of): its attribute of that name (a str); the value of that
 * field or property of its C type (a member or getset descriptor, read straight from the
 * descriptor as its __get__ would); or what that function makes of it. */
static PyObject* part_of(PyObject* obj, PyObject* part) {
  if (PyUnicode_Check(part)) {
    /* A field of an immutable C type whose instances have no dictionary (the real
     * sqlite3 cursor's description ...): its descriptor, read as below. */
    PyTypeObject* type = Py_TYPE(obj);
    PyObject* found = fixed_lookup(type) ? _PyType_Lookup(type, part) : NULL; /* borrowed */
    if (!is_field(found)) return PyObject_GetAttr(obj, part);
    part = found;
  }
  if (is_field(part)) {
    PyDescrObject* descr = (PyDescrObject*)part;
    if (!PyObject_TypeCheck(obj, descr->d_type))
      return Py_TYPE(part)->tp_descr_get(part, obj, (PyObject*)Py_TYPE(obj)); /* raises */
    if (Py_IS_TYPE(part, &PyMemberDescr_Type))
      return PyMember_GetOne((const char*)obj, ((PyMemberDescrObject*)part)->d_member);
    PyGetSetDef* getset = ((PyGetSetDescrObject*)part)->d_getset;
    if (getset->get != NULL) return getset->get(obj, getset->closure);
    return Py_TYPE(part)->tp_descr_get(part, obj, (PyObject*)Py_TYPE(obj));
  }
  return PyObject_CallOneArg(part, obj);
}

/* The tuple of obj's parts: part_of(obj, part) for each of `parts`. */
PyObject* parts_of(PyObject* obj, PyObject* parts) {
  Py_ssize_t n = PyTuple_GET_SIZE(parts);
  PyObject* values = PyTuple_New(n);
  for (Py_ssize_t i = 0; values != NULL && i < n; i++) {
    PyObject* value = part_of(obj, PyTuple_GET_ITEM(parts, i));
    if (value == NULL)
      Py_CLEAR(values);
    else
      PyTuple_SET_ITEM(values, i, value);
  }
  return values;
}

/* obj.method(*args) (call_real: stack, count and method as there; method_of finds the
 * method itself) as one boundary call of `kind` (CALL, or OUTPUT of `data`), recorded when
 * `recording` (the caller saw that the call is made on the recorded thread). With `state`
 * (a tuple of names), the call's result is the tuple of obj's attributes of those names
 * after the method returned, read inside the call: sqlite3's cursor state after execute(). */
PyObject* run_method(CallPath* self, unsigned char kind, PyObject* name, Key* key, PyObject* data,
                     PyObject* method, PyObject** stack, Py_ssize_t count, PyObject* state,
                     int recording) {
  if (recording) open_call();
  PyObject* result = call_real(method, stack, count);
  if (result != NULL && state != NULL) {
    Py_SETREF(result, parts_of(stack[1], state));
  }
  if (!recording) return result;
  close_call(self);
  if (result == NULL) return record_raised(self, kind, name, key, data);
  if (kind == KIND_OUTPUT) return record_output(self, name, key, data, result);
  return record_returned(self, name, key, result);
}

/* invoke(name, key, obj, method, *args): RecordRuntime.invoke, call() of obj.method(*args)
 * without a closure to make and a Python frame to run. */
static PyObject* callpath_invoke(CallPath* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 4) {
    PyErr_Format(PyExc_TypeError, "invoke() takes at least 4 arguments (%zd given)", nargs);
    return NULL;
  }
  PyObject *name = args[0], *method = args[3];
  Key key = KEY_OF(args[1]);
  if (!PyUnicode_Check(method)) {
    PyErr_SetString(PyExc_TypeError, "invoke() needs a method name");
    return NULL;
  }
  /* obj and the method's arguments, after one free slot for the vectorcall offset */
  Py_ssize_t count = nargs - 3;
  PyObject *small[2 + INVOKE_STACK], **stack = stack_of(small, count + 1);
  if (stack == NULL) return NULL;
  stack[1] = args[2];
  for (Py_ssize_t i = 1; i < count; i++) stack[1 + i] = args[3 + i];
  PyObject* result = run_method(self, KIND_CALL, name, &key, Py_None, method, stack, count, NULL,
                                recorded_here(self));
  release_stack(stack, small);
  return result;
}

static PyObject* callpath_output(CallPath* self, PyObject* const* args, Py_ssize_t nargs) {
  if (check_count(nargs, 4, "output") < 0) return NULL;
  PyObject *name = args[0], *data = args[2], *fn = args[3];
  Key key = KEY_OF(args[1]);
  if (!recorded_here(self)) return PyObject_CallNoArgs(fn);
  open_call();
  PyObject* result = PyObject_CallNoArgs(fn);
  close_call(self);
  if (result == NULL) return record_raised(self, KIND_OUTPUT, name, &key, data);
  return record_output(self, name, &key, data, result);
}

/* new_oid(): RecordRuntime.new_oid. Objects made inside another boundary call (a selector
 * inside communicate()) do not exist on replay: they take no id (0). */
static PyObject* callpath_new_oid(CallPath* self, PyObject* unused) {
  (void)unused;
  if (!recorded_here(self)) return PyLong_FromLong(0);
  self->oids += 1;
  return next_oid();
}

/* intercepting(): whether a call made here now goes through the boundary. */
static PyObject* callpath_intercepting(CallPath* self, PyObject* unused) {
  (void)unused;
  return PyBool_FromLong(recorded_here(self));
}

/* thread_index(): this thread's index in the recording, or -1 if it is not recorded. */
static PyObject* callpath_thread_index(CallPath* self, PyObject* unused) {
  (void)unused;
  if (fp_thread.path != self) return PyLong_FromLong(-1);
  return PyLong_FromUnsignedLong(fp_thread.index);
}

/* enter_thread(index): this thread's calls are recorded from now on, as thread `index`. */
static PyObject* callpath_enter_thread(CallPath* self, PyObject* arg) {
  unsigned long index = PyLong_AsUnsignedLong(arg);
  if (index == (unsigned long)-1 && PyErr_Occurred()) return NULL;
  fp_thread.recording = self;
  fp_thread.path = self;
  fp_thread.index = index;
  fp_thread.oids = 0;
  Py_RETURN_NONE;
}

/* leave_thread(): this thread's calls are no longer recorded (its function returned). */
static PyObject* callpath_leave_thread(CallPath* self, PyObject* unused) {
  (void)unused;
  if (fp_thread.path == self) {
    fp_thread.recording = NULL;
    fp_thread.path = NULL;
  }
  Py_RETURN_NONE;
}

/* _calls_open(flag): a recorded thread's calls are recorded again (True) or pass through as
 * inside a boundary call (False); what they did before: True, False, or None on a thread
 * that is not recorded (nothing changes). A signal handler that runs inside a boundary call
 * opens them for its own calls, and closes them again after. */
static PyObject* callpath_calls_open(CallPath* self, PyObject* arg) {
  int open = PyObject_IsTrue(arg);
  if (open < 0) return NULL;
  if (fp_thread.path != self) Py_RETURN_NONE;
  int was = fp_thread.recording == self;
  fp_thread.recording = open ? self : NULL;
  return PyBool_FromLong(was);
}

/* _records_held(): whether this thread holds the records lock now (it is framing a record,
 * and may run Python while it does: a signal's handler must wait for the record's end). */
static PyObject* callpath_records_held(CallPath* self, PyObject* unused) {
  (void)unused;
  return PyBool_FromLong(self->records_owner == PyThread_get_thread_ident());
}

/* _defer_signal(signum): the handler of `signum` ran while this thread held the records lock
 * and did nothing: it is tripped again when the lock is released (release_records). False
 * for a signal number this cannot hold (the caller then runs the handler as it is). */
static PyObject* callpath_defer_signal(CallPath* self, PyObject* arg) {
  long signum = PyLong_AsLong(arg);
  if (signum == -1 && PyErr_Occurred()) return NULL;
  if (signum < 1 || signum >= 64) Py_RETURN_FALSE;
  self->signals_deferred |= (uint64_t)1 << signum;
  Py_RETURN_TRUE;
}

static PyObject* callpath_hold_records(CallPath* self, PyObject* unused) {
  (void)unused;
  hold_records(self);
  Py_RETURN_NONE;
}

static PyObject* callpath_release_records(CallPath* self, PyObject* unused) {
  (void)unused;
  release_records(self);
  Py_RETURN_NONE;
}

static PyMethodDef callpath_methods[] = {
    {"intercepting", (PyCFunction)callpath_intercepting, METH_NOARGS,
     "intercepting(): whether a call made here now is recorded (RecordRuntime.intercepting)."},
    {"thread_index", (PyCFunction)callpath_thread_index, METH_NOARGS,
     "thread_index(): this thread's index in the recording, or -1."},
    {"enter_thread", (PyCFunction)callpath_enter_thread, METH_O,
     "enter_thread(index): record this thread's calls, as thread `index`."},
    {"leave_thread", (PyCFunction)callpath_leave_thread, METH_NOARGS,
     "leave_thread(): stop recording this thread's calls."},
    {"_calls_open", (PyCFunction)callpath_calls_open, METH_O,
     "_calls_open(flag): record this thread's calls again, or not; what it did before."},
    {"_records_held", (PyCFunction)callpath_records_held, METH_NOARGS,
     "_records_held(): whether this thread holds the records lock."},
    {"_defer_signal", (PyCFunction)callpath_defer_signal, METH_O,
     "_defer_signal(signum): trip the signal again once the records lock is released."},
    {"_hold_records", (PyCFunction)callpath_hold_records, METH_NOARGS,
     "_hold_records(): take the records lock (recursive)."},
    {"_release_records", (PyCFunction)callpath_release_records, METH_NOARGS,
     "_release_records(): give the records lock back."},
    {"new_oid", (PyCFunction)callpath_new_oid, METH_NOARGS,
     "new_oid(): the next object id, or 0 inside a boundary call (RecordRuntime.new_oid)."},
    {"call", (PyCFunction)(void (*)(void))callpath_call, METH_FASTCALL,
     "call(name, key, fn): run fn and record its result (RecordRuntime.call)."},
    {"invoke", (PyCFunction)(void (*)(void))callpath_invoke, METH_FASTCALL,
     "invoke(name, key, obj, method, *args): call() of obj.method(*args) (RecordRuntime.invoke)."},
    {"output", (PyCFunction)(void (*)(void))callpath_output, METH_FASTCALL,
     "output(name, key, data, fn): run fn and record data and its result (RecordRuntime.output)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef callpath_members[] = {
    {"_live", T_ULONG, offsetof(CallPath, live), 0, NULL},
    {"_last_thread", T_ULONG, offsetof(CallPath, last_thread), 0, NULL},
    {"_threads_started", T_ULONG, offsetof(CallPath, threads), 0, NULL},
    {"_main", T_ULONG, offsetof(CallPath, main), 0, NULL},
    {"_buf", T_OBJECT_EX, offsetof(CallPath, buf), 0, NULL},
    {"_heads", T_OBJECT_EX, offsetof(CallPath, heads), 0, NULL},
    {"events", T_PYSSIZET, offsetof(CallPath, events), 0, NULL},
    {"_oids", T_PYSSIZET, offsetof(CallPath, oids), 0, NULL},
    {"_last_flush", T_DOUBLE, offsetof(CallPath, last_flush), 0, NULL},
    {"_flush_interval", T_DOUBLE, offsetof(CallPath, flush_interval), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot callpath_slots[] = {
    {Py_tp_doc, "The state and the per-call path of RecordRuntime, in C."},
    {Py_tp_new, callpath_new},
    {Py_tp_dealloc, callpath_dealloc},
    {Py_tp_traverse, callpath_traverse},
    {Py_tp_clear, callpath_clear},
    {Py_tp_methods, callpath_methods},
    {Py_tp_members, callpath_members},
    {0, NULL},
};

FP_DEFINE PyType_Spec callpath_spec = {
    .name = "sealtrace.proxy._fastpath.CallPath",
    .basicsize = sizeof(CallPath),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = callpath_slots,
};
