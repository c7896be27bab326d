// The trace callback's events: a call, an instruction (the previous one completes, the next
// begins, stops and captures fire), a return or yield, an exception.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>

#include "hooks.hpp"
#include "py_values.hpp"
#include "quiet.h"
#include "tracer.hpp"

namespace sealtrace {

namespace {

// A Python function that a CALL instruction calls runs in its caller's interpreter loop (its
// frame is no entry frame) and returns straight to that CALL; one that C code calls returns to
// the C code. Told from the CALL's inputs, not from f->is_entry, which is true for every frame
// once an evaluation function is installed (eval_loop.cpp).
bool returns_to_call(const Pending& p, const _PyInterpreterFrame* f) {
  if (p.op != kCallOp || p.in_objs.size() < 2) return false;
  PyObject* function = p.in_objs[0] != nullptr ? p.in_objs[0] : p.in_objs[1];
  return function == reinterpret_cast<PyObject*>(f->f_func) &&
         Py_IS_TYPE(function, &PyFunction_Type);
}

}  // namespace

// -- events ---------------------------------------------------------------------------------

int Tracer::on_event(PyFrameObject* frame, int what, PyObject* arg) {
  ensure_thread();
  switch (what) {
    case PyTrace_OPCODE:
      return on_opcode(frame->f_frame);
    case PyTrace_CALL: {
      CodeInfo* info = code_info(frame->f_frame->f_code);
      const bool traced = info != nullptr && !info->own;
      frame->f_trace_lines = 0;
      frame->f_trace_opcodes = traced ? 1 : 0;
      if (traced) on_call(frame->f_frame, info);
      return 0;
    }
    case PyTrace_RETURN:
      return on_return(frame->f_frame, arg);
    case PyTrace_EXCEPTION:
      return on_exception(frame->f_frame, arg);
    default:
      return 0;
  }
}

void Tracer::on_call(_PyInterpreterFrame* f, CodeInfo* info) {
  ++stats_.frames;
  auto parked = suspended_.empty() ? suspended_.end() : suspended_.find(f);
  if (parked != suspended_.end()) {
    ShadowFrame* sf = parked->second;
    suspended_.erase(parked);
    if (sf->code == info) {
      stack_.push_back(sf);
      stats_.max_shadow_depth = std::max(stats_.max_shadow_depth, stack_.size());
      return;
    }
    release(sf);
  }
  ShadowFrame* caller = stack_.empty() ? nullptr : stack_.back();
  ShadowFrame* sf = acquire(f, info);
  stack_.push_back(sf);
  stats_.max_shadow_depth = std::max(stats_.max_shadow_depth, stack_.size());
  const auto index = static_cast<std::size_t>(f->prev_instr - _PyCode_CODE(f->f_code));
  const bool fresh = index < info->instrs.size() && info->instrs[index].op == kResume &&
                     info->instrs[index].oparg == 0;
  if (caller != nullptr && caller->call.active && caller->iframe == f->previous) {
    QuickCall& call = caller->call;
    if (fresh && call.callee == nullptr &&
        reinterpret_cast<PyObject*>(f->f_func) == call.function) {
      // The callee of a CALL the loop counted: its arguments are the caller's stack items
      // after the function, each bound to its position (step_calling checked they are). A
      // class's __init__ is handed the new instance first, which the call made.
      call.callee = f;
      const int self = call.kind == QuickCall::kConstructs ? 1 : 0;
      const Tag* args = caller->slots.data() + call.before - (info->argslots - self);
      if (self != 0) sf->slots[0] = call.counter;
      std::copy(args, args + (info->argslots - self), sf->slots.begin() + self);
      return;
    }
    make_call_pending(*caller);  // any other frame: bound as to any call's pending half
  }
  if (fresh && caller != nullptr && caller->p.active) {
    if (caller->iframe == f->previous) {
      bind_arguments(caller->p, *sf);
    } else if (caller->p.input_served) {
      fill_arguments(caller->p, *sf);  // called by untraced code with what a read brought
    }
  }
}

int Tracer::on_opcode(_PyInterpreterFrame* f) {
  ShadowFrame* sf = stack_.empty() ? nullptr : stack_.back();
  if (sf == nullptr || sf->iframe != f) {
    sf = resync(f);
    if (sf == nullptr) return 0;
  }
  const int depth = f->stacktop;
  if (depth < sf->code->nlocalsplus || depth > sf->code->nlocalsplus + sf->code->stacksize) {
    return 0;  // not a state the interpreter traces; never guess
  }
  if (sf->p.active) complete(*sf, depth);
  const auto index = static_cast<int>(f->prev_instr - _PyCode_CODE(f->f_code));
  CodeInfo* info = sf->code;
  if (index < 0 || index >= static_cast<int>(info->instrs.size())) return 0;
  const std::uint64_t now = counter_.tick();
  ++stats_.instructions;
  begin(*sf, index, depth);
  if (info->watch_end) end_counter_ = now;
  if (every_interval_ != 0 && now % every_interval_ == 0 && every_cb_ != nullptr) {
    PyObject* cb = every_cb_;
    Py_INCREF(cb);
    call_stop(cb, f);
  }
  if (stop_line_cb_ != nullptr && info->breakpoint_generation != breakpoint_generation_) {
    refresh_breakpoints(*info);
  }
  if (!info->breakpoint.empty()) {
    const int line = info->instrs[static_cast<std::size_t>(index)].line;
    const std::uint8_t mark = info->breakpoint[static_cast<std::size_t>(index)];
    if (mark != 0) {
      // A line is hit when entered; a return stop's mark (2) on every execution.
      const bool entered = mark == 2 || sf->last_line != line || index <= sf->last_index;
      if (entered && stop_line_cb_ != nullptr && ++hits_ == stop_hit_) {
        PyObject* cb = stop_line_cb_;
        stop_line_cb_ = nullptr;
        call_stop(cb, f);
      }
    }
    sf->last_line = line;
    sf->last_index = index;
  }
  // A stop armed at this very instant by the stop's own callback comes too: a question's
  // worker forked from a checkpoint kept inside a counter stop here (Checkpoints.keep) returns
  // into that callback, configured with its own stop, which may be this counter. (A few
  // rounds at most: a callback that re-arms the instant forever is not followed.)
  for (int round = 0; round < 4 && now == stop_counter_ && stop_counter_cb_ != nullptr; ++round) {
    PyObject* cb = stop_counter_cb_;
    stop_counter_cb_ = nullptr;
    call_stop(cb, f);
  }
  if (now >= capture_min_ && now <= capture_max_ && capture_.count(now) != 0) {
    capture_pre(f, sf->p);
  }
  return 0;
}

int Tracer::on_return(_PyInterpreterFrame* f, PyObject* value) {
  if (stack_.empty() || stack_.back()->iframe != f) return 0;
  ShadowFrame* sf = stack_.back();
  stack_.pop_back();
  Pending& p = sf->p;
  Tag ret = 0;
  bool yielding = false;
  if (p.active) {
    if ((p.rule == Rule::kReturn || p.rule == Rule::kYield) && !p.in_tags.empty()) {
      ret = p.in_tags.back();
    }
    yielding = p.rule == Rule::kYield && value != nullptr;
    if (yielding) value = unwrap_async_gen_value(value);
    if (value != nullptr && p.counter >= capture_min_ && p.counter <= capture_max_ &&
        capture_.count(p.counter) != 0 && capture_post_ != nullptr) {
      QuietScope quiet;
      PyObject* outputs = Py_BuildValue("[(OK)]", value, static_cast<unsigned long long>(ret));
      if (outputs != nullptr) {
        PyObject* r = PyObject_CallFunction(capture_post_, "KOOOO",
                                            static_cast<unsigned long long>(p.counter), outputs,
                                            Py_False, Py_None, Py_True);
        Py_XDECREF(r);
        Py_DECREF(outputs);
      }
      if (PyErr_Occurred()) {
        PyErr_Clear();
        ++stats_.callback_errors;
      }
    }
    if (!yielding) p.active = false;
  }
  if (value != nullptr && (f->f_code->co_flags & CO_OPTIMIZED) == 0 && f->f_locals != nullptr &&
      f->f_locals != f->f_globals && PyDict_Check(f->f_locals)) {
    // A class body: remember its namespace's tags for the class __build_class__ makes.
    class_slots_.clear();
    Py_ssize_t pos = 0;
    PyObject* k = nullptr;
    PyObject* v = nullptr;
    while (PyDict_Next(f->f_locals, &pos, &k, &v)) {
      if (!PyUnicode_Check(k)) continue;
      const Tag t = slots_.get(addr(f->f_locals), name_key(k), addr(v));
      if (t != 0) class_slots_.push_back(ClassSlot{attr_key(k), t, addr(v)});
    }
    class_slots_seq_ = return_seq_ + 1;  // the return recorded just below
  }
  if (value != nullptr) {
    ShadowFrame* caller = stack_.empty() ? nullptr : stack_.back();
    if (caller != nullptr && caller->awaits(f)) {
      caller->returned(ret, value);
    } else if (caller != nullptr && caller->iframe == f->previous && caller->p.active &&
               returns_to_call(caller->p, f)) {
      caller->p.has_return = true;
      caller->p.return_tag = ret;
    } else {
      last_return_.value = value;
      last_return_.tag = ret;
      last_return_.seq = ++return_seq_;
      // A generator's final return only ends the iteration; its yields are the values.
      const bool final_return =
          !yielding &&
          (f->f_code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) != 0;
      if (!final_return && caller != nullptr && caller->iframe == f->previous && caller->p.active) {
        Pending& cp = caller->p;
        if (ret != 0 && cp.callbacks.size() < kMaxCallbacks &&
            (cp.callbacks.empty() || cp.callbacks.back() != ret)) {
          cp.callbacks.push_back(ret);
          cp.callback_values.push_back(value);
        }
        if (cp.pairs_yielded && value != nullptr) take_yielded_pair(cp, value, ret);
        if (tainting_ && ret != 0 && tainted_.count(ret) != 0) cp.tainted_inputs = true;
      }
    }
  } else if (stack_.empty() && exc_origin_ != 0 && exc_value_ != nullptr) {
    // The program ended by an uncaught exception; sys.exit() with success is not a crash.
    bool clean_exit = false;
    if (PyObject_TypeCheck(exc_value_, reinterpret_cast<PyTypeObject*>(PyExc_SystemExit))) {
      PyObject* code = reinterpret_cast<PySystemExitObject*>(exc_value_)->code;
      clean_exit = code == nullptr || code == Py_None ||
                   (PyLong_CheckExact(code) && PyLong_AsLong(code) == 0);
      if (PyErr_Occurred()) PyErr_Clear();
    }
    if (!clean_exit) crash_counter_ = exc_origin_;
  }
  if (yielding) {
    suspended_[f] = sf;
  } else {
    release(sf);
  }
  return 0;
}

int Tracer::on_exception(_PyInterpreterFrame* f, PyObject* arg) {
  ++stats_.exceptions;
  if (stack_.empty() || stack_.back()->iframe != f) return 0;
  if (arg == nullptr || !PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) < 2) return 0;
  PyObject* value = PyTuple_GET_ITEM(arg, 1);
  ShadowFrame* sf = stack_.back();
  Pending& p = sf->p;
  if (!p.active) return 0;
  // FOR_ITER and SEND end an iteration on StopIteration themselves: nothing unwinds.
  if ((p.op == kForIterOp || p.op == kSendOp) &&
      PyErr_GivenExceptionMatches(value, PyExc_StopIteration)) {
    return 0;
  }
  if (value != exc_value_) {
    exc_origin_ = p.counter;
    exc_tag_ = (p.rule == Rule::kRaise && !p.in_tags.empty()) ? p.in_tags.front() : p.counter;
    exc_value_ = value;
    // generator.throw(exc): the exception arrives at the yield, handed in by the caller.
    const Pending* cp = stack_.size() >= 2 ? &stack_[stack_.size() - 2]->p : nullptr;
    if (p.rule == Rule::kYield && cp != nullptr && cp->active) {
      for (std::size_t j = 0; j < cp->in_objs.size(); ++j) {
        if (cp->in_objs[j] == value && cp->in_tags[j] != 0) exc_tag_ = cp->in_tags[j];
      }
    }
  }
  p.raised = true;
  return 0;
}

}  // namespace sealtrace
