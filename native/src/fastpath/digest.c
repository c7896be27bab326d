#include "fastpath_internal.h"

/* -- argument digests (args_digest in proxy/_runtime.py) -------------------------------- */

FP_DEFINE unsigned char empty_digest[ARGS_DIGEST_SIZE];

COLD int key_shape(PyObject* key, int depth) {
  int shape = 0;
  Py_ssize_t n = PyTuple_GET_SIZE(key);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* item = PyTuple_GET_ITEM(key, i);
    if (PyLong_CheckExact(item) || PyUnicode_CheckExact(item) || item == Py_None) continue;
    if (PyFloat_CheckExact(item) || PyBytes_CheckExact(item) || PyBool_Check(item))
      shape |= SHAPE_INEXACT;
    else if (PyTuple_CheckExact(item) && depth > 0)
      shape |= key_shape(item, depth - 1);
    else if (is_int_enum(item))
      shape |= SHAPE_ENUM;
    else
      return shape | SHAPE_OTHER;
  }
  return shape;
}

/* The key as an object (borrowed; the Key holds it until key_release); NULL with an
 * exception set if it cannot be made. */
COLD PyObject* key_object(Key* key) {
  if (key->object != NULL) return key->object;
  Py_ssize_t first = key->head != NULL;
  PyObject* tuple = PyTuple_New(first + key->n);
  if (tuple == NULL) return NULL;
  if (first) PyTuple_SET_ITEM(tuple, 0, Py_NewRef(key->head));
  for (Py_ssize_t i = 0; i < key->n; i++)
    PyTuple_SET_ITEM(tuple, first + i, Py_NewRef(key->items[i]));
  key->object = tuple;
  key->owned = 1;
  return tuple;
}

/* Remembers a key's digest, starting afresh past RECENT_LIMIT keys; NULL (and the digest
 * released) if that fails. */
static PyObject* remember(PyObject* recent, PyObject* key, PyObject* digest) {
  if (PyDict_GET_SIZE(recent) >= RECENT_LIMIT) PyDict_Clear(recent);
  if (PyDict_SetItem(recent, key, digest) < 0) Py_CLEAR(digest);
  return digest;
}

FP_DEFINE unsigned char repr_class[128];

/* repr() of a plain key's parts, written as UTF-8, for the commonest ones: ints of 62
 * bits, None, tuples, and ASCII strs that need no escape. DEFERRED for anything else, which
 * PyObject_Repr then makes (the bytes must be exactly repr's). The digest of a key with
 * floats, bytes or bools is made from it on the application's thread (plain keys go to
 * the pipeline's thread as their encoding instead, see plain_repr). */
static int put_repr(Scratch* s, PyObject* value) {
  if (value == Py_None) return put_bytes(s, "None", 4) < 0 ? FAILED : ENCODED;
  if (PyLong_CheckExact(value)) {
    long long v;
    int fits = small_int(value, &v);
    if (fits <= 0) return fits < 0 ? FAILED : DEFERRED;
    if (scratch_reserve(s, 24) < 0) return FAILED;
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? (unsigned long long)-v : (unsigned long long)v;
    do {
      digits[sizeof digits - 1 - n++] = (char)('0' + u % 10);
      u /= 10;
    } while (u);
    if (v < 0) digits[sizeof digits - 1 - n++] = '-';
    copy_bytes(s->data + s->size, (unsigned char*)digits + sizeof digits - n, (size_t)n);
    s->size += n;
    return ENCODED;
  }
  if (PyUnicode_CheckExact(value)) {
    if (!PyUnicode_IS_ASCII(value)) return DEFERRED;
    const unsigned char* chars = PyUnicode_1BYTE_DATA(value);
    Py_ssize_t n = PyUnicode_GET_LENGTH(value);
    unsigned char seen = 0; /* REPR_* bits of the characters, one table load each */
    for (Py_ssize_t i = 0; i < n; i++) seen |= repr_class[chars[i]];
    if (seen & REPR_ESCAPED || (seen & REPR_QUOTES) == REPR_QUOTES)
      return DEFERRED; /* repr escapes them (both quotes: the single one) */
    char quote = seen & REPR_SINGLE ? '"' : '\'';
    if (put_byte(s, (unsigned char)quote) < 0 || put_bytes(s, chars, n) < 0 ||
        put_byte(s, (unsigned char)quote) < 0)
      return FAILED;
    return ENCODED;
  }
  if (PyTuple_CheckExact(value)) {
    Py_ssize_t n = PyTuple_GET_SIZE(value);
    if (put_byte(s, '(') < 0) return FAILED;
    for (Py_ssize_t i = 0; i < n; i++) {
      if (i && put_bytes(s, ", ", 2) < 0) return FAILED;
      int status = put_repr(s, PyTuple_GET_ITEM(value, i));
      if (status != ENCODED) return status;
    }
    if (n == 1 && put_byte(s, ',') < 0) return FAILED;
    return put_byte(s, ')') < 0 ? FAILED : ENCODED;
  }
  return DEFERRED;
}

/* The digest of a key whose shape is 0 or SHAPE_INEXACT: BLAKE2b of "r" and its repr. A key
 * of shape 0 is remembered in `recent` when its repr is short; one with floats, bytes or
 * bools is not (1, 1.0 and True are equal keys with different reprs). `text` is scratch
 * space for the repr. */
static COLD PyObject* repr_digest(PyObject* recent, Scratch* text, PyObject* key) {
  PyObject* digest = recent != NULL ? PyDict_GetItemWithError(recent, key) : NULL;
  if (digest != NULL) return Py_NewRef(digest);
  if (PyErr_Occurred()) return NULL;
  unsigned char out[ARGS_DIGEST_SIZE];
  Py_ssize_t length; /* of the repr, in code points */
  text->size = 0;
  int status = put_repr(text, key);
  if (status == FAILED) return NULL;
  if (status == ENCODED) { /* ASCII: as many code points as bytes */
    length = text->size;
    blake2b_digest(out, ARGS_DIGEST_SIZE, (const unsigned char*)"r", 1, text->data,
                   (size_t)text->size);
  } else {
    PyObject* repr = PyObject_Repr(key);
    if (repr == NULL) return NULL;
    PyObject* raw = PyUnicode_AsEncodedString(repr, "utf-8", "surrogatepass");
    length = PyUnicode_GET_LENGTH(repr);
    Py_DECREF(repr);
    if (raw == NULL) return NULL;
    blake2b_digest(out, ARGS_DIGEST_SIZE, (const unsigned char*)"r", 1,
                   (const unsigned char*)PyBytes_AS_STRING(raw), (size_t)PyBytes_GET_SIZE(raw));
    Py_DECREF(raw);
  }
  digest = PyBytes_FromStringAndSize((const char*)out, ARGS_DIGEST_SIZE);
  if (digest != NULL && recent != NULL && length <= RECENT_REPR_MAX)
    return remember(recent, key, digest);
  return digest;
}

/* The digest of a key holding int enum members: BLAKE2b of "e" and its fingerprint
 * encoding, remembered in `recent` (enum keys only: (AF_INET, 1) == (2, 1)). NULL with no
 * exception set: the encoding needs Python. */
static COLD PyObject* enum_digest(PyObject* recent, Scratch* text, PyObject* key) {
  PyObject* digest = PyDict_GetItemWithError(recent, key);
  if (digest != NULL) return Py_NewRef(digest);
  if (PyErr_Occurred()) return NULL;
  text->size = 0;
  int status = encode(text, key, 0, 1);
  if (status != ENCODED) return NULL;
  unsigned char out[ARGS_DIGEST_SIZE];
  blake2b_digest(out, ARGS_DIGEST_SIZE, (const unsigned char*)"e", 1, text->data,
                 (size_t)text->size);
  digest = PyBytes_FromStringAndSize((const char*)out, ARGS_DIGEST_SIZE);
  return digest != NULL ? remember(recent, key, digest) : NULL;
}

/* A key's digest when this module makes it (NULL, no exception: ask Python). */
PyObject* known_digest(PyObject* recent, PyObject* recent_enum, Scratch* text, PyObject* key) {
  if (key == Py_None || (PyTuple_CheckExact(key) && PyTuple_GET_SIZE(key) == 0))
    return PyBytes_FromStringAndSize((const char*)empty_digest, ARGS_DIGEST_SIZE);
  if (!PyTuple_CheckExact(key)) return NULL;
  switch (key_shape(key, KEY_DEPTH)) {
    case 0:
      return repr_digest(recent, text, key);
    case SHAPE_INEXACT:
      return repr_digest(NULL, text, key);
    case SHAPE_ENUM:
      return enum_digest(recent_enum, text, key);
    default:
      return NULL;
  }
}
