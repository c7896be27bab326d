// Iteration: GET_ITER over an exact list or tuple remembers the sequence, so FOR_ITER can give
// each item the tag of the slot it came from (iterators made elsewhere, a comprehension's
// `.0`, are read through the iterator's own index). An exhausted FOR_ITER forgets its
// iterator (complete's pushed < 0 case, drop_iters).
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
  Tag* s = sf.slots.data();
  fill(sf, base, depth);
  if (depth - base != 1) return;
  PyObject* iter = sf.iframe->localsplus[base];
  PyObject* src = p.in_objs.empty() ? nullptr : p.in_objs[0];
  if (iter == src && src != nullptr) s[base] = p.in_tags[0];
  drop_iters(sf, base);
  if (src != nullptr && iter != src && (PyList_CheckExact(src) || PyTuple_CheckExact(src))) {
    sf.iters.push_back(IterState{base, iter, src, 0});
  }
}

// FOR_ITER pushed the next item: the slot tag of a list's or tuple's item, else computed.
void Tracer::complete_for_iter(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  PyObject** lp = sf.iframe->localsplus;
  Tag* s = sf.slots.data();
  if (depth - base != 1) {
    fill(sf, base, depth);
    return;
  }
  PyObject* item = lp[p.before];
  Tag tag = 0;
  const int slot = p.before - 1;
  for (auto& st : sf.iters) {
    if (st.slot != slot) continue;
    if (st.iter == lp[slot]) {
      const Py_ssize_t i = st.next++;
      if (i < Py_SIZE(st.seq) && seq_item(st.seq, i) == item) {
        tag = slots_.get(addr(st.seq), index_key(i), addr(item));
      }
    }
    break;
  }
  if (tag == 0) tag = iterated_item_tag(slots_, lp[slot], item);
  s[p.before] = tag != 0 ? tag : computed(p, item);
}

}  // namespace sealtrace
