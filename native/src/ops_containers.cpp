// Building and extending containers: an item keeps, in its new container's slot, the tag it
// had on the stack or in the container it was copied from (a set's items, in member slots
// keyed by their identity). The first half of a build reads
// what the second half needs (a map's keys, a list's item tags for LIST_TO_TUPLE); the
// appends and updates write their slots before they run.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "ops.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

// LIST_APPEND: a comprehension's list sits oparg values below the top.
void Tracer::begin_list_append(ShadowFrame& sf, const Instr& in, int depth, Tag now) {
  PyObject* list = sf.iframe->localsplus[depth - 1 - in.oparg];
  if (PyList_Check(list) && trackable(list)) {
    set_slot(addr(list), index_key(PyList_GET_SIZE(list)), stack_top_tag(sf, depth, 0),
             addr(stack_top(sf, depth, 0)), now);
  }
}

// MAP_ADD.
void Tracer::begin_map_add(ShadowFrame& sf, const Instr& in, int depth, Tag now) {
  PyObject* map = sf.iframe->localsplus[depth - 2 - in.oparg];
  std::uint64_t key = 0;
  if (PyDict_Check(map) && trackable(map) && item_key(stack_top(sf, depth, 1), key)) {
    set_slot(addr(map), key, stack_top_tag(sf, depth, 0), addr(stack_top(sf, depth, 0)), now);
  }
}

// LIST_EXTEND: items of a list or tuple keep their slot tags, or take the source's.
void Tracer::begin_list_extend(ShadowFrame& sf, const Instr& in, int depth) {
  const Tag now = sf.p.counter;
  PyObject* list = sf.iframe->localsplus[depth - 1 - in.oparg];
  PyObject* src = stack_top(sf, depth, 0);
  if (!PyList_Check(list) || !trackable(list)) return;
  if ((PyList_Check(src) || PyTuple_Check(src)) &&
      static_cast<std::size_t>(Py_SIZE(src)) <= kMaxCopiedItems) {
    const Py_ssize_t base = PyList_GET_SIZE(list);
    for (Py_ssize_t j = 0; j < Py_SIZE(src); ++j) {
      PyObject* item = seq_item(src, j);
      Tag t = slots_.get(addr(src), index_key(j), addr(item));
      set_slot(addr(list), index_key(base + j), t != 0 ? t : stack_top_tag(sf, depth, 0),
               addr(item), now);
    }
  } else {
    slots_.mark_updated(addr(list), now);
  }
}

// DICT_UPDATE, DICT_MERGE: a dict's slots are copied along.
void Tracer::begin_dict_update(ShadowFrame& sf, const Instr& in, int depth) {
  const Tag now = sf.p.counter;
  PyObject* dict = sf.iframe->localsplus[depth - 1 - in.oparg];
  PyObject* src = stack_top(sf, depth, 0);
  const ObjectRecord* record = slots_.find(addr(src));
  if (!PyDict_Check(dict) || !trackable(dict)) return;
  if (record != nullptr && PyDict_Check(src)) {
    std::vector<std::pair<std::uint64_t, Slot>> copy(record->slots.begin(), record->slots.end());
    for (const auto& [key, slot] : copy) copy_slot(addr(dict), key, slot, now);
  } else {
    slots_.mark_updated(addr(dict), now);
  }
}

// BUILD_MAP: the keys of its key/value pairs.
void Tracer::begin_build_map(ShadowFrame& sf, const Instr& in) {
  Pending& p = sf.p;
  p.keys.assign(static_cast<std::size_t>(in.oparg), 0);
  for (int i = 0; i < in.oparg; ++i) {
    item_key(p.in_objs[static_cast<std::size_t>(2 * i)], p.keys[static_cast<std::size_t>(i)]);
  }
}

// BUILD_CONST_KEY_MAP: the keys of its keys tuple.
void Tracer::begin_build_const_key_map(ShadowFrame& sf, const Instr& in, int depth) {
  const_map_keys(stack_top(sf, depth, 0), in.oparg, sf.p.keys);
}

// The slot keys of a BUILD_CONST_KEY_MAP's `count` keys (0 for one whose hash could run Python
// code, or for all where the tuple is not as many).
void Tracer::const_map_keys(PyObject* keys, int count, std::vector<std::uint64_t>& out) {
  out.assign(static_cast<std::size_t>(count), 0);
  if (PyTuple_Check(keys) && PyTuple_GET_SIZE(keys) == count) {
    for (int i = 0; i < count; ++i) {
      item_key(PyTuple_GET_ITEM(keys, i), out[static_cast<std::size_t>(i)]);
    }
  }
}

// BUILD_TUPLE, BUILD_LIST and LIST_TO_TUPLE: the last reads its list's item tags.
void Tracer::begin_build_seq(ShadowFrame& sf, const Instr& in, int depth) {
  Pending& p = sf.p;
  if (in.op != kListToTuple) return;
  PyObject* list = stack_top(sf, depth, 0);
  p.items.assign(static_cast<std::size_t>(PyList_Check(list) ? PyList_GET_SIZE(list) : 0), 0);
  for (std::size_t j = 0; j < p.items.size() && j < kMaxCopiedItems; ++j) {
    const auto i = static_cast<Py_ssize_t>(j);
    p.items[j] = slots_.get(addr(list), index_key(i), addr(PyList_GET_ITEM(list, i)));
  }
}

// A new tuple or list: its items keep their stack tags (or, from LIST_TO_TUPLE, the list's).
void Tracer::complete_build_seq(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  const Tag now = p.counter;
  fill(sf, base, depth);
  if (depth - base != 1) return;
  const std::vector<Tag>& tags = p.op == kListToTuple ? p.items : p.in_tags;
  tag_new_sequence(sf.iframe->localsplus[base], tags.data(), static_cast<Py_ssize_t>(tags.size()),
                   now);
}

// A new tuple or list (the two halves' or the loop's): its first `count` items keep `tags`.
void Tracer::tag_new_sequence(PyObject* obj, const Tag* tags, Py_ssize_t count, Tag now) {
  if (!trackable(obj)) return;
  slots_.mark_created(addr(obj), now, Py_SIZE(obj) == 0);
  const Py_ssize_t size = Py_SIZE(obj);
  for (Py_ssize_t i = 0; i < count && i < size; ++i) {
    if (tags[i] != 0) set_slot(addr(obj), index_key(i), tags[i], addr(seq_item(obj, i)), now);
  }
}

// BUILD_MAP, BUILD_CONST_KEY_MAP: each value keeps its stack tag in the new dict.
void Tracer::complete_build_map(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  const Tag now = p.counter;
  fill(sf, base, depth);
  if (depth - base != 1) return;
  // BUILD_MAP's inputs are key/value pairs; BUILD_CONST_KEY_MAP's the values (then the keys).
  const std::size_t first = p.rule == Rule::kBuildMap ? 1 : 0;
  const std::size_t stride = first + 1;
  const std::size_t inputs = std::min(p.in_objs.size(), p.in_tags.size());
  const std::size_t values = inputs > first ? (inputs - first - 1) / stride + 1 : 0;
  tag_new_dict(sf.iframe->localsplus[base], p.keys.data(), std::min(p.keys.size(), values),
               p.in_tags.data() + first, p.in_objs.data() + first, stride, now);
}

// A new dict (the two halves' or the loop's): its value under keys[i] (none where 0) is
// values[i * stride], tagged tags[i * stride].
void Tracer::tag_new_dict(PyObject* obj, const std::uint64_t* keys, std::size_t count,
                          const Tag* tags, PyObject* const* values, std::size_t stride, Tag now) {
  if (!PyDict_Check(obj) || !trackable(obj)) return;
  slots_.mark_created(addr(obj), now, PyDict_GET_SIZE(obj) == 0);
  for (std::size_t i = 0; i < count; ++i) {
    if (keys[i] != 0) set_slot(addr(obj), keys[i], tags[i * stride], addr(values[i * stride]), now);
  }
}

// Items copied into a set or a deque keep their tags in member slots: a list's or tuple's
// positional tags, a set's or deque's member tags, else the tag of where they came from.
void Tracer::copy_items_as_members(PyObject* into, PyObject* from, Tag fallback, Tag now) {
  if (!trackable(into)) return;
  if (PyList_Check(from) || PyTuple_Check(from)) {
    const Py_ssize_t n = std::min<Py_ssize_t>(Py_SIZE(from), kMaxCopiedItems);
    for (Py_ssize_t j = 0; j < n; ++j) {
      PyObject* item = seq_item(from, j);
      const Tag t = item_tag_of(from, index_key(j), item);
      set_slot(addr(into), member_key(addr(item)), t != 0 ? t : fallback, addr(item), now);
    }
  } else if (PyAnySet_Check(from) &&
             PySet_GET_SIZE(from) <= static_cast<Py_ssize_t>(kMaxCopiedItems)) {
    Py_ssize_t pos = 0;
    PyObject* item = nullptr;
    Py_hash_t hash = 0;
    while (_PySet_NextEntry(from, &pos, &item, &hash)) {
      const Tag t = item_tag_of(from, 0, item);
      set_slot(addr(into), member_key(addr(item)), t != 0 ? t : fallback, addr(item), now);
    }
  } else {
    slots_.mark_dirty(addr(into), now);
  }
}

// SET_ADD (a set comprehension's set sits oparg values below the top), SET_UPDATE ({*a, b}).
void Tracer::begin_set_items(ShadowFrame& sf, const Instr& in, int depth) {
  const Tag now = sf.p.counter;
  PyObject* set = sf.iframe->localsplus[depth - 1 - in.oparg];
  if (!PyAnySet_Check(set) || !trackable(set)) return;
  PyObject* item = stack_top(sf, depth, 0);
  if (in.rule == Rule::kSetAdd) {
    set_slot(addr(set), member_key(addr(item)), stack_top_tag(sf, depth, 0), addr(item), now);
  } else {
    copy_items_as_members(set, item, stack_top_tag(sf, depth, 0), now);
  }
}

// BUILD_SET: each item keeps its stack tag in the new set.
void Tracer::complete_build_set(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  PyObject* obj = depth - base == 1 ? sf.iframe->localsplus[base] : nullptr;
  if (obj == nullptr || !PyAnySet_Check(obj) || !trackable(obj)) return;
  slots_.mark_created(addr(obj), p.counter, PySet_GET_SIZE(obj) == 0);
  // An item equal to one before it was dropped (and maybe freed): only the set's own entries.
  Py_ssize_t pos = 0;
  PyObject* entry = nullptr;
  Py_hash_t hash = 0;
  while (_PySet_NextEntry(obj, &pos, &entry, &hash)) {
    for (std::size_t i = 0; i < p.in_objs.size(); ++i) {
      if (p.in_objs[i] == entry && p.in_tags[i] != 0) {
        set_slot(addr(obj), member_key(addr(entry)), p.in_tags[i], addr(entry), p.counter);
        break;
      }
    }
  }
}

}  // namespace sealtrace
