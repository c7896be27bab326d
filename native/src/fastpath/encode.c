#include "fastpath_internal.h"

/* A growing scratch buffer (its inline helpers are in fastpath_internal.h). */
COLD int scratch_grow(Scratch* s, Py_ssize_t extra) {
  Py_ssize_t capacity = s->capacity ? s->capacity : 256;
  while (capacity < s->size + extra) capacity *= 2;
  unsigned char* data = PyMem_Realloc(s->data, (size_t)capacity);
  if (data == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  s->data = data;
  s->capacity = capacity;
  return 0;
}

/* -- the value encoding (Encoder.encode in proxy/_codec.py) ----------------------------- */

static int put_raw(Scratch* s, unsigned char tag, const char* raw, Py_ssize_t n) {
  if (n >= BLOB_THRESHOLD) return DEFERRED; /* content-addressed: Python's blob path */
  if (put_byte(s, tag) < 0 || put_varint(s, (uint64_t)n) < 0 || put_bytes(s, raw, n) < 0)
    return FAILED;
  return ENCODED;
}

/* Writes bytes as put_raw does, but leaves a long one's bytes out: *inserted is then their
 * count, for append_record to copy straight from the caller's object (once), at the
 * scratch buffer's size when this returns. */
int put_payload(Scratch* s, const char* raw, Py_ssize_t n, Py_ssize_t* inserted) {
  *inserted = 0;
  if (n < LONG_PAYLOAD || n >= BLOB_THRESHOLD) return put_raw(s, TAG_BYTES, raw, n);
  if (put_byte(s, TAG_BYTES) < 0 || put_varint(s, (uint64_t)n) < 0) return FAILED;
  *inserted = n;
  return ENCODED;
}

static int put_str(Scratch* s, PyObject* text) {
  if (PyUnicode_IS_ASCII(text)) /* its own bytes are its UTF-8 */
    return put_raw(s, TAG_STR, (const char*)PyUnicode_1BYTE_DATA(text), PyUnicode_GET_LENGTH(text));
  /* As str.encode() makes it (surrogatepass changes nothing but for lone surrogates), and
   * without PyUnicode_AsUTF8's copy kept in the application's string. */
  PyObject* bytes = PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass");
  if (bytes == NULL) return FAILED;
  int status = put_raw(s, TAG_STR, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
  Py_DECREF(bytes);
  return status;
}

/* The int enum classes the recorder has met (proxy/_runtime.py's _int_enums, a set it fills):
 * in argument fingerprints their members count as their int. */
FP_DEFINE PyObject* int_enums;

/* The last few classes found in int_enums (which only grows): most keys with enum members
 * hold one of AddressFamily, SocketKind and a few more. */
#define KNOWN_ENUMS 8
static PyObject* known_enums[KNOWN_ENUMS];
static int next_known_enum;

void forget_enums(void) {
  for (int i = 0; i < KNOWN_ENUMS; i++) Py_CLEAR(known_enums[i]);
}

int is_int_enum(PyObject* value) {
  if (int_enums == NULL || !PyLong_Check(value) || PyLong_CheckExact(value)) return 0;
  PyObject* type = (PyObject*)Py_TYPE(value);
  for (int i = 0; i < KNOWN_ENUMS; i++)
    if (known_enums[i] == type) return 1;
  if (PySet_Contains(int_enums, type) != 1) return 0;
  Py_XSETREF(known_enums[next_known_enum], Py_NewRef(type));
  next_known_enum = (next_known_enum + 1) % KNOWN_ENUMS;
  return 1;
}

/* lenient: the fingerprint encoding of argument keys (Encoder(lenient=True)), where int enum
 * members are their int; the recorder's own encoding otherwise. */
int encode(Scratch* s, PyObject* value, int depth, int lenient) {
  if (PyLong_CheckExact(value)) return put_int(s, value);
  if (value == Py_None) return put_byte(s, TAG_NONE) < 0 ? FAILED : ENCODED;
  if (PyTuple_CheckExact(value) || PyList_CheckExact(value)) {
    if (depth > MAX_DEPTH) return DEFERRED;
    int is_tuple = PyTuple_CheckExact(value);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
    if (put_byte(s, is_tuple ? TAG_TUPLE : TAG_LIST) < 0 || put_varint(s, (uint64_t)n) < 0)
      return FAILED;
    for (Py_ssize_t i = 0; i < n; i++) {
      /* A list cannot change size here: encoding exact built-in types runs no Python. */
      int status = encode(s, PySequence_Fast_GET_ITEM(value, i), depth + 1, lenient);
      if (status != ENCODED) return status;
    }
    return ENCODED;
  }
  if (PyBytes_CheckExact(value))
    return put_raw(s, TAG_BYTES, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
  if (PyUnicode_CheckExact(value)) return put_str(s, value);
  if (PyBool_Check(value))
    return put_byte(s, value == Py_True ? TAG_TRUE : TAG_FALSE) < 0 ? FAILED : ENCODED;
  if (PyFloat_CheckExact(value)) {
    unsigned char packed[8];
    if (PyFloat_Pack8(PyFloat_AS_DOUBLE(value), (char*)packed, 1) < 0) return FAILED;
    return put_byte(s, TAG_FLOAT) < 0 || put_bytes(s, packed, 8) < 0 ? FAILED : ENCODED;
  }
  if (PyDict_CheckExact(value)) {
    if (depth > MAX_DEPTH) return DEFERRED;
    if (put_byte(s, TAG_DICT) < 0 || put_varint(s, (uint64_t)PyDict_GET_SIZE(value)) < 0)
      return FAILED;
    Py_ssize_t pos = 0;
    PyObject *key, *item;
    while (PyDict_Next(value, &pos, &key, &item)) {
      int status = encode(s, key, depth + 1, lenient);
      if (status == ENCODED) status = encode(s, item, depth + 1, lenient);
      if (status != ENCODED) return status;
    }
    return ENCODED;
  }
  if (lenient && is_int_enum(value)) return put_int(s, value); /* counts as its int */
  return DEFERRED; /* extensions, exceptions, subclasses, sets, ...: Python's encoder */
}

/* A plain key, encoded as encode() writes it, for the pipeline's thread to make its repr
 * from (plain_repr): None, bools, ints of 62 bits, ASCII strs and tuples of them to KEY_DEPTH
 * levels; DEFERRED (with part of it written) for any other key. This is all a plain key's
 * argument digest costs the application's thread: no decimal digits, and no scan of a str
 * for the characters its repr escapes. With `enums`, members of known int enums are
 * written as their int too, as the lenient encode() writes them, and *enums set: the
 * encoding is then that key's fingerprint encoding (key_shape's SHAPE_ENUM), not a plain
 * one. */

int put_plain(Scratch* s, PyObject* value, int depth, int* enums) {
  if (!PyTuple_CheckExact(value) || depth > KEY_DEPTH) {
    if (PyLong_CheckExact(value) || PyUnicode_CheckExact(value) || value == Py_None ||
        PyBool_Check(value))
      return put_plain_item(s, value, depth, enums);
    if (enums == NULL || !is_int_enum(value)) return DEFERRED;
    *enums = 1;
    return put_int(s, value);
  }
  Py_ssize_t n = PyTuple_GET_SIZE(value);
  if (scratch_reserve(s, 11) < 0) return FAILED;
  unsigned char* at = s->data + s->size;
  *at++ = TAG_TUPLE;
  s->size = write_varint(at, (uint64_t)n) - s->data;
  for (Py_ssize_t i = 0; i < n; i++) {
    int status = put_plain_item(s, PyTuple_GET_ITEM(value, i), depth + 1, enums);
    if (status != ENCODED) return status;
  }
  return ENCODED;
}
