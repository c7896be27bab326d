#include "fastpath_internal.h"

/* -- module functions, for the tests that hold this module to the Python reference ------ */

static PyObject* fastpath_encode(PyObject* module, PyObject* value) {
  (void)module;
  Scratch s = {NULL, 0, 0};
  int status = encode(&s, value, 0, 0);
  PyObject* out = NULL;
  if (status == ENCODED)
    out = PyBytes_FromStringAndSize((const char*)s.data, s.size);
  else if (status == DEFERRED)
    out = Py_NewRef(Py_None);
  PyMem_Free(s.data);
  return out;
}

static PyObject* fastpath_digest(PyObject* module, PyObject* key) {
  (void)module;
  PyObject *recent = PyDict_New(), *recent_enum = PyDict_New();
  Scratch text = {NULL, 0, 0};
  PyObject* digest = NULL;
  if (recent != NULL && recent_enum != NULL) {
    digest = known_digest(recent, recent_enum, &text, key);
    if (digest == NULL && !PyErr_Occurred()) digest = Py_NewRef(Py_None);
  }
  PyMem_Free(text.data);
  Py_XDECREF(recent);
  Py_XDECREF(recent_enum);
  return digest;
}

static PyObject* fastpath_configure(PyObject* module, PyObject* enums) {
  (void)module;
  if (!PySet_Check(enums)) {
    PyErr_SetString(PyExc_TypeError, "configure() takes the set of int enum classes");
    return NULL;
  }
  Py_XSETREF(int_enums, Py_NewRef(enums));
  forget_enums();
  Py_RETURN_NONE;
}

static PyObject* fastpath_blake2b(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
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
  return PyBytes_FromStringAndSize((const char*)out, size);
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

static int add_constants(PyObject* module) {
  struct {
    const char* name;
    long value;
  } constants[] = {
      {"CALL", KIND_CALL},
      {"OUTPUT", KIND_OUTPUT},
      {"THREAD", KIND_THREAD},
      {"THREAD_SHIFT", THREAD_SHIFT},
      {"STATUS_RETURNED", STATUS_RETURNED},
      {"STATUS_RAISED", STATUS_RAISED},
      {"T_NONE", TAG_NONE},
      {"T_FALSE", TAG_FALSE},
      {"T_TRUE", TAG_TRUE},
      {"T_INT", TAG_INT},
      {"T_FLOAT", TAG_FLOAT},
      {"T_STR", TAG_STR},
      {"T_BYTES", TAG_BYTES},
      {"T_TUPLE", TAG_TUPLE},
      {"T_LIST", TAG_LIST},
      {"T_DICT", TAG_DICT},
      {"BLOB_THRESHOLD", BLOB_THRESHOLD},
      {"ARGS_DIGEST_SIZE", ARGS_DIGEST_SIZE},
      {"DRAIN_AT", DRAIN_AT},
      {"RECENT_LIMIT", RECENT_LIMIT},
      {"RECENT_REPR_MAX", RECENT_REPR_MAX},
      {"MAX_DEPTH", MAX_DEPTH},
      {"KEY_DEPTH", KEY_DEPTH},
      {"FORM_CALL", FORM_CALL},
      {"FORM_ROW", FORM_ROW},
      {"FORM_STATE", FORM_STATE},
      {"FORM_OUTPUT", FORM_OUTPUT},
      {"FORM_RECV_INTO", FORM_RECV_INTO},
      {"FORM_FUNCTION", FORM_FUNCTION},
      {"FORM_NEW", FORM_NEW},
      {"FORM_CURSOR", FORM_CURSOR},
      {"FORM_CLOSE", FORM_CLOSE},
      {"FORM_TIMEOUT", FORM_TIMEOUT},
      {"FORM_LOCK", FORM_LOCK},
  };
  for (size_t i = 0; i < sizeof constants / sizeof constants[0]; i++)
    if (PyModule_AddIntConstant(module, constants[i].name, constants[i].value) < 0) return -1;
  return 0;
}

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT,
    "_fastpath",
    "The recorder's per-call path in C (see proxy/_runtime.py for the reference).",
    -1,
    fastpath_functions,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fastpath(void) {
  blake2b_digest(empty_digest, ARGS_DIGEST_SIZE, NULL, 0, NULL, 0);
  for (int c = 0; c < 128; c++)
    repr_class[c] = c < 0x20 || c == 0x7F || c == '\\' ? REPR_ESCAPED
                    : c == '\''                        ? REPR_SINGLE
                    : c == '"'                         ? REPR_DOUBLE
                                                       : 0;
  PyObject* names[] = {
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
  PyObject* module = PyModule_Create(&fastpath_module);
  if (module == NULL) return NULL;
  PyObject* type = PyType_FromSpec(&callpath_spec);
  PyObject* method = PyType_FromSpec(&method_spec);
  PyObject* function = PyType_FromSpec(&function_spec);
  PyObject* proxy = PyType_FromSpec(&proxy_spec);
  PyObject* cursor = proxy != NULL ? PyType_FromSpecWithBases(&cursor_state_spec, proxy) : NULL;
  PyObject* sock = proxy != NULL ? PyType_FromSpecWithBases(&socket_state_spec, proxy) : NULL;
  if (type == NULL || method == NULL || function == NULL || proxy == NULL || cursor == NULL ||
      sock == NULL || PyModule_AddObjectRef(module, "CallPath", type) < 0 ||
      PyModule_AddObjectRef(module, "BoundaryMethod", method) < 0 ||
      PyModule_AddObjectRef(module, "BoundaryFunction", function) < 0 ||
      PyModule_AddObjectRef(module, "ProxyState", proxy) < 0 ||
      PyModule_AddObjectRef(module, "CursorState", cursor) < 0 ||
      PyModule_AddObjectRef(module, "SocketState", sock) < 0 || add_constants(module) < 0) {
    Py_XDECREF(type);
    Py_XDECREF(method);
    Py_XDECREF(function);
    Py_XDECREF(proxy);
    Py_XDECREF(cursor);
    Py_XDECREF(sock);
    Py_DECREF(module);
    return NULL;
  }
  /* the module keeps them */
  callpath_type = (PyTypeObject*)type;
  method_type = (PyTypeObject*)method;
  proxy_type = (PyTypeObject*)proxy;
  cursor_state_type = (PyTypeObject*)cursor;
  socket_state_type = (PyTypeObject*)sock;
  Py_DECREF(type);
  Py_DECREF(method);
  Py_DECREF(function);
  Py_DECREF(proxy);
  Py_DECREF(cursor);
  Py_DECREF(sock);
  return module;
}
