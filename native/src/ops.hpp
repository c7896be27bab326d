// What the opcode families' two halves share (begin.cpp dispatches the first half to them,
// complete.cpp the second): reading the instruction's value stack, remembering the slot a
// value was read from, and tagging what an instruction pushed. Header-only; Py_BUILD_CORE
// (it reads the interpreter frame).
#pragma once

#include <Python.h>
#include <internal/pycore_frame.h>

#include <algorithm>

#include "slots.hpp"
#include "tracer.hpp"

namespace sealtrace {

// The k-th value from the top of a value stack `depth` slots deep (k = 0 is the top).
inline PyObject* stack_top(const ShadowFrame& sf, int depth, int k) {
  return sf.iframe->localsplus[depth - 1 - k];
}

inline Tag stack_top_tag(const ShadowFrame& sf, int depth, int k) {
  return sf.slots.data()[depth - 1 - k];
}

// The first half read a value out of this slot: the second half gives the pushed value the
// slot's tag if it is the value the slot tagged.
inline void remember(Pending& p, const Slot* slot) {
  if (slot != nullptr) {
    p.aux_tag = slot->tag;
    p.aux_value = reinterpret_cast<PyObject*>(slot->value);
  }
}

// Every stack slot from `from` up to depth holds a value this instruction made.
inline void fill(ShadowFrame& sf, int from, int depth) {
  Tag* s = sf.slots.data();
  const Tag now = sf.p.counter;
  for (int i = std::max(from, sf.code->nlocalsplus); i < depth; ++i) s[i] = now;
}

// Forget the iterators held in stack slots from `from` up (they were popped).
inline void drop_iters(ShadowFrame& sf, int from) {
  sf.iters.erase(std::remove_if(sf.iters.begin(), sf.iters.end(),
                                [from](const IterState& st) { return st.slot >= from; }),
                 sf.iters.end());
}

}  // namespace sealtrace
