// Attributes: an object's attribute slots, or a module's namespace slots when the owner is a
// module. A load remembers the slot it reads (a class attribute when the instance has none);
// LOAD_METHOD's second half tags the [method, self] or [NULL, attribute] pair it pushed.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <cstdint>

#include "fields.h"
#include "ops.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

// LOAD_ATTR, LOAD_METHOD, IMPORT_FROM.
void Tracer::begin_attr_load(ShadowFrame& sf, const Instr& in, int depth) {
  Pending& p = sf.p;
  PyObject* owner = stack_top(sf, depth, 0);
  PyObject* name = PyTuple_GET_ITEM(sf.iframe->f_code->co_names, in.oparg);
  PyObject* ns = namespace_of(owner);
  if (ns != nullptr) {
    remember(p, slots_.slot(addr(ns), name_key(name)));
  } else {
    const Slot source =
        instance_attr_source(owner, name, in.rule == Rule::kLoadAttr, in.rule != Rule::kImportFrom);
    p.aux_tag = source.tag;
    p.aux_value = reinterpret_cast<PyObject*>(source.value);
  }
  if (in.rule == Rule::kLoadAttr && ns == nullptr && PyUnicode_Check(name) &&
      PyUnicode_CompareWithASCIIString(name, "__dict__") == 0) {
    p.flag = true;  // complete_slot_load gives the dict its owner's attribute slots
    p.copy_of = owner;
  }
}

Slot Tracer::instance_attr_source(PyObject* owner, PyObject* name, bool via_dict,
                                  bool via_class) const {
  Slot found;
  if (const Slot* own = slots_.slot(addr(owner), attr_key(name))) found = *own;
  if (found.tag == 0 && via_dict) {
    // Written through the instance's __dict__ (ORMs, copy.copy's __dict__.update).
    PyObject* dict = sealtrace_instance_dict(owner);
    const Slot* in_dict = dict != nullptr ? slots_.slot(addr(dict), name_key(name)) : nullptr;
    if (in_dict != nullptr) found = *in_dict;
  }
  if (found.tag == 0 && via_class) {
    PyObject* v = nullptr;
    found.tag = class_attr_slot(owner, name, &v);
    found.value = addr(v);
  }
  return found;
}

// obj.__dict__ read by Python code (a logging formatter's `fmt % record.__dict__`): its items
// are the attributes STORE_ATTR tagged on the owner. `owner` is only compared, never read.
void Tracer::share_attribute_slots(PyObject* owner, PyObject* dict) {
  if (!trackable(dict) || PyDict_GET_SIZE(dict) > static_cast<Py_ssize_t>(kMaxCopiedItems)) {
    return;
  }
  const Tag now = counter_.value();
  Py_ssize_t pos = 0;
  PyObject* k = nullptr;
  PyObject* v = nullptr;
  while (PyDict_Next(dict, &pos, &k, &v)) {
    if (!PyUnicode_CheckExact(k)) continue;
    const Slot* slot = slots_.slot(addr(owner), attr_key(k));
    if (slot != nullptr && slot->value == addr(v))
      set_slot(addr(dict), name_key(k), slot->tag, addr(v), now);
  }
}

// STORE_ATTR, DELETE_ATTR.
void Tracer::begin_attr_store(ShadowFrame& sf, const Instr& in, int depth) {
  const Tag now = sf.p.counter;
  PyObject* owner = stack_top(sf, depth, 0);
  PyObject* name = PyTuple_GET_ITEM(sf.iframe->f_code->co_names, in.oparg);
  PyObject* ns = namespace_of(owner);
  PyObject* target = ns != nullptr ? ns : owner;
  const std::uint64_t key = ns != nullptr ? name_key(name) : attr_key(name);
  if (!trackable(target)) {
    ++stats_.untracked_writes;
  } else if (in.rule == Rule::kStoreAttr) {
    set_slot(addr(target), key, stack_top_tag(sf, depth, 1), addr(stack_top(sf, depth, 1)), now);
  } else {
    slots_.erase(addr(target), key, now);
  }
}

// LOAD_METHOD pushes [method, self] (self keeps its tag) or [NULL, attribute] (a load).
void Tracer::complete_load_method(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  PyObject** lp = sf.iframe->localsplus;
  Tag* s = sf.slots.data();
  fill(sf, base, depth);
  if (depth - base == 2) {
    if (lp[base] != nullptr) {
      s[base + 1] = p.in_tags.back();  // [method, self]
    } else {
      s[base] = 0;  // [NULL, attribute]
      PyObject* v = lp[base + 1];
      s[base + 1] = (p.aux_tag != 0 && v == p.aux_value) ? p.aux_tag : computed(p, v);
    }
  }
}

}  // namespace sealtrace
