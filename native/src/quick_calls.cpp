// Calls the engine's evaluation loop counts itself (eval_loop.cpp; quick_steps.cpp has the other
// quick instructions): a Python function or a class of the program's own that the loop runs,
// passing its arguments by position, and C code the two halves model by its result alone. The
// call is noted in the caller's shadow (QuickCall) instead of a pending half; where it turns out
// otherwise (the callee never started, raised, or its clean-up could run Python code) the
// pending half is made after all (make_call_pending), so the answer is the two halves'.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#include <opcode.h>

#include <algorithm>
#include <cstdint>

#include "eval_pending.h"
#include "ops.hpp"
#include "py_values.hpp"
#include "quiet_values.hpp"
#include "tracer.hpp"
#include "tracing_off.hpp"

namespace sealtrace {

// CALL of a Python function the loop runs, passing exactly its positional parameters (no
// keywords, no defaults, no *args or **kwargs, no parameter a cell) while no slice is recorded
// and no buffer fills wait: counted before it runs, with the call noted in the caller's shadow
// (QuickCall) instead of a pending half. The callee's call event binds each parameter to the
// tag of the stack item at its position (what bind_arguments finds there by identity), its
// return hands back its value's tag, and `called` tags the result. A call whose callee never
// started or returned there, that raised, or whose clean-up could run Python code (a __del__ of
// the function or an argument, a signal handler) gets its pending half after all.
ShadowFrame* Tracer::step_calling(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                                  PyObject** sp, int index) {
  if (!fills_.empty() || recording_edges(counter_.value() + 1)) return nullptr;
  const bool is_meth = sp[-in.oparg - 2] != nullptr;
  PyObject* function = is_meth ? sp[-in.oparg - 2] : sp[-in.oparg - 1];
  bool constructs = false;
  if (!Py_IS_TYPE(function, &PyFunction_Type)) {
    if (calls_c_quietly(sp[-in.oparg - 2], sp[-in.oparg - 1], sp - in.oparg, in.oparg)) {
      const int depth = static_cast<int>(sp - f->localsplus);
      ShadowFrame* sf = quick_event(ts, f, depth);
      if (sf == nullptr) return nullptr;
      PyObject* self = sp[-in.oparg - 1];
      if (function == list_append_ && trackable(self)) {  // model_list_method's append
        set_slot(addr(self), index_key(PyList_GET_SIZE(self)), sf->slots[depth - 1], addr(sp[-1]),
                 counter_.value());
      }
      note_call(*sf, QuickCall::kCCode, nullptr, index, depth);
      return sf;
    }
    constructs = !is_meth && constructs_quietly(function, in.oparg);
    if (!constructs) return nullptr;
    function = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(function), init_name());
    if (function == nullptr || !Py_IS_TYPE(function, &PyFunction_Type)) return nullptr;
  }
  auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(function));
  const CodeInfo* callee = known_code_info(code);
  if (callee == nullptr || callee->own || callee->loop != 1 || !callee->positional_only_args ||
      code->co_argcount != in.oparg + (is_meth || constructs ? 1 : 0)) {
    return nullptr;
  }
  const int depth = static_cast<int>(sp - f->localsplus);
  ShadowFrame* sf = quick_event(ts, f, depth);
  if (sf == nullptr) return nullptr;
  note_call(*sf, constructs ? QuickCall::kConstructs : QuickCall::kFunction, function, index,
            depth);
  return sf;
}

// The CALL just counted, noted in its frame's shadow instead of a pending half.
void Tracer::note_call(ShadowFrame& sf, QuickCall::Kind kind, PyObject* function, int index,
                       int depth) {
  ++stats_.loop_calls;
  sf.call = QuickCall{true,     false,   kind, counter_.value(), return_seq_, index, depth,
                      function, nullptr, 0,    nullptr};
}

// A call of C code the two halves model by its result alone, with nothing read or filled
// before it (model_call, read_fills: no list, dict, set, deque or bytearray method but
// list.append, whose one slot step_calling sets as begin sets it; no file, no fill): a str
// method of a str with plain arguments; str, int, float or bool of one value; len, isinstance
// and a few builtins like them (not next, min, max, getattr and the like). Python code it runs
// (a __str__, a __len__, an __instancecheck__) makes the pending half at its call event.
bool Tracer::calls_c_quietly(PyObject* head, PyObject* callable, PyObject** args, int argc) const {
  if (head != nullptr) {  // [method descriptor, self, arguments]
    if (Py_TYPE(head) != &PyMethodDescr_Type) return false;
    if (head == list_append_) return argc == 1 && PyList_CheckExact(callable);
    if (reinterpret_cast<PyMethodDescrObject*>(head)->d_common.d_type != &PyUnicode_Type ||
        !PyUnicode_CheckExact(callable)) {
      return false;
    }
    for (int k = 0; k < argc; ++k) {
      if (!plain_value(args[k])) return false;
    }
    return true;
  }
  if (argc < 1) return false;  // `Cls()`: read_fills notes an empty instance of a C type
  if (callable == reinterpret_cast<PyObject*>(&PyUnicode_Type) ||
      callable == reinterpret_cast<PyObject*>(&PyLong_Type) ||
      callable == reinterpret_cast<PyObject*>(&PyFloat_Type) ||
      callable == reinterpret_cast<PyObject*>(&PyBool_Type)) {
    return argc == 1;
  }
  if (!PyCFunction_Check(callable) || PyCFunction_GET_SELF(callable) != builtins_) return false;
  if (argc >= 2 && PyUnicode_Check(args[1])) return false;  // model_builtin_attr's
  return std::find(quiet_builtins_.begin(), quiet_builtins_.end(), callable) !=
         quiet_builtins_.end();
}

Tag Tracer::c_result(ShadowFrame& sf, PyObject* result, int first, int end, Tag counter) {
  if (!shared(result)) {
    PyObject** lp = sf.iframe->localsplus;
    for (int j = first; j < end; ++j) {
      if (lp[j] == result) return sf.slots[static_cast<std::size_t>(j)];
    }
    const Tag held = held_tag(result);
    if (held != 0) return held;
  }
  if (trackable(result) && Py_REFCNT(result) == 1) {
    slots_.mark_created(addr(result), counter, container_size(result, deque_type_) == 0);
  }
  return counter;
}

// A class whose call runs no Python code but its __init__ (a function, found by step_calling):
// a class statement's own class, of the plain metaclass, object's __new__, called with at least
// one argument (`Cls()` may be a C type's empty instance, which read_fills notes).
bool Tracer::constructs_quietly(PyObject* callable, int argc) noexcept {
  if (argc < 1 || !Py_IS_TYPE(callable, &PyType_Type)) return false;
  auto* type = reinterpret_cast<PyTypeObject*>(callable);
  return PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE) &&
         !PyType_HasFeature(type, Py_TPFLAGS_IS_ABSTRACT) &&
         type->tp_new == PyBaseObject_Type.tp_new;
}

PyObject* Tracer::init_name() noexcept {
  static PyObject* name = PyUnicode_InternFromString("__init__");
  return name;
}

// After a quick CALL, before its stack is dropped: the result keeps the tag its callee returned.
void Tracer::called(PyThreadState* ts, ShadowFrame& sf, PyObject* result, PyObject** sp) {
  QuickCall& call = sf.call;
  const int base = call.before - sf.code->instrs[static_cast<std::size_t>(call.index)].oparg - 2;
  // C code has no callee to return; a Python callee that did not return raised.
  bool quiet = result != nullptr && (call.has_return || call.kind == QuickCall::kCCode) &&
               sealtrace_breaker_set(ts) == 0;
  for (PyObject** v = sf.iframe->localsplus + base; quiet && v < sp; ++v) {
    quiet = *v == nullptr || Py_REFCNT(*v) > 1 || drops_quietly(*v);
  }
  if (quiet) {
    call.active = false;
    Tag tag = call.return_tag;
    if (call.kind == QuickCall::kCCode) {
      // call_result's inputs: the method's self and its arguments, or the arguments.
      const bool method = sf.iframe->localsplus[base] != nullptr;
      tag = c_result(sf, result, base + (method ? 1 : 2), call.before, call.counter);
    } else if (call.kind == QuickCall::kConstructs) {
      tag = c_result(sf, result, call.before, call.before, call.counter);  // new: no input
    }
    sf.slots[static_cast<std::size_t>(base)] = tag;
    return;
  }
  const TracingOff off(ts);
  ensure_thread();
  make_call_pending(sf);
}

// The pending half a quick CALL skipped, as begin would have left it before the call (its
// counter, its inputs, the returns seen since), with what its callee handed back.
void Tracer::make_call_pending(ShadowFrame& sf) {
  QuickCall& call = sf.call;
  call.active = false;
  run_.frame = nullptr;  // a pending half now: the next instruction completes it first
  begin_pending(sf, sf.code->instrs[static_cast<std::size_t>(call.index)], call.index, call.before);
  Pending& p = sf.p;
  p.counter = call.counter;
  p.return_seq = call.return_seq;
  if (call.kind == QuickCall::kConstructs) {
    // __init__'s return is a value C code's callee returned, as on_return keeps one.
    if (call.has_return) {
      if (call.return_tag != 0) {
        p.callbacks.push_back(call.return_tag);
        p.callback_values.push_back(call.returned_value);
      }
      last_return_.value = call.returned_value;
      last_return_.tag = call.return_tag;
      last_return_.seq = ++return_seq_;
    }
  } else {
    p.has_return = call.has_return;
    p.return_tag = call.return_tag;
  }
  if (call.kind == QuickCall::kCCode) {
    sf.kw_pending = false;  // its model, list.append's slot, was applied before the call
  } else {
    begin_call(sf);
  }
}

// RETURN_VALUE of a frame a quick CALL called, whose caller still waits there (a function's
// frame: no class body's namespace to keep).
bool Tracer::returns_quickly(const ShadowFrame& sf) const noexcept {
  if (stack_.size() < 2 || stack_.back() != &sf) return false;
  return stack_[stack_.size() - 2]->awaits(sf.iframe) &&
         (sf.iframe->f_code->co_flags & CO_OPTIMIZED) != 0;
}

}  // namespace sealtrace
