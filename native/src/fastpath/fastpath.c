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
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blake2b.h"

/* The recording format's constants (proxy/_stream.py, proxy/_codec.py). The module exports
 * them and tests/proxy/test_fastpath.py checks them against the Python definitions. */
enum { KIND_CALL = 5, KIND_OUTPUT = 6 };
#define PENDING 0x80 /* on a record's kind: it carries its key's material, not yet the digest */
/* What a pending record's material starts with (start_record); the digest's own domain
 * bytes ("r" of a repr, "e" of a fingerprint encoding) are args_digest's, _runtime.py. */
#define MATERIAL_PLAIN 'p'
#define MATERIAL_ENUM 'e'
enum { STATUS_RETURNED = 0, STATUS_RAISED = 1 };
enum {
    TAG_NONE = 0, TAG_FALSE = 1, TAG_TRUE = 2, TAG_INT = 3, TAG_FLOAT = 5, TAG_STR = 7,
    TAG_BYTES = 8,
    TAG_TUPLE = 16, TAG_LIST = 17, TAG_DICT = 18
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
    unsigned char *data;
    Py_ssize_t size, capacity;
} Scratch;

static COLD int scratch_grow(Scratch *s, Py_ssize_t extra) {
    Py_ssize_t capacity = s->capacity ? s->capacity : 256;
    while (capacity < s->size + extra) capacity *= 2;
    unsigned char *data = PyMem_Realloc(s->data, (size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    s->data = data;
    s->capacity = capacity;
    return 0;
}

static inline int scratch_reserve(Scratch *s, Py_ssize_t extra) {
    return s->size + extra <= s->capacity ? 0 : scratch_grow(s, extra);
}

static inline int put_byte(Scratch *s, unsigned char byte) {
    if (s->size == s->capacity && scratch_reserve(s, 1) < 0) return -1;
    s->data[s->size++] = byte;
    return 0;
}

/* memcpy for the few bytes that most parts of a record are, without a call into the C
 * library: fixed-size copies that overlap, never reading past either end. */
static inline void copy_bytes(unsigned char *to, const unsigned char *from, size_t n) {
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

static inline int put_bytes(Scratch *s, const void *bytes, Py_ssize_t n) {
    if (scratch_reserve(s, n) < 0) return -1;
    copy_bytes(s->data + s->size, bytes, (size_t)n);
    s->size += n;
    return 0;
}

/* Writes a varint at `at`; returns the end of it. */
static unsigned char *write_varint(unsigned char *at, uint64_t value) {
    while (value > 0x7F) {
        *at++ = (unsigned char)((value & 0x7F) | 0x80);
        value >>= 7;
    }
    *at++ = (unsigned char)value;
    return at;
}

static inline int put_varint(Scratch *s, uint64_t value) {
    if (scratch_reserve(s, 10) < 0) return -1;
    s->size = write_varint(s->data + s->size, value) - s->data;
    return 0;
}

/* -- the value encoding (Encoder.encode in proxy/_codec.py) ----------------------------- */

static int put_raw(Scratch *s, unsigned char tag, const char *raw, Py_ssize_t n) {
    if (n >= BLOB_THRESHOLD) return DEFERRED; /* content-addressed: Python's blob path */
    if (put_byte(s, tag) < 0 || put_varint(s, (uint64_t)n) < 0 || put_bytes(s, raw, n) < 0)
        return FAILED;
    return ENCODED;
}

/* Writes bytes as put_raw does, but leaves a long one's bytes out: *inserted is then their
 * count, for append_record to copy straight from the caller's object (once), at the
 * scratch buffer's size when this returns. */
static int put_payload(Scratch *s, const char *raw, Py_ssize_t n, Py_ssize_t *inserted) {
    *inserted = 0;
    if (n < LONG_PAYLOAD || n >= BLOB_THRESHOLD) return put_raw(s, TAG_BYTES, raw, n);
    if (put_byte(s, TAG_BYTES) < 0 || put_varint(s, (uint64_t)n) < 0) return FAILED;
    *inserted = n;
    return ENCODED;
}

static int put_str(Scratch *s, PyObject *text) {
    if (PyUnicode_IS_ASCII(text)) /* its own bytes are its UTF-8 */
        return put_raw(s, TAG_STR, (const char *)PyUnicode_1BYTE_DATA(text),
                       PyUnicode_GET_LENGTH(text));
    /* As str.encode() makes it (surrogatepass changes nothing but for lone surrogates), and
     * without PyUnicode_AsUTF8's copy kept in the application's string. */
    PyObject *bytes = PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass");
    if (bytes == NULL) return FAILED;
    int status = put_raw(s, TAG_STR, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
    Py_DECREF(bytes);
    return status;
}

/* The int enum classes the recorder has met (proxy/_runtime.py's _int_enums, a set it fills):
 * in argument fingerprints their members count as their int. */
static PyObject *int_enums;

/* The last few classes found in int_enums (which only grows): most keys with enum members
 * hold one of AddressFamily, SocketKind and a few more. */
#define KNOWN_ENUMS 8
static PyObject *known_enums[KNOWN_ENUMS];
static int next_known_enum;

static void forget_enums(void) {
    for (int i = 0; i < KNOWN_ENUMS; i++) Py_CLEAR(known_enums[i]);
}

static int is_int_enum(PyObject *value) {
    if (int_enums == NULL || !PyLong_Check(value) || PyLong_CheckExact(value)) return 0;
    PyObject *type = (PyObject *)Py_TYPE(value);
    for (int i = 0; i < KNOWN_ENUMS; i++)
        if (known_enums[i] == type) return 1;
    if (PySet_Contains(int_enums, type) != 1) return 0;
    Py_XSETREF(known_enums[next_known_enum], Py_NewRef(type));
    next_known_enum = (next_known_enum + 1) % KNOWN_ENUMS;
    return 1;
}

/* An exact int's value when it fits in 62 bits (what T_INT carries): 1 and *v set, or 0 (a
 * T_BIGINT), or -1 with an exception set. Ints of one or two 30-bit digits, nearly all of
 * them, are read from the digits (CPython 3.11's PyLongObject layout). */
static inline int small_int(PyObject *value, long long *v) {
    Py_ssize_t ndigits = Py_SIZE(value);
    const digit *digits = ((PyLongObject *)value)->ob_digit;
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

/* Writes an int (an exact one, or an int enum member: an int subclass keeps int's digits)
 * as T_INT and the zigzag varint of its value; DEFERRED past 62 bits (a T_BIGINT, Python's
 * encoder). */
static inline int put_int(Scratch *s, PyObject *value) {
    long long v;
    int fits = small_int(value, &v);
    if (fits <= 0) return fits < 0 ? FAILED : DEFERRED;
    if (scratch_reserve(s, 11) < 0) return FAILED;
    unsigned char *at = s->data + s->size;
    *at++ = TAG_INT;
    s->size = write_varint(at, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)) - s->data;
    return ENCODED;
}

/* lenient: the fingerprint encoding of argument keys (Encoder(lenient=True)), where int enum
 * members are their int; the recorder's own encoding otherwise. */
static int encode(Scratch *s, PyObject *value, int depth, int lenient) {
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
        if (PyFloat_Pack8(PyFloat_AS_DOUBLE(value), (char *)packed, 1) < 0) return FAILED;
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
 * from (plain_repr): None, ints of 62 bits, ASCII strs and tuples of them to KEY_DEPTH
 * levels; DEFERRED (with part of it written) for any other key. This is all a plain key's
 * argument digest costs the application's thread: no decimal digits, and no scan of a str
 * for the characters its repr escapes. With `enums`, members of known int enums are
 * written as their int too, as the lenient encode() writes them, and *enums set: the
 * encoding is then that key's fingerprint encoding (key_shape's SHAPE_ENUM), not a plain
 * one. */
static int put_plain(Scratch *s, PyObject *value, int depth, int *enums);

/* put_plain of an ASCII str. */
static inline int put_ascii(Scratch *s, PyObject *value) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(value);
    if (!PyUnicode_IS_ASCII(value) || n >= BLOB_THRESHOLD) return DEFERRED;
    if (scratch_reserve(s, 11 + n) < 0) return FAILED;
    unsigned char *at = s->data + s->size;
    *at++ = TAG_STR;
    at = write_varint(at, (uint64_t)n);
    copy_bytes(at, PyUnicode_1BYTE_DATA(value), (size_t)n);
    s->size = at + n - s->data;
    return ENCODED;
}

/* put_plain of one item of a key: ints, strs and None, nearly all of them, in line. */
static inline int put_plain_item(Scratch *s, PyObject *value, int depth, int *enums) {
    if (PyLong_CheckExact(value)) return put_int(s, value);
    if (PyUnicode_CheckExact(value)) return put_ascii(s, value);
    if (value == Py_None) return put_byte(s, TAG_NONE) < 0 ? FAILED : ENCODED;
    return put_plain(s, value, depth, enums);
}

static int put_plain(Scratch *s, PyObject *value, int depth, int *enums) {
    if (!PyTuple_CheckExact(value) || depth > KEY_DEPTH) {
        if (PyLong_CheckExact(value) || PyUnicode_CheckExact(value) || value == Py_None)
            return put_plain_item(s, value, depth, enums);
        if (enums == NULL || !is_int_enum(value)) return DEFERRED;
        *enums = 1;
        return put_int(s, value);
    }
    Py_ssize_t n = PyTuple_GET_SIZE(value);
    if (scratch_reserve(s, 11) < 0) return FAILED;
    unsigned char *at = s->data + s->size;
    *at++ = TAG_TUPLE;
    s->size = write_varint(at, (uint64_t)n) - s->data;
    for (Py_ssize_t i = 0; i < n; i++) {
        int status = put_plain_item(s, PyTuple_GET_ITEM(value, i), depth + 1, enums);
        if (status != ENCODED) return status;
    }
    return ENCODED;
}

/* -- argument digests (args_digest in proxy/_runtime.py) -------------------------------- */

static unsigned char empty_digest[ARGS_DIGEST_SIZE];

/* What a key holds, as _key_shape in proxy/_runtime.py sees it: nothing but ints, strs and
 * Nones of the exact types (0), or floats, bytes or bools too (SHAPE_INEXACT), or members of
 * known int enums (SHAPE_ENUM); tuples in it count to KEY_DEPTH levels. SHAPE_OTHER: anything
 * else, which Python fingerprints (and learns any new int enum class from). */
enum { SHAPE_INEXACT = 1, SHAPE_ENUM = 2, SHAPE_OTHER = 4 };

static COLD int key_shape(PyObject *key, int depth) {
    int shape = 0;
    Py_ssize_t n = PyTuple_GET_SIZE(key);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(key, i);
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

/* A call's key. A twin holds it in parts, (head, *items) (with no head: the items), and the
 * tuple is made only when something needs the object (key_object): a plain key is encoded
 * straight from its parts (put_plain_parts). Python's call, invoke and output pass the key
 * itself (KEY_OF). */
typedef struct {
    PyObject *object; /* the key; NULL until made from the parts, then owned here */
    int owned;
    PyObject *head; /* NULL: none */
    PyObject *const *items;
    Py_ssize_t n;
} Key;

#define KEY_OF(obj) ((Key){(obj), 0, NULL, NULL, 0})
#define KEY_PARTS(head, items, n) ((Key){NULL, 0, (head), (items), (n)})

/* The key as an object (borrowed; the Key holds it until key_release); NULL with an
 * exception set if it cannot be made. */
static COLD PyObject *key_object(Key *key) {
    if (key->object != NULL) return key->object;
    Py_ssize_t first = key->head != NULL;
    PyObject *tuple = PyTuple_New(first + key->n);
    if (tuple == NULL) return NULL;
    if (first) PyTuple_SET_ITEM(tuple, 0, Py_NewRef(key->head));
    for (Py_ssize_t i = 0; i < key->n; i++)
        PyTuple_SET_ITEM(tuple, first + i, Py_NewRef(key->items[i]));
    key->object = tuple;
    key->owned = 1;
    return tuple;
}

static void key_release(Key *key) {
    if (key->owned) Py_CLEAR(key->object);
    key->owned = 0;
}

/* put_plain of the tuple that a key's parts make, without making it. */
static int put_plain_parts(Scratch *s, const Key *key, int *enums) {
    Py_ssize_t first = key->head != NULL;
    if (scratch_reserve(s, 11) < 0) return FAILED;
    unsigned char *at = s->data + s->size;
    *at++ = TAG_TUPLE;
    s->size = write_varint(at, (uint64_t)(first + key->n)) - s->data;
    int status = first ? put_plain_item(s, key->head, 2, enums) : ENCODED;
    for (Py_ssize_t i = 0; status == ENCODED && i < key->n; i++)
        status = put_plain_item(s, key->items[i], 2, enums);
    return status;
}

/* Remembers a key's digest, starting afresh past RECENT_LIMIT keys; NULL (and the digest
 * released) if that fails. */
static PyObject *remember(PyObject *recent, PyObject *key, PyObject *digest) {
    if (PyDict_GET_SIZE(recent) >= RECENT_LIMIT) PyDict_Clear(recent);
    if (PyDict_SetItem(recent, key, digest) < 0) Py_CLEAR(digest);
    return digest;
}

/* What repr() does with an ASCII character in a str: keeps it, or (REPR_ESCAPED) escapes it;
 * quotes decide which quote the repr uses. Filled by PyInit__fastpath. */
enum { REPR_SINGLE = 1, REPR_DOUBLE = 2, REPR_QUOTES = 3, REPR_ESCAPED = 4 };
static unsigned char repr_class[128];

/* repr() of a plain key's parts, written as UTF-8, for the commonest ones: ints of 62
 * bits, None, tuples, and ASCII strs that need no escape. DEFERRED for anything else, which
 * PyObject_Repr then makes (the bytes must be exactly repr's). The digest of a key with
 * floats, bytes or bools is made from it on the application's thread (plain keys go to
 * the pipeline's thread as their encoding instead, see plain_repr). */
static int put_repr(Scratch *s, PyObject *value) {
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
        copy_bytes(s->data + s->size, (unsigned char *)digits + sizeof digits - n, (size_t)n);
        s->size += n;
        return ENCODED;
    }
    if (PyUnicode_CheckExact(value)) {
        if (!PyUnicode_IS_ASCII(value)) return DEFERRED;
        const unsigned char *chars = PyUnicode_1BYTE_DATA(value);
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
static COLD PyObject *repr_digest(PyObject *recent, Scratch *text, PyObject *key) {
    PyObject *digest = recent != NULL ? PyDict_GetItemWithError(recent, key) : NULL;
    if (digest != NULL) return Py_NewRef(digest);
    if (PyErr_Occurred()) return NULL;
    unsigned char out[ARGS_DIGEST_SIZE];
    Py_ssize_t length; /* of the repr, in code points */
    text->size = 0;
    int status = put_repr(text, key);
    if (status == FAILED) return NULL;
    if (status == ENCODED) { /* ASCII: as many code points as bytes */
        length = text->size;
        blake2b_digest(out, ARGS_DIGEST_SIZE, (const unsigned char *)"r", 1, text->data,
                       (size_t)text->size);
    } else {
        PyObject *repr = PyObject_Repr(key);
        if (repr == NULL) return NULL;
        PyObject *raw = PyUnicode_AsEncodedString(repr, "utf-8", "surrogatepass");
        length = PyUnicode_GET_LENGTH(repr);
        Py_DECREF(repr);
        if (raw == NULL) return NULL;
        blake2b_digest(out, ARGS_DIGEST_SIZE, (const unsigned char *)"r", 1,
                       (const unsigned char *)PyBytes_AS_STRING(raw),
                       (size_t)PyBytes_GET_SIZE(raw));
        Py_DECREF(raw);
    }
    digest = PyBytes_FromStringAndSize((const char *)out, ARGS_DIGEST_SIZE);
    if (digest != NULL && recent != NULL && length <= RECENT_REPR_MAX)
        return remember(recent, key, digest);
    return digest;
}

/* The digest of a key holding int enum members: BLAKE2b of "e" and its fingerprint
 * encoding, remembered in `recent` (enum keys only: (AF_INET, 1) == (2, 1)). NULL with no
 * exception set: the encoding needs Python. */
static COLD PyObject *enum_digest(PyObject *recent, Scratch *text, PyObject *key) {
    PyObject *digest = PyDict_GetItemWithError(recent, key);
    if (digest != NULL) return Py_NewRef(digest);
    if (PyErr_Occurred()) return NULL;
    text->size = 0;
    int status = encode(text, key, 0, 1);
    if (status != ENCODED) return NULL;
    unsigned char out[ARGS_DIGEST_SIZE];
    blake2b_digest(out, ARGS_DIGEST_SIZE, (const unsigned char *)"e", 1, text->data,
                   (size_t)text->size);
    digest = PyBytes_FromStringAndSize((const char *)out, ARGS_DIGEST_SIZE);
    return digest != NULL ? remember(recent, key, digest) : NULL;
}

/* A key's digest when this module makes it (NULL, no exception: ask Python). */
static PyObject *known_digest(PyObject *recent, PyObject *recent_enum, Scratch *text,
                              PyObject *key) {
    if (key == Py_None || (PyTuple_CheckExact(key) && PyTuple_GET_SIZE(key) == 0))
        return PyBytes_FromStringAndSize((const char *)empty_digest, ARGS_DIGEST_SIZE);
    if (!PyTuple_CheckExact(key)) return NULL;
    switch (key_shape(key, KEY_DEPTH)) {
    case 0: return repr_digest(recent, text, key);
    case SHAPE_INEXACT: return repr_digest(NULL, text, key);
    case SHAPE_ENUM: return enum_digest(recent_enum, text, key);
    default: return NULL;
    }
}

/* -- the per-call path ---------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    unsigned long gate;     /* _gate: the thread whose calls are recorded now, or 0 */
    unsigned long live;     /* _live: what _gate returns to after a call; 0 once ended */
    unsigned long main;     /* _main: the thread that installed the recorder */
    PyObject *buf;          /* _buf: the bytearray of records not yet handed over */
    PyObject *heads;        /* _heads: callee name -> its index, encoded */
    PyObject *recent;       /* key of shape 0 -> its digest */
    PyObject *recent_enum;  /* key of SHAPE_ENUM -> its digest */
    Py_ssize_t events;      /* events */
    Py_ssize_t oids;        /* _oids: object ids handed out */
    double last_flush;      /* _last_flush: time.monotonic() of the last flush */
    double flush_interval;  /* _flush_interval */
    Scratch scratch;        /* one record being made */
    Scratch text;           /* the repr of a key being digested */
    Py_ssize_t callee_size; /* bytes of the callee's index at the start of the record */
    Py_ssize_t repr_at, repr_size; /* where a pending key's material is in the record */
    int pending;            /* the record carries its key's repr, not yet its digest */
    /* Callee heads by the identity of the name object (a twin's name is always the same
     * str), with strong references; filled from `head_of`, the _heads they came from. An
     * open-addressed table: a direct-mapped one let two hot names that shared a slot evict
     * each other on every call (half the calls of a request, with some addresses). */
    PyObject *head_of;
    int head_count;
    PyObject *head_names[HEAD_CACHE], *head_values[HEAD_CACHE];
} CallPath;

static PyObject *s_callee, *s_event, *s_drain, *s_failed, *s_args_digest, *s_flush_names;

static double monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static PyObject *callpath_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    (void)args;
    (void)kwargs; /* the subclass's __init__ takes them */
    CallPath *self = (CallPath *)type->tp_alloc(type, 0);
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
    return (PyObject *)self;
}

static int callpath_traverse(CallPath *self, visitproc visit, void *arg) {
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

/* Empties the cache of heads (not head_of, which says where they came from). */
static COLD void forget_heads(CallPath *self) {
    self->head_count = 0;
    for (int i = 0; i < HEAD_CACHE; i++) {
        Py_CLEAR(self->head_names[i]);
        Py_CLEAR(self->head_values[i]);
    }
}

static int callpath_clear(CallPath *self) {
    Py_CLEAR(self->buf);
    Py_CLEAR(self->heads);
    Py_CLEAR(self->recent);
    Py_CLEAR(self->recent_enum);
    Py_CLEAR(self->head_of);
    forget_heads(self);
    return 0;
}

static void callpath_dealloc(CallPath *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    callpath_clear(self);
    PyMem_Free(self->scratch.data);
    PyMem_Free(self->text.data);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

/* The digest of a call's key: plain keys here, every other key by the Python function. */
static COLD PyObject *key_digest(CallPath *self, PyObject *key) {
    PyObject *known = known_digest(self->recent, self->recent_enum, &self->text, key);
    if (known != NULL || PyErr_Occurred()) return known;
    PyObject *fn = PyObject_GetAttr((PyObject *)self, s_args_digest);
    if (fn == NULL) return NULL;
    PyObject *digest = PyObject_CallOneArg(fn, key);
    Py_DECREF(fn);
    if (digest != NULL &&
        (!PyBytes_Check(digest) || PyBytes_GET_SIZE(digest) != ARGS_DIGEST_SIZE)) {
        Py_DECREF(digest);
        PyErr_SetString(PyExc_ValueError, "args_digest returned no digest");
        return NULL;
    }
    return digest;
}

/* The cache's slot that holds `name`, or the empty one where it goes: from where Fibonacci
 * hashing of its address points, on to the next empty slot. */
static inline size_t head_slot(CallPath *self, PyObject *name) {
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
static PyObject *callee_head(CallPath *self, PyObject *name) {
    if (self->head_of != self->heads) {
        forget_heads(self);
        Py_XSETREF(self->head_of, Py_NewRef(self->heads));
    }
    size_t slot = head_slot(self, name);
    if (self->head_names[slot] == name) return self->head_values[slot];
    PyObject *head = PyDict_GetItemWithError(self->heads, name);
    if (head != NULL) {
        Py_INCREF(head);
    } else {
        if (PyErr_Occurred()) return NULL;
        head = PyObject_CallMethodOneArg((PyObject *)self, s_callee, name);
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
static COLD int put_digest(CallPath *self, PyObject *key) {
    PyObject *digest = key_digest(self, key);
    if (digest == NULL) return -1;
    int status = put_bytes(&self->scratch, PyBytes_AS_STRING(digest), ARGS_DIGEST_SIZE);
    Py_DECREF(digest);
    return status;
}

/* Ends the material begun at `at` (start_record): writes its length in the byte kept for it,
 * moving the material along when the length takes more, and marks the record pending. */
static int end_material(CallPath *self, Py_ssize_t at) {
    Py_ssize_t size = self->scratch.size - at - 1;
    unsigned char length[10];
    Py_ssize_t extra = write_varint(length, (uint64_t)size) - length - 1;
    if (extra > 0) {
        if (scratch_reserve(&self->scratch, extra) < 0) return -1;
        unsigned char *data = self->scratch.data;
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
static int start_record(CallPath *self, PyObject *name, Key *key) {
    if (self->heads == NULL || self->recent == NULL || self->recent_enum == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the recorder has been torn down");
        return -1;
    }
    PyObject *head = callee_head(self, name);
    if (head == NULL) return -1;
    Scratch *s = &self->scratch;
    Py_ssize_t at = PyBytes_GET_SIZE(head); /* where the digest or the material goes */
    s->size = 0;
    self->callee_size = at;
    self->pending = 0;
    if (scratch_reserve(s, at + 2) < 0) return -1; /* and two bytes for the material's start */
    copy_bytes(s->data, (const unsigned char *)PyBytes_AS_STRING(head), (size_t)at);
    s->size = at;
    PyObject *obj = key->object;
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
    int written = parts ? put_plain_parts(s, key, &enums)
                        : put_plain(s, obj, 1, &enums);
    if (written == ENCODED) {
        if (enums) s->data[at + 1] = MATERIAL_ENUM;
        return end_material(self, at);
    }
    if (written == FAILED || (obj = key_object(key)) == NULL) return -1;
    s->size = at; /* not plain: an enum key's material, or the digest */
    if (key_shape(obj, KEY_DEPTH) == SHAPE_ENUM) {
        if (put_byte(s, 0) < 0 || put_byte(s, MATERIAL_ENUM) < 0)
            return -1;
        written = encode(s, obj, 0, 1);
        if (written == ENCODED) return end_material(self, at);
        if (written == FAILED) return -1;
        s->size = at;
    }
    return put_digest(self, obj);
}

static int read_varint(const unsigned char **at, const unsigned char *end, uint64_t *value);

/* Appends repr() of the plain key encoded at *at (put_plain) to `out`, which has room for
 * it (material_digest's bound); returns the end of what it wrote, or NULL if the encoding
 * is not one put_plain writes. As repr() writes them: ASCII strs quoted with ' unless they
 * hold ' and no ", escaping the quote, backslash, \t, \n, \r and other control characters
 * (\xNN); decimal ints; None; tuples with ", " and the one-item tuple's ",". Runs without
 * the GIL. */
static unsigned char *plain_repr(const unsigned char **at, const unsigned char *end,
                                 unsigned char *out, int depth) {
    static const char hex[] = "0123456789abcdef";
    uint64_t n;
    if (*at >= end || depth > KEY_DEPTH) return NULL;
    unsigned char tag = *(*at)++;
    switch (tag) {
    case TAG_NONE:
        memcpy(out, "None", 4);
        return out + 4;
    case TAG_INT: {
        if (read_varint(at, end, &n) < 0) return NULL;
        int64_t v = (int64_t)(n >> 1) ^ -(int64_t)(n & 1);
        uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        unsigned char digits[20];
        int count = 0;
        do {
            digits[count++] = (unsigned char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (v < 0) *out++ = '-';
        while (count) *out++ = digits[--count];
        return out;
    }
    case TAG_STR: {
        if (read_varint(at, end, &n) < 0 || n > (uint64_t)(end - *at)) return NULL;
        const unsigned char *text = *at, *text_end = text + n;
        *at = text_end;
        int single = memchr(text, '\'', (size_t)n) != NULL;
        unsigned char quote = single && memchr(text, '"', (size_t)n) == NULL ? '"' : '\'';
        *out++ = quote;
        for (const unsigned char *c = text; c < text_end; c++) {
            unsigned char ch = *c;
            if (ch >= 0x80) return NULL; /* put_plain writes ASCII only */
            if (ch == quote || ch == '\\') {
                *out++ = '\\';
                *out++ = ch;
            } else if (ch == '\t' || ch == '\n' || ch == '\r') {
                *out++ = '\\';
                *out++ = ch == '\t' ? 't' : ch == '\n' ? 'n' : 'r';
            } else if (ch < 0x20 || ch == 0x7F) {
                *out++ = '\\';
                *out++ = 'x';
                *out++ = (unsigned char)hex[ch >> 4];
                *out++ = (unsigned char)hex[ch & 15];
            } else {
                *out++ = ch;
            }
        }
        *out++ = quote;
        return out;
    }
    case TAG_TUPLE: {
        if (read_varint(at, end, &n) < 0 || n > (uint64_t)(end - *at)) return NULL;
        *out++ = '(';
        for (uint64_t i = 0; i < n; i++) {
            if (i) {
                *out++ = ',';
                *out++ = ' ';
            }
            out = plain_repr(at, end, out, depth + 1);
            if (out == NULL) return NULL;
        }
        if (n == 1) *out++ = ',';
        *out++ = ')';
        return out;
    }
    default:
        return NULL;
    }
}

/* The argument digest of a pending record's material (start_record) into out; -1 if the
 * material is malformed or memory runs out. Runs without the GIL. */
static int material_digest(unsigned char *out, const unsigned char *material, size_t size) {
    if (size == 0) return -1;
    if (material[0] == MATERIAL_ENUM) {
        blake2b_digest(out, ARGS_DIGEST_SIZE, NULL, 0, material, size);
        return 0;
    }
    if (material[0] != MATERIAL_PLAIN) return -1;
    /* A byte of the encoding makes at most six of the repr: None (one byte) and ", ". */
    size_t bound = 6 * size + 16;
    unsigned char small[1024], *text = bound <= sizeof small ? small : malloc(bound);
    if (text == NULL) return -1;
    const unsigned char *at = material + 1, *end = material + size;
    unsigned char *written = plain_repr(&at, end, text, 0);
    int status = written != NULL && at == end ? 0 : -1;
    if (status == 0)
        blake2b_digest(out, ARGS_DIGEST_SIZE, (const unsigned char *)"r", 1, text,
                       (size_t)(written - text));
    if (text != small) free(text);
    return status;
}

/* The callee's index and the argument digest of the record begun, as bytes (for Python's
 * _event, which finishes the records this module does not encode). */
static COLD PyObject *record_head(CallPath *self) {
    if (!self->pending)
        return PyBytes_FromStringAndSize((const char *)self->scratch.data,
                                         self->callee_size + ARGS_DIGEST_SIZE);
    PyObject *head = PyBytes_FromStringAndSize(NULL, self->callee_size + ARGS_DIGEST_SIZE);
    if (head == NULL) return NULL;
    char *at = PyBytes_AS_STRING(head);
    memcpy(at, self->scratch.data, (size_t)self->callee_size);
    const unsigned char *material = self->scratch.data + self->repr_at;
    if (material_digest((unsigned char *)at + self->callee_size, material,
                        (size_t)self->repr_size) < 0) {
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
static char *grow_buffer(PyObject *buf, Py_ssize_t extra) {
    PyByteArrayObject *b = (PyByteArrayObject *)buf;
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
static int append_record(CallPath *self, unsigned char kind, Py_ssize_t split,
                         const char *payload, Py_ssize_t payload_size) {
    if (self->buf == NULL || !PyByteArray_CheckExact(self->buf)) {
        PyErr_SetString(PyExc_TypeError, "the record buffer must be a bytearray");
        return -1;
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
    char *at = grow_buffer(self->buf, framed + self->scratch.size + payload_size);
    if (at == NULL) return -1;
    copy_bytes((unsigned char *)at, frame, (size_t)framed);
    at += framed;
    copy_bytes((unsigned char *)at, self->scratch.data, (size_t)split);
    at += split;
    copy_bytes((unsigned char *)at, (const unsigned char *)payload, (size_t)payload_size);
    copy_bytes((unsigned char *)at + payload_size, self->scratch.data + split,
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
    PyObject *call_args[2] = {(PyObject *)self, flush ? Py_True : Py_False};
    PyObject *done = PyObject_VectorcallMethod(
        s_drain, call_args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, s_flush_names);
    if (done == NULL) return -1;
    Py_DECREF(done);
    return 0;
}

/* After the real call returned: an error in recording ends the recording, not the call. */
static COLD PyObject *recording_failed(CallPath *self, PyObject *result) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        Py_DECREF(result); /* KeyboardInterrupt and friends go on to the application */
        return NULL;
    }
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    PyObject *done = PyObject_CallMethodOneArg((PyObject *)self, s_failed, exc);
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
static COLD PyObject *record_raised(CallPath *self, unsigned char kind, PyObject *name, Key *key,
                               PyObject *data) {
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    if (tb != NULL) PyException_SetTraceback(exc, tb);
    PyObject *kind_obj = PyLong_FromLong(kind);
    PyObject *status = PyLong_FromLong(STATUS_RAISED);
    PyObject *done = NULL;
    PyObject *key_obj = kind_obj != NULL && status != NULL ? key_object(key) : NULL;
    if (key_obj != NULL) {
        PyObject *args[7] = {(PyObject *)self, kind_obj, name, key_obj, data, status, exc};
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
static COLD int defer(CallPath *self, unsigned char kind, PyObject *name, Key *key, PyObject *data,
                 PyObject *result, PyObject *head) {
    PyObject *kind_obj = PyLong_FromLong(kind);
    PyObject *status = PyLong_FromLong(STATUS_RETURNED);
    PyObject *done = NULL;
    PyObject *key_obj = kind_obj != NULL && status != NULL ? key_object(key) : NULL;
    if (key_obj != NULL) {
        PyObject *args[8] = {(PyObject *)self, kind_obj, name, key_obj, data, status, result, head};
        size_t nargs = head != NULL ? 8 : 7;
        done = PyObject_VectorcallMethod(s_event, args, nargs | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                         NULL);
    }
    Py_XDECREF(kind_obj);
    Py_XDECREF(status);
    if (done == NULL) return -1;
    Py_DECREF(done);
    return 0;
}

static int check_count(Py_ssize_t nargs, Py_ssize_t want, const char *name) {
    if (nargs == want) return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, nargs);
    return -1;
}

/* What call and invoke do once the real call has returned `result`; returns it. Or, with
 * no result, what they do for the bytes data[0:size] returned (recv_into's twin reads into
 * the caller's buffer, and records what recv would have returned); returns None then. */
static PyObject *record_result(CallPath *self, PyObject *name, Key *key, PyObject *result,
                               const char *data, Py_ssize_t size) {
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
        PyObject *value = PyBytes_CheckExact(result) || data == NULL
                              ? Py_NewRef(result)
                              : PyBytes_FromStringAndSize(data, size);
        PyObject *head = value != NULL ? record_head(self) : NULL;
        int deferred = head != NULL ? defer(self, KIND_CALL, name, key, Py_None, value, head) : -1;
        Py_XDECREF(head);
        Py_XDECREF(value);
        return deferred < 0 ? recording_failed(self, result) : result;
    }
    if (append_record(self, KIND_CALL, self->scratch.size, data, inserted) < 0)
        return recording_failed(self, result);
    return result;
}

static PyObject *record_returned(CallPath *self, PyObject *name, Key *key, PyObject *result) {
    return record_result(self, name, key, result, NULL, 0);
}

/* call(name, key, fn): RecordRuntime.call. */
static PyObject *callpath_call(CallPath *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_count(nargs, 3, "call") < 0) return NULL;
    PyObject *name = args[0], *fn = args[2];
    Key key = KEY_OF(args[1]);
    if (PyThread_get_thread_ident() != self->gate) return PyObject_CallNoArgs(fn);
    self->gate = 0;
    PyObject *result = PyObject_CallNoArgs(fn);
    self->gate = self->live;
    if (result == NULL) return record_raised(self, KIND_CALL, name, &key, Py_None);
    return record_returned(self, name, &key, result);
}

/* What output does once the real call has returned `result`. */
static PyObject *record_output(CallPath *self, PyObject *name, Key *key, PyObject *data,
                               PyObject *result) {
    if (!self->live) return result;
    int fast = PyUnicode_CheckExact(name) &&
               (data == Py_None ||
                (PyBytes_CheckExact(data) && PyBytes_GET_SIZE(data) < BLOB_THRESHOLD));
    if (fast) {
        if (start_record(self, name, key) < 0) return recording_failed(self, result);
        const char *payload = data == Py_None ? "" : PyBytes_AS_STRING(data);
        Py_ssize_t size = data == Py_None ? 0 : PyBytes_GET_SIZE(data), inserted;
        int status = put_payload(&self->scratch, payload, size, &inserted);
        Py_ssize_t split = self->scratch.size;
        if (status == ENCODED)
            status = put_byte(&self->scratch, STATUS_RETURNED) < 0
                         ? FAILED
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

/* Whether looking a name up on instances of `type` always finds what _PyType_Lookup finds
 * on the type: an immutable type (such as _socket.socket and sqlite3.Cursor) that looks
 * attributes up the generic way, and whose instances have no dictionary to shadow it. */
static inline int fixed_lookup(PyTypeObject *type) {
    return PyType_HasFeature(type, Py_TPFLAGS_IMMUTABLETYPE) && type->tp_dictoffset == 0 &&
           type->tp_getattro == PyObject_GenericGetAttr;
}

/* Whether `found` (what _PyType_Lookup found, or NULL) is a field or property of a C type. */
static inline int is_field(PyObject *found) {
    return found != NULL &&
           (Py_IS_TYPE(found, &PyGetSetDescr_Type) || Py_IS_TYPE(found, &PyMemberDescr_Type));
}

/* What a part of obj is (parts_of): its attribute of that name (a str); the value of that
 * field or property of its C type (a member or getset descriptor, read straight from the
 * descriptor as its __get__ would); or what that function makes of it. */
static PyObject *part_of(PyObject *obj, PyObject *part) {
    if (PyUnicode_Check(part)) {
        /* A field of an immutable C type whose instances have no dictionary (the real
         * sqlite3 cursor's description ...): its descriptor, read as below. */
        PyTypeObject *type = Py_TYPE(obj);
        PyObject *found = fixed_lookup(type) ? _PyType_Lookup(type, part) : NULL; /* borrowed */
        if (!is_field(found)) return PyObject_GetAttr(obj, part);
        part = found;
    }
    if (is_field(part)) {
        PyDescrObject *descr = (PyDescrObject *)part;
        if (!PyObject_TypeCheck(obj, descr->d_type))
            return Py_TYPE(part)->tp_descr_get(part, obj, (PyObject *)Py_TYPE(obj)); /* raises */
        if (Py_IS_TYPE(part, &PyMemberDescr_Type))
            return PyMember_GetOne((const char *)obj, ((PyMemberDescrObject *)part)->d_member);
        PyGetSetDef *getset = ((PyGetSetDescrObject *)part)->d_getset;
        if (getset->get != NULL) return getset->get(obj, getset->closure);
        return Py_TYPE(part)->tp_descr_get(part, obj, (PyObject *)Py_TYPE(obj));
    }
    return PyObject_CallOneArg(part, obj);
}

/* The tuple of obj's parts: part_of(obj, part) for each of `parts`. */
static PyObject *parts_of(PyObject *obj, PyObject *parts) {
    Py_ssize_t n = PyTuple_GET_SIZE(parts);
    PyObject *values = PyTuple_New(n);
    for (Py_ssize_t i = 0; values != NULL && i < n; i++) {
        PyObject *value = part_of(obj, PyTuple_GET_ITEM(parts, i));
        if (value == NULL) Py_CLEAR(values);
        else PyTuple_SET_ITEM(values, i, value);
    }
    return values;
}

#define INVOKE_STACK 8

/* A vectorcall stack of n slots: `small` (2 + INVOKE_STACK of them) when they are enough,
 * else allocated; NULL with MemoryError set. release_stack gives it back. */
static PyObject **stack_of(PyObject **small, Py_ssize_t n) {
    if (n <= 2 + INVOKE_STACK) return small;
    PyObject **stack = PyMem_New(PyObject *, (size_t)n);
    if (stack == NULL) PyErr_NoMemory();
    return stack;
}

static void release_stack(PyObject **stack, PyObject **small) {
    if (stack != small) PyMem_Free(stack);
}

/* The real call of run_method (below), not recorded: obj.method(*args) with stack[1] obj and
 * stack[2 ...] its arguments, `count` of them all, and stack[0] free; `method` is its name,
 * or the method itself (a descriptor of obj's type); with no `method`, stack[1] is a
 * function, called with the rest. */
static inline PyObject *call_real(PyObject *method, PyObject **stack, Py_ssize_t count) {
    if (method != NULL && PyUnicode_CheckExact(method)) {
        size_t nargsf = (size_t)count | PY_VECTORCALL_ARGUMENTS_OFFSET;
        return PyObject_VectorcallMethod(method, stack + 1, nargsf, NULL);
    }
    if (method != NULL && Py_IS_TYPE(method, &PyMethodDescr_Type)) {
        /* A C method found by method_of on obj's type (so obj is one that it takes), called
         * straight, as its vectorcall (descrobject.c) would call it after its checks. */
        PyMethodDef *def = ((PyMethodDescrObject *)method)->d_method;
        PyObject *obj = stack[1];
        switch (def->ml_flags & (METH_VARARGS | METH_FASTCALL | METH_NOARGS | METH_O |
                                 METH_KEYWORDS | METH_METHOD)) {
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

/* obj.method(*args) (call_real: stack, count and method as there; method_of finds the
 * method itself) as one boundary call of `kind` (CALL, or OUTPUT of `data`), recorded when
 * `recording` (the caller saw that the call is made on the recorded thread). With `state`
 * (a tuple of names), the call's result is the tuple of obj's attributes of those names
 * after the method returned, read inside the call: sqlite3's cursor state after execute(). */
static PyObject *run_method(CallPath *self, unsigned char kind, PyObject *name, Key *key,
                            PyObject *data, PyObject *method, PyObject **stack, Py_ssize_t count,
                            PyObject *state, int recording) {
    if (recording) self->gate = 0;
    PyObject *result = call_real(method, stack, count);
    if (result != NULL && state != NULL) {
        Py_SETREF(result, parts_of(stack[1], state));
    }
    if (!recording) return result;
    self->gate = self->live;
    if (result == NULL) return record_raised(self, kind, name, key, data);
    if (kind == KIND_OUTPUT) return record_output(self, name, key, data, result);
    return record_returned(self, name, key, result);
}

/* invoke(name, key, obj, method, *args): RecordRuntime.invoke, call() of obj.method(*args)
 * without a closure to make and a Python frame to run. */
static PyObject *callpath_invoke(CallPath *self, PyObject *const *args, Py_ssize_t nargs) {
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
    PyObject *result =
        run_method(self, KIND_CALL, name, &key, Py_None, method, stack, count, NULL,
                   PyThread_get_thread_ident() == self->gate);
    release_stack(stack, small);
    return result;
}

static PyObject *callpath_output(CallPath *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_count(nargs, 4, "output") < 0) return NULL;
    PyObject *name = args[0], *data = args[2], *fn = args[3];
    Key key = KEY_OF(args[1]);
    if (PyThread_get_thread_ident() != self->gate) return PyObject_CallNoArgs(fn);
    self->gate = 0;
    PyObject *result = PyObject_CallNoArgs(fn);
    self->gate = self->live;
    if (result == NULL) return record_raised(self, KIND_OUTPUT, name, &key, data);
    return record_output(self, name, &key, data, result);
}

/* new_oid(): RecordRuntime.new_oid. Objects made inside another boundary call (a selector
 * inside communicate()) do not exist on replay: they take no id (0). */
static PyObject *callpath_new_oid(CallPath *self, PyObject *unused) {
    (void)unused;
    if (PyThread_get_thread_ident() != self->gate) return PyLong_FromLong(0);
    return PyLong_FromSsize_t(++self->oids);
}

static PyMethodDef callpath_methods[] = {
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
    {"_gate", T_ULONG, offsetof(CallPath, gate), 0, NULL},
    {"_live", T_ULONG, offsetof(CallPath, live), 0, NULL},
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

static PyType_Spec callpath_spec = {
    .name = "sealtrace.proxy._fastpath.CallPath",
    .basicsize = sizeof(CallPath),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = callpath_slots,
};

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
    FORM_COUNT
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    CallPath *runtime;
    PyObject *name;     /* the callee's name in events */
    PyObject *method;   /* the real object's method (FORM_FUNCTION: the function) */
    PyObject *fallback; /* the Python method: the reference, for every case not handled here */
    PyObject *defaults; /* of the trailing positional parameters */
    PyObject *state;    /* FORM_STATE: the attribute names; FORM_NEW: the describing functions */
    Py_ssize_t required, maximum; /* positional arguments after self; maximum -1: any number */
    Py_ssize_t ndefaults;         /* the size of `defaults`, read without touching it */
    int form, guard;              /* guard: only while self._fd >= 0 (a socket not closed) */
    PyObject *real_type, *real_method; /* `method` as looked up on the real object's type */
    PyObject *parts_type, *parts;      /* FORM_STATE: `state` as looked up on that type */
    int cursor_state;                  /* FORM_STATE: `state` is CursorState's three */
} BoundaryMethod;

static PyTypeObject *callpath_type, *method_type, *proxy_type;
static PyObject *s_oid, *s_real, *s_fd, *s_row_factory, *s_row, *s_setup, *s_connection,
    *s_closed, *s_io_refs, *s_getdefaulttimeout, *empty_tuple;
static PyObject *socket_module; /* imported by the first socket set up (setup_socket) */

/* -- proxy state ----------------------------------------------------------------------------
 *
 * ProxyState is a base of the proxy classes that the C path records with (proxy/_runtime.py's
 * proxy_bases): it holds the three attributes that every twin reads, `_oid`, `_real` and
 * `_fd`, in its struct rather than in the instance's dictionary. Python code reads and
 * writes them as before (through member descriptors); the twins read them with no lookup.
 * Replay and the Python per-call path build the same proxy classes without it. */

typedef struct {
    PyObject_HEAD
    PyObject *oid;  /* _oid */
    PyObject *real; /* _real */
    PyObject *fd;   /* _fd (sockets) */
} ProxyState;

static int proxy_traverse(ProxyState *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->oid);
    Py_VISIT(self->real);
    Py_VISIT(self->fd);
    return 0;
}

static int proxy_clear(ProxyState *self) {
    Py_CLEAR(self->oid);
    Py_CLEAR(self->real);
    Py_CLEAR(self->fd);
    return 0;
}

/* The tp_dealloc of this module's GC types whose `clear` (their own tp_clear, not a
 * subclass's) releases all they hold. They are heap types: the instance holds a reference
 * to its type, which a heap subclass leaves to its base to release. */
static void free_cleared(PyObject *self, inquiry clear) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

static void proxy_dealloc(PyObject *self) { free_cleared(self, (inquiry)proxy_clear); }

/* A subclass of ProxyState (CursorState, SocketState) adds object fields only, in a row right
 * after it: STATE_FIELDS counts them from the struct, so traverse and clear cover every one
 * without a list to keep in step. */
#define STATE_FIELDS(type) ((int)((sizeof(type) - sizeof(ProxyState)) / sizeof(PyObject *)))

static int fields_traverse(ProxyState *self, int n, visitproc visit, void *arg) {
    PyObject **fields = (PyObject **)(self + 1);
    for (int i = 0; i < n; i++) Py_VISIT(fields[i]);
    return proxy_traverse(self, visit, arg);
}

static int fields_clear(ProxyState *self, int n) {
    PyObject **fields = (PyObject **)(self + 1);
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

static PyType_Spec proxy_spec = {
    .name = "sealtrace.proxy._fastpath.ProxyState",
    .basicsize = sizeof(ProxyState),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = proxy_slots,
};

/* Whether self's type is `type` or a subtype: the proxy classes have their state class as
 * their first base (proxy_bases in _runtime.py), which is checked before the MRO is, and
 * that class's base (SocketState's is ProxyState). */
static inline int is_a(PyObject *self, PyTypeObject *type) {
    PyTypeObject *own = Py_TYPE(self), *base = own->tp_base;
    return own == type || base == type || (base != NULL && base->tp_base == type) ||
           PyType_IsSubtype(own, type);
}

/* CursorState is ProxyState and what sqlite3's Cursor proxy keeps that its twins read and
 * write: its connection and row factory, and the state a statement leaves (description,
 * rowcount, lastrowid: _CURSOR_STATE in _sqlite_boundary.py). A new one has the state that
 * Cursor's class attributes give a fresh cursor. */
typedef struct {
    ProxyState proxy;
    PyObject *connection, *row_factory;
    PyObject *state[3];
} CursorState;

_Static_assert(offsetof(CursorState, connection) == sizeof(ProxyState) &&
                   STATE_FIELDS(CursorState) == 5,
               "CursorState adds its five object fields right after ProxyState");

static PyTypeObject *cursor_state_type;
static PyObject *cursor_state_names; /* ("description", "rowcount", "lastrowid") */

static PyObject *cursor_state_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    (void)args;
    (void)kwargs; /* Cursor.__init__ takes them */
    PyObject *self = PyBaseObject_Type.tp_new(type, empty_tuple, NULL);
    if (self == NULL) return NULL;
    CursorState *cursor = (CursorState *)self;
    cursor->state[0] = Py_NewRef(Py_None);
    cursor->state[1] = PyLong_FromLong(-1);
    cursor->state[2] = Py_NewRef(Py_None);
    if (cursor->state[1] == NULL) Py_CLEAR(self);
    return self;
}

static int cursor_state_traverse(CursorState *self, visitproc visit, void *arg) {
    return fields_traverse(&self->proxy, STATE_FIELDS(CursorState), visit, arg);
}

static int cursor_state_clear(CursorState *self) {
    return fields_clear(&self->proxy, STATE_FIELDS(CursorState));
}

static void cursor_state_dealloc(PyObject *self) {
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
    {Py_tp_doc, "ProxyState of a sqlite3 cursor: also its connection, row factory and the "
                "state its last statement left."},
    {Py_tp_new, cursor_state_new},
    {Py_tp_dealloc, cursor_state_dealloc},
    {Py_tp_traverse, cursor_state_traverse},
    {Py_tp_clear, cursor_state_clear},
    {Py_tp_members, cursor_state_members},
    {0, NULL},
};

static PyType_Spec cursor_state_spec = {
    .name = "sealtrace.proxy._fastpath.CursorState",
    .basicsize = sizeof(CursorState),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = cursor_state_slots,
};

/* SocketState is ProxyState and the rest of what a socket proxy keeps (Socket._setup in
 * _net_boundary.py): its family, type and protocol, its timeout, its count of open file
 * objects and whether it was closed. The `new` twin sets a proxy up in it, and the `close`
 * twin reads and writes it, without a lookup. */
enum { SOCK_FAMILY, SOCK_TYPE, SOCK_PROTO, SOCK_TIMEOUT, SOCK_IO_REFS, SOCK_CLOSED, SOCK_FIELDS };

typedef struct {
    ProxyState proxy;
    PyObject *fields[SOCK_FIELDS];
} SocketState;

#define SOCKET_FIELD(i) (offsetof(SocketState, fields) + (i) * sizeof(PyObject *))

_Static_assert(offsetof(SocketState, fields) == sizeof(ProxyState) &&
                   STATE_FIELDS(SocketState) == SOCK_FIELDS,
               "SocketState adds its fields right after ProxyState");

static PyTypeObject *socket_state_type;

static int socket_state_traverse(SocketState *self, visitproc visit, void *arg) {
    return fields_traverse(&self->proxy, STATE_FIELDS(SocketState), visit, arg);
}

static int socket_state_clear(SocketState *self) {
    return fields_clear(&self->proxy, STATE_FIELDS(SocketState));
}

static void socket_state_dealloc(PyObject *self) {
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
    {Py_tp_doc, "ProxyState of a socket: also its family, type, protocol, timeout, open file "
                "objects and whether it was closed."},
    {Py_tp_dealloc, socket_state_dealloc},
    {Py_tp_traverse, socket_state_traverse},
    {Py_tp_clear, socket_state_clear},
    {Py_tp_members, socket_state_members},
    {0, NULL},
};

static PyType_Spec socket_state_spec = {
    .name = "sealtrace.proxy._fastpath.SocketState",
    .basicsize = sizeof(SocketState),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = socket_state_slots,
};

/* self.<name> (a new reference): the field at `offset` of `state` (ProxyState, CursorState
 * or SocketState) when self is one and it is set, else looked up by name (which raises as
 * Python would). */
static inline PyObject *state_field(PyObject *self, PyTypeObject *state, size_t offset,
                                    PyObject *name) {
    if (is_a(self, state)) {
        PyObject *value = *(PyObject **)((char *)self + offset);
        if (value != NULL) return Py_NewRef(value);
    }
    return PyObject_GetAttr(self, name);
}

/* self.<name> = value: in the field at `offset` of `state` when self is one. */
static inline int set_state_field(PyObject *self, PyTypeObject *state, size_t offset,
                                  PyObject *name, PyObject *value) {
    if (!is_a(self, state)) return PyObject_SetAttr(self, name, value);
    Py_XSETREF(*(PyObject **)((char *)self + offset), Py_NewRef(value));
    return 0;
}

#define PROXY_OID(self) state_field(self, proxy_type, offsetof(ProxyState, oid), s_oid)
#define PROXY_REAL(self) state_field(self, proxy_type, offsetof(ProxyState, real), s_real)

/* An int attribute's value as a long (state_field): 0 and *ok unset if it is not an exact int
 * that fits. */
static long int_attribute(PyObject *self, PyTypeObject *state, size_t offset, PyObject *name,
                          int *ok) {
    PyObject *value = state_field(self, state, offset, name);
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

/* What to call for real.<m->method>: the method descriptor found on real's type, kept for
 * the next call on an object of the same type; or the name, looked up on each call. Only
 * for a type whose lookups cannot change (fixed_lookup): the same lookup always finds the
 * same descriptor. */
static PyObject *method_of(BoundaryMethod *m, PyObject *real) {
    PyTypeObject *type = Py_TYPE(real);
    if ((PyObject *)type == m->real_type) return m->real_method;
    if (!fixed_lookup(type)) return m->method;
    PyObject *found = _PyType_Lookup(type, m->method); /* borrowed */
    if (found == NULL || !PyType_HasFeature(Py_TYPE(found), Py_TPFLAGS_METHOD_DESCRIPTOR))
        return m->method;
    Py_XSETREF(m->real_type, Py_NewRef((PyObject *)type));
    Py_XSETREF(m->real_method, Py_NewRef(found));
    return found;
}

/* The parts to read from `real` after a FORM_STATE call (parts_of): the field and property
 * descriptors that part_of finds for m->state's names on real's type, kept for the next call
 * on an object of the same type, under method_of's conditions; or the names themselves (kept
 * too, for a type where one of them is not a field). */
static PyObject *state_parts(BoundaryMethod *m, PyObject *real) {
    PyTypeObject *type = Py_TYPE(real);
    if ((PyObject *)type == m->parts_type) return m->parts;
    if (!fixed_lookup(type)) return m->state;
    Py_ssize_t n = PyTuple_GET_SIZE(m->state);
    PyObject *parts = PyTuple_New(n);
    if (parts == NULL) {
        PyErr_Clear(); /* the names do as well, looked up on every call */
        return m->state;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *found = _PyType_Lookup(type, PyTuple_GET_ITEM(m->state, i)); /* borrowed */
        if (!is_field(found)) {
            Py_SETREF(parts, Py_NewRef(m->state)); /* part_of looks each name up */
            break;
        }
        PyTuple_SET_ITEM(parts, i, Py_NewRef(found));
    }
    Py_XSETREF(m->parts_type, Py_NewRef((PyObject *)type));
    Py_XSETREF(m->parts, parts);
    return parts;
}

static COLD PyObject *method_fallback(BoundaryMethod *m, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    return PyObject_Vectorcall(m->fallback, args, nargsf, kwnames);
}

/* Whether self._fd is not a non-negative int: the Python method raises OSError then. */
static int socket_closed(PyObject *self) {
    PyObject *field = is_a(self, proxy_type) ? ((ProxyState *)self)->fd : NULL;
    if (field != NULL && PyLong_CheckExact(field)) return Py_SIZE(field) < 0; /* its sign */
    int ok;
    long fd = int_attribute(self, proxy_type, offsetof(ProxyState, fd), s_fd, &ok);
    return !ok || fd < 0;
}

/* recv_into(buffer, nbytes=0, flags=0) when the buffer is writable plain bytes and nbytes
 * fits it; NULL with no exception otherwise (the Python method then). The Python method
 * records real.recv(size, flags) and copies its bytes in; this reads with the real
 * socket's recv_into, straight into the buffer, and records the same bytes from there. */
static PyObject *recv_into(BoundaryMethod *m, PyObject *key_oid, PyObject *real,
                           PyObject *const *argv, int *handled) {
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
    PyObject *size = wanted ? Py_NewRef(nbytes) : PyLong_FromSsize_t(view.len);
    PyObject *items[2] = {size, flags}, *result = NULL;
    Key key = KEY_PARTS(key_oid, items, 2);
    if (size != NULL) {
        CallPath *rt = m->runtime;
        PyObject *method = method_of(m, real), *stack[5] = {NULL, real, buffer, size, flags};
        /* recv_into(buffer) reads as much as (buffer, its size, 0) does, and parses less */
        int whole = !wanted && PyLong_CheckExact(flags) && Py_SIZE(flags) == 0;
        rt->gate = 0; /* the caller checked that this call is recorded */
        result = call_real(method, stack, whole ? 2 : 4);
        rt->gate = rt->live;
        Py_ssize_t n = result != NULL ? PyLong_AsSsize_t(result) : -1;
        if (result == NULL) {
            record_raised(rt, KIND_CALL, m->name, &key, Py_None);
        } else if (n < 0 || n > view.len) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "recv_into read more than the buffer holds");
            Py_CLEAR(result);
        } else {
            PyObject *done = record_result(rt, m->name, &key, NULL, view.buf, n);
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
static PyObject *call_function(BoundaryMethod *m, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *small[2 + INVOKE_STACK], **stack = stack_of(small, nargs + 2);
    if (stack == NULL) return NULL;
    Key key = nargs ? KEY_PARTS(NULL, args, nargs) : KEY_OF(Py_None);
    stack[1] = m->method;
    for (Py_ssize_t i = 0; i < nargs; i++) stack[2 + i] = args[i];
    PyObject *result =
        run_method(m->runtime, KIND_CALL, m->name, &key, Py_None, NULL, stack, 1 + nargs, NULL, 1);
    key_release(&key);
    release_stack(stack, small);
    return result;
}

/* Socket._setup(info, real) (_net_boundary.py) of a socket proxy whose state is a
 * SocketState, right after the recorded call that made `real`: 0 when done, -1 with an
 * exception set, or 1 (with nothing changed) for any other proxy or an info that is not the
 * four values of _DESCRIBE (its Python _setup then). */
static int setup_socket(CallPath *rt, PyObject *self, PyObject *info, PyObject *real) {
    if (!is_a(self, socket_state_type) || !PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) != 4)
        return 1;
    if (socket_module == NULL && (socket_module = PyImport_ImportModule("socket")) == NULL)
        return -1;
    PyObject *timeout = PyObject_CallMethodNoArgs(socket_module, s_getdefaulttimeout);
    PyObject *oid = timeout != NULL ? PyLong_FromSsize_t(++rt->oids) : NULL; /* new_oid() */
    if (oid == NULL) {
        Py_XDECREF(timeout);
        return -1;
    }
    SocketState *sock = (SocketState *)self;
    Py_XSETREF(sock->proxy.real, Py_NewRef(real));
    Py_XSETREF(sock->proxy.oid, oid);
    Py_XSETREF(sock->proxy.fd, Py_NewRef(PyTuple_GET_ITEM(info, 0)));
    for (int i = 0; i < 3; i++) /* family, type, proto */
        Py_XSETREF(sock->fields[SOCK_FAMILY + i], Py_NewRef(PyTuple_GET_ITEM(info, 1 + i)));
    Py_XSETREF(sock->fields[SOCK_TIMEOUT], timeout);
    Py_XSETREF(sock->fields[SOCK_IO_REFS], PyLong_FromLong(0)); /* a small int: never fails */
    Py_XSETREF(sock->fields[SOCK_CLOSED], Py_NewRef(Py_False));
    return 0;
}

/* FORM_NEW: self.__init__(*argv): makes the real object, records its description (what
 * replay builds the proxy from) and sets the proxy up from both. */
static PyObject *construct(BoundaryMethod *m, PyObject *self, PyObject **stack,
                           Py_ssize_t count) {
    Key key = KEY_PARTS(NULL, stack + 2, count);
    CallPath *rt = m->runtime;
    stack[1] = m->method; /* the vectorcall offset's slot, which the callee may borrow */
    rt->gate = 0;         /* the caller checked that this call is recorded */
    size_t nargsf = (size_t)count | PY_VECTORCALL_ARGUMENTS_OFFSET;
    PyObject *real = PyObject_Vectorcall(m->method, stack + 2, nargsf, NULL);
    PyObject *info = real != NULL ? parts_of(real, m->state) : NULL;
    rt->gate = rt->live;
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
            PyObject *args[3] = {self, info, real};
            PyObject *none = PyObject_VectorcallMethod(s_setup, args,
                                                       3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
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
static PyObject *cursor_execute(BoundaryMethod *m, PyObject *self, PyObject **stack,
                                Py_ssize_t count) {
    PyTypeObject *cls = (PyTypeObject *)PyTuple_GET_ITEM(m->state, 0);
    PyObject *execute = PyTuple_GET_ITEM(m->state, 1), *cursor = NULL, *result = NULL;
    PyObject *real = PROXY_REAL(self);
    PyObject *factory = real != NULL ? PyObject_GetAttr(self, s_row_factory) : NULL;
    PyObject *made[2] = {NULL, real};
    PyObject *real_cursor = factory == NULL ? NULL
                            : real == Py_None ? Py_NewRef(Py_None)
                                              : call_real(method_of(m, real), made, 1);
    if (real_cursor != NULL) cursor = cls->tp_new(cls, empty_tuple, NULL);
    if (cursor != NULL) {
        ProxyState *state = (ProxyState *)cursor;
        Py_XSETREF(state->real, Py_NewRef(real_cursor));
        Py_XSETREF(state->oid, PyLong_FromSsize_t(++m->runtime->oids)); /* new_oid() */
        if (state->oid != NULL &&
            set_state_field(cursor, cursor_state_type, offsetof(CursorState, connection),
                            s_connection, self) == 0 &&
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
static PyObject *close_socket(BoundaryMethod *m, PyObject *self, PyObject **stack) {
    int refs_ok, fd_ok;
    long refs = int_attribute(self, socket_state_type, SOCKET_FIELD(SOCK_IO_REFS), s_io_refs,
                              &refs_ok);
    long fd = int_attribute(self, proxy_type, offsetof(ProxyState, fd), s_fd, &fd_ok);
    if (!refs_ok || !fd_ok) return NULL;
    if (set_state_field(self, socket_state_type, SOCKET_FIELD(SOCK_CLOSED), s_closed, Py_True) < 0)
        return NULL;
    if (refs > 0 || fd < 0) Py_RETURN_NONE;
    PyObject *oid = PROXY_OID(self), *result = NULL;
    PyObject *real = oid != NULL ? PROXY_REAL(self) : NULL;
    Key key = KEY_PARTS(oid, NULL, 0);
    if (real != NULL) {
        stack[1] = real;
        result = run_method(m->runtime, KIND_CALL, m->name, &key, Py_None, method_of(m, real),
                            stack, 1, NULL, 1);
    }
    if (result != NULL) {
        PyObject *closed = PyLong_FromLong(-1);
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
static PyObject *set_timeout(BoundaryMethod *m, PyObject *self, PyObject *value) {
    PyObject *real = is_a(self, socket_state_type) ? ((ProxyState *)self)->real : NULL;
    if (real == NULL || real == Py_None) return NULL;
    PyObject *timeout;
    if (value == Py_None || PyFloat_CheckExact(value)) timeout = Py_NewRef(value);
    else if (PyLong_CheckExact(value)) timeout = PyNumber_Float(value); /* float(value) */
    else return NULL;
    if (timeout == NULL) return NULL;
    if (timeout != Py_None && PyFloat_AS_DOUBLE(timeout) < 0) {
        Py_DECREF(timeout);
        return NULL;
    }
    Py_INCREF(real);
    PyObject *stack[3] = {NULL, real, timeout};
    PyObject *result = call_real(method_of(m, real), stack, 2);
    Py_DECREF(real);
    if (result != NULL) {
        SocketState *sock = (SocketState *)self;
        Py_XSETREF(sock->fields[SOCK_TIMEOUT], Py_NewRef(timeout));
        Py_SETREF(result, Py_NewRef(Py_None));
    }
    Py_DECREF(timeout);
    return result;
}

static PyObject *method_vectorcall(BoundaryMethod *m, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
    if (m->runtime == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the method has been torn down");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), given = nargs - 1;
    Py_ssize_t ndefaults = m->ndefaults;
    int keywords = kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0;
    if (m->form == FORM_FUNCTION) {
        if (keywords || PyThread_get_thread_ident() != m->runtime->gate)
            return method_fallback(m, args, nargsf, kwnames);
        return call_function(m, args, nargs);
    }
    if (m->form == FORM_TIMEOUT) {
        PyObject *result = !keywords && nargs == 2 ? set_timeout(m, args[0], args[1]) : NULL;
        if (result == NULL && !PyErr_Occurred()) return method_fallback(m, args, nargsf, kwnames);
        return result;
    }
    if (keywords || given < m->required ||
        (m->maximum >= 0 && given > m->maximum) ||
        PyThread_get_thread_ident() != m->runtime->gate ||
        (m->guard && socket_closed(args[0])))
        return method_fallback(m, args, nargsf, kwnames);
    PyObject *self = args[0];
    /* The arguments as the Python method sees them: defaults filled in. */
    Py_ssize_t count = given > m->required + ndefaults ? given : m->required + ndefaults;
    PyObject *small[2 + INVOKE_STACK], **stack = stack_of(small, count + 2);
    if (stack == NULL) return NULL;
    PyObject **argv = stack + 2; /* stack[0]: the vectorcall offset; stack[1]: the real object */
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
                                              : PyObject_CallOneArg((PyObject *)&PyBytes_Type,
                                                                    argv[0]);
        if (payload == NULL) goto done;
        argv[0] = payload;
        result = run_method(m->runtime, KIND_OUTPUT, m->name, &key, payload, method_of(m, real),
                            stack, 1 + count, NULL, 1);
        goto done;
    }
    result = run_method(m->runtime, KIND_CALL, m->name, &key, Py_None, method_of(m, real), stack,
                        1 + count, m->form == FORM_STATE ? state_parts(m, real) : NULL, 1);
    if (result == NULL) goto done;
    if (m->form == FORM_ROW) {
        PyObject *factory = state_field(self, cursor_state_type,
                                        offsetof(CursorState, row_factory), s_row_factory);
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
            size_t offset = offsetof(CursorState, state) + (size_t)i * sizeof(PyObject *);
            int status = m->cursor_state
                             ? set_state_field(self, cursor_state_type, offset, name, value)
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

static PyObject *method_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"runtime", "name", "method", "fallback", "form", "required",
                            "defaults", "variadic", "guard", "state", NULL};
    PyObject *runtime, *name, *method, *fallback, *defaults, *state;
    Py_ssize_t required;
    int form, variadic, guard;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OUOOinO!ppO!:BoundaryMethod", names,
                                     &runtime, &name, &method, &fallback, &form, &required,
                                     &PyTuple_Type, &defaults, &variadic, &guard, &PyTuple_Type,
                                     &state))
        return NULL;
    if (!PyObject_TypeCheck(runtime, callpath_type)) {
        PyErr_SetString(PyExc_TypeError, "a BoundaryMethod needs the C per-call path's runtime");
        return NULL;
    }
    if (form < 0 || form >= FORM_COUNT || required < 0 || !PyCallable_Check(fallback) ||
        (form == FORM_FUNCTION || form == FORM_NEW ? !PyCallable_Check(method)
                                                   : !PyUnicode_Check(method)) ||
        (form == FORM_FUNCTION && (required || !variadic || guard)) ||
        (form == FORM_STATE || form == FORM_NEW || form == FORM_CURSOR) !=
            (PyTuple_GET_SIZE(state) > 0) ||
        (form == FORM_OUTPUT && required < 1) ||
        (form == FORM_RECV_INTO && (required != 1 || PyTuple_GET_SIZE(defaults) != 2)) ||
        (form == FORM_CLOSE && (required || PyTuple_GET_SIZE(defaults) || variadic)) ||
        (form == FORM_TIMEOUT && (required != 1 || PyTuple_GET_SIZE(defaults) || variadic))) {
        PyErr_SetString(PyExc_ValueError, "this method cannot take that form");
        return NULL;
    }
    if (form == FORM_CURSOR) {
        PyObject *cls = PyTuple_GET_ITEM(state, 0);
        PyObject *execute = PyTuple_GET_SIZE(state) == 2 ? PyTuple_GET_ITEM(state, 1) : NULL;
        if (execute == NULL || !PyType_Check(cls) ||
            !PyType_IsSubtype((PyTypeObject *)cls, proxy_type) ||
            Py_TYPE(execute) != method_type ||
            ((BoundaryMethod *)execute)->form != FORM_STATE) {
            PyErr_SetString(PyExc_TypeError,
                            "state must be a cursor class with ProxyState and its execute twin");
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; form != FORM_CURSOR && i < PyTuple_GET_SIZE(state); i++) {
        PyObject *item = PyTuple_GET_ITEM(state, i);
        int describes = PyCallable_Check(item) || is_field(item);
        if (form == FORM_NEW ? !describes : !PyUnicode_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "state must be names, or functions to describe");
            return NULL;
        }
    }
    BoundaryMethod *m = (BoundaryMethod *)type->tp_alloc(type, 0);
    if (m == NULL) return NULL;
    m->vectorcall = (vectorcallfunc)method_vectorcall;
    m->runtime = (CallPath *)Py_NewRef(runtime);
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
    return (PyObject *)m;
}

static int method_traverse(BoundaryMethod *m, visitproc visit, void *arg) {
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

static int method_clear(BoundaryMethod *m) {
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

static void method_dealloc(PyObject *self) { free_cleared(self, (inquiry)method_clear); }

/* Looked up on an instance, it binds to it as a function does. */
static PyObject *method_get(PyObject *m, PyObject *obj, PyObject *type) {
    (void)type;
    if (obj == NULL || obj == Py_None) return Py_NewRef(m);
    return PyMethod_New(m, obj);
}

static PyObject *method_getattr_of_fallback(BoundaryMethod *m, void *name) {
    return PyObject_GetAttrString(m->fallback, (const char *)name);
}

/* What it wraps: the function (FORM_FUNCTION), or the Python method it stands for. */
static PyObject *method_wrapped(BoundaryMethod *m, void *unused) {
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

static PyType_Spec method_spec = {
    .name = "sealtrace.proxy._fastpath.BoundaryMethod",
    .basicsize = sizeof(BoundaryMethod),
    /* Immutable as a method descriptor type must be for the interpreter to specialise
     * `proxy.method(...)` on it (LOAD_METHOD_WITH_VALUES): a mutable descriptor type sends
     * every such load down the generic lookup. */
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
             Py_TPFLAGS_METHOD_DESCRIPTOR | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = method_slots,
};

/* -- module functions, for the tests that hold this module to the Python reference ------ */

static PyObject *fastpath_encode(PyObject *module, PyObject *value) {
    (void)module;
    Scratch s = {NULL, 0, 0};
    int status = encode(&s, value, 0, 0);
    PyObject *out = NULL;
    if (status == ENCODED)
        out = PyBytes_FromStringAndSize((const char *)s.data, s.size);
    else if (status == DEFERRED)
        out = Py_NewRef(Py_None);
    PyMem_Free(s.data);
    return out;
}

static PyObject *fastpath_digest(PyObject *module, PyObject *key) {
    (void)module;
    PyObject *recent = PyDict_New(), *recent_enum = PyDict_New();
    Scratch text = {NULL, 0, 0};
    PyObject *digest = NULL;
    if (recent != NULL && recent_enum != NULL) {
        digest = known_digest(recent, recent_enum, &text, key);
        if (digest == NULL && !PyErr_Occurred()) digest = Py_NewRef(Py_None);
    }
    PyMem_Free(text.data);
    Py_XDECREF(recent);
    Py_XDECREF(recent_enum);
    return digest;
}

/* -- the pipeline's side ----------------------------------------------------------------- */

static int read_varint(const unsigned char **at, const unsigned char *end, uint64_t *value) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64 && *at < end; shift += 7) {
        unsigned char byte = *(*at)++;
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *value = result;
            return 0;
        }
    }
    return -1;
}

/* Counts the pending records of the records in [at, end); -1 if they are not whole records. */
static Py_ssize_t count_pending(const unsigned char *at, const unsigned char *end) {
    Py_ssize_t pending = 0;
    while (at < end) {
        unsigned char kind = *at++;
        uint64_t size;
        if (read_varint(&at, end, &size) < 0 || size > (uint64_t)(end - at)) return -1;
        pending += (kind & PENDING) != 0;
        at += size;
    }
    return pending;
}

/* Rewrites the records in [at, end) into out, each pending one with its digest; returns the
 * end of what it wrote, or NULL if a pending record is malformed. Runs without the GIL. */
static unsigned char *finalize_records(const unsigned char *at, const unsigned char *end,
                                       unsigned char *out) {
    while (at < end) {
        unsigned char kind = *at++;
        uint64_t size = 0, callee, material_size;
        if (read_varint(&at, end, &size) < 0) return NULL; /* count_pending checked it */
        const unsigned char *body = at, *body_end = at + size;
        at = body_end;
        if (!(kind & PENDING)) {
            *out++ = kind;
            out = write_varint(out, size);
            memcpy(out, body, (size_t)size);
            out += size;
            continue;
        }
        const unsigned char *p = body;
        if (read_varint(&p, body_end, &callee) < 0) return NULL;
        const unsigned char *callee_end = p;
        if (read_varint(&p, body_end, &material_size) < 0 ||
            material_size > (uint64_t)(body_end - p))
            return NULL;
        const unsigned char *material = p, *rest = p + material_size;
        size_t callee_bytes = (size_t)(callee_end - body), rest_bytes = (size_t)(body_end - rest);
        *out++ = kind & (unsigned char)~PENDING;
        out = write_varint(out, callee_bytes + ARGS_DIGEST_SIZE + rest_bytes);
        memcpy(out, body, callee_bytes);
        out += callee_bytes;
        if (material_digest(out, material, (size_t)material_size) < 0) return NULL;
        out += ARGS_DIGEST_SIZE;
        memcpy(out, rest, rest_bytes);
        out += rest_bytes;
    }
    return out;
}

/* finalize(records, start): the records after `start` (before it: the stream prefix) with
 * every pending record's key digest made; `records` itself if it has none pending. The
 * pipeline's thread calls it on buffers it owns, and BLAKE2b runs without the GIL. */
static PyObject *fastpath_finalize(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (check_count(nargs, 2, "finalize") < 0) return NULL;
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    Py_buffer in;
    if (PyObject_GetBuffer(args[0], &in, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = NULL;
    const unsigned char *data = in.buf, *end = data + in.len;
    Py_ssize_t pending = start < 0 || start > in.len ? -1 : count_pending(data + start, end);
    if (pending < 0) {
        PyErr_SetString(PyExc_ValueError, "finalize() needs whole records after the prefix");
    } else if (pending == 0) {
        out = Py_NewRef(args[0]);
    } else {
        /* A record grows by at most the digest less the one byte of repr length, plus a
         * byte more of record size. */
        out = PyByteArray_FromStringAndSize(NULL, in.len + pending * ARGS_DIGEST_SIZE);
        if (out != NULL) {
            unsigned char *to = (unsigned char *)PyByteArray_AS_STRING(out), *written;
            Py_BEGIN_ALLOW_THREADS
            memcpy(to, data, (size_t)start);
            written = finalize_records(data + start, end, to + start);
            Py_END_ALLOW_THREADS
            if (written == NULL) {
                PyErr_SetString(PyExc_ValueError, "a pending record is malformed");
                Py_CLEAR(out);
            } else if (PyByteArray_Resize(out, (Py_ssize_t)(written - to)) < 0) {
                Py_CLEAR(out);
            }
        }
    }
    PyBuffer_Release(&in);
    return out;
}

static PyObject *fastpath_configure(PyObject *module, PyObject *enums) {
    (void)module;
    if (!PySet_Check(enums)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes the set of int enum classes");
        return NULL;
    }
    Py_XSETREF(int_enums, Py_NewRef(enums));
    forget_enums();
    Py_RETURN_NONE;
}

static PyObject *fastpath_blake2b(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (check_count(nargs, 2, "blake2b") < 0) return NULL;
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0) return NULL;
    long size = PyLong_AsLong(args[1]);
    if (size < 1 || size > 64) {
        PyBuffer_Release(&data);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "digest size must be 1 to 64");
        return NULL;
    }
    unsigned char out[64];
    blake2b_digest(out, (size_t)size, NULL, 0, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyBytes_FromStringAndSize((const char *)out, size);
}

static PyMethodDef fastpath_functions[] = {
    {"encode", fastpath_encode, METH_O,
     "encode(value): the value's encoding, or None where the Python encoder is needed."},
    {"digest", fastpath_digest, METH_O,
     "digest(key): the argument digest of a key, or None where Python makes it."},
    {"finalize", (PyCFunction)(void (*)(void))fastpath_finalize, METH_FASTCALL,
     "finalize(records, start): the records with every pending key digest made (pipeline thread)."},
    {"configure", fastpath_configure, METH_O,
     "configure(int_enums): the set of int enum classes that the recorder fills as it meets them."},
    {"blake2b", (PyCFunction)(void (*)(void))fastpath_blake2b, METH_FASTCALL,
     "blake2b(data, size): the BLAKE2b digest of data, size bytes long."},
    {NULL, NULL, 0, NULL},
};

static int add_constants(PyObject *module) {
    struct { const char *name; long value; } constants[] = {
        {"CALL", KIND_CALL}, {"OUTPUT", KIND_OUTPUT}, {"STATUS_RETURNED", STATUS_RETURNED},
        {"STATUS_RAISED", STATUS_RAISED}, {"T_NONE", TAG_NONE}, {"T_FALSE", TAG_FALSE},
        {"T_TRUE", TAG_TRUE}, {"T_INT", TAG_INT}, {"T_FLOAT", TAG_FLOAT}, {"T_STR", TAG_STR},
        {"T_BYTES", TAG_BYTES}, {"T_TUPLE", TAG_TUPLE}, {"T_LIST", TAG_LIST}, {"T_DICT", TAG_DICT},
        {"BLOB_THRESHOLD", BLOB_THRESHOLD}, {"ARGS_DIGEST_SIZE", ARGS_DIGEST_SIZE},
        {"DRAIN_AT", DRAIN_AT}, {"RECENT_LIMIT", RECENT_LIMIT},
        {"RECENT_REPR_MAX", RECENT_REPR_MAX}, {"MAX_DEPTH", MAX_DEPTH}, {"KEY_DEPTH", KEY_DEPTH},
        {"FORM_CALL", FORM_CALL}, {"FORM_ROW", FORM_ROW}, {"FORM_STATE", FORM_STATE},
        {"FORM_OUTPUT", FORM_OUTPUT}, {"FORM_RECV_INTO", FORM_RECV_INTO},
        {"FORM_FUNCTION", FORM_FUNCTION}, {"FORM_NEW", FORM_NEW}, {"FORM_CURSOR", FORM_CURSOR},
        {"FORM_CLOSE", FORM_CLOSE}, {"FORM_TIMEOUT", FORM_TIMEOUT},
    };
    for (size_t i = 0; i < sizeof constants / sizeof constants[0]; i++)
        if (PyModule_AddIntConstant(module, constants[i].name, constants[i].value) < 0) return -1;
    return 0;
}

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT, "_fastpath",
    "The recorder's per-call path in C (see proxy/_runtime.py for the reference).", -1,
    fastpath_functions, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastpath(void) {
    blake2b_digest(empty_digest, ARGS_DIGEST_SIZE, NULL, 0, NULL, 0);
    for (int c = 0; c < 128; c++)
        repr_class[c] = c < 0x20 || c == 0x7F || c == '\\' ? REPR_ESCAPED
                        : c == '\''                        ? REPR_SINGLE
                        : c == '"'                         ? REPR_DOUBLE
                                                           : 0;
    PyObject *names[] = {
        s_callee = PyUnicode_InternFromString("_callee"),
        s_event = PyUnicode_InternFromString("_event"),
        s_drain = PyUnicode_InternFromString("_drain"),
        s_failed = PyUnicode_InternFromString("_failed"),
        s_args_digest = PyUnicode_InternFromString("_args_digest"),
        s_flush_names = Py_BuildValue("(s)", "flush"),
        s_oid = PyUnicode_InternFromString("_oid"),
        s_real = PyUnicode_InternFromString("_real"),
        s_fd = PyUnicode_InternFromString("_fd"),
        s_row_factory = PyUnicode_InternFromString("row_factory"),
        s_row = PyUnicode_InternFromString("_row"),
        s_setup = PyUnicode_InternFromString("_setup"),
        s_connection = PyUnicode_InternFromString("connection"),
        s_closed = PyUnicode_InternFromString("_closed"),
        s_io_refs = PyUnicode_InternFromString("_io_refs"),
        s_getdefaulttimeout = PyUnicode_InternFromString("getdefaulttimeout"),
        empty_tuple = PyTuple_New(0),
        cursor_state_names = Py_BuildValue("(sss)", "description", "rowcount", "lastrowid"),
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i] == NULL) return NULL;
    PyObject *module = PyModule_Create(&fastpath_module);
    if (module == NULL) return NULL;
    PyObject *type = PyType_FromSpec(&callpath_spec);
    PyObject *method = PyType_FromSpec(&method_spec);
    PyObject *proxy = PyType_FromSpec(&proxy_spec);
    PyObject *cursor = proxy != NULL ? PyType_FromSpecWithBases(&cursor_state_spec, proxy) : NULL;
    PyObject *sock = proxy != NULL ? PyType_FromSpecWithBases(&socket_state_spec, proxy) : NULL;
    if (type == NULL || method == NULL || proxy == NULL || cursor == NULL || sock == NULL ||
        PyModule_AddObjectRef(module, "CallPath", type) < 0 ||
        PyModule_AddObjectRef(module, "BoundaryMethod", method) < 0 ||
        PyModule_AddObjectRef(module, "ProxyState", proxy) < 0 ||
        PyModule_AddObjectRef(module, "CursorState", cursor) < 0 ||
        PyModule_AddObjectRef(module, "SocketState", sock) < 0 || add_constants(module) < 0) {
        Py_XDECREF(type);
        Py_XDECREF(method);
        Py_XDECREF(proxy);
        Py_XDECREF(cursor);
        Py_XDECREF(sock);
        Py_DECREF(module);
        return NULL;
    }
    /* the module keeps them */
    callpath_type = (PyTypeObject *)type;
    method_type = (PyTypeObject *)method;
    proxy_type = (PyTypeObject *)proxy;
    cursor_state_type = (PyTypeObject *)cursor;
    socket_state_type = (PyTypeObject *)sock;
    Py_DECREF(type);
    Py_DECREF(method);
    Py_DECREF(proxy);
    Py_DECREF(cursor);
    Py_DECREF(sock);
    return module;
}
