// An instance's attributes without materialising its __dict__ (fields.h). C: the interpreter's
// object layout headers use C11 atomics.
#define Py_BUILD_CORE 1
#include "fields.h"

#include <Python.h>
#include <internal/pycore_dict.h>
#include <internal/pycore_object.h>

/* Whether the instance keeps its attributes inline (its class manages its dict, and none was
   built): then *values holds them (NULL while it has none) and *keys names them (the class's
   shared keys; callers check they are split keys before reading them by position). */
static int kept_inline(PyObject* obj, PyDictValues** values, PyDictKeysObject** keys) {
  PyTypeObject* tp = Py_TYPE(obj);
  if ((tp->tp_flags & Py_TPFLAGS_MANAGED_DICT) == 0 || *_PyObject_ManagedDictPointer(obj) != NULL) {
    return 0;
  }
  *values = *_PyObject_ValuesPointer(obj);
  *keys = ((PyHeapTypeObject*)tp)->ht_cached_keys;
  return 1;
}

PyObject* sealtrace_instance_fields(PyObject* obj) {
  PyDictValues* values = NULL;
  PyDictKeysObject* keys = NULL;
  if (kept_inline(obj, &values, &keys)) {
    if (values == NULL || keys == NULL || keys->dk_kind != DICT_KEYS_SPLIT) Py_RETURN_NONE;
    PyObject* out = PyDict_New();
    if (out == NULL) return NULL;
    PyDictUnicodeEntry* entries = DK_UNICODE_ENTRIES(keys);
    for (Py_ssize_t i = 0; i < keys->dk_nentries; ++i) {
      PyObject* value = values->values[i];
      if (value != NULL && entries[i].me_key != NULL &&
          PyDict_SetItem(out, entries[i].me_key, value) < 0) {
        Py_DECREF(out);
        return NULL;
      }
    }
    return out;
  }
  PyObject* dict = sealtrace_instance_dict(obj);  // one built already: nothing is built here
  if (dict == NULL) Py_RETURN_NONE;
  return Py_NewRef(dict);
}

PyObject* sealtrace_instance_dict(PyObject* obj) {
  PyTypeObject* tp = Py_TYPE(obj);
  if ((tp->tp_flags & Py_TPFLAGS_MANAGED_DICT) != 0) return *_PyObject_ManagedDictPointer(obj);
  if (tp->tp_dictoffset == 0) return NULL;
  PyObject** slot = _PyObject_GetDictPtr(obj);
  return slot == NULL ? NULL : *slot;
}

PyObject* sealtrace_instance_attr(PyObject* obj, PyObject* name, int* known) {
  PyDictValues* values = NULL;
  PyDictKeysObject* keys = NULL;
  *known = 1;
  if (kept_inline(obj, &values, &keys)) {
    if (values == NULL) return NULL;
    if (keys == NULL || keys->dk_kind != DICT_KEYS_SPLIT) {
      *known = 0;
      return NULL;
    }
    PyDictUnicodeEntry* entries = DK_UNICODE_ENTRIES(keys);
    for (Py_ssize_t i = 0; i < keys->dk_nentries; ++i) {
      PyObject* key = entries[i].me_key;
      // Names are interned, but a str made at run time may spell one: compared by content too.
      if (key == name || (key != NULL && _PyUnicode_EQ(key, name))) return values->values[i];
    }
    return NULL;
  }
  PyObject* dict = sealtrace_instance_dict(obj);
  if (dict == NULL) return NULL;
  if (!PyDict_CheckExact(dict)) {
    *known = 0;
    return NULL;
  }
  PyObject* v = PyDict_GetItemWithError(dict, name);
  if (v == NULL && PyErr_Occurred()) {
    PyErr_Clear();
    *known = 0;
  }
  return v;
}

int sealtrace_instance_values(PyObject* obj, PyObject** out, int max) {
  PyDictValues* values = NULL;
  PyDictKeysObject* keys = NULL;
  int n = 0;
  if (kept_inline(obj, &values, &keys)) {
    if (values == NULL) return 0;
    if (keys == NULL || keys->dk_kind != DICT_KEYS_SPLIT) return -1;
    for (Py_ssize_t i = 0; i < keys->dk_nentries; ++i) {
      if (values->values[i] == NULL) continue;
      if (n == max) return -1;
      out[n++] = values->values[i];
    }
    return n;
  }
  PyObject* dict = sealtrace_instance_dict(obj);
  if (dict == NULL) return 0;
  if (!PyDict_CheckExact(dict)) return -1;
  if (Py_REFCNT(dict) > 1) return 0; /* freeing the instance leaves its dict alive */
  Py_ssize_t pos = 0;
  PyObject* k = NULL;
  PyObject* v = NULL;
  while (PyDict_Next(dict, &pos, &k, &v)) {
    if (n == max || !PyUnicode_CheckExact(k)) return -1;
    out[n++] = v;
  }
  return n;
}

static int dict_holds(PyObject* dict, PyObject* value) {
  if (dict == NULL || !PyDict_Check(dict) || PyDict_GET_SIZE(dict) > 1024) return 0;
  Py_ssize_t pos = 0;
  PyObject* k = NULL;
  PyObject* v = NULL;
  while (PyDict_Next(dict, &pos, &k, &v)) {
    if (v == value) return 1;
  }
  return 0;
}

int sealtrace_instance_holds(PyObject* obj, PyObject* value) {
  if (PyType_Check(obj)) return dict_holds(((PyTypeObject*)obj)->tp_dict, value);
  PyDictValues* values = NULL;
  PyDictKeysObject* keys = NULL;
  if (kept_inline(obj, &values, &keys)) {
    if (values == NULL || keys == NULL) return 0;
    for (Py_ssize_t i = 0; i < keys->dk_nentries; ++i) {
      if (values->values[i] == value) return 1;
    }
    return 0;
  }
  return dict_holds(sealtrace_instance_dict(obj), value);
}
