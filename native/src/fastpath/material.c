#include "fastpath_internal.h"

/* -- a pending record's material: its repr and digest, made on the pipeline's thread -------- */

static int read_varint(const unsigned char** at, const unsigned char* end, uint64_t* value);

/* Appends repr() of the plain key encoded at *at (put_plain) to `out`, which has room for
 * it (material_digest's bound); returns the end of what it wrote, or NULL if the encoding
 * is not one put_plain writes. As repr() writes them: ASCII strs quoted with ' unless they
 * hold ' and no ", escaping the quote, backslash, \t, \n, \r and other control characters
 * (\xNN); decimal ints; None, True and False; tuples with ", " and the one-item tuple's ",". Runs
 * without the GIL. */
static unsigned char* plain_repr(const unsigned char** at, const unsigned char* end,
                                 unsigned char* out, int depth) {
  static const char hex[] = "0123456789abcdef";
  uint64_t n;
  if (*at >= end || depth > KEY_DEPTH) return NULL;
  unsigned char tag = *(*at)++;
  switch (tag) {
    case TAG_NONE:
      memcpy(out, "None", 4);
      return out + 4;
    case TAG_TRUE:
      memcpy(out, "True", 4);
      return out + 4;
    case TAG_FALSE:
      memcpy(out, "False", 5);
      return out + 5;
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
      for (const unsigned char* c = text; c < text_end; c++) {
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
int material_digest(unsigned char* out, const unsigned char* material, size_t size) {
  if (size == 0) return -1;
  if (material[0] == MATERIAL_ENUM) {
    blake2b_digest(out, ARGS_DIGEST_SIZE, NULL, 0, material, size);
    return 0;
  }
  if (material[0] != MATERIAL_PLAIN) return -1;
  /* A byte of the encoding makes at most seven of the repr: False (one byte) and ", ". */
  size_t bound = 7 * size + 16;
  unsigned char small[1024], *text = bound <= sizeof small ? small : malloc(bound);
  if (text == NULL) return -1;
  const unsigned char *at = material + 1, *end = material + size;
  unsigned char* written = plain_repr(&at, end, text, 0);
  int status = written != NULL && at == end ? 0 : -1;
  if (status == 0)
    blake2b_digest(out, ARGS_DIGEST_SIZE, (const unsigned char*)"r", 1, text,
                   (size_t)(written - text));
  if (text != small) free(text);
  return status;
}

/* The callee's index and the argument digest of the record begun, as bytes (for Python's
 * _event, which finishes the records this module does not encode). */

/* -- the pipeline's side ----------------------------------------------------------------- */

static int read_varint(const unsigned char** at, const unsigned char* end, uint64_t* value) {
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
static Py_ssize_t count_pending(const unsigned char* at, const unsigned char* end) {
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
static unsigned char* finalize_records(const unsigned char* at, const unsigned char* end,
                                       unsigned char* out) {
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
    const unsigned char* p = body;
    if (read_varint(&p, body_end, &callee) < 0) return NULL;
    const unsigned char* callee_end = p;
    if (read_varint(&p, body_end, &material_size) < 0 || material_size > (uint64_t)(body_end - p))
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
PyObject* fastpath_finalize(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (check_count(nargs, 2, "finalize") < 0) return NULL;
  Py_ssize_t start = PyLong_AsSsize_t(args[1]);
  if (start == -1 && PyErr_Occurred()) return NULL;
  Py_buffer in;
  if (PyObject_GetBuffer(args[0], &in, PyBUF_SIMPLE) < 0) return NULL;
  PyObject* out = NULL;
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
      unsigned char *to = (unsigned char*)PyByteArray_AS_STRING(out), *written;
      Py_BEGIN_ALLOW_THREADS memcpy(to, data, (size_t)start);
      written = finalize_records(data + start, end, to + start);
      Py_END_ALLOW_THREADS if (written == NULL) {
        PyErr_SetString(PyExc_ValueError, "a pending record is malformed");
        Py_CLEAR(out);
      }
      else if (PyByteArray_Resize(out, (Py_ssize_t)(written - to)) < 0) {
        Py_CLEAR(out);
      }
    }
  }
  PyBuffer_Release(&in);
  return out;
}
