#include "fastpath_internal.h"

/* -- proxy methods ------------------------------------------------------------------------
 *
 * A BoundaryMethod is the C twin of one of a proxy class's hot methods (socket.connect,
 * sendall, recv_into, sqlite3's Cursor.execute ...), installed on the proxy class when the
 * recording uses this path (proxy/_runtime.py's native_methods). The proxy keeps its Python
 * method as the reference: the BoundaryMethod does exactly what that method does, and calls
 * it instead for anything but the common case (keyword arguments, a closed socket, a call
 * made inside another boundary call, a buffer that is not plain bytes). Replay always runs
 * the Python methods, so every recording made here is checked against them.
 *
 * The proxy instance holds `_oid` (the key's first item) and `_real` (the object called),
 * in its ProxyState when it has one; the key is (_oid, *arguments), defaults included, as
 * the Python method makes it. */

FP_DEFINE PyTypeObject *callpath_type, *method_type, *proxy_type;
FP_DEFINE PyObject *s_oid, *s_real, *s_fd, *s_row_factory, *s_row, *s_setup, *s_connection,
    *s_closed, *s_io_refs, *s_getdefaulttimeout, *empty_tuple;
static PyObject* socket_module; /* imported by the first socket set up (setup_socket) */

/* What to call for real.<m->method>: the method descriptor found on real's type, kept for
 * the next call on an object of the same type; or the name, looked up on each call. Only
 * for a type whose lookups cannot change (fixed_lookup): the same lookup always finds the
 * same descriptor. */
static PyObject* method_of(BoundaryMethod* m, PyObject* real) {
  PyTypeObject* type = Py_TYPE(real);
  if ((PyObject*)type == m->real_type) return m->real_method;
  if (!fixed_lookup(type)) return m->method;
  PyObject* found = _PyType_Lookup(type, m->method); /* borrowed */
  if (found == NULL || !PyType_HasFeature(Py_TYPE(found), Py_TPFLAGS_METHOD_DESCRIPTOR))
    return m->method;
  Py_XSETREF(m->real_type, Py_NewRef((PyObject*)type));
  Py_XSETREF(m->real_method, Py_NewRef(found));
  return found;
}

/* The parts to read from `real` after a FORM_STATE call (parts_of): the field and property
 * descriptors that part_of finds for m->state's names on real's type, kept for the next call
 * on an object of the same type, under method_of's conditions; or the names themselves (kept
 * too, for a type where one of them is not a field). */
static PyObject* state_parts(BoundaryMethod* m, PyObject* real) {
  PyTypeObject* type = Py_TYPE(real);
  if ((PyObject*)type == m->parts_type) return m->parts;
  if (!fixed_lookup(type)) return m->state;
  Py_ssize_t n = PyTuple_GET_SIZE(m->state);
  PyObject* parts = PyTuple_New(n);
  if (parts == NULL) {
    PyErr_Clear(); /* the names do as well, looked up on every call */
    return m->state;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* found = _PyType_Lookup(type, PyTuple_GET_ITEM(m->state, i)); /* borrowed */
    if (!is_field(found)) {
      Py_SETREF(parts, Py_NewRef(m->state)); /* part_of looks each name up */
      break;
    }
    PyTuple_SET_ITEM(parts, i, Py_NewRef(found));
  }
  Py_XSETREF(m->parts_type, Py_NewRef((PyObject*)type));
  Py_XSETREF(m->parts, parts);
  return parts;
}

static COLD PyObject* method_fallback(BoundaryMethod* m, PyObject* const* args, size_t nargsf,
                                      PyObject* kwnames) {
  return PyObject_Vectorcall(m->fallback, args, nargsf, kwnames);
}

/* Whether self._fd is not a non-negative int: the Python method raises OSError then. */
static int socket_closed(PyObject* self) {
  PyObject* field = is_a(self, proxy_type) ? ((ProxyState*)self)->fd : NULL;
  if (field != NULL && PyLong_CheckExact(field)) return Py_SIZE(field) < 0; /* its sign */
  int ok;
  long fd = int_attribute(self, proxy_type, offsetof(ProxyState, fd), s_fd, &ok);
  return !ok || fd < 0;
}

/* recv_into(buffer, nbytes=0, flags=0) when the buffer is writable plain bytes and nbytes
 * fits it; NULL with no exception otherwise (the Python method then). The Python method
 * records real.recv(size, flags) and copies its bytes in; this reads with the real
 * socket's recv_into, straight into the buffer, and records the same bytes from there. */
static PyObject* recv_into(BoundaryMethod* m, PyObject* key_oid, PyObject* real,
                           PyObject* const* argv, int* handled) {
  PyObject *buffer = argv[0], *nbytes = argv[1], *flags = argv[2];
  *handled = 0;
  if (!PyLong_CheckExact(nbytes)) return NULL;
  Py_buffer view;
  if (PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
    PyErr_Clear();
    return NULL;
  }
  Py_ssize_t wanted = PyLong_AsSsize_t(nbytes);
  if (wanted < 0 || wanted > view.len) {
    PyErr_Clear();
    PyBuffer_Release(&view);
    return NULL;
  }
  *handled = 1;
  PyObject* size = wanted ? Py_NewRef(nbytes) : PyLong_FromSsize_t(view.len);
  PyObject *items[2] = {size, flags}, *result = NULL;
  Key key = KEY_PARTS(key_oid, items, 2);
  if (size != NULL) {
    CallPath* rt = m->runtime;
    PyObject *method = method_of(m, real), *stack[5] = {NULL, real, buffer, size, flags};
    /* recv_into(buffer) reads as much as (buffer, its size, 0) does, and parses less */
    int whole = !wanted && PyLong_CheckExact(flags) && Py_SIZE(flags) == 0;
    open_call(); /* the caller checked that this call is recorded */
    result = call_real(method, stack, whole ? 2 : 4);
    close_call(rt);
    Py_ssize_t n = result != NULL ? PyLong_AsSsize_t(result) : -1;
    if (result == NULL) {
      record_raised(rt, KIND_CALL, m->name, &key, Py_None);
    } else if (n < 0 || n > view.len) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "recv_into read more than the buffer holds");
      Py_CLEAR(result);
    } else {
      PyObject* done = record_result(rt, m->name, &key, NULL, view.buf, n);
      if (done == NULL) Py_CLEAR(result);
      Py_XDECREF(done);
    }
  }
  key_release(&key);
  Py_XDECREF(size);
  PyBuffer_Release(&view);
  return result;
}

/* FORM_FUNCTION: function(*args), keyed by args (None without any). */
static PyObject* call_function(BoundaryMethod* m, PyObject* const* args, Py_ssize_t nargs) {
  PyObject *small[2 + INVOKE_STACK], **stack = stack_of(small, nargs + 2);
  if (stack == NULL) return NULL;
  Key key = nargs ? KEY_PARTS(NULL, args, nargs) : KEY_OF(Py_None);
  stack[1] = m->method;
  for (Py_ssize_t i = 0; i < nargs; i++) stack[2 + i] = args[i];
  PyObject* result =
      run_method(m->runtime, KIND_CALL, m->name, &key, Py_None, NULL, stack, 1 + nargs, NULL, 1);
  key_release(&key);
  release_stack(stack, small);
  return result;
}

/* As Socket._setup does: the socket's descriptor joins the runtime's tracked descriptors
 * (_io_boundary.tracked_descriptors), whose os and fcntl calls are then boundary calls. */
static int track_descriptor(CallPath* rt, PyObject* fd) {
  static PyObject* name = NULL;
  if (name == NULL && (name = PyUnicode_InternFromString("_tracked_descriptors")) == NULL)
    return -1;
  PyObject* tracked = PyObject_GetAttr((PyObject*)rt, name);
  if (tracked == NULL) { /* no file boundary installed: nothing tracks descriptors */
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    return 0;
  }
  int failed = PySet_Check(tracked) ? PySet_Add(tracked, fd) : 0;
  Py_DECREF(tracked);
  return failed;
}

/* Socket._setup(info, real) (_net_boundary.py) of a socket proxy whose state is a
 * SocketState, right after the recorded call that made `real`: 0 when done, -1 with an
 * exception set, or 1 (with nothing changed) for any other proxy or an info that is not the
 * four values of _DESCRIBE (its Python _setup then). */
static int setup_socket(CallPath* rt, PyObject* self, PyObject* info, PyObject* real) {
  if (!is_a(self, socket_state_type) || !PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) != 4)
    return 1;
  if (socket_module == NULL && (socket_module = PyImport_ImportModule("socket")) == NULL) return -1;
  PyObject* timeout = PyObject_CallMethodNoArgs(socket_module, s_getdefaulttimeout);
  PyObject* oid = NULL;
  if (timeout != NULL) { /* new_oid() */
    rt->oids += 1;
    oid = next_oid();
  }
  if (oid == NULL) {
    Py_XDECREF(timeout);
    return -1;
  }
  SocketState* sock = (SocketState*)self;
  Py_XSETREF(sock->proxy.real, Py_NewRef(real));
  Py_XSETREF(sock->proxy.oid, oid);
  Py_XSETREF(sock->proxy.fd, Py_NewRef(PyTuple_GET_ITEM(info, 0)));
  for (int i = 0; i < 3; i++) /* family, type, proto */
    Py_XSETREF(sock->fields[SOCK_FAMILY + i], Py_NewRef(PyTuple_GET_ITEM(info, 1 + i)));
  Py_XSETREF(sock->fields[SOCK_TIMEOUT], timeout);
  Py_XSETREF(sock->fields[SOCK_IO_REFS], PyLong_FromLong(0)); /* a small int: never fails */
  Py_XSETREF(sock->fields[SOCK_CLOSED], Py_NewRef(Py_False));
  return track_descriptor(rt, sock->proxy.fd);
}

/* FORM_NEW: self.__init__(*argv): makes the real object, records its description (what
 * replay builds the proxy from) and sets the proxy up from both. */
static PyObject* construct(BoundaryMethod* m, PyObject* self, PyObject** stack, Py_ssize_t count) {
  Key key = KEY_PARTS(NULL, stack + 2, count);
  CallPath* rt = m->runtime;
  stack[1] = m->method; /* the vectorcall offset's slot, which the callee may borrow */
  open_call();          /* the caller checked that this call is recorded */
  size_t nargsf = (size_t)count | PY_VECTORCALL_ARGUMENTS_OFFSET;
  PyObject* real = PyObject_Vectorcall(m->method, stack + 2, nargsf, NULL);
  PyObject* info = real != NULL ? parts_of(real, m->state) : NULL;
  close_call(rt);
  if (info == NULL) {
    record_raised(rt, KIND_CALL, m->name, &key, Py_None);
  } else {
    info = record_returned(rt, m->name, &key, info);
  }
  key_release(&key);
  int done = -1;
  if (info != NULL) {
    done = setup_socket(rt, self, info, real);
    if (done == 1) { /* not a SocketState: its Python _setup */
      PyObject* args[3] = {self, info, real};
      PyObject* none =
          PyObject_VectorcallMethod(s_setup, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
      done = none != NULL ? 0 : -1;
      Py_XDECREF(none);
    }
    Py_DECREF(info);
  }
  Py_XDECREF(real);
  if (done < 0) return NULL;
  Py_RETURN_NONE;
}

/* FORM_CURSOR: Connection.execute(*argv): the cursor proxy that Connection.execute makes
 * (Cursor.__init__: its connection, the real connection's new cursor, the next object id,
 * the connection's row factory), then the cursor's execute twin with argv. stack[2 ...]
 * holds argv, `count` of them. */
static PyObject* cursor_execute(BoundaryMethod* m, PyObject* self, PyObject** stack,
                                Py_ssize_t count) {
  PyTypeObject* cls = (PyTypeObject*)PyTuple_GET_ITEM(m->state, 0);
  PyObject *execute = PyTuple_GET_ITEM(m->state, 1), *cursor = NULL, *result = NULL;
  PyObject* real = PROXY_REAL(self);
  PyObject* factory = real != NULL ? PyObject_GetAttr(self, s_row_factory) : NULL;
  PyObject* made[2] = {NULL, real};
  PyObject* real_cursor = factory == NULL   ? NULL
                          : real == Py_None ? Py_NewRef(Py_None)
                                            : call_real(method_of(m, real), made, 1);
  if (real_cursor != NULL) cursor = cls->tp_new(cls, empty_tuple, NULL);
  if (cursor != NULL) {
    ProxyState* state = (ProxyState*)cursor;
    Py_XSETREF(state->real, Py_NewRef(real_cursor));
    m->runtime->oids += 1;
    Py_XSETREF(state->oid, next_oid()); /* new_oid() */
    if (state->oid != NULL &&
        set_state_field(cursor, cursor_state_type, offsetof(CursorState, connection), s_connection,
                        self) == 0 &&
        set_state_field(cursor, cursor_state_type, offsetof(CursorState, row_factory),
                        s_row_factory, factory) == 0) {
      stack[1] = cursor;
      size_t nargsf = (size_t)(1 + count) | PY_VECTORCALL_ARGUMENTS_OFFSET;
      result = PyObject_Vectorcall(execute, stack + 1, nargsf, NULL);
    }
  }
  Py_XDECREF(cursor);
  Py_XDECREF(real_cursor);
  Py_XDECREF(factory);
  Py_XDECREF(real);
  return result;
}

/* FORM_CLOSE: Socket.close(); NULL with no exception set when self's state is not plain
 * ints (the Python method then). */
static PyObject* close_socket(BoundaryMethod* m, PyObject* self, PyObject** stack) {
  int refs_ok, fd_ok;
  long refs =
      int_attribute(self, socket_state_type, SOCKET_FIELD(SOCK_IO_REFS), s_io_refs, &refs_ok);
  long fd = int_attribute(self, proxy_type, offsetof(ProxyState, fd), s_fd, &fd_ok);
  if (!refs_ok || !fd_ok) return NULL;
  if (set_state_field(self, socket_state_type, SOCKET_FIELD(SOCK_CLOSED), s_closed, Py_True) < 0)
    return NULL;
  if (refs > 0 || fd < 0) Py_RETURN_NONE;
  PyObject *oid = PROXY_OID(self), *result = NULL;
  PyObject* real = oid != NULL ? PROXY_REAL(self) : NULL;
  Key key = KEY_PARTS(oid, NULL, 0);
  if (real != NULL) {
    stack[1] = real;
    result = run_method(m->runtime, KIND_CALL, m->name, &key, Py_None, method_of(m, real), stack, 1,
                        NULL, 1);
  }
  if (result != NULL) {
    PyObject* closed = PyLong_FromLong(-1);
    if (closed == NULL ||
        set_state_field(self, proxy_type, offsetof(ProxyState, fd), s_fd, closed) < 0)
      Py_CLEAR(result);
    Py_XDECREF(closed);
  }
  key_release(&key);
  Py_XDECREF(real);
  Py_XDECREF(oid);
  return result;
}

/* FORM_TIMEOUT: Socket.settimeout(value) on a SocketState with its real socket, for a value
 * that is None, a float or an int; NULL with no exception set otherwise, and for a negative
 * value (the Python method then, which says what is wrong). Not a boundary call, so the same
 * on any thread. */
static PyObject* set_timeout(BoundaryMethod* m, PyObject* self, PyObject* value) {
  PyObject* real = is_a(self, socket_state_type) ? ((ProxyState*)self)->real : NULL;
  if (real == NULL || real == Py_None) return NULL;
  PyObject* timeout;
  if (value == Py_None || PyFloat_CheckExact(value))
    timeout = Py_NewRef(value);
  else if (PyLong_CheckExact(value))
    timeout = PyNumber_Float(value); /* float(value) */
  else
    return NULL;
  if (timeout == NULL) return NULL;
  if (timeout != Py_None && PyFloat_AS_DOUBLE(timeout) < 0) {
    Py_DECREF(timeout);
    return NULL;
  }
  Py_INCREF(real);
  PyObject* stack[3] = {NULL, real, timeout};
  PyObject* result = call_real(method_of(m, real), stack, 2);
  Py_DECREF(real);
  if (result != NULL) {
    SocketState* sock = (SocketState*)self;
    Py_XSETREF(sock->fields[SOCK_TIMEOUT], Py_NewRef(timeout));
    Py_SETREF(result, Py_NewRef(Py_None));
  }
  Py_DECREF(timeout);
  return result;
}

/* FORM_LOCK: whether sealtrace's own code runs now (state[0] is _thread_boundary._outside,
 * a list whose first item counts how deep): its locks are real and make no event, which the
 * Python method sees to. */
static int outside_the_program(BoundaryMethod* m) {
  PyObject* outside = PyTuple_GET_ITEM(m->state, 0);
  if (!PyList_CheckExact(outside) || PyList_GET_SIZE(outside) < 1) return 1;
  PyObject* depth = PyList_GET_ITEM(outside, 0);
  return !PyLong_CheckExact(depth) || Py_SIZE(depth) != 0;
}

/* FORM_LOCK: real.acquire(blocking, timeout) as Runtime.sync records a lock proxy's acquire:
 * the key (oid, bool(blocking), timeout), the result kept as it is when a bool (None
 * otherwise, as _outcome_only keeps it), the real result returned. __enter__ passes no
 * arguments: acquire()'s defaults, True and -1. */
static PyObject* lock_acquire(BoundaryMethod* m, PyObject* oid, PyObject* real,
                              PyObject* const* argv, Py_ssize_t count) {
  static PyObject* minus_one = NULL;
  if (minus_one == NULL && (minus_one = PyLong_FromLong(-1)) == NULL) return NULL;
  PyObject* blocking = count > 0 ? argv[0] : Py_True;
  PyObject* timeout = count > 1 ? argv[1] : minus_one;
  int truth = PyObject_IsTrue(blocking); /* bool(blocking) raises before anything is done */
  if (truth < 0) return NULL;
  PyObject* items[2] = {truth ? Py_True : Py_False, timeout};
  Key key = KEY_PARTS(oid, items, 2);
  CallPath* rt = m->runtime;
  PyObject* stack[4] = {NULL, real, blocking, timeout};
  open_call(); /* the caller checked that this call is recorded */
  PyObject* result = call_real(method_of(m, real), stack, 3);
  close_call(rt);
  if (result == NULL) {
    result = record_raised(rt, KIND_CALL, m->name, &key, Py_None);
  } else if (PyBool_Check(result)) {
    result = record_returned(rt, m->name, &key, result);
  } else {
    PyObject* kept = record_returned(rt, m->name, &key, Py_NewRef(Py_None));
    if (kept == NULL) Py_CLEAR(result);
    Py_XDECREF(kept);
  }
  key_release(&key);
  return result;
}

static PyObject* method_vectorcall(BoundaryMethod* m, PyObject* const* args, size_t nargsf,
                                   PyObject* kwnames) {
  if (m->runtime == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "the method has been torn down");
    return NULL;
  }
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), given = nargs - 1;
  Py_ssize_t ndefaults = m->ndefaults;
  int keywords = kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0;
  if (m->form == FORM_FUNCTION) {
    if (keywords || !recorded_here(m->runtime)) return method_fallback(m, args, nargsf, kwnames);
    return call_function(m, args, nargs);
  }
  if (m->form == FORM_TIMEOUT) {
    PyObject* result = !keywords && nargs == 2 ? set_timeout(m, args[0], args[1]) : NULL;
    if (result == NULL && !PyErr_Occurred()) return method_fallback(m, args, nargsf, kwnames);
    return result;
  }
  if (keywords || given < m->required || (m->maximum >= 0 && given > m->maximum) ||
      !recorded_here(m->runtime) || (m->guard && socket_closed(args[0])) ||
      (m->form == FORM_LOCK && outside_the_program(m)))
    return method_fallback(m, args, nargsf, kwnames);
  PyObject* self = args[0];
  /* The arguments as the Python method sees them: defaults filled in. */
  Py_ssize_t count = given > m->required + ndefaults ? given : m->required + ndefaults;
  PyObject *small[2 + INVOKE_STACK], **stack = stack_of(small, count + 2);
  if (stack == NULL) return NULL;
  PyObject** argv = stack + 2; /* stack[0]: the vectorcall offset; stack[1]: the real object */
  for (Py_ssize_t i = 0; i < count; i++)
    argv[i] = i < given ? args[1 + i] : PyTuple_GET_ITEM(m->defaults, i - m->required);
  PyObject *oid = NULL, *real = NULL, *payload = NULL, *result = NULL;
  Key key = KEY_OF(NULL);
  if (m->form == FORM_NEW) { /* no _oid and no _real yet: the proxy is being made */
    result = construct(m, self, stack, count);
    goto done;
  }
  if (m->form == FORM_CURSOR) {
    result = cursor_execute(m, self, stack, count);
    goto done;
  }
  if (m->form == FORM_CLOSE) {
    result = close_socket(m, self, stack);
    if (result == NULL && !PyErr_Occurred()) result = method_fallback(m, args, nargsf, kwnames);
    goto done;
  }
  oid = PROXY_OID(self);
  real = oid != NULL ? PROXY_REAL(self) : NULL;
  if (real == NULL) goto done;
  stack[1] = real;
  if (m->form == FORM_LOCK) {
    result = lock_acquire(m, oid, real, argv, count);
    goto done;
  }
  if (m->form == FORM_RECV_INTO) {
    int handled;
    result = recv_into(m, oid, real, argv, &handled);
    if (!handled) result = method_fallback(m, args, nargsf, kwnames);
    goto done;
  }
  /* The key: (oid, *arguments), less the data of an output. */
  Py_ssize_t skip = m->form == FORM_OUTPUT;
  key = KEY_PARTS(oid, argv + skip, count - skip);
  if (m->form == FORM_OUTPUT) {
    payload = PyBytes_CheckExact(argv[0]) ? Py_NewRef(argv[0])
                                          : PyObject_CallOneArg((PyObject*)&PyBytes_Type, argv[0]);
    if (payload == NULL) goto done;
    argv[0] = payload;
    result = run_method(m->runtime, KIND_OUTPUT, m->name, &key, payload, method_of(m, real), stack,
                        1 + count, NULL, 1);
    goto done;
  }
  result = run_method(m->runtime, KIND_CALL, m->name, &key, Py_None, method_of(m, real), stack,
                      1 + count, m->form == FORM_STATE ? state_parts(m, real) : NULL, 1);
  if (result == NULL) goto done;
  if (m->form == FORM_ROW) {
    PyObject* factory =
        state_field(self, cursor_state_type, offsetof(CursorState, row_factory), s_row_factory);
    if (factory == NULL) {
      Py_CLEAR(result);
    } else {
      if (factory != Py_None) Py_SETREF(result, PyObject_CallMethodOneArg(self, s_row, result));
      Py_DECREF(factory);
    }
  } else if (m->form == FORM_STATE) {
    /* self.description, self.rowcount, self.lastrowid = result */
    Py_ssize_t n = PyTuple_GET_SIZE(m->state);
    if (!PyTuple_CheckExact(result) || PyTuple_GET_SIZE(result) != n) {
      PyErr_SetString(PyExc_ValueError, "the recorded state does not match");
      Py_CLEAR(result);
      goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject *name = PyTuple_GET_ITEM(m->state, i), *value = PyTuple_GET_ITEM(result, i);
      size_t offset = offsetof(CursorState, state) + (size_t)i * sizeof(PyObject*);
      int status = m->cursor_state ? set_state_field(self, cursor_state_type, offset, name, value)
                                   : PyObject_SetAttr(self, name, value);
      if (status < 0) {
        Py_CLEAR(result);
        goto done;
      }
    }
    Py_SETREF(result, Py_NewRef(self));
  }
done:
  Py_XDECREF(payload);
  key_release(&key);
  Py_XDECREF(real);
  Py_XDECREF(oid);
  release_stack(stack, small);
  return result;
}

static PyObject* method_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static char* names[] = {"runtime",  "name",     "method", "fallback", "form", "required",
                          "defaults", "variadic", "guard",  "state",    NULL};
  PyObject *runtime, *name, *method, *fallback, *defaults, *state;
  Py_ssize_t required;
  int form, variadic, guard;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OUOOinO!ppO!:BoundaryMethod", names, &runtime,
                                   &name, &method, &fallback, &form, &required, &PyTuple_Type,
                                   &defaults, &variadic, &guard, &PyTuple_Type, &state))
    return NULL;
  if (!PyObject_TypeCheck(runtime, callpath_type)) {
    PyErr_SetString(PyExc_TypeError, "a BoundaryMethod needs the C per-call path's runtime");
    return NULL;
  }
  if (form < 0 || form >= FORM_COUNT || required < 0 || !PyCallable_Check(fallback) ||
      (form == FORM_FUNCTION || form == FORM_NEW ? !PyCallable_Check(method)
                                                 : !PyUnicode_Check(method)) ||
      (form == FORM_FUNCTION && (required || !variadic || guard)) ||
      (form == FORM_STATE || form == FORM_NEW || form == FORM_CURSOR || form == FORM_LOCK) !=
          (PyTuple_GET_SIZE(state) > 0) ||
      (form == FORM_LOCK &&
       (PyTuple_GET_SIZE(state) != 1 || !PyList_CheckExact(PyTuple_GET_ITEM(state, 0)))) ||
      (form == FORM_OUTPUT && required < 1) ||
      (form == FORM_RECV_INTO && (required != 1 || PyTuple_GET_SIZE(defaults) != 2)) ||
      (form == FORM_CLOSE && (required || PyTuple_GET_SIZE(defaults) || variadic)) ||
      (form == FORM_TIMEOUT && (required != 1 || PyTuple_GET_SIZE(defaults) || variadic)) ||
      (form == FORM_LOCK && (required || variadic || PyTuple_GET_SIZE(defaults) > 2))) {
    PyErr_SetString(PyExc_ValueError, "this method cannot take that form");
    return NULL;
  }
  if (form == FORM_CURSOR) {
    PyObject* cls = PyTuple_GET_ITEM(state, 0);
    PyObject* execute = PyTuple_GET_SIZE(state) == 2 ? PyTuple_GET_ITEM(state, 1) : NULL;
    if (execute == NULL || !PyType_Check(cls) ||
        !PyType_IsSubtype((PyTypeObject*)cls, proxy_type) || Py_TYPE(execute) != method_type ||
        ((BoundaryMethod*)execute)->form != FORM_STATE) {
      PyErr_SetString(PyExc_TypeError,
                      "state must be a cursor class with ProxyState and its execute twin");
      return NULL;
    }
  }
  for (Py_ssize_t i = 0; form != FORM_CURSOR && form != FORM_LOCK && i < PyTuple_GET_SIZE(state);
       i++) {
    PyObject* item = PyTuple_GET_ITEM(state, i);
    int describes = PyCallable_Check(item) || is_field(item);
    if (form == FORM_NEW ? !describes : !PyUnicode_Check(item)) {
      PyErr_SetString(PyExc_TypeError, "state must be names, or functions to describe");
      return NULL;
    }
  }
  BoundaryMethod* m = (BoundaryMethod*)type->tp_alloc(type, 0);
  if (m == NULL) return NULL;
  m->vectorcall = (vectorcallfunc)method_vectorcall;
  m->runtime = (CallPath*)Py_NewRef(runtime);
  m->name = Py_NewRef(name);
  m->method = Py_NewRef(method);
  if (PyUnicode_Check(m->method)) PyUnicode_InternInPlace(&m->method);
  m->fallback = Py_NewRef(fallback);
  m->defaults = Py_NewRef(defaults);
  m->state = Py_NewRef(state);
  m->required = required;
  m->ndefaults = PyTuple_GET_SIZE(defaults);
  m->maximum = variadic ? -1 : required + m->ndefaults;
  m->form = form;
  m->guard = guard;
  if (form == FORM_STATE) {
    m->cursor_state = PyObject_RichCompareBool(state, cursor_state_names, Py_EQ);
    if (m->cursor_state < 0) Py_CLEAR(m);
  }
  return (PyObject*)m;
}

static int method_traverse(BoundaryMethod* m, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(m));
  Py_VISIT(m->runtime);
  Py_VISIT(m->name);
  Py_VISIT(m->method);
  Py_VISIT(m->fallback);
  Py_VISIT(m->defaults);
  Py_VISIT(m->state);
  Py_VISIT(m->real_type);
  Py_VISIT(m->real_method);
  Py_VISIT(m->parts_type);
  Py_VISIT(m->parts);
  return 0;
}

static int method_clear(BoundaryMethod* m) {
  Py_CLEAR(m->runtime);
  Py_CLEAR(m->name);
  Py_CLEAR(m->method);
  Py_CLEAR(m->fallback);
  Py_CLEAR(m->defaults);
  Py_CLEAR(m->state);
  Py_CLEAR(m->real_type);
  Py_CLEAR(m->real_method);
  Py_CLEAR(m->parts_type);
  Py_CLEAR(m->parts);
  return 0;
}

static void method_dealloc(PyObject* self) { free_cleared(self, (inquiry)method_clear); }

/* Looked up on an instance, it binds to it as a function does. */
static PyObject* method_get(PyObject* m, PyObject* obj, PyObject* type) {
  (void)type;
  if (obj == NULL || obj == Py_None) return Py_NewRef(m);
  return PyMethod_New(m, obj);
}

/* A BoundaryFunction (the twin of a builtin function) never binds: a class that keeps one as
   an attribute (logging.Formatter.converter = time.localtime) calls it without the instance,
   as it would the builtin. */
static PyObject* function_get(PyObject* m, PyObject* obj, PyObject* type) {
  (void)obj;
  (void)type;
  return Py_NewRef(m);
}

static PyObject* method_getattr_of_fallback(BoundaryMethod* m, void* name) {
  return PyObject_GetAttrString(m->fallback, (const char*)name);
}

/* What it wraps: the function (FORM_FUNCTION), or the Python method it stands for. */
static PyObject* method_wrapped(BoundaryMethod* m, void* unused) {
  (void)unused;
  return Py_NewRef(m->form == FORM_FUNCTION ? m->method : m->fallback);
}

static PyGetSetDef method_getset[] = {
    {"__wrapped__", (getter)method_wrapped, NULL, NULL, NULL},
    {"__name__", (getter)method_getattr_of_fallback, NULL, NULL, "__name__"},
    {"__qualname__", (getter)method_getattr_of_fallback, NULL, NULL, "__qualname__"},
    {"__doc__", (getter)method_getattr_of_fallback, NULL, NULL, "__doc__"},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef method_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(BoundaryMethod, vectorcall), READONLY, NULL},
    {"name", T_OBJECT, offsetof(BoundaryMethod, name), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot method_slots[] = {
    {Py_tp_new, method_new},
    {Py_tp_dealloc, method_dealloc},
    {Py_tp_traverse, method_traverse},
    {Py_tp_clear, method_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, method_get},
    {Py_tp_getset, method_getset},
    {Py_tp_members, method_members},
    {0, NULL},
};

static PyType_Slot function_slots[] = {
    {Py_tp_new, method_new},
    {Py_tp_dealloc, method_dealloc},
    {Py_tp_traverse, method_traverse},
    {Py_tp_clear, method_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, function_get},
    {Py_tp_getset, method_getset},
    {Py_tp_members, method_members},
    {0, NULL},
};

/* The same object as a BoundaryMethod, without Py_TPFLAGS_METHOD_DESCRIPTOR: the interpreter
   would otherwise call `instance.attribute(...)` with the instance first, whatever
   tp_descr_get says. */
FP_DEFINE PyType_Spec function_spec = {
    .name = "sealtrace.proxy._fastpath.BoundaryFunction",
    .basicsize = sizeof(BoundaryMethod),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = function_slots,
};

FP_DEFINE PyType_Spec method_spec = {
    .name = "sealtrace.proxy._fastpath.BoundaryMethod",
    .basicsize = sizeof(BoundaryMethod),
    /* Immutable as a method descriptor type must be for the interpreter to specialise
     * `proxy.method(...)` on it (LOAD_METHOD_WITH_VALUES): a mutable descriptor type sends
     * every such load down the generic lookup. */
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
             Py_TPFLAGS_METHOD_DESCRIPTOR | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = method_slots,
};
