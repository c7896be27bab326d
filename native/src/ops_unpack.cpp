// Unpacking and pattern matching: values taken out of a sequence, a dict or an object's
// attributes keep the tags of the slots they came from. The first half reads those slots
// (and, for a match, the value each slot tagged); the second half gives them to the values
// the instruction pushed when they are still the same objects.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <cstdint>

#include "ops.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

// UNPACK_SEQUENCE: the slot tags of an exact tuple's or list's items.
void Tracer::begin_unpack_sequence(ShadowFrame& sf, const Instr& in, int depth) {
  Pending& p = sf.p;
  PyObject* seq = stack_top(sf, depth, 0);
  p.items.assign(static_cast<std::size_t>(in.oparg), 0);
  if ((PyTuple_CheckExact(seq) || PyList_CheckExact(seq)) && Py_SIZE(seq) == in.oparg) {
    for (int i = 0; i < in.oparg; ++i) {
      p.items[static_cast<std::size_t>(i)] =
          slots_.get(addr(seq), index_key(i), addr(seq_item(seq, i)));
    }
  }
}

// UNPACK_EX: the slot tags of every item.
void Tracer::begin_unpack_ex(ShadowFrame& sf, int depth) {
  Pending& p = sf.p;
  p.items.clear();
  if (p.in_objs.empty()) return;
  PyObject* seq = stack_top(sf, depth, 0);
  if ((PyTuple_CheckExact(seq) || PyList_CheckExact(seq)) &&
      static_cast<std::size_t>(Py_SIZE(seq)) <= kMaxCopiedItems) {
    p.items.resize(static_cast<std::size_t>(Py_SIZE(seq)));
    for (std::size_t j = 0; j < p.items.size(); ++j) {
      PyObject* item = seq_item(seq, static_cast<Py_ssize_t>(j));
      p.items[j] = slots_.get(addr(seq), index_key(static_cast<Py_ssize_t>(j)), addr(item));
    }
  }
}

// A match's result tuple: the slot each of its values would be read from, its tag in items
// and the value it tagged in keys (compared, once the tuple exists, with what was found).
static inline void want_slot(Pending& p, const Slot* slot) {
  p.items.push_back(slot != nullptr ? slot->tag : 0);
  p.keys.push_back(slot != nullptr ? static_cast<std::uint64_t>(slot->value) : 0);
}

// MATCH_KEYS: the dict subject's slots of the keys tuple's keys.
void Tracer::begin_match_keys(ShadowFrame& sf, int depth) {
  Pending& p = sf.p;
  p.items.clear();
  p.keys.clear();
  if (p.in_objs.size() < 2U) return;
  PyObject* subject = stack_top(sf, depth, 1);
  PyObject* keys = stack_top(sf, depth, 0);
  if (!PyDict_Check(subject) || !PyTuple_Check(keys)) return;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); ++i) {
    std::uint64_t key = 0;
    const bool known = item_key(PyTuple_GET_ITEM(keys, i), key);
    want_slot(p, known ? slots_.slot(addr(subject), key) : nullptr);
  }
}

// MATCH_CLASS: the subject's attribute slots, positional (by __match_args__) then keyword.
void Tracer::begin_match_class(ShadowFrame& sf, const Instr& in, int depth) {
  Pending& p = sf.p;
  p.items.clear();
  p.keys.clear();
  if (p.in_objs.size() < 3U) return;
  PyObject* subject = stack_top(sf, depth, 2);
  PyObject* names = stack_top(sf, depth, 0);
  if (!PyType_Check(stack_top(sf, depth, 1)) || !PyTuple_Check(names)) return;
  auto* cls = reinterpret_cast<PyTypeObject*>(stack_top(sf, depth, 1));
  static PyObject* const match_args_name = [] {
    PyObject* name = PyUnicode_InternFromString("__match_args__");
    if (name == nullptr) PyErr_Clear();
    return name;
  }();
  PyObject* match_args =
      in.oparg > 0 && match_args_name != nullptr ? _PyType_Lookup(cls, match_args_name) : nullptr;
  for (int i = 0; i < in.oparg; ++i) {
    if (match_args != nullptr && PyTuple_Check(match_args) && i < PyTuple_GET_SIZE(match_args)) {
      want_slot(p, slots_.slot(addr(subject), attr_key(PyTuple_GET_ITEM(match_args, i))));
    } else if (i == 0 && match_args == nullptr && PyType_HasFeature(cls, _Py_TPFLAGS_MATCH_SELF)) {
      p.items.push_back(p.in_tags[0]);  // `case int(v)`: the subject itself
      p.keys.push_back(addr(subject));
    } else {
      want_slot(p, nullptr);
    }
  }
  for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(names); ++j) {
    want_slot(p, slots_.slot(addr(subject), attr_key(PyTuple_GET_ITEM(names, j))));
  }
}

Tag Tracer::callback_tag(const Pending& p, PyObject* v, std::size_t position,
                         std::size_t count) const noexcept {
  // An iterator that handed back exactly the values taken, in order: position decides, even
  // for shared objects (small ints, None) that identity alone cannot tell apart.
  if (p.callback_values.size() == count && position < count) {
    return p.callback_values[position] == v ? p.callbacks[position] : 0;
  }
  if (v == nullptr || shared(v)) return 0;  // a shared object could be any of them
  for (std::size_t i = p.callback_values.size(); i-- > 0;) {
    if (p.callback_values[i] == v) return p.callbacks[i];
  }
  return 0;
}

// UNPACK_SEQUENCE pushes the items last first; an item without a slot tag may still be held,
// or be what a generator yielded.
void Tracer::complete_unpack_sequence(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  PyObject** lp = sf.iframe->localsplus;
  Tag* s = sf.slots.data();
  fill(sf, base, depth);
  const int count = static_cast<int>(p.items.size());
  if (depth - base == count) {
    for (int i = 0; i < count; ++i) {
      Tag t = p.items[static_cast<std::size_t>(i)];
      if (t == 0) {
        t = callback_tag(p, lp[base + (count - 1 - i)], static_cast<std::size_t>(i),
                         static_cast<std::size_t>(count));
      }
      if (t == 0) t = held_tag(lp[base + (count - 1 - i)]);
      if (t != 0) s[base + (count - 1 - i)] = t;
    }
  }
}

// UNPACK_EX pushes, from the top: the leading items, the starred list, then the trailing
// items with the sequence's last item deepest.
void Tracer::complete_unpack_ex(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  const Tag now = p.counter;
  PyObject** lp = sf.iframe->localsplus;
  Tag* s = sf.slots.data();
  fill(sf, base, depth);
  const int lead = p.oparg & 0xFF;
  const int trail = p.oparg >> 8;
  const auto n = static_cast<int>(p.items.size());
  if (depth - base != lead + 1 + trail) return;
  PyObject* rest = lp[base + trail];
  if (n == 0 && !p.callback_values.empty()) {
    // An iterator's items (a generator's yields): known by the objects it handed back.
    const Py_ssize_t middle = PyList_CheckExact(rest) ? PyList_GET_SIZE(rest) : 0;
    const auto count = static_cast<std::size_t>(lead + trail + middle);
    for (int i = 0; i < lead; ++i) {
      const Tag t = callback_tag(p, lp[depth - 1 - i], static_cast<std::size_t>(i), count);
      if (t != 0) s[depth - 1 - i] = t;
    }
    for (int k = 0; k < trail; ++k) {
      const Tag t = callback_tag(p, lp[base + k], count - 1 - static_cast<std::size_t>(k), count);
      if (t != 0) s[base + k] = t;
    }
    if (!PyList_CheckExact(rest) || !trackable(rest)) return;
    slots_.mark_created(addr(rest), now);
    for (Py_ssize_t j = 0; j < middle; ++j) {
      PyObject* item = PyList_GET_ITEM(rest, j);
      const Tag t = callback_tag(p, item, static_cast<std::size_t>(lead + j), count);
      if (t != 0) set_slot(addr(rest), index_key(j), t, addr(item), now);
    }
    return;
  }
  if (n < lead + trail) return;
  auto item_tag = [&](int i) { return p.items[static_cast<std::size_t>(i)]; };
  for (int i = 0; i < lead; ++i) {
    if (item_tag(i) != 0) s[depth - 1 - i] = item_tag(i);
  }
  for (int k = 0; k < trail; ++k) {
    if (item_tag(n - 1 - k) != 0) s[base + k] = item_tag(n - 1 - k);
  }
  if (!PyList_CheckExact(rest) || !trackable(rest)) return;
  slots_.mark_created(addr(rest), now);
  for (Py_ssize_t j = 0; j < PyList_GET_SIZE(rest) && lead + j < n - trail; ++j) {
    const Tag t = item_tag(lead + static_cast<int>(j));
    if (t != 0) set_slot(addr(rest), index_key(j), t, addr(PyList_GET_ITEM(rest, j)), now);
  }
}

// MATCH_KEYS keeps its inputs; MATCH_KEYS and MATCH_CLASS push a values tuple whose items
// keep the tags of the slots they were read from.
void Tracer::complete_match(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  const Tag now = p.counter;
  Tag* s = sf.slots.data();
  const int pushed = depth - base;
  fill(sf, base, depth);
  for (int i = 0; i + 1 < pushed && i < static_cast<int>(p.in_tags.size()); ++i) {
    s[base + i] = p.in_tags[static_cast<std::size_t>(i)];
  }
  PyObject* values = pushed >= 1 ? sf.iframe->localsplus[depth - 1] : nullptr;
  if (values == nullptr || !PyTuple_CheckExact(values) || !trackable(values) ||
      PyTuple_GET_SIZE(values) != static_cast<Py_ssize_t>(p.items.size())) {
    return;
  }
  slots_.mark_created(addr(values), now);
  for (std::size_t i = 0; i < p.items.size(); ++i) {
    const auto at = static_cast<Py_ssize_t>(i);
    PyObject* v = PyTuple_GET_ITEM(values, at);
    if (p.items[i] != 0 && addr(v) == p.keys[i]) {
      set_slot(addr(values), index_key(at), p.items[i], addr(v), now);
    }
  }
}

}  // namespace sealtrace
