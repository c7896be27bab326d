// Iteration: GET_ITER over an exact list or tuple remembers the sequence, so FOR_ITER can give
// each item the tag of the slot it came from (iterators made elsewhere, a comprehension's
// `.0`, are read through the iterator's own index; a dict's values through its slots); the
// tuples of dict.items(), enumerate() and zip() carry their items' tags. An exhausted FOR_ITER
// forgets its iterator (complete's pushed < 0 case, drop_iters).
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include "ops.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

// GET_ITER: an iterable that is its own iterator keeps its tag.
void Tracer::complete_get_iter(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  fill(sf, base, depth);
  if (depth - base != 1) return;
  const bool read = !p.in_objs.empty() && !p.in_tags.empty();
  tag_new_iterator(sf, base, read ? p.in_objs[0] : nullptr, read ? p.in_tags[0] : 0);
}

// GET_ITER (the two halves' or the loop's) left an iterator at stack slot `base` from `src`,
// tagged `src_tag` (nullptr where not read): an iterable that is its own iterator keeps its tag
// (the rest have GET_ITER's, already there); an exact list's or tuple's iterator remembers the
// sequence for FOR_ITER.
void Tracer::tag_new_iterator(ShadowFrame& sf, int base, PyObject* src, Tag src_tag) {
  PyObject* iter = sf.iframe->localsplus[base];
  if (src != nullptr && iter == src) sf.slots[static_cast<std::size_t>(base)] = src_tag;
  drop_iters(sf, base);
  if (src != nullptr && iter != src && (PyList_CheckExact(src) || PyTuple_CheckExact(src))) {
    sf.iters.push_back(IterState{base, iter, src, 0});
  }
}

// The tag of the item FOR_ITER just pushed above the iterator in stack slot `slot`, where one
// says where it came from: the slot of a list's or tuple's item (GET_ITER's IterState, moved on
// one, or the iterator's own index), a dict's value; 0 where none does.
Tag Tracer::iterated_tag(ShadowFrame& sf, int slot, PyObject* item) {
  PyObject* iter = sf.iframe->localsplus[slot];
  Tag tag = 0;
  for (auto& st : sf.iters) {
    if (st.slot != slot) continue;
    if (st.iter == iter) {
      const Py_ssize_t i = st.next++;
      if (i < Py_SIZE(st.seq) && seq_item(st.seq, i) == item) {
        tag = slots_.get(addr(st.seq), index_key(i), addr(item));
      }
    }
    break;
  }
  if (tag == 0) tag = iterated_item_tag(slots_, iter, item);
  if (tag == 0 && Py_IS_TYPE(iter, &PyDictIterValue_Type)) {
    tag = dict_iterated_tag(slots_, iter, item);
  }
  return tag;
}

// FOR_ITER pushed the next item: the tag of where it came from, else computed.
void Tracer::complete_for_iter(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  if (depth - base != 1) {
    fill(sf, base, depth);
    return;
  }
  PyObject* item = sf.iframe->localsplus[p.before];
  const Tag tag = iterated_tag(sf, p.before - 1, item);
  sf.slots.data()[p.before] = tag != 0 ? tag : computed(p, item);
  if (PyTuple_CheckExact(item) && trackable(item)) {
    tag_iterated_tuple(sf.iframe->localsplus[p.before - 1], item, p.counter);
  }
}

// The tuple dict.items(), enumerate() or zip() just made: its items keep the tags of where
// they came from (the dict's slot, the list's or tuple's), so unpacking it hands them on.
void Tracer::tag_iterated_tuple(PyObject* iter, PyObject* tuple, Tag now) {
  const Py_ssize_t n = PyTuple_GET_SIZE(tuple);
  if (Py_IS_TYPE(iter, &PyDictIterItem_Type) && n == 2) {
    const auto* it = reinterpret_cast<const DictIterLayout*>(iter);
    auto* dict = reinterpret_cast<PyObject*>(it->di_dict);
    if (dict == nullptr || it->di_pos < 1) return;
    Py_ssize_t pos = it->di_pos - 1;
    PyObject* k = nullptr;
    PyObject* v = nullptr;
    std::uint64_t key = 0;
    if (PyDict_Next(dict, &pos, &k, &v) && v == PyTuple_GET_ITEM(tuple, 1) && item_key(k, key)) {
      const Tag t = slots_.get(addr(dict), key, addr(v));
      if (t != 0) set_slot(addr(tuple), index_key(1), t, addr(v), now);
    }
  } else if (Py_IS_TYPE(iter, &PyEnum_Type) && n == 2) {
    PyObject* inner = reinterpret_cast<const EnumLayout*>(iter)->en_sit;
    PyObject* v = PyTuple_GET_ITEM(tuple, 1);
    const Tag t = inner != nullptr ? iterated_item_tag(slots_, inner, v) : 0;
    if (t != 0) set_slot(addr(tuple), index_key(1), t, addr(v), now);
  } else if (Py_IS_TYPE(iter, &PyZip_Type)) {
    PyObject* its = reinterpret_cast<const ZipLayout*>(iter)->ittuple;
    if (its == nullptr || !PyTuple_Check(its) || PyTuple_GET_SIZE(its) != n) return;
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* v = PyTuple_GET_ITEM(tuple, i);
      const Tag t = iterated_item_tag(slots_, PyTuple_GET_ITEM(its, i), v);
      if (t != 0) set_slot(addr(tuple), index_key(i), t, addr(v), now);
    }
  }
}

}  // namespace sealtrace
