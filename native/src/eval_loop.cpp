// The engine's own evaluation loop (PEP 523; eval_loop.hpp): it runs a traced frame's
// CPython 3.11 bytecode itself and hands the tracer each event directly, where the trace
// callback path pays for a frame object, a line-number lookup and a callback per instruction.
//
// It must give the tracer exactly the events the trace callback gives, in the same order and
// with the frame in the same state (the same instruction, the same value stack): a call at
// RESUME, an instruction before each instruction (none for RESUME, none for the instruction
// after an EXTENDED_ARG), an exception where one is raised, a return (with NULL when the frame
// unwinds). A generator's or coroutine's frame goes to CPython's own loop under the trace
// callback from its start, and any other frame from an opcode the loop does not implement
// (resumed there as a generator's frame is); so does every frame while its thread is not
// traced or the tracer is inside a callback of its own.
//
// The instruction bodies follow CPython 3.11's de-specialised instructions (what the
// interpreter runs while tracing), with the same errors and messages (their helpers shared with
// ceval.c: instruction_bodies.hpp). The instructions the loop tags itself, without the tracer's
// event, are quick_steps.cpp's and quick_calls.cpp's; this file asks them (quick_ready) and
// counts the commonest inline.
#define Py_BUILD_CORE 1
#include "eval_loop.hpp"

#include <Python.h>
#include <frameobject.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#include <opcode.h>
#include <pthread.h>

#include <algorithm>
#include <cstdint>

#include "eval_pending.h"
#include "hooks.hpp"
#include "instruction_bodies.hpp"
#include "ops.hpp"
#include "py_values.hpp"
#include "quiet_values.hpp"
#include "tracer.hpp"
#include "tracing_off.hpp"

// Exported by CPython 3.11 but declared only in its internal headers, which need C11 atomics.
extern "C" {
PyAPI_FUNC(int) _Py_CheckRecursiveCall(PyThreadState* tstate, const char* where);
PyAPI_FUNC(PyObject*) _PyObject_LookupSpecial(PyObject* self, PyObject* attr);
}

namespace sealtrace {

namespace {

_PyFrameEvalFunction g_previous_eval = nullptr;

}  // namespace

// The opcodes this loop implements; a code object with any other runs in CPython's loop.
bool loop_implements(int op) {
  switch (op) {
    case POP_TOP:
    case PUSH_NULL:
    case NOP:
    case UNARY_POSITIVE:
    case UNARY_NEGATIVE:
    case UNARY_NOT:
    case UNARY_INVERT:
    case BINARY_SUBSCR:
    case PUSH_EXC_INFO:
    case CHECK_EXC_MATCH:
    case WITH_EXCEPT_START:
    case BEFORE_WITH:
    case STORE_SUBSCR:
    case DELETE_SUBSCR:
    case GET_ITER:
    case LOAD_BUILD_CLASS:
    case LOAD_ASSERTION_ERROR:
    case LIST_TO_TUPLE:
    case RETURN_VALUE:
    case POP_EXCEPT:
    case STORE_NAME:
    case UNPACK_SEQUENCE:
    case FOR_ITER:
    case STORE_ATTR:
    case STORE_GLOBAL:
    case SWAP:
    case LOAD_CONST:
    case LOAD_NAME:
    case BUILD_TUPLE:
    case BUILD_LIST:
    case BUILD_SET:
    case BUILD_MAP:
    case LOAD_ATTR:
    case COMPARE_OP:
    case IMPORT_NAME:
    case JUMP_FORWARD:
    case JUMP_IF_FALSE_OR_POP:
    case JUMP_IF_TRUE_OR_POP:
    case POP_JUMP_FORWARD_IF_FALSE:
    case POP_JUMP_FORWARD_IF_TRUE:
    case LOAD_GLOBAL:
    case IS_OP:
    case CONTAINS_OP:
    case RERAISE:
    case COPY:
    case BINARY_OP:
    case LOAD_FAST:
    case STORE_FAST:
    case DELETE_FAST:
    case POP_JUMP_FORWARD_IF_NOT_NONE:
    case POP_JUMP_FORWARD_IF_NONE:
    case RAISE_VARARGS:
    case MAKE_FUNCTION:
    case BUILD_SLICE:
    case JUMP_BACKWARD_NO_INTERRUPT:
    case MAKE_CELL:
    case LOAD_CLOSURE:
    case LOAD_DEREF:
    case STORE_DEREF:
    case JUMP_BACKWARD:
    case EXTENDED_ARG:
    case LIST_APPEND:
    case SET_ADD:
    case MAP_ADD:
    case COPY_FREE_VARS:
    case RESUME:
    case FORMAT_VALUE:
    case BUILD_CONST_KEY_MAP:
    case BUILD_STRING:
    case LOAD_METHOD:
    case LIST_EXTEND:
    case SET_UPDATE:
    case DICT_UPDATE:
    case PRECALL:
    case CALL:
    case KW_NAMES:
    case POP_JUMP_BACKWARD_IF_NOT_NONE:
    case POP_JUMP_BACKWARD_IF_NONE:
    case POP_JUMP_BACKWARD_IF_FALSE:
    case POP_JUMP_BACKWARD_IF_TRUE:
    case SETUP_ANNOTATIONS:
    case UNPACK_EX:
    case DELETE_NAME:
    case DELETE_ATTR:
    case DELETE_GLOBAL:
    case DELETE_DEREF:
    case LOAD_CLASSDEREF:
    case GET_LEN:
    case IMPORT_FROM:
    case DICT_MERGE:
    case CALL_FUNCTION_EX:
      return true;
    default:
      return false;
  }
}

// The opcodes the loop runs only in their common case (loop_runs): the rest of the frame goes
// to CPython's loop from an instruction whose case is rarer (an error with ceval.c's own
// message, a module's __getattr__, a mapping or an iterable that is not a dict or a sequence).
bool loop_guards(int op) { return op == IMPORT_FROM || op == DICT_MERGE || op == CALL_FUNCTION_EX; }

namespace {

// Whether the loop runs this guarded instruction (loop_guards) with this stack: only where its
// body cannot take a path whose result or error is ceval.c's own.
bool loop_runs(const Instr& in, PyObject** sp, PyObject* names) {
  switch (in.op) {
    case IMPORT_FROM: {
      // `from module import name` of a plain module holding it: the attribute lookup is the
      // module dict's item, nothing runs (no __getattr__, no descriptor of the module type).
      PyObject* from = sp[-1];
      PyObject* name = PyTuple_GET_ITEM(names, in.oparg);
      if (!PyModule_CheckExact(from) || _PyType_Lookup(Py_TYPE(from), name) != nullptr) {
        return false;
      }
      PyObject* found = PyDict_GetItemWithError(PyModule_GetDict(from), name);
      if (found == nullptr) PyErr_Clear();
      return found != nullptr;
    }
    case DICT_MERGE: {
      // `f(**mapping)`: a dict of str keys none of which the call's dict holds already.
      PyObject* update = sp[-1];
      PyObject* into = sp[-1 - in.oparg];
      if (!PyDict_CheckExact(update) || !PyDict_CheckExact(into)) return false;
      Py_ssize_t pos = 0;
      PyObject* key = nullptr;
      PyObject* value = nullptr;
      while (PyDict_Next(update, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) return false;
        const int there = PyDict_Contains(into, key);
        if (there != 0) {
          if (there < 0) PyErr_Clear();
          return false;
        }
      }
      return true;
    }
    case CALL_FUNCTION_EX: {
      // `f(*args, **kwargs)`: a tuple or a list of arguments and a dict of keywords.
      PyObject* kwargs = (in.oparg & 1) != 0 ? sp[-1] : nullptr;
      PyObject* callargs = (in.oparg & 1) != 0 ? sp[-2] : sp[-1];
      if (kwargs != nullptr && !PyDict_CheckExact(kwargs)) return false;
      return PyTuple_CheckExact(callargs) || PyList_CheckExact(callargs);
    }
    default:
      return false;
  }
}

// A frame with no frame object has its opcode events; one with a frame object has them as the
// object says (made here by the program, a traceback or a stop, it is set at its next
// instruction as a call event sets it: opcode_events_on, hooks.hpp).
bool opcode_events(_PyInterpreterFrame* f) {
  return f->frame_obj == nullptr || opcode_events_on(f->frame_obj);
}

// Once an evaluation function is installed every Python call is a C call, where CPython 3.11
// runs Python-to-Python calls without one: a program that raised its recursion limit far
// could run this thread's C stack out. Below a margin (an eighth of the stack, at most
// 256 KiB) a call raises RecursionError instead, which replay reports as a divergence.
bool c_stack_low() {
  // Initial-exec: read at every call, where a dlopen()ed library's default TLS model costs a
  // __tls_get_addr call (16 bytes of the static TLS surplus glibc keeps for such libraries).
  [[gnu::tls_model("initial-exec")]] static thread_local std::uintptr_t floor = 0;
  [[gnu::tls_model("initial-exec")]] static thread_local bool known = false;
  if (!known) {
    known = true;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* low = nullptr;
      std::size_t size = 0;
      if (pthread_attr_getstack(&attr, &low, &size) == 0) {
        floor = reinterpret_cast<std::uintptr_t>(low) + std::min<std::size_t>(size / 8, 256 << 10);
      }
      pthread_attr_destroy(&attr);
    }
  }
  char here = 0;
  return floor != 0 && reinterpret_cast<std::uintptr_t>(&here) < floor;
}
}  // namespace

// A generator's or coroutine's frame is CPython's from its start; any other starts here and
// runs here up to its first instruction the loop does not implement.
bool Tracer::loopable(CodeInfo& info, PyCodeObject* code) {
  if (info.loop < 0) {
    info.loop = (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) == 0;
    for (Instr& in : info.instrs) {
      in.guarded = loop_guards(in.op) && loop_implements(in.op);
      in.looped = loop_implements(in.op) && !in.guarded;
      in.quick = in.looped ? quick_kind(in.op) : std::uint8_t{kQuickNo};
    }
    if (info.loop == 1 && std::any_of(info.instrs.begin(), info.instrs.end(),
                                      [](const Instr& in) { return in.op == LOAD_GLOBAL; })) {
      info.global_hits.resize(info.instrs.size());
    }
  }
  return info.loop == 1;
}

// The tracer's event for an instruction the loop tags itself, while no question watches this
// instant: no stop, capture, checkpoint, taint or slice root here, no breakpoint in the code.
// The pending instruction before it completes as at any event; the frame's shadow is
// returned, or nullptr where on_opcode must run as usual. quick_tick then counts the
// instruction, or on_opcode runs after all (the instruction turned out not to be quick).
inline ShadowFrame* Tracer::quick_ready(PyThreadState* ts, _PyInterpreterFrame* f, int depth) {
  if (run_live_ && run_unwatched()) {
    run_.frame = f;
    return run_.shadow;
  }
  if (ts != thread_ || stack_.empty() || stack_.back()->iframe != f) return nullptr;
  ShadowFrame* sf = stack_.back();
  if (sf->p.active) {
    f->stacktop = depth;
    {
      const TracingOff off(ts);
      complete(*sf, depth);  // may call back sealtrace's own code (a slice's root completing)
    }
    f->stacktop = -1;
    if (ts != thread_ || stack_.empty() || stack_.back() != sf) return nullptr;
  }
  const CodeInfo& info = *sf->code;
  const Tag now = counter_.value() + 1;
  if (tainting_ || !info.breakpoint.empty() ||
      (stop_line_cb_ != nullptr && info.breakpoint_generation != breakpoint_generation_) ||
      now == stop_counter_ || now == edges_upto_ ||
      ((now >= capture_next_ || (every_interval_ != 0 && now >= every_next_)) && watched_at(now))) {
    return nullptr;
  }
  // Until the next instant a stop, a slice root, a capture or a checkpoint is at, a quick
  // instruction right after this one is let through on its counter alone.
  Tag until = capture_next_;
  if (every_interval_ != 0) until = std::min(until, every_next_);
  if (stop_counter_ > now) until = std::min(until, stop_counter_);
  if (edges_upto_ > now) until = std::min(until, edges_upto_);
  run_ = QuickRun{f, sf, until};
  return sf;
}

ShadowFrame* Tracer::quick_event_anew(PyThreadState* ts, _PyInterpreterFrame* f, int depth) {
  ShadowFrame* sf = quick_ready(ts, f, depth);
  if (sf != nullptr) quick_tick(*sf);
  return sf;
}

// Whether a capture or a checkpoint (every) is due at `now`; moves on the next ones after it
// (the counter only grows within a pass, and capture and every start them afresh).
bool Tracer::watched_at(std::uint64_t now) {
  while (capture_at_ < capture_order_.size() && capture_order_[capture_at_] < now) ++capture_at_;
  capture_next_ = capture_at_ < capture_order_.size() ? capture_order_[capture_at_] : UINT64_MAX;
  if (every_interval_ != 0 && now >= every_next_) {
    every_next_ = (now / every_interval_ + (now % every_interval_ != 0 ? 1 : 0)) * every_interval_;
  }
  return capture_next_ == now || (every_interval_ != 0 && every_next_ == now);
}

PyObject* Tracer::evaluate(PyThreadState* ts, _PyInterpreterFrame* f, int throwflag) {
  if (c_stack_low()) {
    PyErr_SetString(PyExc_RecursionError,
                    "maximum recursion depth exceeded: the C stack is nearly used up (under the "
                    "provenance engine every Python call is a C call)");
    return nullptr;
  }
  // Only a fresh frame of a traced thread, outside the tracer's own callbacks.
  if (throwflag != 0 || ts->tracing != 0 || ts->c_tracefunc != trampoline ||
      _PyInterpreterFrame_LASTI(f) >= 0) {
    return _PyEval_EvalFrameDefault(ts, f, throwflag);
  }
  PyCodeObject* co = f->f_code;
  CodeInfo* info = nullptr;
  {
    const TracingOff off(ts);
    ensure_thread();
    info = code_info(co);
  }
  if (info == nullptr || info->own || !loopable(*info, co)) {
    return _PyEval_EvalFrameDefault(ts, f, throwflag);
  }
  ++stats_.loop_frames;

  const std::uint64_t generation = g_generation;  // this engine's; a new one moves it
  _PyCFrame cframe;
  _PyCFrame* prev_cframe = ts->cframe;
  cframe.use_tracing = prev_cframe->use_tracing;
  cframe.previous = prev_cframe;
  ts->cframe = &cframe;
  f->is_entry = true;
  f->previous = prev_cframe->current_frame;
  cframe.current_frame = f;

  _Py_CODEUNIT* const first = _PyCode_CODE(co);
  PyObject** const locals = f->localsplus;
  PyObject** sp = locals + f->stacktop;
  PyObject* const names = co->co_names;
  PyObject* const consts = co->co_consts;
  const Instr* const program = info->instrs.data();
  PyObject* kwnames = nullptr;     // KW_NAMES, for the CALL after it (borrowed from co_consts)
  ShadowFrame* ready = nullptr;    // quick_ready: the instruction's case tags it (kQuickInline)
  ShadowFrame* quick = nullptr;    // the shadow of an instruction a step_* counted, while it runs
  ShadowFrame* calling = nullptr;  // this frame's shadow while a CALL step_calling counted runs
  int quick_depth = 0;
  int quick_index = 0;
  Tag quick_tag = 0;  // step_loading, step_subscripting, step_attribute: the slot read
  std::uintptr_t quick_value = 0;
  AttrFound quick_found;  // step_attribute: what the load finds
  PyObject* retval = nullptr;
  int i = 0;  // the next instruction's code unit

#define TOP() (sp[-1])
#define SECOND() (sp[-2])
#define THIRD() (sp[-3])
#define PEEK(n) (sp[-(n)])
#define PUSH(v) (*sp++ = (v))
#define POP() (*--sp)
#define STACK_SHRINK(n) (sp -= (n))
#define STACK_GROW(n) (sp += (n))
#define TRACER_CALL(expr)                        \
  do {                                           \
    f->stacktop = static_cast<int>(sp - locals); \
    {                                            \
      const TracingOff off(ts);                  \
      ensure_thread();                           \
      expr;                                      \
    }                                            \
    f->stacktop = -1;                            \
    run_.frame = nullptr;                        \
  } while (0)
#define TRACED() (ts->c_tracefunc == trampoline && g_generation == generation)
// An instruction quick_ready let through that is not quick after all: the usual event.
#define SLOW_EVENT()                               \
  do {                                             \
    ready = nullptr;                               \
    f->prev_instr = first + i;                     \
    int err_ = 0;                                  \
    TRACER_CALL(err_ = on_opcode(f));              \
    f->prev_instr = first + in.at;                 \
    if (err_ != 0 && PyErr_Occurred()) goto error; \
  } while (0)
#define BREAK_CHECK()                                  \
  do {                                                 \
    if (sealtrace_handle_pending(ts) != 0) goto error; \
  } while (0)

  // Every way out gives back the recursion depth this frame took and the caller's C frame.
  auto leave = [this, ts, &cframe]() {
    run_.frame = nullptr;  // a frame made later at this address starts no run
    ts->recursion_remaining++;
    ts->cframe = cframe.previous;
    ts->cframe->use_tracing = cframe.use_tracing;
  };
  if (ts->recursion_remaining-- <= 0 && _Py_CheckRecursiveCall(ts, "") != 0) {
    leave();
    return nullptr;
  }
  f->stacktop = -1;

  for (;;) {
    // Another engine since this frame began (the records of its code may be new ones), or an
    // instruction the loop does not implement: CPython's loop runs the rest of the frame.
    // (A KW_NAMES is followed by PRECALL and CALL, which the loop implements.)
    if (g_generation != generation) goto handoff;
    const Instr& in = program[i];
    const int oparg = in.oparg;
    int next = in.next;
    // The commonest way on: an instruction its case tags itself, right after a quick one of
    // this frame, with nothing watching before the run's end (what quick_ready checks first).
    if (in.quick == kQuickInline && run_.frame == f && run_unwatched()) {
      ready = run_.shadow;
      run_live_ = true;
      f->prev_instr = first + in.at;
      goto execute;
    }
    if (!in.looped && kwnames == nullptr && !(in.guarded && loop_runs(in, sp, names))) {
      goto handoff;
    }
    // The tracer's event before the instruction: at its first code unit (an EXTENDED_ARG when
    // it has one), with the frame as the instruction finds it.
    f->prev_instr = first + i;
    if (in.op == RESUME) {
      f->prev_instr = first + in.at;
      if (TRACED()) TRACER_CALL(on_call(f, info));
      if (in.oparg < 2) BREAK_CHECK();
      i = in.next;
      continue;
    }
    ready = nullptr;
    // Right after a quick instruction of this frame the thread is still traced, the frame
    // still has its opcode events, and quick_ready needs only the counter (QuickRun).
    run_live_ = run_.frame == f;
    run_.frame = nullptr;
    if (in.op != MAKE_CELL && in.op != COPY_FREE_VARS &&
        (run_live_ || (TRACED() && opcode_events(f)))) {
      // Counted by the loop (ready: tagged in its case below, or on_opcode runs there; quick:
      // a step_* counted it, tagged after it ran; calling: its callee binds its arguments and
      // `called` tags the result), else the usual event.
      bool counted = false;
      switch (in.quick) {
        case kQuickInline:
          counted = (ready = quick_ready(ts, f, static_cast<int>(sp - locals))) != nullptr;
          break;
        case kQuickMove:
          counted = step_quietly(ts, f, in, sp);
          break;
        case kQuickCompute:
          quick = step_computing(ts, f, in, sp);
          break;
        case kQuickLoad:
          quick = step_loading(ts, f, in, sp, quick_tag, quick_value);
          break;
        case kQuickStore:
          quick = step_storing(ts, f, in, sp);
          break;
        case kQuickIter:
          quick = step_iterating(ts, f, sp);
          break;
        case kQuickSubscr:
          quick = step_subscripting(ts, f, sp, quick_tag, quick_value);
          break;
        case kQuickAttr:
          quick = step_attribute(ts, f, in, sp, quick_tag, quick_value, quick_found);
          break;
        case kQuickPut:
          quick = step_putting(ts, f, in, sp);
          break;
        case kQuickBuild:
          quick = step_building(ts, f, in, sp);
          break;
        case kQuickCall:
          counted = kwnames == nullptr && (calling = step_calling(ts, f, in, sp, i)) != nullptr;
          break;
        default:
          break;
      }
      if (quick != nullptr) {
        counted = true;
        quick_depth = static_cast<int>(sp - locals);
        quick_index = i;
      }
      if (!counted) {
        int err = 0;
        TRACER_CALL(err = on_opcode(f));
        if (err != 0 && PyErr_Occurred()) goto error;
      }
    }
    f->prev_instr = first + in.at;
  execute:
    switch (in.op) {
      case NOP:
        break;
      // The loop's own tags for the commonest instructions (quick_ready let them through):
      // the same the two halves give; where one could fail or free a value that is not plain
      // (a __del__ could run), the usual event instead.
      case POP_TOP:
        if (ready != nullptr) {
          if (drops_quietly(TOP())) {
            quick_tick(*ready);
          } else {
            SLOW_EVENT();
          }
        }
        Py_DECREF(POP());
        break;
      case PUSH_NULL:
        PUSH(nullptr);
        break;
      case LOAD_FAST:
      case LOAD_CLOSURE: {
        PyObject* v = locals[oparg];
        if (ready != nullptr) {
          if (v != nullptr) {
            Tag* const s = ready->slots.data();
            const Tag now = quick_tick(*ready);
            s[sp - locals] = in.op == LOAD_FAST ? s[oparg] : now;  // a cell is a value of its own
          } else {
            SLOW_EVENT();
          }
        }
        if (v == nullptr) {
          unbound(co, oparg);
          goto error;
        }
        PUSH(Py_NewRef(v));
        break;
      }
      case LOAD_CONST:
        if (ready != nullptr)
          ready->slots[static_cast<std::size_t>(sp - locals)] = quick_tick(*ready);
        PUSH(Py_NewRef(PyTuple_GET_ITEM(consts, oparg)));
        break;
      case STORE_FAST: {
        PyObject* old = locals[oparg];
        if (ready != nullptr) {
          if (old == nullptr || drops_quietly(old)) {
            quick_tick(*ready);
            Tag* const s = ready->slots.data();
            s[oparg] = s[sp - locals - 1];
          } else {
            SLOW_EVENT();
          }
        }
        locals[oparg] = POP();
        Py_XDECREF(old);
        break;
      }
      case DELETE_FAST: {
        PyObject* v = locals[oparg];
        if (v == nullptr) {
          unbound(co, oparg);
          goto error;
        }
        locals[oparg] = nullptr;
        Py_DECREF(v);
        break;
      }
      case MAKE_CELL: {
        PyObject* cell = PyCell_New(locals[oparg]);
        if (cell == nullptr) goto error;
        Py_XSETREF(locals[oparg], cell);
        break;
      }
      case COPY_FREE_VARS: {
        PyObject* closure = f->f_func->func_closure;
        const int offset = co->co_nlocals + co->co_nplaincellvars;
        for (int k = 0; k < oparg; ++k) {
          locals[offset + k] = Py_NewRef(PyTuple_GET_ITEM(closure, k));
        }
        break;
      }
      case LOAD_DEREF: {
        PyObject* v = PyCell_GET(locals[oparg]);
        if (v == nullptr) {
          unbound(co, oparg);
          goto error;
        }
        PUSH(Py_NewRef(v));
        break;
      }
      case STORE_DEREF: {
        PyObject* cell = locals[oparg];
        PyObject* old = PyCell_GET(cell);
        PyCell_SET(cell, POP());
        Py_XDECREF(old);
        break;
      }
      case LOAD_GLOBAL: {
        PyObject* name = PyTuple_GET_ITEM(names, oparg >> 1);
        PyObject* v = nullptr;
        if (PyDict_CheckExact(f->f_globals) && PyDict_CheckExact(f->f_builtins)) {
          const std::uint64_t globals =
              reinterpret_cast<PyDictObject*>(f->f_globals)->ma_version_tag;
          const std::uint64_t builtins =
              reinterpret_cast<PyDictObject*>(f->f_builtins)->ma_version_tag;
          GlobalHit& hit = info->global_hits[static_cast<std::size_t>(i)];
          if (hit.value != nullptr && hit.globals == globals && hit.builtins == builtins) {
            v = hit.value;
          } else {
            v = PyDict_GetItemWithError(f->f_globals, name);
            if (v == nullptr && !PyErr_Occurred()) v = PyDict_GetItemWithError(f->f_builtins, name);
            if (v == nullptr) {
              if (!PyErr_Occurred()) format_check_arg(PyExc_NameError, kNameError, name);
              goto error;
            }
            // The tags as they are now: a lookup that ran code changing a namespace (a key's
            // __eq__) left a newer one, and the next lookup runs again.
            hit = GlobalHit{globals, builtins, v};
          }
          Py_INCREF(v);
        } else {
          v = PyObject_GetItem(f->f_globals, name);
          if (v == nullptr) {
            if (!PyErr_ExceptionMatches(PyExc_KeyError)) goto error;
            PyErr_Clear();
            v = PyObject_GetItem(f->f_builtins, name);
            if (v == nullptr) {
              if (PyErr_ExceptionMatches(PyExc_KeyError)) {
                format_check_arg(PyExc_NameError, kNameError, name);
              }
              goto error;
            }
          }
        }
        if (oparg & 1) PUSH(nullptr);
        PUSH(v);
        break;
      }
      case STORE_GLOBAL: {
        PyObject* v = POP();
        const int err = PyDict_SetItem(f->f_globals, PyTuple_GET_ITEM(names, oparg), v);
        Py_DECREF(v);
        if (err != 0) goto error;
        break;
      }
      case LOAD_NAME: {
        PyObject* name = PyTuple_GET_ITEM(names, oparg);
        if (f->f_locals == nullptr) {
          PyErr_Format(PyExc_SystemError, "no locals when loading %R", name);
          goto error;
        }
        PyObject* v = lookup(f->f_locals, name);
        if (v == nullptr && PyErr_Occurred()) goto error;
        if (v == nullptr) {
          v = Py_XNewRef(PyDict_GetItemWithError(f->f_globals, name));
          if (v == nullptr && PyErr_Occurred()) goto error;
        }
        if (v == nullptr) {
          v = lookup(f->f_builtins, name);
          if (v == nullptr) {
            if (!PyErr_Occurred()) format_check_arg(PyExc_NameError, kNameError, name);
            goto error;
          }
        }
        PUSH(v);
        break;
      }
      case STORE_NAME: {
        PyObject* name = PyTuple_GET_ITEM(names, oparg);
        PyObject* v = POP();
        if (f->f_locals == nullptr) {
          PyErr_Format(PyExc_SystemError, "no locals found when storing %R", name);
          Py_DECREF(v);
          goto error;
        }
        const int err = PyDict_CheckExact(f->f_locals) ? PyDict_SetItem(f->f_locals, name, v)
                                                       : PyObject_SetItem(f->f_locals, name, v);
        Py_DECREF(v);
        if (err != 0) goto error;
        break;
      }
      case LOAD_BUILD_CLASS: {
        static PyObject* build_class = PyUnicode_InternFromString("__build_class__");
        PyObject* bc = lookup(f->f_builtins, build_class);
        if (bc == nullptr) {
          if (!PyErr_Occurred()) PyErr_SetString(PyExc_NameError, "__build_class__ not found");
          goto error;
        }
        PUSH(bc);
        break;
      }
      case LOAD_ASSERTION_ERROR:
        PUSH(Py_NewRef(PyExc_AssertionError));
        break;
      case IMPORT_NAME: {
        PyObject* fromlist = POP();
        PyObject* level = TOP();
        PyObject* res = import_name(f, PyTuple_GET_ITEM(names, oparg), fromlist, level);
        Py_DECREF(level);
        Py_DECREF(fromlist);
        TOP() = res;
        if (res == nullptr) goto error;
        break;
      }
      case UNARY_POSITIVE:
      case UNARY_NEGATIVE:
      case UNARY_INVERT: {
        PyObject* v = TOP();
        PyObject* res = in.op == UNARY_POSITIVE   ? PyNumber_Positive(v)
                        : in.op == UNARY_NEGATIVE ? PyNumber_Negative(v)
                                                  : PyNumber_Invert(v);
        Py_DECREF(v);
        TOP() = res;
        if (res == nullptr) goto error;
        break;
      }
      case UNARY_NOT: {
        PyObject* v = TOP();
        const int err = PyObject_IsTrue(v);
        Py_DECREF(v);
        if (err < 0) {
          STACK_SHRINK(1);
          goto error;
        }
        TOP() = Py_NewRef(err == 0 ? Py_True : Py_False);
        break;
      }
      case BINARY_OP:
      case COMPARE_OP:
      case BINARY_SUBSCR: {  // container[sub] too: left and right
        PyObject* right = POP();
        PyObject* left = TOP();
        PyObject* res = in.op == BINARY_OP    ? kBinaryOps[oparg](left, right)
                        : in.op == COMPARE_OP ? PyObject_RichCompare(left, right, oparg)
                                              : PyObject_GetItem(left, right);
        Py_DECREF(left);
        Py_DECREF(right);
        TOP() = res;
        if (res == nullptr) goto error;
        break;
      }
      case IS_OP: {
        PyObject* right = POP();
        PyObject* left = TOP();
        const bool res = (left == right) ^ (oparg != 0);
        Py_DECREF(left);
        Py_DECREF(right);
        TOP() = Py_NewRef(res ? Py_True : Py_False);
        break;
      }
      case CONTAINS_OP: {
        PyObject* right = POP();
        PyObject* left = POP();
        const int res = PySequence_Contains(right, left);
        Py_DECREF(left);
        Py_DECREF(right);
        if (res < 0) goto error;
        PUSH(Py_NewRef((res ^ oparg) != 0 ? Py_True : Py_False));
        break;
      }
      case STORE_SUBSCR: {
        PyObject* sub = TOP();
        PyObject* container = SECOND();
        PyObject* v = THIRD();
        STACK_SHRINK(3);
        const int err = PyObject_SetItem(container, sub, v);
        Py_DECREF(v);
        Py_DECREF(container);
        Py_DECREF(sub);
        if (err != 0) goto error;
        break;
      }
      case DELETE_SUBSCR: {
        PyObject* sub = TOP();
        PyObject* container = SECOND();
        STACK_SHRINK(2);
        const int err = PyObject_DelItem(container, sub);
        Py_DECREF(container);
        Py_DECREF(sub);
        if (err != 0) goto error;
        break;
      }
      case LOAD_ATTR: {
        PyObject* owner = TOP();
        // Counted by step_attribute: it found the value (and the owner's pop frees nothing).
        PyObject* res = quick != nullptr ? Py_NewRef(quick_found.value)
                                         : PyObject_GetAttr(owner, PyTuple_GET_ITEM(names, oparg));
        Py_DECREF(owner);
        TOP() = res;
        if (res == nullptr) goto error;
        break;
      }
      case STORE_ATTR: {
        PyObject* owner = TOP();
        PyObject* v = SECOND();
        STACK_SHRINK(2);
        const int err = PyObject_SetAttr(owner, PyTuple_GET_ITEM(names, oparg), v);
        Py_DECREF(v);
        Py_DECREF(owner);
        if (err != 0) goto error;
        break;
      }
      case LOAD_METHOD: {
        PyObject* obj = TOP();
        PyObject* meth = nullptr;
        int found = 0;
        if (quick != nullptr) {  // as step_attribute found it
          meth = Py_NewRef(quick_found.value);
          found = quick_found.method ? 1 : 0;
        } else {
          found = _PyObject_GetMethod(obj, PyTuple_GET_ITEM(names, oparg), &meth);
        }
        if (meth == nullptr) goto error;
        if (found != 0) {
          TOP() = meth;
          PUSH(obj);
        } else {
          TOP() = nullptr;
          Py_DECREF(obj);
          PUSH(meth);
        }
        break;
      }
      case PRECALL: {
        // A bound method called as a function becomes (function, self), as CPython's does.
        const bool is_meth = PEEK(oparg + 2) != nullptr;
        PyObject* function = PEEK(oparg + 1);
        if (!is_meth && Py_TYPE(function) == &PyMethod_Type) {
          PEEK(oparg + 1) = Py_NewRef(PyMethod_GET_SELF(function));
          PEEK(oparg + 2) = Py_NewRef(PyMethod_GET_FUNCTION(function));
          Py_DECREF(function);
        }
        break;
      }
      case KW_NAMES:
        kwnames = PyTuple_GET_ITEM(consts, oparg);
        break;
      case CALL: {
        bool is_meth = PEEK(oparg + 2) != nullptr;
        PyObject* function = PEEK(oparg + 1);
        if (!is_meth && Py_TYPE(function) == &PyMethod_Type) {
          PEEK(oparg + 1) = Py_NewRef(PyMethod_GET_SELF(function));
          PEEK(oparg + 2) = Py_NewRef(PyMethod_GET_FUNCTION(function));
          Py_DECREF(function);
          is_meth = true;
        }
        const int total = oparg + (is_meth ? 1 : 0);
        function = PEEK(total + 1);
        const Py_ssize_t positional = total - (kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames));
        PyObject* res = PyObject_Vectorcall(
            function, sp - total, static_cast<size_t>(positional) | PY_VECTORCALL_ARGUMENTS_OFFSET,
            kwnames);
        kwnames = nullptr;
        if (calling != nullptr) {
          // The same engine's, and still this frame's shadow with the call noted (a shadow is
          // never freed while its engine lives, and acquire clears the note).
          if (g_generation == generation && calling->iframe == f && calling->call.active) {
            called(ts, *calling, res, sp);
          }
          calling = nullptr;
        }
        Py_DECREF(function);
        STACK_SHRINK(total);
        for (int k = 0; k < total; ++k) Py_DECREF(sp[k]);
        STACK_SHRINK(is_meth ? 1 : 2);
        PUSH(res);
        if (res == nullptr) goto error;
        BREAK_CHECK();
        break;
      }
      case RETURN_VALUE:
        if (ready != nullptr) {
          if (returns_quickly(*ready)) {
            // Back to a quick CALL waiting in the caller: the return event's work.
            quick_tick(*ready);
            stack_[stack_.size() - 2]->returned(
                ready->slots[static_cast<std::size_t>(sp - locals) - 1], TOP());
            stack_.pop_back();
            release(ready);
            retval = POP();
            f->stacktop = static_cast<int>(sp - locals);
            goto exit;
          }
          SLOW_EVENT();
        }
        retval = POP();
        f->stacktop = static_cast<int>(sp - locals);
        if (TRACED()) {
          const TracingOff off(ts);
          ensure_thread();
          on_return(f, retval);
        }
        goto exit;
      case BUILD_TUPLE: {
        PyObject* tup = PyTuple_New(oparg);
        if (tup == nullptr) goto error;
        for (int k = oparg; --k >= 0;) PyTuple_SET_ITEM(tup, k, POP());
        PUSH(tup);
        break;
      }
      case BUILD_LIST: {
        PyObject* list = PyList_New(oparg);
        if (list == nullptr) goto error;
        for (int k = oparg; --k >= 0;) PyList_SET_ITEM(list, k, POP());
        PUSH(list);
        break;
      }
      case UNPACK_SEQUENCE: {
        PyObject* seq = POP();
        if (!unpack(seq, oparg, sp + oparg)) {
          Py_DECREF(seq);
          goto error;
        }
        STACK_GROW(oparg);
        Py_DECREF(seq);
        break;
      }
      case UNPACK_EX: {
        const int before = oparg & 0xFF;
        const int after = oparg >> 8;
        PyObject* seq = POP();
        if (!unpack(seq, before, after, sp + before + 1 + after)) {
          Py_DECREF(seq);
          goto error;
        }
        STACK_GROW(before + 1 + after);
        Py_DECREF(seq);
        break;
      }
      case SETUP_ANNOTATIONS: {
        static PyObject* annotations = PyUnicode_InternFromString("__annotations__");
        PyObject* ns = f->f_locals;
        if (ns == nullptr) {
          PyErr_SetString(PyExc_SystemError, "no locals found when setting up annotations");
          goto error;
        }
        PyObject* found = lookup(ns, annotations);
        if (found == nullptr && PyErr_Occurred()) goto error;
        if (found == nullptr) {
          PyObject* made = PyDict_New();
          if (made == nullptr) goto error;
          const int err = PyDict_CheckExact(ns) ? PyDict_SetItem(ns, annotations, made)
                                                : PyObject_SetItem(ns, annotations, made);
          Py_DECREF(made);
          if (err != 0) goto error;
        } else {
          Py_DECREF(found);
        }
        break;
      }
      case DELETE_NAME: {
        PyObject* name = PyTuple_GET_ITEM(names, oparg);
        if (f->f_locals == nullptr) {
          PyErr_Format(PyExc_SystemError, "no locals when deleting %R", name);
          goto error;
        }
        if (PyObject_DelItem(f->f_locals, name) != 0) {
          format_check_arg(PyExc_NameError, kNameError, name);
          goto error;
        }
        break;
      }
      case DELETE_ATTR: {
        PyObject* owner = POP();
        const int err = PyObject_SetAttr(owner, PyTuple_GET_ITEM(names, oparg), nullptr);
        Py_DECREF(owner);
        if (err != 0) goto error;
        break;
      }
      case DELETE_GLOBAL: {
        PyObject* name = PyTuple_GET_ITEM(names, oparg);
        if (PyDict_DelItem(f->f_globals, name) != 0) {
          if (PyErr_ExceptionMatches(PyExc_KeyError)) {
            format_check_arg(PyExc_NameError, kNameError, name);
          }
          goto error;
        }
        break;
      }
      case DELETE_DEREF: {
        PyObject* cell = locals[oparg];
        PyObject* old = PyCell_GET(cell);
        if (old == nullptr) {
          unbound(co, oparg);
          goto error;
        }
        PyCell_SET(cell, nullptr);
        Py_DECREF(old);
        break;
      }
      case LOAD_CLASSDEREF: {
        // A class body's free variable: the class namespace's first, else the cell's.
        PyObject* ns = f->f_locals;
        PyObject* name = PyTuple_GET_ITEM(co->co_localsplusnames, oparg);
        PyObject* v = lookup(ns, name);
        if (v == nullptr && PyErr_Occurred()) goto error;
        if (v == nullptr) {
          v = PyCell_GET(locals[oparg]);
          if (v == nullptr) {
            unbound(co, oparg);
            goto error;
          }
          Py_INCREF(v);
        }
        PUSH(v);
        break;
      }
      case GET_LEN: {
        const Py_ssize_t n = PyObject_Length(TOP());
        if (n < 0) goto error;
        PyObject* len = PyLong_FromSsize_t(n);
        if (len == nullptr) goto error;
        PUSH(len);
        break;
      }
      case IMPORT_FROM: {  // loop_runs: a plain module's own item
        PyObject* name = PyTuple_GET_ITEM(names, oparg);
        PyObject* v = PyObject_GetAttr(TOP(), name);
        if (v == nullptr) goto error;
        PUSH(v);
        break;
      }
      case DICT_MERGE: {  // loop_runs: a dict whose keys the call's dict does not hold
        PyObject* update = POP();
        const int err = PyDict_Update(PEEK(oparg), update);
        Py_DECREF(update);
        if (err != 0) goto error;
        break;
      }
      case CALL_FUNCTION_EX: {  // loop_runs: a tuple or a list, and a dict or no keywords
        PyObject* kwargs = (oparg & 1) != 0 ? POP() : nullptr;
        PyObject* callargs = POP();
        if (!PyTuple_CheckExact(callargs)) {
          PyObject* tuple = PySequence_Tuple(callargs);
          Py_DECREF(callargs);
          if (tuple == nullptr) {
            Py_XDECREF(kwargs);
            goto error;
          }
          callargs = tuple;
        }
        PyObject* function = TOP();
        PyObject* res = PyObject_Call(function, callargs, kwargs);
        Py_DECREF(function);
        Py_DECREF(callargs);
        Py_XDECREF(kwargs);
        STACK_SHRINK(1);  // the NULL under the function (PUSH_NULL) takes the result
        TOP() = res;
        if (res == nullptr) goto error;
        BREAK_CHECK();
        break;
      }
      case LIST_TO_TUPLE: {
        PyObject* list = POP();
        PyObject* tup = PyList_AsTuple(list);
        Py_DECREF(list);
        if (tup == nullptr) goto error;
        PUSH(tup);
        break;
      }
      case BUILD_SET: {
        PyObject* set = PySet_New(nullptr);
        if (set == nullptr) goto error;
        int err = 0;
        for (int k = oparg; k > 0; --k) {
          PyObject* item = PEEK(k);
          if (err == 0) err = PySet_Add(set, item);
          Py_DECREF(item);
        }
        STACK_SHRINK(oparg);
        if (err != 0) {
          Py_DECREF(set);
          goto error;
        }
        PUSH(set);
        break;
      }
      case BUILD_MAP: {
        PyObject* map = PyDict_New();
        int err = map == nullptr ? -1 : 0;
        for (int k = 0; k < oparg && err == 0; ++k) {
          err = PyDict_SetItem(map, PEEK(2 * (oparg - k)), PEEK(2 * (oparg - k) - 1));
        }
        for (int k = 0; k < 2 * oparg; ++k) Py_DECREF(POP());
        if (err != 0) {
          Py_XDECREF(map);
          goto error;
        }
        PUSH(map);
        break;
      }
      case BUILD_CONST_KEY_MAP: {
        PyObject* keys = TOP();
        if (!PyTuple_CheckExact(keys) || PyTuple_GET_SIZE(keys) != oparg) {
          PyErr_SetString(PyExc_SystemError, "bad BUILD_CONST_KEY_MAP keys argument");
          goto error;
        }
        PyObject* map = PyDict_New();
        int err = map == nullptr ? -1 : 0;
        for (int k = 0; k < oparg && err == 0; ++k) {
          err = PyDict_SetItem(map, PyTuple_GET_ITEM(keys, k), PEEK(oparg + 1 - k));
        }
        Py_DECREF(POP());
        for (int k = 0; k < oparg; ++k) Py_DECREF(POP());
        if (err != 0) {
          Py_XDECREF(map);
          goto error;
        }
        PUSH(map);
        break;
      }
      case LIST_APPEND:
      case SET_ADD: {
        PyObject* v = POP();
        const int err =
            in.op == LIST_APPEND ? PyList_Append(PEEK(oparg), v) : PySet_Add(PEEK(oparg), v);
        Py_DECREF(v);
        if (err != 0) goto error;
        break;
      }
      case MAP_ADD: {
        PyObject* value = TOP();
        PyObject* key = SECOND();
        STACK_SHRINK(2);
        const int err = PyDict_SetItem(PEEK(oparg), key, value);
        Py_DECREF(value);
        Py_DECREF(key);
        if (err != 0) goto error;
        break;
      }
      case LIST_EXTEND: {
        PyObject* iterable = POP();
        PyObject* none = _PyList_Extend(reinterpret_cast<PyListObject*>(PEEK(oparg)), iterable);
        if (none == nullptr) {
          if (PyErr_ExceptionMatches(PyExc_TypeError) && Py_TYPE(iterable)->tp_iter == nullptr &&
              !PySequence_Check(iterable)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "Value after * must be an iterable, not %.200s",
                         Py_TYPE(iterable)->tp_name);
          }
          Py_DECREF(iterable);
          goto error;
        }
        Py_DECREF(none);
        Py_DECREF(iterable);
        break;
      }
      case SET_UPDATE: {
        PyObject* iterable = POP();
        const int err = _PySet_Update(PEEK(oparg), iterable);
        Py_DECREF(iterable);
        if (err < 0) goto error;
        break;
      }
      case DICT_UPDATE: {
        PyObject* update = POP();
        if (PyDict_Update(PEEK(oparg), update) < 0) {
          if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Format(PyExc_TypeError, "'%.200s' object is not a mapping",
                         Py_TYPE(update)->tp_name);
          }
          Py_DECREF(update);
          goto error;
        }
        Py_DECREF(update);
        break;
      }
      case BUILD_SLICE: {
        PyObject* step = oparg == 3 ? POP() : nullptr;
        PyObject* stop = POP();
        PyObject* start = TOP();
        PyObject* slice = PySlice_New(start, stop, step);
        Py_DECREF(start);
        Py_DECREF(stop);
        Py_XDECREF(step);
        TOP() = slice;
        if (slice == nullptr) goto error;
        break;
      }
      case BUILD_STRING: {
        static PyObject* empty = PyUnicode_New(0, 0);
        PyObject* str = _PyUnicode_JoinArray(empty, sp - oparg, oparg);
        for (int k = 0; k < oparg; ++k) Py_DECREF(POP());
        if (str == nullptr) goto error;
        PUSH(str);
        break;
      }
      case FORMAT_VALUE: {
        PyObject* spec = (oparg & 0x4) != 0 ? POP() : nullptr;
        PyObject* value = POP();
        PyObject* (*convert)(PyObject*) = nullptr;
        switch (oparg & 0x3) {
          case 1:
            convert = PyObject_Str;
            break;
          case 2:
            convert = PyObject_Repr;
            break;
          case 3:
            convert = PyObject_ASCII;
            break;
          default:
            break;
        }
        if (convert != nullptr) {
          PyObject* converted = convert(value);
          Py_DECREF(value);
          if (converted == nullptr) {
            Py_XDECREF(spec);
            goto error;
          }
          value = converted;
        }
        PyObject* result = value;
        if (!PyUnicode_CheckExact(value) || spec != nullptr) {
          result = PyObject_Format(value, spec);
          Py_DECREF(value);
          Py_XDECREF(spec);
          if (result == nullptr) goto error;
        }
        PUSH(result);
        break;
      }
      case COPY: {
        PyObject* bottom = PEEK(oparg);
        PUSH(Py_NewRef(bottom));
        break;
      }
      case SWAP: {
        PyObject* top = TOP();
        TOP() = PEEK(oparg);
        PEEK(oparg) = top;
        break;
      }
      case MAKE_FUNCTION: {
        PyObject* code = POP();
        auto* func = reinterpret_cast<PyFunctionObject*>(PyFunction_New(code, f->f_globals));
        Py_DECREF(code);
        if (func == nullptr) goto error;
        if (oparg & 0x08) func->func_closure = POP();
        if (oparg & 0x04) func->func_annotations = POP();
        if (oparg & 0x02) func->func_kwdefaults = POP();
        if (oparg & 0x01) func->func_defaults = POP();
        PUSH(reinterpret_cast<PyObject*>(func));
        break;
      }
      case GET_ITER: {
        PyObject* iterable = TOP();
        PyObject* iter = PyObject_GetIter(iterable);
        Py_DECREF(iterable);
        TOP() = iter;
        if (iter == nullptr) goto error;
        break;
      }
      case FOR_ITER: {
        PyObject* iter = TOP();
        PyObject* item = (*Py_TYPE(iter)->tp_iternext)(iter);
        if (item != nullptr) {
          PUSH(item);
          break;
        }
        if (PyErr_Occurred()) {
          if (!PyErr_ExceptionMatches(PyExc_StopIteration)) goto error;
          if (TRACED()) raise_event(f, sp);
          PyErr_Clear();
        }
        STACK_SHRINK(1);
        Py_DECREF(iter);
        next = in.at + 1 + oparg;
        break;
      }
      case JUMP_FORWARD:
        next = in.at + 1 + oparg;
        break;
      case JUMP_BACKWARD:
        next = in.at + 1 - oparg;
        i = next;
        BREAK_CHECK();
        continue;
      case JUMP_BACKWARD_NO_INTERRUPT:
        next = in.at + 1 - oparg;
        break;
      case POP_JUMP_FORWARD_IF_FALSE:
      case POP_JUMP_FORWARD_IF_TRUE:
      case POP_JUMP_BACKWARD_IF_FALSE:
      case POP_JUMP_BACKWARD_IF_TRUE: {
        PyObject* cond = POP();
        int truth;
        if (cond == Py_True) {
          truth = 1;
        } else if (cond == Py_False) {
          truth = 0;
        } else {
          truth = PyObject_IsTrue(cond);
        }
        Py_DECREF(cond);
        if (truth < 0) goto error;
        const bool on_true =
            in.op == POP_JUMP_FORWARD_IF_TRUE || in.op == POP_JUMP_BACKWARD_IF_TRUE;
        if ((truth != 0) == on_true) {
          const bool backward =
              in.op == POP_JUMP_BACKWARD_IF_FALSE || in.op == POP_JUMP_BACKWARD_IF_TRUE;
          next = backward ? in.at + 1 - oparg : in.at + 1 + oparg;
          if (backward) {
            i = next;
            BREAK_CHECK();
            continue;
          }
        }
        break;
      }
      case POP_JUMP_FORWARD_IF_NONE:
      case POP_JUMP_FORWARD_IF_NOT_NONE:
      case POP_JUMP_BACKWARD_IF_NONE:
      case POP_JUMP_BACKWARD_IF_NOT_NONE: {
        PyObject* value = POP();
        const bool on_none =
            in.op == POP_JUMP_FORWARD_IF_NONE || in.op == POP_JUMP_BACKWARD_IF_NONE;
        const bool backward =
            in.op == POP_JUMP_BACKWARD_IF_NONE || in.op == POP_JUMP_BACKWARD_IF_NOT_NONE;
        const bool jump = (value == Py_None) == on_none;
        Py_DECREF(value);
        if (jump) {
          next = backward ? in.at + 1 - oparg : in.at + 1 + oparg;
          if (backward) {
            i = next;
            BREAK_CHECK();
            continue;
          }
        }
        break;
      }
      case JUMP_IF_FALSE_OR_POP:
      case JUMP_IF_TRUE_OR_POP: {
        PyObject* cond = TOP();
        const int truth = cond == Py_True ? 1 : cond == Py_False ? 0 : PyObject_IsTrue(cond);
        if (truth < 0) goto error;
        if ((truth != 0) == (in.op == JUMP_IF_TRUE_OR_POP)) {
          next = in.at + 1 + oparg;
        } else {
          STACK_SHRINK(1);
          Py_DECREF(cond);
        }
        break;
      }
      case PUSH_EXC_INFO: {
        PyObject* value = TOP();
        _PyErr_StackItem* exc_info = ts->exc_info;
        TOP() = exc_info->exc_value != nullptr ? exc_info->exc_value : Py_NewRef(Py_None);
        PUSH(Py_NewRef(value));
        exc_info->exc_value = value;
        break;
      }
      case POP_EXCEPT: {
        _PyErr_StackItem* exc_info = ts->exc_info;
        PyObject* value = exc_info->exc_value;
        exc_info->exc_value = POP();
        Py_XDECREF(value);
        break;
      }
      case CHECK_EXC_MATCH: {
        PyObject* right = POP();
        PyObject* left = TOP();
        if (!except_type_valid(right)) {
          Py_DECREF(right);
          goto error;
        }
        const int res = PyErr_GivenExceptionMatches(left, right);
        Py_DECREF(right);
        PUSH(Py_NewRef(res != 0 ? Py_True : Py_False));
        break;
      }
      case RERAISE: {
        if (oparg != 0) {
          PyObject* lasti = PEEK(oparg + 1);
          if (!PyLong_Check(lasti)) {
            PyErr_SetString(PyExc_SystemError, "lasti is not an int");
            goto error;
          }
          f->prev_instr = first + PyLong_AsLong(lasti);
        }
        PyObject* value = POP();
        PyObject* type = Py_NewRef(PyExceptionInstance_Class(value));
        PyErr_Restore(type, value, PyException_GetTraceback(value));
        goto unwind;
      }
      case RAISE_VARARGS: {
        PyObject* cause = nullptr;
        PyObject* exc = nullptr;
        if (oparg == 2) cause = POP();
        if (oparg >= 1) exc = POP();
        if (oparg > 2) {
          PyErr_SetString(PyExc_SystemError, "bad RAISE_VARARGS oparg");
          goto error;
        }
        if (do_raise(exc, cause)) goto unwind;
        goto error;
      }
      case BEFORE_WITH: {
        static PyObject* enter_name = PyUnicode_InternFromString("__enter__");
        static PyObject* exit_name = PyUnicode_InternFromString("__exit__");
        PyObject* mgr = TOP();
        PyObject* enter = _PyObject_LookupSpecial(mgr, enter_name);
        if (enter == nullptr) {
          if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError,
                         "'%.200s' object does not support the context manager protocol",
                         Py_TYPE(mgr)->tp_name);
          }
          goto error;
        }
        PyObject* exit_fn = _PyObject_LookupSpecial(mgr, exit_name);
        if (exit_fn == nullptr) {
          if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError,
                         "'%.200s' object does not support the context manager protocol "
                         "(missed __exit__ method)",
                         Py_TYPE(mgr)->tp_name);
          }
          Py_DECREF(enter);
          goto error;
        }
        TOP() = exit_fn;
        Py_DECREF(mgr);
        PyObject* res = PyObject_CallNoArgs(enter);
        Py_DECREF(enter);
        if (res == nullptr) goto error;
        PUSH(res);
        break;
      }
      case WITH_EXCEPT_START: {
        PyObject* val = TOP();
        PyObject* exc = PyExceptionInstance_Class(val);
        PyObject* tb = PyException_GetTraceback(val);
        Py_XDECREF(tb);
        PyObject* args[4] = {nullptr, exc, val, tb != nullptr ? tb : Py_None};
        PyObject* res =
            PyObject_Vectorcall(PEEK(4), args + 1, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
        if (res == nullptr) goto error;
        PUSH(res);
        break;
      }
      default:
        PyErr_Format(PyExc_SystemError, "sealtrace's evaluation loop met opcode %d", in.op);
        goto error;
    }
    if (quick != nullptr) {  // a step_* counted it: what it left is tagged now
      const int after = static_cast<int>(sp - locals);
      switch (in.quick) {
        case kQuickLoad:
          quick_loaded(*quick, quick_depth, after, quick_tag, quick_value);
          break;
        case kQuickIter:
          quick_iterated(*quick, quick_depth, after);
          break;
        case kQuickSubscr:
          quick_subscripted(*quick, after, quick_tag, quick_value);
          break;
        case kQuickCompute:
          quick_made(*quick, in, quick_depth, after);
          break;
        case kQuickAttr:
          quick_attribute(*quick, in, quick_depth, after, quick_tag, quick_value);
          break;
        case kQuickBuild:
          quick_built(*quick, in, after);
          break;
        default:  // kQuickStore, kQuickPut: tagged before it ran
          break;
      }
      quick = nullptr;
    }
    i = next;
    continue;

  error:
    // A new exception at this instruction: its traceback entry and the tracer's event.
    {
      if (quick != nullptr) {
        quick_raised(*quick, quick_index, quick_depth);
        quick = nullptr;
      }
      PyFrameObject* frame = PyEval_GetFrame();
      if (frame != nullptr && frame->f_frame == f) PyTraceBack_Here(frame);
      if (TRACED()) raise_event(f, sp);
    }
  unwind : {
    // The handler covers the instruction that raised; the offset handed to it is the frame's
    // last instruction, which RERAISE sets to where the exception first arose.
    const int at = in.at;
    const int last = static_cast<int>(f->prev_instr - first);
    int level = 0;
    int handler = 0;
    bool lasti = false;
    if (!exception_handler(co, at, level, handler, lasti)) {
      while (sp > locals + co->co_nlocalsplus) Py_XDECREF(POP());
      f->stacktop = static_cast<int>(sp - locals);
      if (TRACED()) {
        // The exception stays the frame's while the tracer hears of the unwinding, as
        // CPython's protected trace call keeps it.
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        {
          const TracingOff off(ts);
          ensure_thread();
          on_return(f, nullptr);
        }
        PyErr_Restore(type, value, tb);
      }
      retval = nullptr;
      goto exit;
    }
    PyObject** base = locals + co->co_nlocalsplus + level;
    while (sp > base) Py_XDECREF(POP());
    if (lasti) {
      PyObject* offset = PyLong_FromLong(last);
      if (offset == nullptr) goto unwind;
      PUSH(offset);
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyException_SetTraceback(value, tb != nullptr ? tb : Py_None);
    Py_XDECREF(tb);
    Py_XDECREF(type);
    PUSH(value);
    i = handler;
    continue;
  }
  }

handoff:
  // The rest of the frame goes to CPython's loop, resumed from the frame as a generator's is:
  // its next instruction after prev_instr, its stack up to stacktop. Under the trace callback
  // it needs the frame object a call event would have set to opcode events.
  f->prev_instr = first + i - 1;
  f->stacktop = static_cast<int>(sp - locals);
  if (TRACED()) {
    const TracingOff off(ts);
    frame_object(f);
  }
  if (g_generation == generation) ++stats_.loop_handoffs;
  leave();
  return _PyEval_EvalFrameDefault(ts, f, 0);

exit:
  leave();
  return retval;

#undef TOP
#undef SECOND
#undef THIRD
#undef PEEK
#undef PUSH
#undef POP
#undef STACK_SHRINK
#undef STACK_GROW
#undef TRACER_CALL
#undef SLOW_EVENT
#undef TRACED
#undef BREAK_CHECK
}

// The exception event, as the interpreter gives it: (type, value, traceback), normalised.
void Tracer::raise_event(_PyInterpreterFrame* f, PyObject** sp) {
  PyThreadState* ts = PyThreadState_GET();
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (value == nullptr) value = Py_NewRef(Py_None);
  PyErr_NormalizeException(&type, &value, &tb);
  PyObject* arg = PyTuple_Pack(3, type, value, tb != nullptr ? tb : Py_None);
  if (arg != nullptr) {
    f->stacktop = static_cast<int>(sp - f->localsplus);
    {
      const TracingOff off(ts);
      ensure_thread();
      on_exception(f, arg);
    }
    f->stacktop = -1;
    Py_DECREF(arg);
  } else {
    PyErr_Clear();
  }
  run_.frame = nullptr;  // an event: the run of quick instructions ends, as at any other
  PyErr_Restore(type, value, tb);
}

PyObject* evaluate_frame(PyThreadState* ts, _PyInterpreterFrame* f, int throwflag) {
  Tracer* t = g_tracer;
  if (t == nullptr) return _PyEval_EvalFrameDefault(ts, f, throwflag);
  return t->evaluate(ts, f, throwflag);
}

void install_eval_loop() {
  PyInterpreterState* interp = PyInterpreterState_Get();
  _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
  if (current == evaluate_frame) return;
  g_previous_eval = current;
  _PyInterpreterState_SetEvalFrameFunc(interp, evaluate_frame);
}

void remove_eval_loop() {
  PyInterpreterState* interp = PyInterpreterState_Get();
  if (_PyInterpreterState_GetEvalFrameFunc(interp) != evaluate_frame) return;
  _PyInterpreterState_SetEvalFrameFunc(interp, g_previous_eval);
  g_previous_eval = nullptr;
}

}  // namespace sealtrace
