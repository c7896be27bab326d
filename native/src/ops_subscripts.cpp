// Subscripts: the item slots of lists, tuples and dicts. BINARY_SUBSCR remembers the slot it
// reads (its second half is complete_slot_load); a store or delete the tracer cannot key
// forgets every item slot of the container.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <cstdint>

#include "ops.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

// BINARY_SUBSCR.
void Tracer::begin_subscr_load(ShadowFrame& sf, int depth) {
  Pending& p = sf.p;
  std::uint64_t key = 0;
  PyObject* current = nullptr;
  PyObject* container = stack_top(sf, depth, 1);
  if (subscript_key(container, stack_top(sf, depth, 0), key, &current)) {
    const Tag t = slots_.get(addr(container), key, addr(current));
    if (t != 0) {
      p.aux_tag = t;
      p.aux_value = current;
    } else if (current == nullptr && !PyDict_CheckExact(container) && trackable(container)) {
      // A missing key of a dict subclass: __missing__ may put a value there (defaultdict);
      // the second half tags that slot with what the read made.
      p.flag = true;
      p.keys.assign(1, key);
      slots_.mark_updated(addr(container), p.counter);
    }
  }
}

// BINARY_SUBSCR of a missing key that __missing__ filled: the new slot holds the value read.
void Tracer::complete_missing(ShadowFrame& sf, int depth) {
  const Pending& p = sf.p;
  PyObject* container = p.in_objs.empty() ? nullptr : p.in_objs[0];
  // Still alive if its record is (deallocation drops it): then the key's slot is its own.
  if (container == nullptr || p.keys.empty() || slots_.find(addr(container)) == nullptr) return;
  PyObject* v = sf.iframe->localsplus[depth - 1];
  set_slot(addr(container), p.keys[0], sf.slots.data()[depth - 1], addr(v), p.counter);
}

// STORE_SUBSCR.
void Tracer::begin_subscr_store(ShadowFrame& sf, int depth, Tag now) {
  PyObject* container = stack_top(sf, depth, 1);
  PyObject* key_obj = stack_top(sf, depth, 0);
  std::uint64_t key = 0;
  PyObject* current = nullptr;
  if (!trackable(container)) {
    ++stats_.untracked_writes;
  } else if ((PyList_Check(container) || PyDict_Check(container)) &&
             (subscript_key(container, key_obj, key, &current) ||
              (PyDict_Check(container) && item_key(key_obj, key)))) {
    set_slot(addr(container), key, stack_top_tag(sf, depth, 2), addr(stack_top(sf, depth, 2)), now);
  } else {
    slots_.drop_slots(addr(container), now);
  }
}

// DELETE_SUBSCR.
void Tracer::begin_subscr_delete(ShadowFrame& sf, int depth) {
  const Tag now = sf.p.counter;
  PyObject* container = stack_top(sf, depth, 1);
  std::uint64_t key = 0;
  if (PyDict_Check(container) && item_key(stack_top(sf, depth, 0), key)) {
    slots_.erase(addr(container), key, now);
  } else {
    slots_.drop_slots(addr(container), now);
  }
}

}  // namespace sealtrace
