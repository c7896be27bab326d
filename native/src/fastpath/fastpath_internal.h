/* sealtrace.proxy._fastpath: the recorder's per-call path in C.
 *
 * RecordRuntime.call and .output run on the application's thread for every boundary call.
 * This module is their C twin: it checks the gate, makes the call, and frames the record
 * (callee index, argument digest, status, encoded result) straight into the runtime's buffer,
 * for the results and keys that nearly every call has. Anything else (blobs, extension
 * types, exceptions, a key that is not plain) is handed back to the Python implementation in
 * proxy/_runtime.py, which stays the reference: both must write the same bytes, and
 * tests/proxy/test_record_stream.py pins them. BoundaryMethod (below) gives proxy classes
 * and call entries C twins of their hot Python methods, which call this path directly, and
 * ProxyState and CursorState hold the proxy state those twins read and write.
 *
 * Like the rest of the recorder it must never crash or block the application: every error
 * after the real call has returned ends the recording (RecordRuntime._failed), and the
 * call's result is returned untouched. It never executes Python code that the value being
 * recorded could supply: only exact built-in types are encoded here.
 */
/* The private header of _fastpath's files (one idea each, named for it): what more than
 * one of them uses. Functions shared between files are hidden, so the module exports
 * what it did as one file (PyInit__fastpath and blake2b_digest); hot helpers shared
 * between files are static inline here, as they were in the one file. */
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <structmember.h>
#include <time.h>

#include "blake2b.h"

/* Shared between the module's files, not exported from it. The module is compiled as one
 * translation unit (fastpath.c includes the files, FP_UNITY), as it was before it was split
 * into files of one idea: what the files share is then static, so the compiler inlines and
 * lays out the per-call path as it did. Compiled file by file, they are hidden instead. */
#ifdef FP_UNITY
#define FP_HIDDEN static
#define FP_SHARED static
#define FP_DEFINE static
#else
#define FP_HIDDEN __attribute__((visibility("hidden")))
#define FP_SHARED extern FP_HIDDEN
#define FP_DEFINE
#endif

/* The recording format's constants (proxy/_stream.py, proxy/_codec.py). The module exports
 * them and tests/proxy/test_fastpath.py checks them against the Python definitions. */
enum { KIND_CALL = 5, KIND_OUTPUT = 6, KIND_THREAD = 10 };
#define PENDING 0x80 /* on a record's kind: it carries its key's material, not yet the digest */
/* What a pending record's material starts with (start_record); the digest's own domain
 * bytes ("r" of a repr, "e" of a fingerprint encoding) are args_digest's, _runtime.py. */
#define MATERIAL_PLAIN 'p'
#define MATERIAL_ENUM 'e'
enum { STATUS_RETURNED = 0, STATUS_RAISED = 1 };
enum {
  TAG_NONE = 0,
  TAG_FALSE = 1,
  TAG_TRUE = 2,
  TAG_INT = 3,
  TAG_FLOAT = 5,
  TAG_STR = 7,
  TAG_BYTES = 8,
  TAG_TUPLE = 16,
  TAG_LIST = 17,
  TAG_DICT = 18
};
#define BLOB_THRESHOLD 4096
#define ARGS_DIGEST_SIZE 16
#define DRAIN_AT (64 * 1024)
#define RECENT_LIMIT 4096
#define RECENT_REPR_MAX 256
#define MAX_DEPTH 200
#define KEY_DEPTH 3
#define HEAD_BITS 7
#define HEAD_CACHE (1 << HEAD_BITS) /* at most half of it is filled */
/* Bytes this long are copied into the record buffer straight from their object. */
#define LONG_PAYLOAD 256

/* encode() results: the value is written, or it is not one this module encodes (the
 * caller hands it to the Python encoder), or an exception is set. */
enum { ENCODED = 0, DEFERRED = 1, FAILED = -1 };

/* What the common calls never run (errors, a callee's first call, a key that is not plain,
 * a growing buffer): out of line, so the hot path spans fewer cache lines (CMakeLists.txt). */
#define COLD __attribute__((cold, noinline))

/* -- a growable scratch buffer ---------------------------------------------------------- */

typedef struct {
  unsigned char* data;
  Py_ssize_t size, capacity;
} Scratch;

FP_HIDDEN COLD int scratch_grow(Scratch* s, Py_ssize_t extra);

static inline int scratch_reserve(Scratch* s, Py_ssize_t extra) {
  return s->size + extra <= s->capacity ? 0 : scratch_grow(s, extra);
}

static inline int put_byte(Scratch* s, unsigned char byte) {
  if (s->size == s->capacity && scratch_reserve(s, 1) < 0) return -1;
  s->data[s->size++] = byte;
  return 0;
}

/* memcpy for the few bytes that most parts of a record are, without a call into the C
 * library: fixed-size copies that overlap, never reading past either end. */
static inline void copy_bytes(unsigned char* to, const unsigned char* from, size_t n) {
  if (n > 16) {
    memcpy(to, from, n);
  } else if (n >= 8) {
    uint64_t head, tail;
    memcpy(&head, from, 8);
    memcpy(&tail, from + n - 8, 8);
    memcpy(to, &head, 8);
    memcpy(to + n - 8, &tail, 8);
  } else if (n >= 4) {
    uint32_t head, tail;
    memcpy(&head, from, 4);
    memcpy(&tail, from + n - 4, 4);
    memcpy(to, &head, 4);
    memcpy(to + n - 4, &tail, 4);
  } else if (n > 0) {
    to[0] = from[0];
    to[n / 2] = from[n / 2];
    to[n - 1] = from[n - 1];
  }
}

static inline int put_bytes(Scratch* s, const void* bytes, Py_ssize_t n) {
  if (scratch_reserve(s, n) < 0) return -1;
  copy_bytes(s->data + s->size, bytes, (size_t)n);
  s->size += n;
  return 0;
}

/* Writes a varint at `at`; returns the end of it. */
static inline unsigned char* write_varint(unsigned char* at, uint64_t value) {
  while (value > 0x7F) {
    *at++ = (unsigned char)((value & 0x7F) | 0x80);
    value >>= 7;
  }
  *at++ = (unsigned char)value;
  return at;
}

static inline int put_varint(Scratch* s, uint64_t value) {
  if (scratch_reserve(s, 10) < 0) return -1;
  s->size = write_varint(s->data + s->size, value) - s->data;
  return 0;
}

/* -- the value encoding (encode.c) ---------------------------------------------------- */

FP_SHARED PyObject* int_enums; /* configure(): the int enum classes */

FP_HIDDEN int encode(Scratch* s, PyObject* value, int depth, int lenient);
FP_HIDDEN int put_payload(Scratch* s, const char* raw, Py_ssize_t n, Py_ssize_t* inserted);
FP_HIDDEN void forget_enums(void);
FP_HIDDEN int is_int_enum(PyObject* value);
FP_HIDDEN int put_plain(Scratch* s, PyObject* value, int depth, int* enums);

/* An exact int's value when it fits in 62 bits (what T_INT carries): 1 and *v set, or 0 (a
 * T_BIGINT), or -1 with an exception set. Ints of one or two 30-bit digits, nearly all of
 * them, are read from the digits (CPython 3.11's PyLongObject layout). */
static inline int small_int(PyObject* value, long long* v) {
  Py_ssize_t ndigits = Py_SIZE(value);
  const digit* digits = ((PyLongObject*)value)->ob_digit;
  if (ndigits >= -1 && ndigits <= 1) {
    *v = (long long)digits[0] * ndigits;
    return 1;
  }
  if (ndigits == 2 || ndigits == -2) {
    long long magnitude = (long long)digits[0] | (long long)digits[1] << PyLong_SHIFT;
    *v = ndigits < 0 ? -magnitude : magnitude; /* under 2**60 */
    return 1;
  }
  int overflow;
  *v = PyLong_AsLongLongAndOverflow(value, &overflow);
  if (*v == -1 && PyErr_Occurred()) return -1;
  return !overflow && *v >= -(1LL << 62) && *v < (1LL << 62);
}

/* put_plain of an ASCII str. */
static inline int put_ascii(Scratch* s, PyObject* value) {
  Py_ssize_t n = PyUnicode_GET_LENGTH(value);
  if (!PyUnicode_IS_ASCII(value) || n >= BLOB_THRESHOLD) return DEFERRED;
  if (scratch_reserve(s, 11 + n) < 0) return FAILED;
  unsigned char* at = s->data + s->size;
  *at++ = TAG_STR;
  at = write_varint(at, (uint64_t)n);
  copy_bytes(at, PyUnicode_1BYTE_DATA(value), (size_t)n);
  s->size = at + n - s->data;
  return ENCODED;
}

/* Writes an int (an exact one, or an int enum member: an int subclass keeps int's digits)
 * as T_INT and the zigzag varint of its value; DEFERRED past 62 bits (a T_BIGINT, Python's
 * encoder). */
static inline int put_int(Scratch* s, PyObject* value) {
  long long v;
  int fits = small_int(value, &v);
  if (fits <= 0) return fits < 0 ? FAILED : DEFERRED;
  if (scratch_reserve(s, 11) < 0) return FAILED;
  unsigned char* at = s->data + s->size;
  *at++ = TAG_INT;
  s->size = write_varint(at, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)) - s->data;
  return ENCODED;
}

/* put_plain of one item of a key: ints, strs and None, nearly all of them, in line. */
static inline int put_plain_item(Scratch* s, PyObject* value, int depth, int* enums) {
  if (PyLong_CheckExact(value)) return put_int(s, value);
  if (PyUnicode_CheckExact(value)) return put_ascii(s, value);
  if (value == Py_None) return put_byte(s, TAG_NONE) < 0 ? FAILED : ENCODED;
  if (PyBool_Check(value)) /* a lock's acquire(blocking): its repr is True or False */
    return put_byte(s, value == Py_True ? TAG_TRUE : TAG_FALSE) < 0 ? FAILED : ENCODED;
  return put_plain(s, value, depth, enums);
}

/* -- argument digests (digest.c) ----------------------------------------------------- */

/* What a key holds, as _key_shape in proxy/_runtime.py sees it: nothing but ints, strs and
 * Nones of the exact types (0), or floats, bytes or bools too (SHAPE_INEXACT), or members of
 * known int enums (SHAPE_ENUM); tuples in it count to KEY_DEPTH levels. SHAPE_OTHER: anything
 * else, which Python fingerprints (and learns any new int enum class from). */
enum { SHAPE_INEXACT = 1, SHAPE_ENUM = 2, SHAPE_OTHER = 4 };

/* A call's key. A twin holds it in parts, (head, *items) (with no head: the items), and the
 * tuple is made only when something needs the object (key_object): a plain key is encoded
 * straight from its parts (put_plain_parts). Python's call, invoke and output pass the key
 * itself (KEY_OF). */
typedef struct {
  PyObject* object; /* the key; NULL until made from the parts, then owned here */
  int owned;
  PyObject* head; /* NULL: none */
  PyObject* const* items;
  Py_ssize_t n;
} Key;

#define KEY_OF(obj) ((Key){(obj), 0, NULL, NULL, 0})
#define KEY_PARTS(head, items, n) ((Key){NULL, 0, (head), (items), (n)})

/* What repr() does with an ASCII character in a str: keeps it, or (REPR_ESCAPED) escapes it;
 * quotes decide which quote the repr uses. Filled by PyInit__fastpath. */
enum { REPR_SINGLE = 1, REPR_DOUBLE = 2, REPR_QUOTES = 3, REPR_ESCAPED = 4 };
FP_SHARED unsigned char repr_class[128];

FP_SHARED unsigned char empty_digest[ARGS_DIGEST_SIZE];

FP_HIDDEN COLD int key_shape(PyObject* key, int depth);
FP_HIDDEN COLD PyObject* key_object(Key* key);
FP_HIDDEN PyObject* known_digest(PyObject* recent, PyObject* recent_enum, Scratch* text,
                                 PyObject* key);

static inline void key_release(Key* key) {
  if (key->owned) Py_CLEAR(key->object);
  key->owned = 0;
}

/* put_plain of the tuple that a key's parts make, without making it. */
static inline int put_plain_parts(Scratch* s, const Key* key, int* enums) {
  Py_ssize_t first = key->head != NULL;
  if (scratch_reserve(s, 11) < 0) return FAILED;
  unsigned char* at = s->data + s->size;
  *at++ = TAG_TUPLE;
  s->size = write_varint(at, (uint64_t)(first + key->n)) - s->data;
  int status = first ? put_plain_item(s, key->head, 2, enums) : ENCODED;
  for (Py_ssize_t i = 0; status == ENCODED && i < key->n; i++)
    status = put_plain_item(s, key->items[i], 2, enums);
  return status;
}

/* -- the per-call path (callpath.c, record.c, material.c) ------------------------------ */

typedef struct {
  PyObject_HEAD unsigned long live; /* _live: nonzero while recording; 0 once ended */
  unsigned long main;               /* _main: the thread that installed the recorder */
  unsigned long last_thread;        /* _last_thread: the thread of the last call record */
  unsigned long threads;            /* _threads_started: the highest thread index given */
  unsigned long records_owner;      /* the thread holding the records lock, or 0 */
  long records_depth;               /* how many times it holds it */
  uint64_t signals_deferred;        /* signals whose handler ran while a record was framed:
                                     * tripped again when the records lock is released */
  PyObject* buf;                    /* _buf: the bytearray of records not yet handed over */
  PyObject* heads;                  /* _heads: callee name -> its index, encoded */
  PyObject* recent;                 /* key of shape 0 -> its digest */
  PyObject* recent_enum;            /* key of SHAPE_ENUM -> its digest */
  Py_ssize_t events;                /* events */
  Py_ssize_t oids;                  /* _oids: object ids handed out */
  double last_flush;                /* _last_flush: time.monotonic() of the last flush */
  double flush_interval;            /* _flush_interval */
  Scratch scratch;                  /* one record being made */
  Scratch text;                     /* the repr of a key being digested */
  Py_ssize_t callee_size;           /* bytes of the callee's index at the start of the record */
  Py_ssize_t repr_at, repr_size;    /* where a pending key's material is in the record */
  int pending;                      /* the record carries its key's repr, not yet its digest */
  /* Callee heads by the identity of the name object (a twin's name is always the same
   * str), with strong references; filled from `head_of`, the _heads they came from. An
   * open-addressed table: a direct-mapped one let two hot names that shared a slot evict
   * each other on every call (half the calls of a request, with some addresses). */
  PyObject* head_of;
  int head_count;
  PyObject *head_names[HEAD_CACHE], *head_values[HEAD_CACHE];
} CallPath;

/* The calling thread's part of the recording (thread-local): the path recording its calls
 * now (NULL outside a recorded thread and inside a boundary call), its index in the
 * recording, and how many object ids it has handed out (ids are per thread: its index above
 * THREAD_SHIFT bits, its own count below, whatever the threads' interleaving). */
typedef struct {
  CallPath* recording;
  CallPath* path; /* the path it belongs to, in a boundary call too */
  unsigned long index;
  uint64_t oids;
} ThreadRec;
#define THREAD_SHIFT 32
FP_SHARED _Thread_local ThreadRec fp_thread;

/* Whether a call made on this thread now is recorded by rt. */
static inline int recorded_here(CallPath* rt) { return fp_thread.recording == rt && rt->live; }
/* Inside a boundary call the thread's calls pass through; after it, they are recorded again. */
static inline void open_call(void) { fp_thread.recording = NULL; }
static inline void close_call(CallPath* rt) { fp_thread.recording = rt; }
/* new_oid() of a recorded thread, in a fresh reference. */
static inline PyObject* next_oid(void) {
  return PyLong_FromUnsignedLongLong(((uint64_t)fp_thread.index << THREAD_SHIFT) |
                                     ++fp_thread.oids);
}
/* The records lock: one record framed and appended at a time, across threads, whoever
 * (C or the Python runtime) writes it; held again by the same thread, it counts. */
FP_HIDDEN void hold_records(CallPath* self);
FP_HIDDEN void release_records(CallPath* self);

FP_SHARED PyObject *s_callee, *s_event, *s_drain, *s_failed, *s_args_digest, *s_flush_names;

FP_HIDDEN COLD void forget_heads(CallPath* self);
FP_HIDDEN int start_record(CallPath* self, PyObject* name, Key* key);
FP_HIDDEN COLD PyObject* record_head(CallPath* self);
FP_HIDDEN int append_record(CallPath* self, unsigned char kind, Py_ssize_t split,
                            const char* payload, Py_ssize_t payload_size);
FP_HIDDEN COLD PyObject* recording_failed(CallPath* self, PyObject* result);
FP_HIDDEN COLD PyObject* record_raised(CallPath* self, unsigned char kind, PyObject* name, Key* key,
                                       PyObject* data);
FP_HIDDEN COLD int defer(CallPath* self, unsigned char kind, PyObject* name, Key* key,
                         PyObject* data, PyObject* result, PyObject* head);

FP_HIDDEN int material_digest(unsigned char* out, const unsigned char* material, size_t size);
FP_HIDDEN PyObject* fastpath_finalize(PyObject* module, PyObject* const* args, Py_ssize_t nargs);

FP_HIDDEN PyObject* record_result(CallPath* self, PyObject* name, Key* key, PyObject* result,
                                  const char* data, Py_ssize_t size);
FP_HIDDEN PyObject* parts_of(PyObject* obj, PyObject* parts);
FP_HIDDEN PyObject* run_method(CallPath* self, unsigned char kind, PyObject* name, Key* key,
                               PyObject* data, PyObject* method, PyObject** stack, Py_ssize_t count,
                               PyObject* state, int recording);

static inline double monotonic(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int check_count(Py_ssize_t nargs, Py_ssize_t want, const char* name) {
  if (nargs == want) return 0;
  PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, nargs);
  return -1;
}

static inline PyObject* record_returned(CallPath* self, PyObject* name, Key* key,
                                        PyObject* result) {
  return record_result(self, name, key, result, NULL, 0);
}

/* Whether looking a name up on instances of `type` always finds what _PyType_Lookup finds
 * on the type: an immutable type (such as _socket.socket and sqlite3.Cursor) that looks
 * attributes up the generic way, and whose instances have no dictionary to shadow it. */
static inline int fixed_lookup(PyTypeObject* type) {
  return PyType_HasFeature(type, Py_TPFLAGS_IMMUTABLETYPE) && type->tp_dictoffset == 0 &&
         type->tp_getattro == PyObject_GenericGetAttr;
}

/* Whether `found` (what _PyType_Lookup found, or NULL) is a field or property of a C type. */
static inline int is_field(PyObject* found) {
  return found != NULL &&
         (Py_IS_TYPE(found, &PyGetSetDescr_Type) || Py_IS_TYPE(found, &PyMemberDescr_Type));
}

#define INVOKE_STACK 8

/* A vectorcall stack of n slots: `small` (2 + INVOKE_STACK of them) when they are enough,
 * else allocated; NULL with MemoryError set. release_stack gives it back. */
static inline PyObject** stack_of(PyObject** small, Py_ssize_t n) {
  if (n <= 2 + INVOKE_STACK) return small;
  PyObject** stack = PyMem_New(PyObject*, (size_t)n);
  if (stack == NULL) PyErr_NoMemory();
  return stack;
}

static inline void release_stack(PyObject** stack, PyObject** small) {
  if (stack != small) PyMem_Free(stack);
}

/* The real call of run_method (below), not recorded: obj.method(*args) with stack[1] obj and
 * stack[2 ...] its arguments, `count` of them all, and stack[0] free; `method` is its name,
 * or the method itself (a descriptor of obj's type); with no `method`, stack[1] is a
 * function, called with the rest. */
static inline PyObject* call_real(PyObject* method, PyObject** stack, Py_ssize_t count) {
  if (method != NULL && PyUnicode_CheckExact(method)) {
    size_t nargsf = (size_t)count | PY_VECTORCALL_ARGUMENTS_OFFSET;
    return PyObject_VectorcallMethod(method, stack + 1, nargsf, NULL);
  }
  if (method != NULL && Py_IS_TYPE(method, &PyMethodDescr_Type)) {
    /* A C method found by method_of on obj's type (so obj is one that it takes), called
     * straight, as its vectorcall (descrobject.c) would call it after its checks. */
    PyMethodDef* def = ((PyMethodDescrObject*)method)->d_method;
    PyObject* obj = stack[1];
    switch (def->ml_flags &
            (METH_VARARGS | METH_FASTCALL | METH_NOARGS | METH_O | METH_KEYWORDS | METH_METHOD)) {
      case METH_NOARGS:
        if (count == 1) return def->ml_meth(obj, NULL);
        break;
      case METH_O:
        if (count == 2) return def->ml_meth(obj, stack[2]);
        break;
      case METH_FASTCALL:
        return ((_PyCFunctionFast)(void (*)(void))def->ml_meth)(obj, stack + 2, count - 1);
      case METH_FASTCALL | METH_KEYWORDS:
        return ((_PyCFunctionFastWithKeywords)(void (*)(void))def->ml_meth)(obj, stack + 2,
                                                                            count - 1, NULL);
      default: /* METH_VARARGS builds its tuple: its vectorcall, as for any other method */
        break;
    }
  }
  if (method != NULL) /* the method itself, unbound: called with obj first */
    return PyObject_Vectorcall(method, stack + 1, (size_t)count, NULL);
  /* stack[1] is a function to call with the rest */
  size_t nargsf = (size_t)(count - 1) | PY_VECTORCALL_ARGUMENTS_OFFSET;
  return PyObject_Vectorcall(stack[1], stack + 2, nargsf, NULL);
}

/* -- proxy methods (method.c) ---------------------------------------------------------- */

enum {
  FORM_CALL,      /* real.method(*args) */
  FORM_ROW,       /* real.method(*args), then self._row(result) if self.row_factory is set */
  FORM_STATE,     /* real.method(*args); records and sets `state` on self; returns self */
  FORM_OUTPUT,    /* (data, *rest): real.method(bytes(data), *rest), data an output; key rest */
  FORM_RECV_INTO, /* (buffer, nbytes=0, flags=0): n = real.method(buffer, size, flags) (its
                   * recv_into), recorded as the bytes recv(size, flags) would return */
  FORM_FUNCTION,  /* a call entry's wrapper: `method` is the function; the key is the
                   * arguments (None without any), as _boundary.call_wrapper makes it */
  FORM_NEW,       /* a proxy's __init__: real = method(*args), keyed by args; the recorded
                   * result is (f(real) for f in state); then self._setup(result, real) */
  FORM_CURSOR,    /* sqlite3's Connection.execute(*args): a cursor proxy of class state[0]
                   * on real.method(), as Cursor.__init__ makes it, then state[1] (the
                   * cursor's execute twin) with args */
  FORM_CLOSE,     /* Socket.close(): self._closed = True, then, with no file object left
                   * (self._io_refs <= 0) and self._fd >= 0, real.method() and self._fd = -1 */
  FORM_TIMEOUT,   /* Socket.settimeout(value), no boundary call: real.method(value) with value
                   * None or float(value) >= 0, then self._timeout = value */
  FORM_LOCK,      /* a lock proxy's acquire(blocking=True, timeout=-1), or its __enter__():
                   * real.method(blocking, timeout), keyed (bool(blocking), timeout) after the
                   * oid, its bool result recorded (a sync event, Runtime.sync); handed to
                   * the Python method while state[0][0] (_thread_boundary._outside) is not
                   * 0: sealtrace's own code takes the lock then */
  FORM_COUNT
};

typedef struct {
  PyObject_HEAD vectorcallfunc vectorcall;
  CallPath* runtime;
  PyObject* name;     /* the callee's name in events */
  PyObject* method;   /* the real object's method (FORM_FUNCTION: the function) */
  PyObject* fallback; /* the Python method: the reference, for every case not handled here */
  PyObject* defaults; /* of the trailing positional parameters */
  PyObject* state;    /* FORM_STATE: the attribute names; FORM_NEW: the describing functions */
  Py_ssize_t required, maximum;      /* positional arguments after self; maximum -1: any number */
  Py_ssize_t ndefaults;              /* the size of `defaults`, read without touching it */
  int form, guard;                   /* guard: only while self._fd >= 0 (a socket not closed) */
  PyObject *real_type, *real_method; /* `method` as looked up on the real object's type */
  PyObject *parts_type, *parts;      /* FORM_STATE: `state` as looked up on that type */
  int cursor_state;                  /* FORM_STATE: `state` is CursorState's three */
} BoundaryMethod;

FP_SHARED PyTypeObject *callpath_type, *method_type, *proxy_type;
FP_SHARED PyObject *s_oid, *s_real, *s_fd, *s_row_factory, *s_row, *s_setup, *s_connection,
    *s_closed, *s_io_refs, *s_getdefaulttimeout, *empty_tuple;
FP_SHARED PyType_Spec callpath_spec, method_spec, function_spec;

/* -- proxy state (proxy_state.c) ------------------------------------------------------- */

typedef struct {
  PyObject_HEAD PyObject* oid; /* _oid */
  PyObject* real;              /* _real */
  PyObject* fd;                /* _fd (sockets) */
} ProxyState;

/* CursorState is ProxyState and what sqlite3's Cursor proxy keeps that its twins read and
 * write: its connection and row factory, and the state a statement leaves (description,
 * rowcount, lastrowid: _CURSOR_STATE in _sqlite_boundary.py). A new one has the state that
 * Cursor's class attributes give a fresh cursor. */
typedef struct {
  ProxyState proxy;
  PyObject *connection, *row_factory;
  PyObject* state[3];
} CursorState;

/* SocketState is ProxyState and the rest of what a socket proxy keeps (Socket._setup in
 * _net_boundary.py): its family, type and protocol, its timeout, its count of open file
 * objects and whether it was closed. The `new` twin sets a proxy up in it, and the `close`
 * twin reads and writes it, without a lookup. */
enum { SOCK_FAMILY, SOCK_TYPE, SOCK_PROTO, SOCK_TIMEOUT, SOCK_IO_REFS, SOCK_CLOSED, SOCK_FIELDS };

typedef struct {
  ProxyState proxy;
  PyObject* fields[SOCK_FIELDS];
} SocketState;

#define SOCKET_FIELD(i) (offsetof(SocketState, fields) + (i) * sizeof(PyObject*))

FP_SHARED PyTypeObject *cursor_state_type, *socket_state_type;
FP_SHARED PyObject* cursor_state_names; /* ("description", "rowcount", "lastrowid") */
FP_SHARED PyType_Spec proxy_spec, cursor_state_spec, socket_state_spec;

FP_HIDDEN void free_cleared(PyObject* self, inquiry clear);
FP_HIDDEN long int_attribute(PyObject* self, PyTypeObject* state, size_t offset, PyObject* name,
                             int* ok);

/* Whether self's type is `type` or a subtype: the proxy classes have their state class as
 * their first base (proxy_bases in _runtime.py), which is checked before the MRO is, and
 * that class's base (SocketState's is ProxyState). */
static inline int is_a(PyObject* self, PyTypeObject* type) {
  PyTypeObject *own = Py_TYPE(self), *base = own->tp_base;
  return own == type || base == type || (base != NULL && base->tp_base == type) ||
         PyType_IsSubtype(own, type);
}

/* self.<name> (a new reference): the field at `offset` of `state` (ProxyState, CursorState
 * or SocketState) when self is one and it is set, else looked up by name (which raises as
 * Python would). */
static inline PyObject* state_field(PyObject* self, PyTypeObject* state, size_t offset,
                                    PyObject* name) {
  if (is_a(self, state)) {
    PyObject* value = *(PyObject**)((char*)self + offset);
    if (value != NULL) return Py_NewRef(value);
  }
  return PyObject_GetAttr(self, name);
}

/* self.<name> = value: in the field at `offset` of `state` when self is one. */
static inline int set_state_field(PyObject* self, PyTypeObject* state, size_t offset,
                                  PyObject* name, PyObject* value) {
  if (!is_a(self, state)) return PyObject_SetAttr(self, name, value);
  Py_XSETREF(*(PyObject**)((char*)self + offset), Py_NewRef(value));
  return 0;
}

#define PROXY_OID(self) state_field(self, proxy_type, offsetof(ProxyState, oid), s_oid)
#define PROXY_REAL(self) state_field(self, proxy_type, offsetof(ProxyState, real), s_real)
