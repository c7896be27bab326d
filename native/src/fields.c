// An instance's attributes without materialising its __dict__ (fields.h). C: the interpreter's
// object layout headers use C11 atomics.
#define Py_BUILD_CORE 1
#include "fields.h"

#include <Python.h>
#include <internal/pycore_dict.h>
#include <internal/pycore_object.h>

PyObject* sealtrace_instance_fields(PyObject* obj) {
  PyTypeObject* tp = Py_TYPE(obj);
  if ((tp->tp_flags & Py_TPFLAGS_MANAGED_DICT) != 0) {
    PyObject* dict = *_PyObject_ManagedDictPointer(obj);
    if (dict != NULL) return Py_NewRef(dict);
    PyDictValues* values = *_PyObject_ValuesPointer(obj);
    PyDictKeysObject* keys = ((PyHeapTypeObject*)tp)->ht_cached_keys;
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
  if (tp->tp_dictoffset == 0) Py_RETURN_NONE;
  PyObject** slot = _PyObject_GetDictPtr(obj);  // no managed dict: nothing is built
  if (slot == NULL || *slot == NULL) Py_RETURN_NONE;
  return Py_NewRef(*slot);
}
