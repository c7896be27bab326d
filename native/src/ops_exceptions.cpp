// Raising and handling exceptions. A raise never falls through: its second half lands the
// exception, with its tag, on top of the handler's stack (land_exception). RERAISE, a bare
// `raise` and END_ASYNC_FOR re-raise without an exception event, so their first half notes
// which exception (and tag) is about to land; the handled exceptions of a frame
// (PUSH_EXC_INFO .. POP_EXCEPT) keep their tags for a bare `raise`.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>

#include "ops.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

// RAISE_VARARGS, RERAISE: what lands in a handler is the exception on the stack, or the one
// being handled.
void Tracer::begin_raise(ShadowFrame& sf, const Instr& in) {
  const Pending& p = sf.p;
  PyObject* exc = nullptr;
  Tag tag = 0;
  if (in.op == kReraiseOp && !p.in_objs.empty()) {
    exc = p.in_objs[0];
    tag = p.in_tags[0];
  } else if (in.oparg == 0) {
    PyObject* handled = PyErr_GetHandledException();
    exc = handled == Py_None ? nullptr : handled;
    for (const auto& [obj, t] : sf.handled) {
      if (obj == exc) tag = t;
    }
    Py_XDECREF(handled);  // the thread state still holds it
  }
  if (exc != nullptr && (exc != exc_value_ || tag != 0)) {
    exc_value_ = exc;
    exc_tag_ = tag;
  }
}

// PUSH_EXC_INFO: the frame now handles the exception on top.
void Tracer::begin_push_exc_info(ShadowFrame& sf, int depth) {
  if (depth > sf.code->nlocalsplus) {
    sf.handled.emplace_back(stack_top(sf, depth, 0), stack_top_tag(sf, depth, 0));
  }
}

// POP_EXCEPT ends handling one; END_ASYNC_FOR re-raises anything but StopAsyncIteration.
void Tracer::begin_handler_exit(ShadowFrame& sf, const Instr& in) {
  Pending& p = sf.p;
  if (in.op == kPopExceptOp && !sf.handled.empty()) sf.handled.pop_back();
  if (in.op == kEndAsyncForOp && p.in_objs.size() == 2 && p.in_objs[1] != nullptr &&
      !PyErr_GivenExceptionMatches(p.in_objs[1], PyExc_StopAsyncIteration)) {
    // Anything else ends `async for` by being re-raised, without an exception event.
    exc_value_ = p.in_objs[1];
    exc_tag_ = p.in_tags[1];
    p.raised = true;
  }
}

// PUSH_EXC_INFO pushes [the previous exception, the exception it keeps the tag of].
void Tracer::complete_push_exc_info(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  Tag* s = sf.slots.data();
  fill(sf, base, depth);
  if (depth - base == 2) {
    s[base] = 0;
    s[base + 1] = p.in_tags.empty() ? p.counter : p.in_tags[0];
  }
}

// The second half of an instruction that raised: the stack down to the handler's depth is
// gone and the exception, with its tag, is on top.
void Tracer::land_exception(ShadowFrame& sf, int depth) {
  Pending& p = sf.p;
  Tag* s = sf.slots.data();
  const int top = depth - 1;
  const int keep = std::min(top, p.before);
  for (int i = std::max(keep, sf.code->nlocalsplus); i < top; ++i) s[i] = 0;
  if (top >= sf.code->nlocalsplus) s[top] = exc_tag_;
  drop_iters(sf, top);
  if (recording_edges(p.counter)) record(p, false);
  if (p.counter >= capture_min_ && p.counter <= capture_max_ && capture_.count(p.counter) != 0) {
    capture_post(sf, depth, depth, false);
  }
}

}  // namespace sealtrace
