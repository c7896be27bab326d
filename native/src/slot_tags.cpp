// Slot tags: the tags objects keep for their attributes, items and cell contents (the
// SlotTable), written, read back and seeded.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>

#include "fields.h"
#include "hooks.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

bool Tracer::trackable(PyObject* obj) const noexcept {
  // The commonest values first: numbers and text keep no slots (and are never hooked).
  if (PyLong_CheckExact(obj) || PyUnicode_CheckExact(obj) || PyFloat_CheckExact(obj)) return false;
  PyTypeObject* t = Py_TYPE(obj);
  while (t != nullptr && t->tp_dealloc == g_subtype_dealloc) t = t->tp_base;
  return t != nullptr && hooked(t->tp_dealloc);
}

// A slot copied from another object's record: its value may be gone (C code may have
// replaced it unseen), so it is never dereferenced and never registered as a holder.
void Tracer::copy_slot(std::uintptr_t object, std::uint64_t key, const Slot& slot, Tag now) {
  slots_.set(object, key, slot.tag, slot.value, now, false);
}

void Tracer::set_slot(std::uintptr_t object, std::uint64_t key, Tag tag, std::uintptr_t value,
                      Tag now, std::uint32_t* hint) {
  const bool hold = value != 0 && !shared(reinterpret_cast<PyObject*>(value));
  slots_.set(object, key, tag, value, now, hold, hint);
}

Tag Tracer::held_tag(PyObject* value) const noexcept {
  if (value == nullptr || shared(value)) return 0;
  if (PyUnicode_CheckExact(value) && PyUnicode_CHECK_INTERNED(value)) return 0;
  const Holder* h = slots_.holder(addr(value));
  if (h == nullptr) return 0;
  auto* c = reinterpret_cast<PyObject*>(h->container);
  constexpr Py_ssize_t kScan = 1024;
  if (PyList_Check(c) || PyTuple_Check(c)) {
    const Py_ssize_t n = std::min(Py_SIZE(c), kScan);
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (seq_item(c, i) == value) return slots_.held(*h, addr(value));
    }
  } else if (PyDict_Check(c)) {
    if (PyDict_GET_SIZE(c) > kScan) return 0;
    Py_ssize_t pos = 0;
    PyObject* k = nullptr;
    PyObject* v = nullptr;
    while (PyDict_Next(c, &pos, &k, &v)) {
      if (v == value) return slots_.held(*h, addr(value));
    }
  } else if (PyCell_Check(c)) {
    if (PyCell_GET(c) == value) return slots_.held(*h, addr(value));
  } else if (PyAnySet_Check(c)) {
    if (PySet_GET_SIZE(c) > kScan) return 0;
    Py_ssize_t pos = 0;
    PyObject* k = nullptr;
    Py_hash_t hash = 0;
    while (_PySet_NextEntry(c, &pos, &k, &hash)) {
      if (k == value) return slots_.held(*h, addr(value));
    }
  } else if (deque_type_ != nullptr && Py_IS_TYPE(c, deque_type_)) {
    if (Py_SIZE(c) > kScan) return 0;
    const Slot* s = slots_.slot(h->container, h->key);
    if (s != nullptr && s->value == addr(value) && deque_holds(c, value))
      return slots_.held(*h, addr(value));
  } else if (sealtrace_instance_holds(c, value)) {
    // An attribute (copy.copy and ORMs read them back through __dict__), or a class's.
    return slots_.held(*h, addr(value));
  }
  return 0;
}

// Whether a deque holds this very object (its own iterator: C, runs no Python code).
bool Tracer::deque_holds(PyObject* deque, PyObject* value) const noexcept {
  PyObject* it = PyObject_GetIter(deque);
  if (it == nullptr) {
    PyErr_Clear();
    return false;
  }
  bool found = false;
  for (PyObject* item = PyIter_Next(it); item != nullptr && !found; item = PyIter_Next(it)) {
    found = item == value;
    Py_DECREF(item);
  }
  Py_DECREF(it);
  if (PyErr_Occurred()) PyErr_Clear();
  return found;
}

// A class attribute read through the class or one of its instances.
Tag Tracer::class_attr_slot(PyObject* owner, PyObject* name, PyObject** value) const {
  PyTypeObject* start =
      PyType_Check(owner) ? reinterpret_cast<PyTypeObject*>(owner) : Py_TYPE(owner);
  PyObject* mro = start->tp_mro;
  if (mro == nullptr || !PyTuple_Check(mro)) return 0;
  const std::uint64_t key = attr_key(name);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    const Slot* slot = slots_.slot(addr(PyTuple_GET_ITEM(mro, i)), key);
    if (slot != nullptr) {
      *value = reinterpret_cast<PyObject*>(slot->value);
      return slot->tag;
    }
  }
  return 0;
}

Tag Tracer::attr_tag(PyObject* owner, PyObject* name, PyObject* value) {
  PyObject* ns = namespace_of(owner);
  if (ns != nullptr) return slots_.get(addr(ns), name_key(name), addr(value));
  return slots_.get(addr(owner), attr_key(name), addr(value));
}

Tag Tracer::item_tag(PyObject* container, PyObject* key, PyObject* value) {
  std::uint64_t k = 0;
  PyObject* current = nullptr;
  if (!subscript_key(container, key, k, &current)) {
    if (!item_key(key, k)) return 0;
  }
  return slots_.get(addr(container), k, addr(value));
}

std::pair<Tag, Tag> Tracer::object_counters(PyObject* obj) const {
  const ObjectRecord* r = slots_.find(addr(obj));
  return r == nullptr ? std::pair<Tag, Tag>{0, 0} : std::pair<Tag, Tag>{r->created, r->updated};
}

bool Tracer::seed_item(PyObject* container, PyObject* key, Tag tag) {
  std::uint64_t k = 0;
  PyObject* current = nullptr;
  if (!trackable(container) || !subscript_key(container, key, k, &current) || current == nullptr) {
    return false;
  }
  set_slot(addr(container), k, tag, addr(current), counter_.value());
  return true;
}

bool Tracer::seed_attr(PyObject* owner, PyObject* name, PyObject* value, Tag tag) {
  PyObject* ns = namespace_of(owner);
  PyObject* target = ns != nullptr ? ns : owner;
  if (!trackable(target)) return false;
  set_slot(addr(target), ns != nullptr ? name_key(name) : attr_key(name), tag, addr(value),
           counter_.value());
  return true;
}

}  // namespace sealtrace
