// What the tracer knows of CPython 3.11 values: the opcodes it treats specially, the slot
// keys of names, attributes and items, the objects the interpreter shares between unrelated
// values, and the private layouts of the iterators it reads. Header-only; Py_BUILD_CORE.
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>

#include "slots.hpp"

namespace sealtrace {

constexpr std::uint8_t kResume = 151;
constexpr std::uint8_t kExtendedArg = 144;
constexpr std::uint8_t kKwNames = 172;
constexpr std::uint8_t kLoadGlobalOp = 116;
constexpr std::uint8_t kListToTuple = 82;
constexpr std::uint64_t kCellKey = slot_key(SlotKind::kCell, 0);
constexpr std::uint64_t kDefaultsKey = slot_key(SlotKind::kAttr, 0xDEF);
constexpr std::size_t kMaxCopiedItems = 4096;
constexpr std::size_t kMaxCallbacks = 64;
// Tags at or above 2**62 are origins with no instruction behind them (sealtrace.sandbox.
// _provenance spells the same numbers): an item whose producer the engine cannot know, and
// items that were not all read.
constexpr Tag kUnknownTag = (Tag{1} << 62) | (Tag{1} << 42);
constexpr Tag kCutTag = (Tag{1} << 62) | (Tag{1} << 43);
// A windowed pass (attached partway through the run): an input the engine holds no tag for
// was made before the window opened (or by code it does not trace).
constexpr Tag kBeforeWindowTag = (Tag{1} << 62) | (Tag{1} << 44);
constexpr std::uint8_t kBinaryOp = 122;
constexpr std::int32_t kInplaceAdd = 13;  // BINARY_OP's oparg for +=
constexpr std::int32_t kRemainder = 6;    // BINARY_OP's oparg for %
constexpr std::uint8_t kFormatValueOp = 155;
constexpr std::uint8_t kPrecallOp = 166;
constexpr std::uint8_t kCallOp = 171;
constexpr std::uint8_t kForIterOp = 93;
constexpr std::uint8_t kSendOp = 123;
constexpr std::uint8_t kReraiseOp = 119;
constexpr std::uint8_t kPopExceptOp = 89;
constexpr std::uint8_t kEndAsyncForOp = 54;

inline std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// Objects the interpreter shares between unrelated values: identity says nothing.
inline bool shared(PyObject* v) {
  if (v == Py_None || v == Py_True || v == Py_False || v == Py_Ellipsis) return true;
  if (PyLong_CheckExact(v)) {
    int overflow = 0;
    long x = PyLong_AsLongAndOverflow(v, &overflow);
    return overflow == 0 && x >= -5 && x <= 256;
  }
  if (PyUnicode_CheckExact(v)) return PyUnicode_GET_LENGTH(v) <= 1;
  if (PyBytes_CheckExact(v)) return PyBytes_GET_SIZE(v) <= 1;
  if (PyTuple_CheckExact(v)) return PyTuple_GET_SIZE(v) == 0;
  return false;
}

// Dict keys whose hash runs no Python code.
inline bool item_key(PyObject* key, std::uint64_t& out) {
  PyTypeObject* t = Py_TYPE(key);
  if (t != &PyUnicode_Type && t != &PyLong_Type && t != &PyBytes_Type && t != &PyFloat_Type &&
      t != &PyBool_Type && key != Py_None) {
    return false;
  }
  Py_hash_t h = PyObject_Hash(key);
  if (h == -1) {
    PyErr_Clear();
    return false;
  }
  out = slot_key(SlotKind::kItem, static_cast<std::uint64_t>(h));
  return true;
}

inline std::uint64_t name_key(PyObject* name) {
  std::uint64_t k = 0;
  return item_key(name, k) ? k : 0;
}

inline std::uint64_t attr_key(PyObject* name) {
  Py_hash_t h = PyObject_Hash(name);
  if (h == -1) {
    PyErr_Clear();
    return 0;
  }
  return slot_key(SlotKind::kAttr, static_cast<std::uint64_t>(h));
}

inline std::uint64_t index_key(Py_ssize_t i) {
  return slot_key(SlotKind::kIndex, static_cast<std::uint64_t>(i));
}

// The slot of container[key], for lists, tuples and dicts.
inline bool subscript_key(PyObject* container, PyObject* key, std::uint64_t& out,
                          PyObject** current) {
  *current = nullptr;
  if (PyList_Check(container) || PyTuple_Check(container)) {
    if (!PyLong_CheckExact(key)) return false;
    Py_ssize_t i = PyLong_AsSsize_t(key);
    if (i == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    Py_ssize_t n = Py_SIZE(container);
    if (i < 0) i += n;
    if (i < 0 || i >= n) return false;
    out = index_key(i);
    *current =
        PyList_Check(container) ? PyList_GET_ITEM(container, i) : PyTuple_GET_ITEM(container, i);
    return true;
  }
  if (PyDict_Check(container)) {
    if (!item_key(key, out)) return false;
    *current = PyDict_GetItemWithError(container, key);
    if (*current == nullptr) PyErr_Clear();
    return true;
  }
  return false;
}

// The number of items of a container the engine reads items from, or -1.
inline Py_ssize_t container_size(PyObject* v, PyTypeObject* deque_type) {
  if (PyList_Check(v) || PyTuple_Check(v)) return Py_SIZE(v);
  if (PyDict_Check(v)) return PyDict_GET_SIZE(v);
  if (PyAnySet_Check(v)) return PySet_GET_SIZE(v);
  if (deque_type != nullptr && Py_IS_TYPE(v, deque_type)) return Py_SIZE(v);
  if (PyByteArray_Check(v)) return PyByteArray_GET_SIZE(v);
  return -1;
}

inline PyObject* seq_item(PyObject* seq, Py_ssize_t i) {
  return PyList_Check(seq) ? PyList_GET_ITEM(seq, i) : PyTuple_GET_ITEM(seq, i);
}

inline std::string utf8(PyObject* s) {
  if (s == nullptr || !PyUnicode_Check(s)) return {};
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &n);
  if (p == nullptr) {
    PyErr_Clear();
    return {};
  }
  return std::string(p, static_cast<std::size_t>(n));
}

inline PyObject* namespace_of(PyObject* owner) {
  return PyModule_Check(owner) ? PyModule_GetDict(owner) : nullptr;
}

// 3.11 keeps these structs private (listobject.c, tupleobject.c, genobject.c); their
// layouts are fixed for the release the engine is built for.
struct SeqIterLayout {
  PyObject_HEAD Py_ssize_t it_index;  // of the next item
  PyObject* it_seq;                   // NULL once exhausted
};
struct AsyncGenWrappedLayout {
  PyObject_HEAD PyObject* agw_val;
};

// The slot tag of the item a list or tuple iterator just returned: iterators made in
// another frame (a comprehension's `.0`, a generator expression's) still know the index.
inline Tag iterated_item_tag(const SlotTable& slots, PyObject* iter, PyObject* item) {
  if (!Py_IS_TYPE(iter, &PyListIter_Type) && !Py_IS_TYPE(iter, &PyTupleIter_Type)) return 0;
  const auto* it = reinterpret_cast<const SeqIterLayout*>(iter);
  const Py_ssize_t i = it->it_index - 1;
  PyObject* seq = it->it_seq;
  if (seq == nullptr || i < 0 || i >= Py_SIZE(seq) || seq_item(seq, i) != item) return 0;
  return slots.get(addr(seq), index_key(i), addr(item));
}

// dictobject.c's, enumobject.c's and bltinmodule.c's iterators (3.11).
struct DictIterLayout {
  PyObject_HEAD PyDictObject* di_dict;  // NULL once exhausted
  Py_ssize_t di_used;
  Py_ssize_t di_pos;  // the entry after the one just returned
  PyObject* di_result;
  Py_ssize_t len;
};
struct EnumLayout {
  PyObject_HEAD Py_ssize_t en_index;
  PyObject* en_sit;
  PyObject* en_result;
  PyObject* en_longindex;
};
struct ZipLayout {
  PyObject_HEAD Py_ssize_t tuplesize;
  PyObject* ittuple;
  PyObject* result;
  int strict;
};

// The tag of the value a dict's value or item iterator just returned (the dict's slot).
inline Tag dict_iterated_tag(const SlotTable& slots, PyObject* iter, PyObject* value) {
  const auto* it = reinterpret_cast<const DictIterLayout*>(iter);
  auto* dict = reinterpret_cast<PyObject*>(it->di_dict);
  if (dict == nullptr || it->di_pos < 1) return 0;
  Py_ssize_t pos = it->di_pos - 1;
  PyObject* k = nullptr;
  PyObject* v = nullptr;
  if (!PyDict_Next(dict, &pos, &k, &v) || v != value) return 0;
  std::uint64_t key = 0;
  if (!item_key(k, key)) return 0;
  return slots.get(addr(dict), key, addr(v));
}

// An async generator yields its values wrapped; the consumer receives the value inside.
inline PyObject* unwrap_async_gen_value(PyObject* v) {
  if (v == nullptr || !Py_IS_TYPE(v, &_PyAsyncGenWrappedValue_Type)) return v;
  return reinterpret_cast<AsyncGenWrappedLayout*>(v)->agw_val;
}

}  // namespace sealtrace
