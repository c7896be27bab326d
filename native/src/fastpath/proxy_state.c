#include "fastpath_internal.h"

/* -- proxy state ----------------------------------------------------------------------------
 *
 * ProxyState is a base of the proxy classes that the C path records with (proxy/_runtime.py's
 * proxy_bases): it holds the three attributes that every twin reads, `_oid`, `_real` and
 * `_fd`, in its struct rather than in the instance's dictionary. Python code reads and
 * writes them as before (through member descriptors); the twins read them with no lookup.
 * Replay and the Python per-call path build the same proxy classes without it. */

static int proxy_traverse(ProxyState* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(self->oid);
  Py_VISIT(self->real);
  Py_VISIT(self->fd);
  return 0;
}

static int proxy_clear(ProxyState* self) {
  Py_CLEAR(self->oid);
  Py_CLEAR(self->real);
  Py_CLEAR(self->fd);
  return 0;
}

/* The tp_dealloc of this module's GC types whose `clear` (their own tp_clear, not a
 * subclass's) releases all they hold. They are heap types: the instance holds a reference
 * to its type, which a heap subclass leaves to its base to release. */
void free_cleared(PyObject* self, inquiry clear) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  clear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

static void proxy_dealloc(PyObject* self) { free_cleared(self, (inquiry)proxy_clear); }

/* A subclass of ProxyState (CursorState, SocketState) adds object fields only, in a row right
 * after it: STATE_FIELDS counts them from the struct, so traverse and clear cover every one
 * without a list to keep in step. */
#define STATE_FIELDS(type) ((int)((sizeof(type) - sizeof(ProxyState)) / sizeof(PyObject*)))

static int fields_traverse(ProxyState* self, int n, visitproc visit, void* arg) {
  PyObject** fields = (PyObject**)(self + 1);
  for (int i = 0; i < n; i++) Py_VISIT(fields[i]);
  return proxy_traverse(self, visit, arg);
}

static int fields_clear(ProxyState* self, int n) {
  PyObject** fields = (PyObject**)(self + 1);
  for (int i = 0; i < n; i++) Py_CLEAR(fields[i]);
  return proxy_clear(self);
}

static PyMemberDef proxy_members[] = {
    {"_oid", T_OBJECT_EX, offsetof(ProxyState, oid), 0, NULL},
    {"_real", T_OBJECT_EX, offsetof(ProxyState, real), 0, NULL},
    {"_fd", T_OBJECT_EX, offsetof(ProxyState, fd), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot proxy_slots[] = {
    {Py_tp_doc, "The state of a proxy that the C twins read: _oid, _real and _fd."},
    /* tp_new is object's: it also sets up the subclass instance's attribute values in
     * place (CPython 3.11's managed dict), which PyType_GenericNew does not */
    {Py_tp_dealloc, proxy_dealloc},
    {Py_tp_traverse, proxy_traverse},
    {Py_tp_clear, proxy_clear},
    {Py_tp_members, proxy_members},
    {0, NULL},
};

FP_DEFINE PyType_Spec proxy_spec = {
    .name = "sealtrace.proxy._fastpath.ProxyState",
    .basicsize = sizeof(ProxyState),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = proxy_slots,
};

_Static_assert(offsetof(CursorState, connection) == sizeof(ProxyState) &&
                   STATE_FIELDS(CursorState) == 5,
               "CursorState adds its five object fields right after ProxyState");

FP_DEFINE PyTypeObject* cursor_state_type;
FP_DEFINE PyObject* cursor_state_names; /* ("description", "rowcount", "lastrowid") */

static PyObject* cursor_state_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  (void)args;
  (void)kwargs; /* Cursor.__init__ takes them */
  PyObject* self = PyBaseObject_Type.tp_new(type, empty_tuple, NULL);
  if (self == NULL) return NULL;
  CursorState* cursor = (CursorState*)self;
  cursor->state[0] = Py_NewRef(Py_None);
  cursor->state[1] = PyLong_FromLong(-1);
  cursor->state[2] = Py_NewRef(Py_None);
  if (cursor->state[1] == NULL) Py_CLEAR(self);
  return self;
}

static int cursor_state_traverse(CursorState* self, visitproc visit, void* arg) {
  return fields_traverse(&self->proxy, STATE_FIELDS(CursorState), visit, arg);
}

static int cursor_state_clear(CursorState* self) {
  return fields_clear(&self->proxy, STATE_FIELDS(CursorState));
}

static void cursor_state_dealloc(PyObject* self) {
  free_cleared(self, (inquiry)cursor_state_clear);
}

static PyMemberDef cursor_state_members[] = {
    {"connection", T_OBJECT_EX, offsetof(CursorState, connection), 0, NULL},
    {"row_factory", T_OBJECT_EX, offsetof(CursorState, row_factory), 0, NULL},
    {"description", T_OBJECT_EX, offsetof(CursorState, state[0]), 0, NULL},
    {"rowcount", T_OBJECT_EX, offsetof(CursorState, state[1]), 0, NULL},
    {"lastrowid", T_OBJECT_EX, offsetof(CursorState, state[2]), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot cursor_state_slots[] = {
    {Py_tp_doc,
     "ProxyState of a sqlite3 cursor: also its connection, row factory and the "
     "state its last statement left."},
    {Py_tp_new, cursor_state_new},
    {Py_tp_dealloc, cursor_state_dealloc},
    {Py_tp_traverse, cursor_state_traverse},
    {Py_tp_clear, cursor_state_clear},
    {Py_tp_members, cursor_state_members},
    {0, NULL},
};

FP_DEFINE PyType_Spec cursor_state_spec = {
    .name = "sealtrace.proxy._fastpath.CursorState",
    .basicsize = sizeof(CursorState),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = cursor_state_slots,
};

_Static_assert(offsetof(SocketState, fields) == sizeof(ProxyState) &&
                   STATE_FIELDS(SocketState) == SOCK_FIELDS,
               "SocketState adds its fields right after ProxyState");

FP_DEFINE PyTypeObject* socket_state_type;

static int socket_state_traverse(SocketState* self, visitproc visit, void* arg) {
  return fields_traverse(&self->proxy, STATE_FIELDS(SocketState), visit, arg);
}

static int socket_state_clear(SocketState* self) {
  return fields_clear(&self->proxy, STATE_FIELDS(SocketState));
}

static void socket_state_dealloc(PyObject* self) {
  free_cleared(self, (inquiry)socket_state_clear);
}

static PyMemberDef socket_state_members[] = {
    {"_family", T_OBJECT_EX, SOCKET_FIELD(SOCK_FAMILY), 0, NULL},
    {"_type", T_OBJECT_EX, SOCKET_FIELD(SOCK_TYPE), 0, NULL},
    {"proto", T_OBJECT_EX, SOCKET_FIELD(SOCK_PROTO), 0, NULL},
    {"_timeout", T_OBJECT_EX, SOCKET_FIELD(SOCK_TIMEOUT), 0, NULL},
    {"_io_refs", T_OBJECT_EX, SOCKET_FIELD(SOCK_IO_REFS), 0, NULL},
    {"_closed", T_OBJECT_EX, SOCKET_FIELD(SOCK_CLOSED), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot socket_state_slots[] = {
    {Py_tp_doc,
     "ProxyState of a socket: also its family, type, protocol, timeout, open file "
     "objects and whether it was closed."},
    {Py_tp_dealloc, socket_state_dealloc},
    {Py_tp_traverse, socket_state_traverse},
    {Py_tp_clear, socket_state_clear},
    {Py_tp_members, socket_state_members},
    {0, NULL},
};

FP_DEFINE PyType_Spec socket_state_spec = {
    .name = "sealtrace.proxy._fastpath.SocketState",
    .basicsize = sizeof(SocketState),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = socket_state_slots,
};

/* An int attribute's value as a long (state_field): 0 and *ok unset if it is not an exact int
 * that fits. */
long int_attribute(PyObject* self, PyTypeObject* state, size_t offset, PyObject* name, int* ok) {
  PyObject* value = state_field(self, state, offset, name);
  long n = 0;
  *ok = 0;
  if (value != NULL && PyLong_CheckExact(value)) {
    n = PyLong_AsLong(value);
    *ok = !(n == -1 && PyErr_Occurred());
  }
  Py_XDECREF(value);
  if (PyErr_Occurred()) PyErr_Clear(); /* the Python method says what is wrong */
  return n;
}
