// Names, globals, cells and `import *`: the slots of a namespace (a frame's locals, its
// globals, a module's dict) and of a cell. A load remembers the slot it reads; the second
// half of every load from a slot (names, cells, attributes, items) is complete_slot_load.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "ops.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

// STORE_NAME, STORE_GLOBAL, DELETE_NAME, DELETE_GLOBAL.
void Tracer::begin_name_store(ShadowFrame& sf, const Instr& in, int depth) {
  _PyInterpreterFrame* f = sf.iframe;
  const Tag now = sf.p.counter;
  if (in.rule == Rule::kStoreName || in.rule == Rule::kStoreGlobal) {
    set_name_slot(f, in, stack_top_tag(sf, depth, 0), stack_top(sf, depth, 0), now);
    return;
  }
  PyObject* ns = in.rule == Rule::kDeleteName ? f->f_locals : f->f_globals;
  if (ns == nullptr || !trackable(ns)) return;
  slots_.erase(addr(ns), name_key(PyTuple_GET_ITEM(f->f_code->co_names, in.oparg)), now);
}

// STORE_NAME, STORE_GLOBAL (begin_name_store; the loop's own, quick_steps.cpp): the namespace's
// slot of the name tags the value stored.
void Tracer::set_name_slot(_PyInterpreterFrame* f, const Instr& in, Tag tag, PyObject* value,
                           Tag now) {
  PyObject* ns = in.rule == Rule::kStoreName ? f->f_locals : f->f_globals;
  if (ns == nullptr || !trackable(ns)) return;
  const std::uint64_t key = name_key(PyTuple_GET_ITEM(f->f_code->co_names, in.oparg));
  set_slot(addr(ns), key, tag, addr(value), now, &name_hints_[key % name_hints_.size()]);
}

// LOAD_GLOBAL, LOAD_NAME: the locals' slot (LOAD_NAME), else the globals'.
void Tracer::begin_name_load(ShadowFrame& sf, const Instr& in) {
  remember(sf.p, name_slot(sf.iframe, in));
}

// The slot a LOAD_GLOBAL or LOAD_NAME reads (begin_name_load; the loop's own, quick_steps.cpp).
const Slot* Tracer::name_slot(_PyInterpreterFrame* f, const Instr& in) const {
  const int name_index = in.op == kLoadGlobalOp ? (in.oparg >> 1) : in.oparg;
  const std::uint64_t key = name_key(PyTuple_GET_ITEM(f->f_code->co_names, name_index));
  std::uint32_t& hint = name_hints_[key % name_hints_.size()];
  const Slot* slot = nullptr;
  if (in.rule == Rule::kLoadName && f->f_locals != nullptr) {
    slot = slots_.slot(addr(f->f_locals), key, hint);
  }
  if (slot == nullptr) slot = slots_.slot(addr(f->f_globals), key, hint);
  return slot;
}

// LOAD_CLASSDEREF: the class body's locals, else the cell.
void Tracer::begin_class_deref(ShadowFrame& sf, const Instr& in) {
  _PyInterpreterFrame* f = sf.iframe;
  PyObject** lp = f->localsplus;
  PyObject* name = PyTuple_GET_ITEM(f->f_code->co_localsplusnames, in.oparg);
  const Slot* slot = nullptr;
  if (f->f_locals != nullptr) slot = slots_.slot(addr(f->f_locals), name_key(name));
  if (slot == nullptr && lp[in.oparg] != nullptr) slot = slots_.slot(addr(lp[in.oparg]), kCellKey);
  remember(sf.p, slot);
}

// LOAD_DEREF.
void Tracer::begin_deref_load(ShadowFrame& sf, const Instr& in) {
  PyObject* cell = sf.iframe->localsplus[in.oparg];
  if (cell != nullptr) remember(sf.p, slots_.slot(addr(cell), kCellKey));
}

// STORE_DEREF, DELETE_DEREF.
void Tracer::begin_deref_store(ShadowFrame& sf, const Instr& in, int depth) {
  const Tag now = sf.p.counter;
  PyObject* cell = sf.iframe->localsplus[in.oparg];
  if (cell == nullptr || !PyCell_Check(cell)) return;
  if (in.rule == Rule::kStoreDeref) {
    set_slot(addr(cell), kCellKey, stack_top_tag(sf, depth, 0), addr(stack_top(sf, depth, 0)), now);
  } else {
    slots_.erase(addr(cell), kCellKey, now);
  }
}

// IMPORT_STAR: `from m import *` copies the module's names here in C; their slots come along
// (a read still checks that a slot holds the value it tagged).
void Tracer::begin_import_star(ShadowFrame& sf, int depth) {
  _PyInterpreterFrame* f = sf.iframe;
  const Pending& p = sf.p;
  const Tag now = p.counter;
  PyObject* module_ns = p.in_objs.empty() ? nullptr : namespace_of(stack_top(sf, depth, 0));
  const ObjectRecord* record = module_ns != nullptr ? slots_.find(addr(module_ns)) : nullptr;
  if (record == nullptr || f->f_locals == nullptr || !trackable(f->f_locals)) return;
  std::vector<std::pair<std::uint64_t, Slot>> copy(record->slots.begin(), record->slots.end());
  for (const auto& [key, slot] : copy) {
    copy_slot(addr(f->f_locals), key, slot, now);
  }
}

// LOAD_GLOBAL, LOAD_NAME, LOAD_CLASSDEREF, LOAD_DEREF, IMPORT_FROM, LOAD_ATTR, BINARY_SUBSCR:
// the value keeps the tag of the slot it was read from, if the slot still held it; an
// attribute or item read from no slot is computed from its owner.
void Tracer::complete_slot_load(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  Tag* s = sf.slots.data();
  const int pushed = depth - base;
  fill(sf, base, depth);
  if (pushed >= 1) {
    PyObject* v = sf.iframe->localsplus[depth - 1];
    const bool attr_like = p.rule == Rule::kLoadAttr || p.rule == Rule::kBinarySubscr;
    if (p.aux_tag != 0 && v == p.aux_value) {
      s[depth - 1] = p.aux_tag;
    } else if (attr_like) {
      s[depth - 1] = computed(p, v);
      if (p.flag && p.rule == Rule::kBinarySubscr && pushed == 1) complete_missing(sf, depth);
      if (p.flag && p.rule == Rule::kLoadAttr && pushed == 1 && PyDict_Check(v)) {
        share_attribute_slots(p.copy_of, v);
      }
    }
    if (pushed == 2) s[base] = 0;  // LOAD_GLOBAL's NULL
  }
}

}  // namespace sealtrace
