#include "fastpath_internal.h"

/* -- framing a record: the callee heads cache, the digest or material, the append --------- */

/* Empties the cache of heads (not head_of, which says where they came from). */
COLD void forget_heads(CallPath* self) {
  self->head_count = 0;
  for (int i = 0; i < HEAD_CACHE; i++) {
    Py_CLEAR(self->head_names[i]);
    Py_CLEAR(self->head_values[i]);
  }
}

/* The digest of a call's key: plain keys here, every other key by the Python function. */
static COLD PyObject* key_digest(CallPath* self, PyObject* key) {
  PyObject* known = known_digest(self->recent, self->recent_enum, &self->text, key);
  if (known != NULL || PyErr_Occurred()) return known;
  PyObject* fn = PyObject_GetAttr((PyObject*)self, s_args_digest);
  if (fn == NULL) return NULL;
  PyObject* digest = PyObject_CallOneArg(fn, key);
  Py_DECREF(fn);
  if (digest != NULL && (!PyBytes_Check(digest) || PyBytes_GET_SIZE(digest) != ARGS_DIGEST_SIZE)) {
    Py_DECREF(digest);
    PyErr_SetString(PyExc_ValueError, "args_digest returned no digest");
    return NULL;
  }
  return digest;
}

/* The cache's slot that holds `name`, or the empty one where it goes: from where Fibonacci
 * hashing of its address points, on to the next empty slot. */
static inline size_t head_slot(CallPath* self, PyObject* name) {
  size_t slot = (size_t)((((uint64_t)(uintptr_t)name >> 4) * UINT64_C(0x9E3779B97F4A7C15)) >>
                         (64 - HEAD_BITS));
  while (self->head_names[slot] != NULL && self->head_names[slot] != name)
    slot = (slot + 1) & (HEAD_CACHE - 1);
  return slot;
}

/* The callee's head (its index, encoded) for `name`, borrowed: from the cache, else from
 * _heads, else made by _callee (which adds it to _heads). _heads only grows, and a name's
 * head never changes; the cache starts afresh if _heads is replaced, or when half full (a
 * program whose names are made anew for each call). */
static PyObject* callee_head(CallPath* self, PyObject* name) {
  if (self->head_of != self->heads) {
    forget_heads(self);
    Py_XSETREF(self->head_of, Py_NewRef(self->heads));
  }
  size_t slot = head_slot(self, name);
  if (self->head_names[slot] == name) return self->head_values[slot];
  PyObject* head = PyDict_GetItemWithError(self->heads, name);
  if (head != NULL) {
    Py_INCREF(head);
  } else {
    if (PyErr_Occurred()) return NULL;
    head = PyObject_CallMethodOneArg((PyObject*)self, s_callee, name);
    if (head == NULL) return NULL;
  }
  if (!PyBytes_Check(head)) {
    Py_DECREF(head);
    PyErr_SetString(PyExc_TypeError, "a callee's head must be bytes");
    return NULL;
  }
  if (self->head_count >= HEAD_CACHE / 2) forget_heads(self);
  slot = head_slot(self, name); /* again: _callee ran Python, which may have filled it */
  if (self->head_names[slot] == NULL) {
    self->head_names[slot] = Py_NewRef(name);
    self->head_count += 1;
  }
  Py_XSETREF(self->head_values[slot], head);
  return head;
}

/* Writes the argument digest of a key that goes with no material. */
static COLD int put_digest(CallPath* self, PyObject* key) {
  PyObject* digest = key_digest(self, key);
  if (digest == NULL) return -1;
  int status = put_bytes(&self->scratch, PyBytes_AS_STRING(digest), ARGS_DIGEST_SIZE);
  Py_DECREF(digest);
  return status;
}

/* Ends the material begun at `at` (start_record): writes its length in the byte kept for it,
 * moving the material along when the length takes more, and marks the record pending. */
static int end_material(CallPath* self, Py_ssize_t at) {
  Py_ssize_t size = self->scratch.size - at - 1;
  unsigned char length[10];
  Py_ssize_t extra = write_varint(length, (uint64_t)size) - length - 1;
  if (extra > 0) {
    if (scratch_reserve(&self->scratch, extra) < 0) return -1;
    unsigned char* data = self->scratch.data;
    memmove(data + at + 1 + extra, data + at + 1, (size_t)size);
    self->scratch.size += extra;
    memcpy(self->scratch.data + at, length, (size_t)(1 + extra));
  } else {
    self->scratch.data[at] = length[0];
  }
  self->pending = 1;
  self->repr_at = self->scratch.size - size;
  self->repr_size = size;
  return 0;
}

/* Starts a record in the scratch buffer: the callee's index, then the argument digest.
 *
 * For a plain key (put_plain), or one holding int enum members, the record carries what
 * the digest is made from instead, its material: a varint length, then MATERIAL_PLAIN and
 * the key's encoding (whose repr is digested), or MATERIAL_ENUM and its fingerprint
 * encoding (digested as it is); and its kind gets PENDING. The pipeline's thread turns that
 * into the digest (finalize), so the application's thread never runs BLAKE2b or repr for
 * such keys. Nothing outside this module ever sees a pending record. */
int start_record(CallPath* self, PyObject* name, Key* key) {
  if (self->heads == NULL || self->recent == NULL || self->recent_enum == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "the recorder has been torn down");
    return -1;
  }
  PyObject* head = callee_head(self, name);
  if (head == NULL) return -1;
  Scratch* s = &self->scratch;
  Py_ssize_t at = PyBytes_GET_SIZE(head); /* where the digest or the material goes */
  s->size = 0;
  self->callee_size = at;
  self->pending = 0;
  if (scratch_reserve(s, at + 2) < 0) return -1; /* and two bytes for the material's start */
  copy_bytes(s->data, (const unsigned char*)PyBytes_AS_STRING(head), (size_t)at);
  s->size = at;
  PyObject* obj = key->object;
  int parts = obj == NULL;
  if ((parts && key->head == NULL && key->n == 0) || obj == Py_None ||
      (!parts && PyTuple_CheckExact(obj) && PyTuple_GET_SIZE(obj) == 0))
    return put_bytes(s, empty_digest, ARGS_DIGEST_SIZE);
  if (!parts && !PyTuple_CheckExact(obj)) return put_digest(self, obj);
  /* The material goes after one byte for its length (end_material). */
  s->data[at] = 0;
  s->data[at + 1] = MATERIAL_PLAIN;
  s->size = at + 2;
  /* put_plain writes an enum key's fingerprint encoding as the lenient encode() below
   * would, when put_plain can write the rest of that key. */
  int enums = 0;
  int written = parts ? put_plain_parts(s, key, &enums) : put_plain(s, obj, 1, &enums);
  if (written == ENCODED) {
    if (enums) s->data[at + 1] = MATERIAL_ENUM;
    return end_material(self, at);
  }
  if (written == FAILED || (obj = key_object(key)) == NULL) return -1;
  s->size = at; /* not plain: an enum key's material, or the digest */
  if (key_shape(obj, KEY_DEPTH) == SHAPE_ENUM) {
    if (put_byte(s, 0) < 0 || put_byte(s, MATERIAL_ENUM) < 0) return -1;
    written = encode(s, obj, 0, 1);
    if (written == ENCODED) return end_material(self, at);
    if (written == FAILED) return -1;
    s->size = at;
  }
  return put_digest(self, obj);
}

COLD PyObject* record_head(CallPath* self) {
  if (!self->pending)
    return PyBytes_FromStringAndSize((const char*)self->scratch.data,
                                     self->callee_size + ARGS_DIGEST_SIZE);
  PyObject* head = PyBytes_FromStringAndSize(NULL, self->callee_size + ARGS_DIGEST_SIZE);
  if (head == NULL) return NULL;
  char* at = PyBytes_AS_STRING(head);
  memcpy(at, self->scratch.data, (size_t)self->callee_size);
  const unsigned char* material = self->scratch.data + self->repr_at;
  if (material_digest((unsigned char*)at + self->callee_size, material, (size_t)self->repr_size) <
      0) {
    Py_DECREF(head);
    PyErr_SetString(PyExc_ValueError, "a pending record's material is malformed");
    return NULL;
  }
  return head;
}

/* Grows the record buffer by `extra` bytes, keeping room for a whole DRAIN_AT more.
 * PyByteArray_Resize would grow it 12.5 % at a time, copying the buffer some thirty times
 * on its way to DRAIN_AT, and shrinks the allocation again when the size is under half of
 * it; so the size is set here directly. Relies on CPython 3.11's bytearray layout
 * (Include/cpython/bytearrayobject.h), the only Python the recorder runs on. */
static char* grow_buffer(PyObject* buf, Py_ssize_t extra) {
  PyByteArrayObject* b = (PyByteArrayObject*)buf;
  Py_ssize_t size = Py_SIZE(b);
  if (b->ob_exports > 0 || b->ob_start + size + extra + 1 > b->ob_bytes + b->ob_alloc) {
    Py_ssize_t room = size + extra + DRAIN_AT + DRAIN_AT / 4;
    if (PyByteArray_Resize(buf, room) < 0) return NULL; /* alloc is then room + 1 or more */
  }
  Py_SET_SIZE(b, size + extra);
  b->ob_start[size + extra] = '\0';
  return b->ob_start + size;
}

/* Frames a record into the buffer, counts it, and hands the buffer over when full or (every
 * 256 events) when the flush interval has passed. The record is the scratch buffer with
 * `payload` (the bytes of a long result or output) inserted at `split`: those are copied
 * once, from the caller's object into the buffer. */
int append_record(CallPath* self, unsigned char kind, Py_ssize_t split, const char* payload,
                  Py_ssize_t payload_size) {
  if (self->buf == NULL || !PyByteArray_CheckExact(self->buf)) {
    PyErr_SetString(PyExc_TypeError, "the record buffer must be a bytearray");
    return -1;
  }
  if (fp_thread.index != self->last_thread) { /* another thread's call: a THREAD record first */
    unsigned char marker[12];
    Py_ssize_t n = 2;
    uint64_t index = fp_thread.index;
    marker[0] = KIND_THREAD;
    while (index > 0x7F) {
      marker[n++] = (unsigned char)((index & 0x7F) | 0x80);
      index >>= 7;
    }
    marker[n++] = (unsigned char)index;
    marker[1] = (unsigned char)(n - 2); /* the index's varint is at most 10 bytes: one byte */
    char* at = grow_buffer(self->buf, n);
    if (at == NULL) return -1;
    copy_bytes((unsigned char*)at, marker, (size_t)n);
    self->last_thread = fp_thread.index;
  }
  unsigned char frame[11];
  Py_ssize_t framed = 0;
  uint64_t size = (uint64_t)(self->scratch.size + payload_size);
  frame[framed++] = self->pending ? kind | PENDING : kind;
  while (size > 0x7F) {
    frame[framed++] = (unsigned char)((size & 0x7F) | 0x80);
    size >>= 7;
  }
  frame[framed++] = (unsigned char)size;
  char* at = grow_buffer(self->buf, framed + self->scratch.size + payload_size);
  if (at == NULL) return -1;
  copy_bytes((unsigned char*)at, frame, (size_t)framed);
  at += framed;
  copy_bytes((unsigned char*)at, self->scratch.data, (size_t)split);
  at += split;
  copy_bytes((unsigned char*)at, (const unsigned char*)payload, (size_t)payload_size);
  copy_bytes((unsigned char*)at + payload_size, self->scratch.data + split,
             (size_t)(self->scratch.size - split));
  self->events += 1;
  int drain = 0, flush = 0;
  if (PyByteArray_GET_SIZE(self->buf) >= DRAIN_AT) {
    drain = 1;
    flush = monotonic() - self->last_flush > self->flush_interval;
  } else if (!(self->events & 255) && monotonic() - self->last_flush > self->flush_interval) {
    drain = flush = 1;
  }
  if (!drain) return 0;
  PyObject* call_args[2] = {(PyObject*)self, flush ? Py_True : Py_False};
  PyObject* done = PyObject_VectorcallMethod(s_drain, call_args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                             s_flush_names);
  if (done == NULL) return -1;
  Py_DECREF(done);
  return 0;
}

/* After the real call returned: an error in recording ends the recording, not the call. */
COLD PyObject* recording_failed(CallPath* self, PyObject* result) {
  if (!PyErr_ExceptionMatches(PyExc_Exception)) {
    Py_DECREF(result); /* KeyboardInterrupt and friends go on to the application */
    return NULL;
  }
  PyObject *type, *exc, *tb;
  PyErr_Fetch(&type, &exc, &tb);
  PyErr_NormalizeException(&type, &exc, &tb);
  PyObject* done = PyObject_CallMethodOneArg((PyObject*)self, s_failed, exc);
  Py_XDECREF(type);
  Py_XDECREF(exc);
  Py_XDECREF(tb);
  if (done == NULL) {
    Py_DECREF(result);
    return NULL;
  }
  Py_DECREF(done);
  return result;
}

/* The call raised: record the exception (Python's _event) and raise it again. */
COLD PyObject* record_raised(CallPath* self, unsigned char kind, PyObject* name, Key* key,
                             PyObject* data) {
  PyObject *type, *exc, *tb;
  PyErr_Fetch(&type, &exc, &tb);
  PyErr_NormalizeException(&type, &exc, &tb);
  if (tb != NULL) PyException_SetTraceback(exc, tb);
  PyObject* kind_obj = PyLong_FromLong(kind);
  PyObject* status = PyLong_FromLong(STATUS_RAISED);
  PyObject* done = NULL;
  PyObject* key_obj = kind_obj != NULL && status != NULL ? key_object(key) : NULL;
  if (key_obj != NULL) {
    PyObject* args[7] = {(PyObject*)self, kind_obj, name, key_obj, data, status, exc};
    done = PyObject_VectorcallMethod(s_event, args, 7 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
  }
  Py_XDECREF(kind_obj);
  Py_XDECREF(status);
  if (done == NULL) {
    /* The recorder itself raised past its own handlers: that exception goes on, with
     * the application's as its context. */
    PyObject *type2, *exc2, *tb2;
    PyErr_Fetch(&type2, &exc2, &tb2);
    PyErr_NormalizeException(&type2, &exc2, &tb2);
    if (exc2 != NULL) PyException_SetContext(exc2, Py_NewRef(exc));
    PyErr_Restore(type2, exc2, tb2);
    Py_XDECREF(type);
    Py_XDECREF(exc);
    Py_XDECREF(tb);
    return NULL;
  }
  Py_DECREF(done);
  PyErr_Restore(type, exc, tb);
  return NULL;
}

/* Hands a record this module does not encode to Python's _event. */
COLD int defer(CallPath* self, unsigned char kind, PyObject* name, Key* key, PyObject* data,
               PyObject* result, PyObject* head) {
  PyObject* kind_obj = PyLong_FromLong(kind);
  PyObject* status = PyLong_FromLong(STATUS_RETURNED);
  PyObject* done = NULL;
  PyObject* key_obj = kind_obj != NULL && status != NULL ? key_object(key) : NULL;
  if (key_obj != NULL) {
    PyObject* args[8] = {(PyObject*)self, kind_obj, name, key_obj, data, status, result, head};
    size_t nargs = head != NULL ? 8 : 7;
    done = PyObject_VectorcallMethod(s_event, args, nargs | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
  }
  Py_XDECREF(kind_obj);
  Py_XDECREF(status);
  if (done == NULL) return -1;
  Py_DECREF(done);
  return 0;
}
