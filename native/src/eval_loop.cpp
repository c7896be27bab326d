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
// interpreter runs while tracing), with the same errors and messages.
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
#include "fields.h"
#include "hooks.hpp"
#include "ops.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

// Exported by CPython 3.11 but declared only in its internal headers, which need C11 atomics.
extern "C" {
PyAPI_FUNC(int) _Py_CheckRecursiveCall(PyThreadState* tstate, const char* where);
PyAPI_FUNC(PyObject*) _PyObject_LookupSpecial(PyObject* self, PyObject* attr);
}

namespace sealtrace {

namespace {

_PyFrameEvalFunction g_previous_eval = nullptr;

constexpr const char* kUnboundLocal =
    "cannot access local variable '%s' where it is not associated with a value";
constexpr const char* kUnboundFree =
    "cannot access free variable '%s' where it is not associated with a value in enclosing "
    "scope";
constexpr const char* kNameError = "name '%.200s' is not defined";

}  // namespace

namespace {

// A number, a string, bytes, True, False or None: C alone runs what operators do with it, and
// freeing it runs no Python code.
bool plain_value(PyObject* v) {
  return PyLong_CheckExact(v) || PyFloat_CheckExact(v) || PyUnicode_CheckExact(v) ||
         PyBool_Check(v) || v == Py_None || PyBytes_CheckExact(v);
}

bool frees_quietly(PyObject* v, int depth);

// Whether dropping a reference to `v` runs no Python code (a __del__, a weakref's callback):
// another reference remains, it is a plain value, or freeing it frees nothing else that could
// (frees_quietly, `depth` attributes deep).
bool drops_quietly(PyObject* v, int depth = 2) {
  return Py_REFCNT(v) > 1 || plain_value(v) || (depth > 0 && frees_quietly(v, depth));
}

// An instance of a class of the program's own (its attributes in a dict, no __slots__, no C base
// but object) with no __del__ and no weak reference to it, whose attributes drop quietly too:
// freeing it runs no Python code (the attribute a loop replaces, `p = p.moved(1)`).
bool frees_quietly(PyObject* v, int depth) {
  PyTypeObject* tp = Py_TYPE(v);
  constexpr unsigned long kPlainClass = Py_TPFLAGS_HEAPTYPE | Py_TPFLAGS_MANAGED_DICT;
  if ((tp->tp_flags & kPlainClass) != kPlainClass || tp->tp_finalize != nullptr ||
      tp->tp_del != nullptr || tp->tp_itemsize != 0) {
    return false;
  }
  const Py_ssize_t weaklist = tp->tp_weaklistoffset;
  const auto plain_size =
      static_cast<Py_ssize_t>(sizeof(PyObject) + (weaklist != 0 ? sizeof(PyObject*) : 0));
  if (tp->tp_basicsize != plain_size) return false;  // __slots__, or a C base's fields
  if (weaklist != 0 &&
      *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(v) + weaklist) != nullptr) {
    return false;
  }
  constexpr int kMaxFields = 16;
  PyObject* fields[kMaxFields];
  const int n = sealtrace_instance_values(v, fields, kMaxFields);
  if (n < 0) return false;
  for (int k = 0; k < n; ++k) {
    if (!drops_quietly(fields[k], depth - 1)) return false;
  }
  return true;
}

// A dict key whose hashing and comparing run no Python code: an exact str or int.
bool plain_key(PyObject* key) { return PyUnicode_CheckExact(key) || PyLong_CheckExact(key); }

// Whether a store into the exact dict `dict` under `key` (a plain_key) replaces nothing or a value
// that drops quietly; false where the lookup fails.
bool replaces_quietly(PyObject* dict, PyObject* key) {
  PyObject* old = PyDict_GetItemWithError(dict, key);
  if (old == nullptr && PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    return false;
  }
  return old == nullptr || drops_quietly(old);
}

// Whether the loop may tag an instruction itself: one that only moves a value within its frame,
// pushes a constant or a NULL, pops or jumps (Tracer::step_quietly), an operator or an
// f-string's piece that C alone runs on plain values (Tracer::step_computing), a load or a store
// of a global or a name (Tracer::step_loading, Tracer::step_storing), a step of a range, a list,
// a tuple or a dict (Tracer::step_iterating), an item of a list, a tuple or a dict read
// (Tracer::step_subscripting) or stored (Tracer::step_putting), or an instance's attribute
// (Tracer::step_attribute).
std::uint8_t quick_kind(int op) {
  switch (op) {
    case LOAD_FAST:
    case LOAD_CLOSURE:
    case STORE_FAST:
    case LOAD_CONST:
    case POP_TOP:
    case RETURN_VALUE:
      return kQuickInline;
    case NOP:
    case PUSH_NULL:
    case COPY:
    case SWAP:
    case PRECALL:
    case JUMP_FORWARD:
    case JUMP_BACKWARD:
    case JUMP_BACKWARD_NO_INTERRUPT:
    case POP_JUMP_FORWARD_IF_FALSE:
    case POP_JUMP_FORWARD_IF_TRUE:
    case POP_JUMP_BACKWARD_IF_FALSE:
    case POP_JUMP_BACKWARD_IF_TRUE:
    case POP_JUMP_FORWARD_IF_NONE:
    case POP_JUMP_FORWARD_IF_NOT_NONE:
    case POP_JUMP_BACKWARD_IF_NONE:
    case POP_JUMP_BACKWARD_IF_NOT_NONE:
      return kQuickMove;
    case BINARY_OP:
    case COMPARE_OP:
    case IS_OP:
    case UNARY_NOT:
    case UNARY_NEGATIVE:
    case UNARY_POSITIVE:
    case UNARY_INVERT:
    case FORMAT_VALUE:
    case BUILD_STRING:
      return kQuickCompute;
    case LOAD_GLOBAL:
    case LOAD_NAME:
      return kQuickLoad;
    case STORE_NAME:
    case STORE_GLOBAL:
      return kQuickStore;
    case FOR_ITER:
      return kQuickIter;
    case BINARY_SUBSCR:
      return kQuickSubscr;
    case LOAD_ATTR:
    case LOAD_METHOD:
    case STORE_ATTR:
      return kQuickAttr;
    case STORE_SUBSCR:
    case LIST_APPEND:
    case MAP_ADD:
      return kQuickPut;
    case CALL:
      return kQuickCall;
    case BUILD_TUPLE:
    case BUILD_LIST:
    case BUILD_MAP:
    case BUILD_CONST_KEY_MAP:
    case GET_ITER:
      return kQuickBuild;
    default:
      return kQuickNo;
  }
}

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
      return true;
    default:
      return false;
  }
}

namespace {

using BinaryFn = PyObject* (*)(PyObject*, PyObject*);
PyObject* power(PyObject* a, PyObject* b) { return PyNumber_Power(a, b, Py_None); }
PyObject* inplace_power(PyObject* a, PyObject* b) { return PyNumber_InPlacePower(a, b, Py_None); }
// BINARY_OP's oparg (dis._nb_ops): the operators, then their in-place forms.
constexpr BinaryFn kBinaryOps[] = {PyNumber_Add,
                                   PyNumber_And,
                                   PyNumber_FloorDivide,
                                   PyNumber_Lshift,
                                   PyNumber_MatrixMultiply,
                                   PyNumber_Multiply,
                                   PyNumber_Remainder,
                                   PyNumber_Or,
                                   power,
                                   PyNumber_Rshift,
                                   PyNumber_Subtract,
                                   PyNumber_TrueDivide,
                                   PyNumber_Xor,
                                   PyNumber_InPlaceAdd,
                                   PyNumber_InPlaceAnd,
                                   PyNumber_InPlaceFloorDivide,
                                   PyNumber_InPlaceLshift,
                                   PyNumber_InPlaceMatrixMultiply,
                                   PyNumber_InPlaceMultiply,
                                   PyNumber_InPlaceRemainder,
                                   PyNumber_InPlaceOr,
                                   inplace_power,
                                   PyNumber_InPlaceRshift,
                                   PyNumber_InPlaceSubtract,
                                   PyNumber_InPlaceTrueDivide,
                                   PyNumber_InPlaceXor};

void format_check_arg(PyObject* exc, const char* format, PyObject* name) {
  const char* text = PyUnicode_AsUTF8(name);
  if (text == nullptr) return;
  PyErr_Format(exc, format, text);
  if (exc != PyExc_NameError) return;
  // The name, for the suggestions a traceback prints.
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value != nullptr && PyErr_GivenExceptionMatches(value, PyExc_NameError)) {
    auto* err = reinterpret_cast<PyNameErrorObject*>(value);
    if (err->name == nullptr) err->name = Py_NewRef(name);
  }
  PyErr_Restore(type, value, tb);
}

void unbound(PyCodeObject* co, int index) {
  if (PyErr_Occurred()) return;
  PyObject* name = PyTuple_GET_ITEM(co->co_localsplusnames, index);
  if (index < co->co_nplaincellvars + co->co_nlocals) {
    format_check_arg(PyExc_UnboundLocalError, kUnboundLocal, name);
  } else {
    format_check_arg(PyExc_NameError, kUnboundFree, name);
  }
}

// The exception table entry covering instruction `index` (3.11's varint format).
bool exception_handler(PyCodeObject* co, int index, int& level, int& handler, bool& lasti) {
  const auto* p = reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(co->co_exceptiontable));
  const auto* end = p + PyBytes_GET_SIZE(co->co_exceptiontable);
  auto varint = [&p]() {
    int v = *p & 63;
    while (*p & 64) {
      ++p;
      v = (v << 6) | (*p & 63);
    }
    ++p;
    return v;
  };
  while (p < end) {
    const int start = varint();
    if (start > index) return false;
    const int size = varint();
    if (start + size > index) {
      handler = varint();
      const int depth_lasti = varint();
      level = depth_lasti >> 1;
      lasti = (depth_lasti & 1) != 0;
      return true;
    }
    while (p < end && (*p & 128) == 0) ++p;  // the next entry starts with bit 7 set
  }
  return false;
}

// `raise`, `raise exc`, `raise exc from cause`: true when it re-raises what is being handled
// (it unwinds without a new traceback entry); false with the exception set otherwise.
bool do_raise(PyObject* exc, PyObject* cause) {
  if (exc == nullptr) {
    PyObject* value = PyErr_GetHandledException();
    if (value == nullptr || value == Py_None) {
      Py_XDECREF(value);
      PyErr_SetString(PyExc_RuntimeError, "No active exception to reraise");
      return false;
    }
    PyObject* type = Py_NewRef(PyExceptionInstance_Class(value));
    PyErr_Restore(type, value, PyException_GetTraceback(value));
    return true;
  }
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  if (PyExceptionClass_Check(exc)) {
    type = exc;
    value = PyObject_CallNoArgs(exc);
    if (value == nullptr) goto raise_error;
    if (!PyExceptionInstance_Check(value)) {
      PyErr_Format(PyExc_TypeError,
                   "calling %R should have returned an instance of BaseException, not %R", type,
                   Py_TYPE(value));
      goto raise_error;
    }
  } else if (PyExceptionInstance_Check(exc)) {
    value = exc;
    type = Py_NewRef(PyExceptionInstance_Class(exc));
  } else {
    Py_DECREF(exc);
    PyErr_SetString(PyExc_TypeError, "exceptions must derive from BaseException");
    goto raise_error;
  }
  if (cause != nullptr) {
    PyObject* fixed = nullptr;
    if (PyExceptionClass_Check(cause)) {
      fixed = PyObject_CallNoArgs(cause);
      if (fixed == nullptr) goto raise_error;
      Py_DECREF(cause);
    } else if (PyExceptionInstance_Check(cause)) {
      fixed = cause;
    } else if (cause == Py_None) {
      Py_DECREF(cause);
    } else {
      PyErr_SetString(PyExc_TypeError, "exception causes must derive from BaseException");
      goto raise_error;
    }
    PyException_SetCause(value, fixed);
  }
  PyErr_SetObject(type, value);
  Py_DECREF(value);
  Py_DECREF(type);
  return false;
raise_error:
  Py_XDECREF(value);
  Py_XDECREF(type);
  Py_XDECREF(cause);
  return false;
}

bool except_type_valid(PyObject* right) {
  constexpr const char* kMessage =
      "catching classes that do not inherit from BaseException is not allowed";
  if (PyTuple_Check(right)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(right); ++i) {
      if (!PyExceptionClass_Check(PyTuple_GET_ITEM(right, i))) {
        PyErr_SetString(PyExc_TypeError, kMessage);
        return false;
      }
    }
  } else if (!PyExceptionClass_Check(right)) {
    PyErr_SetString(PyExc_TypeError, kMessage);
    return false;
  }
  return true;
}

// UNPACK_SEQUENCE: `count` items, the first on top (written downwards from `top`).
bool unpack(PyObject* v, int count, PyObject** top) {
  PyObject* it = PyObject_GetIter(v);
  if (it == nullptr) {
    if (PyErr_ExceptionMatches(PyExc_TypeError) && Py_TYPE(v)->tp_iter == nullptr &&
        !PySequence_Check(v)) {
      PyErr_Format(PyExc_TypeError, "cannot unpack non-iterable %.200s object",
                   Py_TYPE(v)->tp_name);
    }
    return false;
  }
  PyObject** sp = top;
  int i = 0;
  for (; i < count; ++i) {
    PyObject* w = PyIter_Next(it);
    if (w == nullptr) {
      if (!PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected %d, got %d)", count,
                     i);
      }
      goto fail;
    }
    *--sp = w;
  }
  {
    PyObject* w = PyIter_Next(it);
    if (w == nullptr) {
      if (PyErr_Occurred()) goto fail;
      Py_DECREF(it);
      return true;
    }
    Py_DECREF(w);
    PyErr_Format(PyExc_ValueError, "too many values to unpack (expected %d)", count);
  }
fail:
  for (; i > 0; --i, ++sp) Py_DECREF(*sp);
  Py_DECREF(it);
  return false;
}

PyObject* import_name(_PyInterpreterFrame* f, PyObject* name, PyObject* fromlist, PyObject* level) {
  static PyObject* dunder_import = PyUnicode_InternFromString("__import__");
  PyObject* import = PyDict_GetItemWithError(f->f_builtins, dunder_import);
  if (import == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ImportError, "__import__ not found");
    return nullptr;
  }
  PyObject* locals = f->f_locals == nullptr ? Py_None : f->f_locals;
  if (import == sealtrace_import_func(PyThreadState_GET())) {
    const int ilevel = _PyLong_AsInt(level);
    if (ilevel == -1 && PyErr_Occurred()) return nullptr;
    return PyImport_ImportModuleLevelObject(name, f->f_globals, locals, fromlist, ilevel);
  }
  Py_INCREF(import);
  PyObject* args[5] = {name, f->f_globals, locals, fromlist, level};
  PyObject* res = PyObject_Vectorcall(import, args, 5, nullptr);
  Py_DECREF(import);
  return res;
}

// A name in a mapping that may not be a dict: a new reference, nullptr with no exception when
// it is not there.
PyObject* lookup(PyObject* mapping, PyObject* name) {
  if (PyDict_CheckExact(mapping)) return Py_XNewRef(PyDict_GetItemWithError(mapping, name));
  PyObject* v = PyObject_GetItem(mapping, name);
  if (v == nullptr && PyErr_ExceptionMatches(PyExc_KeyError)) PyErr_Clear();
  return v;
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

// While the tracer runs (and any Python code it calls), nothing is traced: what the trace
// callback's caller does around it (PyThreadState_EnterTracing and LeaveTracing, inline).
class TracingOff {
 public:
  explicit TracingOff(PyThreadState* ts) noexcept : ts_(ts) {
    ++ts_->tracing;
    ts_->cframe->use_tracing = 0;
  }
  ~TracingOff() {
    --ts_->tracing;
    ts_->cframe->use_tracing =
        ts_->c_tracefunc != nullptr || ts_->c_profilefunc != nullptr ? 255 : 0;
  }
  TracingOff(const TracingOff&) = delete;
  TracingOff& operator=(const TracingOff&) = delete;

 private:
  PyThreadState* ts_;
};

}  // namespace

// A generator's or coroutine's frame is CPython's from its start; any other starts here and
// runs here up to its first instruction the loop does not implement.
bool Tracer::loopable(CodeInfo& info, PyCodeObject* code) {
  if (info.loop < 0) {
    info.loop = (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) == 0;
    for (Instr& in : info.instrs) {
      in.looped = loop_implements(in.op);
      in.quick = quick_kind(in.op);
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
  if (run_live_ && counter_.value() + 1 < run_.until) {
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

ShadowFrame* Tracer::quick_event(PyThreadState* ts, _PyInterpreterFrame* f, int depth) {
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

// An instruction that only moves a value within its frame (PRECALL unpacking a bound method
// among them), pushes a constant or a NULL, pops or jumps: tagged at once, as the two halves would
// tag it. Refused (on_opcode runs) wherever it could fail or run Python code: an unbound local, a
// value its pop or store would free that is not plain (a __del__ could run), a jump on a value that
// is not True or False, a backward jump while the eval breaker is set (a signal handler called
// there is bound to the jump's pending half; one that arrives between this check and the jump is
// told nothing of it). No slice misses it: a slice follows values' tags, and none is its own but a
// constant's or a NULL's, which have no inputs.
bool Tracer::step_quietly(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                          PyObject** sp) {
  const int depth = static_cast<int>(sp - f->localsplus);
  const int oparg = in.oparg;
  switch (in.op) {
    case POP_JUMP_FORWARD_IF_FALSE:
    case POP_JUMP_FORWARD_IF_TRUE:
      if (sp[-1] != Py_True && sp[-1] != Py_False) return false;
      break;
    case POP_JUMP_BACKWARD_IF_FALSE:
    case POP_JUMP_BACKWARD_IF_TRUE:
      if ((sp[-1] != Py_True && sp[-1] != Py_False) || sealtrace_breaker_set(ts) != 0) {
        return false;
      }
      break;
    case POP_JUMP_FORWARD_IF_NONE:
    case POP_JUMP_FORWARD_IF_NOT_NONE:
      if (!drops_quietly(sp[-1])) return false;
      break;
    case POP_JUMP_BACKWARD_IF_NONE:
    case POP_JUMP_BACKWARD_IF_NOT_NONE:
      if (!drops_quietly(sp[-1]) || sealtrace_breaker_set(ts) != 0) return false;
      break;
    case JUMP_BACKWARD:  // the eval breaker it checks runs nothing (signal handlers, say)
      if (sealtrace_breaker_set(ts) != 0) return false;
      break;
    case COPY:
    case SWAP:
      if (depth - oparg < f->f_code->co_nlocalsplus) return false;
      break;
    case PRECALL:
      if (depth - oparg - 2 < f->f_code->co_nlocalsplus) return false;
      break;
    default:
      break;
  }
  ShadowFrame* sf = quick_event(ts, f, depth);
  if (sf == nullptr) return false;
  Tag* const s = sf->slots.data();
  switch (in.op) {
    case PUSH_NULL:
      s[depth] = counter_.value();
      break;
    case PRECALL: {  // a bound method unpacked into [function, self]: both keep its tag
      PyObject** const slots = f->localsplus + depth - oparg - 2;
      if (slots[0] == nullptr && PyMethod_Check(slots[1]))
        s[depth - oparg - 2] = s[depth - oparg - 1];
      break;
    }
    case COPY:
      s[depth] = s[depth - oparg];
      break;
    case SWAP:
      std::swap(s[depth - 1], s[depth - oparg]);
      break;
    default:  // pops and jumps: nothing to tag
      break;
  }
  return true;
}

// An operator on plain values (numbers, strings, bytes, None: C alone runs it, no Python code),
// an f-string's formatting of one (FORMAT_VALUE, its spec a string) or its joining of strings
// (BUILD_STRING), is counted before it runs; after it, quick_made tags its result, or, where it
// raises, quick_raised hands the tracer the pending instruction on_opcode would have made.
ShadowFrame* Tracer::step_computing(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                                    PyObject** sp) {
  for (int k = 1; k <= in.pops; ++k) {
    PyObject* v = sp[-k];
    // IS_OP runs nothing but its pops, which free nothing still held elsewhere.
    if (!plain_value(v) && !(in.op == IS_OP && Py_REFCNT(v) > 1)) return nullptr;
  }
  return quick_event(ts, f, static_cast<int>(sp - f->localsplus));
}

// A quickly counted operator's result is a value it made: tagged with its counter, and while
// a slice is recorded its operands are the edge's inputs (what edge_inputs gives for them).
void Tracer::quick_made(ShadowFrame& sf, const Instr& in, int before, int after) {
  const Tag now = counter_.value();
  Tag* const s = sf.slots.data();
  const bool recording = recording_edges(now);
  if (recording) {
    inputs_scratch_.clear();
    for (int k = before - (in.pops + in.peeks); k < before; ++k)
      add_input(inputs_scratch_, now, s[k]);
  }
  s[after - 1] = now;
  if (recording) record_inputs(now, false);
}

// LOAD_GLOBAL and LOAD_NAME where every namespace is a dict (its lookups run no Python code):
// counted before it runs, with the slot it reads remembered (begin_name_load), and tagged
// after it by quick_loaded. A load records no edge: it has no inputs, and what it pushes keeps
// the tag of the slot it read or is a value of its own.
ShadowFrame* Tracer::step_loading(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                                  PyObject** sp, Tag& tag, std::uintptr_t& value) {
  if (!PyDict_CheckExact(f->f_globals) || !PyDict_CheckExact(f->f_builtins) ||
      (in.op == LOAD_NAME && (f->f_locals == nullptr || !PyDict_CheckExact(f->f_locals)))) {
    return nullptr;
  }
  ShadowFrame* sf = quick_event(ts, f, static_cast<int>(sp - f->localsplus));
  if (sf == nullptr) return nullptr;
  const Slot* slot = name_slot(f, in);
  tag = slot != nullptr ? slot->tag : 0;
  value = slot != nullptr ? slot->value : 0;
  return sf;
}

// What a quick load pushed (complete_slot_load): the value the slot tagged keeps its tag,
// another is a value of the load's own; LOAD_GLOBAL's NULL has none.
void Tracer::quick_loaded(ShadowFrame& sf, int before, int after, Tag tag, std::uintptr_t value) {
  Tag* const s = sf.slots.data();
  const Tag now = counter_.value();
  for (int k = before; k < after; ++k) s[k] = now;
  if (after - before >= 1 && tag != 0 && addr(sf.iframe->localsplus[after - 1]) == value) {
    s[after - 1] = tag;
  }
  if (after - before == 2) s[before] = 0;
}

// STORE_NAME and STORE_GLOBAL into a dict whose value under the name, if any, is held
// elsewhere too or plain (dropping it runs no Python code): counted before it runs, the
// namespace's slot set as begin_name_store sets it, and, while a slice is recorded, the
// stored value's tag is the edge's input (the namespace's record is updated at this counter,
// which a slice can reach).
ShadowFrame* Tracer::step_storing(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                                  PyObject** sp) {
  PyObject* ns = in.op == STORE_NAME ? f->f_locals : f->f_globals;
  if (ns == nullptr || !PyDict_CheckExact(ns)) return nullptr;
  if (!replaces_quietly(ns, PyTuple_GET_ITEM(f->f_code->co_names, in.oparg))) return nullptr;
  const int depth = static_cast<int>(sp - f->localsplus);
  ShadowFrame* sf = quick_event(ts, f, depth);
  if (sf == nullptr) return nullptr;
  const Tag now = counter_.value();
  const Tag stored = sf->slots[static_cast<std::size_t>(depth) - 1];
  set_name_slot(f, in, stored, sp[-1], now);
  if (recording_edges(now)) {
    inputs_scratch_.clear();
    add_input(inputs_scratch_, now, stored);
    record_inputs(now, false);
  }
  return sf;
}

// FOR_ITER over a range, a list, a tuple or a dict (its keys, values or items): C alone runs
// its next step. Counted before it runs; quick_iterated tags what it left after (complete's
// rules). A step that ends the iteration pops the iterator: it must free nothing but the
// iterator (its sequence or dict held elsewhere too, or not ended now). While a slice is
// recorded only a range's steps are tagged here (their edge is a move of the range); no buffer
// fills wait (a text file's reads).
ShadowFrame* Tracer::step_iterating(PyThreadState* ts, _PyInterpreterFrame* f, PyObject** sp) {
  PyObject* iter = sp[-1];
  if (!fills_.empty()) return nullptr;
  PyTypeObject* tp = Py_TYPE(iter);
  if (tp != &PyRangeIter_Type && tp != &PyLongRangeIter_Type) {
    if (recording_edges(counter_.value() + 1)) return nullptr;
    if (tp == &PyListIter_Type || tp == &PyTupleIter_Type) {
      const auto* it = reinterpret_cast<const SeqIterLayout*>(iter);
      const bool ends = it->it_seq == nullptr || it->it_index >= Py_SIZE(it->it_seq);
      if (ends && Py_REFCNT(iter) < 2 && it->it_seq != nullptr && Py_REFCNT(it->it_seq) < 2) {
        return nullptr;
      }
    } else if (tp == &PyDictIterKey_Type || tp == &PyDictIterValue_Type ||
               tp == &PyDictIterItem_Type) {
      const auto* it = reinterpret_cast<const DictIterLayout*>(iter);
      const auto* dict = reinterpret_cast<PyObject*>(it->di_dict);
      if (Py_REFCNT(iter) < 2 && dict != nullptr && Py_REFCNT(dict) < 2) return nullptr;
      // items() reuses its last tuple when nothing else holds it, dropping what it held.
      PyObject* last = it->di_result;
      if (last != nullptr && Py_REFCNT(last) == 1 && PyTuple_GET_SIZE(last) == 2 &&
          (!drops_quietly(PyTuple_GET_ITEM(last, 0)) ||
           !drops_quietly(PyTuple_GET_ITEM(last, 1)))) {
        return nullptr;
      }
    } else {
      return nullptr;
    }
  }
  return quick_event(ts, f, static_cast<int>(sp - f->localsplus));
}

// The item a step gave keeps the tag of where it came from (iterated_tag: none for a range's
// new int), else it is a value of FOR_ITER's own unless a slot holds that very object; a tuple
// of dict.items() carries its items' tags. An exhausted iterator leaves the stack, and its
// frame forgets what iterated below. While a slice is recorded (a range only) the range's tag
// is the edge's input (a move of it, for an item).
void Tracer::quick_iterated(ShadowFrame& sf, int before, int after) {
  const Tag now = counter_.value();
  Tag* const s = sf.slots.data();
  const Tag iter = s[before - 1];
  if (after > before) {
    PyObject* item = sf.iframe->localsplus[before];
    Tag tag = iterated_tag(sf, before - 1, item);
    if (tag == 0) tag = held_tag(item);
    s[before] = tag != 0 ? tag : now;
    if (PyTuple_CheckExact(item) && trackable(item)) {
      tag_iterated_tuple(sf.iframe->localsplus[before - 1], item, now);
    }
  } else {
    drop_iters(sf, before - 1);
  }
  if (recording_edges(now)) {
    inputs_scratch_.clear();
    add_input(inputs_scratch_, now, iter);
    record_inputs(now, after > before);
  }
}

// BINARY_SUBSCR of a list or a tuple by an int, or of a dict by a string or an int (C alone
// runs it), while no slice is recorded (its inputs would be read as begin reads them): counted
// before it runs, with the slot it reads remembered (begin_subscr_load), and tagged after it by
// quick_subscripted.
ShadowFrame* Tracer::step_subscripting(PyThreadState* ts, _PyInterpreterFrame* f, PyObject** sp,
                                       Tag& tag, std::uintptr_t& value) {
  PyObject* container = sp[-2];
  PyObject* sub = sp[-1];
  const bool plain =
      ((PyList_CheckExact(container) || PyTuple_CheckExact(container)) && PyLong_CheckExact(sub)) ||
      (PyDict_CheckExact(container) && plain_key(sub));
  // The pop of a container nothing else holds would free it (a __del__ of an item could run).
  if (!plain || Py_REFCNT(container) < 2 || recording_edges(counter_.value() + 1)) return nullptr;
  ShadowFrame* sf = quick_event(ts, f, static_cast<int>(sp - f->localsplus));
  if (sf == nullptr) return nullptr;
  tag = 0;
  value = 0;
  std::uint64_t key = 0;
  PyObject* current = nullptr;
  if (subscript_key(container, sub, key, &current)) {
    tag = slots_.get(addr(container), key, addr(current));
    value = addr(current);
  }
  return sf;
}

// What a quick read of a slot (its tag and the value it tagged) pushed: the slot's tag where it
// still tags `v`; else a value of the read's own, unless a slot holds that very object
// (complete_slot_load's rule).
Tag Tracer::quick_read(PyObject* v, Tag tag, std::uintptr_t value) const noexcept {
  if (tag != 0 && addr(v) == value) return tag;
  const Tag held = held_tag(v);
  return held != 0 ? held : counter_.value();
}

void Tracer::quick_subscripted(ShadowFrame& sf, int after, Tag tag, std::uintptr_t value) {
  sf.slots[static_cast<std::size_t>(after) - 1] =
      quick_read(sf.iframe->localsplus[after - 1], tag, value);
}

// LOAD_ATTR, LOAD_METHOD and STORE_ATTR of an instance attribute where C alone runs them: the
// type's generic getattr/setattr, no class attribute of that name (no descriptor, no property)
// but, for LOAD_METHOD, a method descriptor (a function, `list.append`); the instance's own
// attribute there to read (or, for a store, its old value dropped quietly); the owner held
// elsewhere too (its pop frees nothing); no slice being recorded and no buffer fills. A load
// is counted before it runs with the slot it reads remembered as begin_attr_load remembers it
// (the instance's, its __dict__'s, a class's), and tagged after it by quick_attribute; a store
// sets the slot as begin_attr_store sets it.
ShadowFrame* Tracer::step_attribute(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                                    PyObject** sp, Tag& tag, std::uintptr_t& value) {
  PyObject* owner = sp[-1];
  PyTypeObject* tp = Py_TYPE(owner);
  if (Py_REFCNT(owner) < 2 || !fills_.empty() || recording_edges(counter_.value() + 1)) {
    return nullptr;
  }
  PyObject* name = PyTuple_GET_ITEM(f->f_code->co_names, in.oparg);
  int known = 0;
  PyObject* own = nullptr;
  if (in.op == STORE_ATTR) {
    if (tp->tp_setattro != PyObject_GenericSetAttr || PyModule_Check(owner) ||
        tp->tp_dictoffset == 0 || _PyType_Lookup(tp, name) != nullptr || !trackable(owner)) {
      return nullptr;
    }
    own = sealtrace_instance_attr(owner, name, &known);
    if (known == 0 || (own != nullptr && !drops_quietly(own))) return nullptr;
  } else {
    if (tp->tp_getattro != PyObject_GenericGetAttr) return nullptr;
    PyObject* descr = _PyType_Lookup(tp, name);
    // LOAD_METHOD: a method descriptor (a function, a builtin type's method) is never called
    // to be found, and an attribute of the instance's own of that name is read instead.
    if (in.op == LOAD_ATTR ? descr != nullptr
                           : descr == nullptr ||
                                 !PyType_HasFeature(Py_TYPE(descr), Py_TPFLAGS_METHOD_DESCRIPTOR)) {
      return nullptr;
    }
    own = sealtrace_instance_attr(owner, name, &known);
    if (known == 0 || (in.op == LOAD_ATTR && own == nullptr)) return nullptr;
  }
  const int depth = static_cast<int>(sp - f->localsplus);
  ShadowFrame* sf = quick_event(ts, f, depth);
  if (sf == nullptr) return nullptr;
  if (in.op == STORE_ATTR) {
    set_slot(addr(owner), attr_key(name), sf->slots[static_cast<std::size_t>(depth) - 2],
             addr(sp[-2]), counter_.value());
    return sf;
  }
  const Slot source = instance_attr_source(owner, name, in.op == LOAD_ATTR, true);
  tag = source.tag;
  value = source.value;
  return sf;
}

// STORE_SUBSCR into a dict by a string or an int or into a list by an int, LIST_APPEND and
// MAP_ADD (a comprehension's list or dict): C alone runs them. Counted before they run, with the
// slot set as begin sets it. Refused where the store would free something that is not plain
// (the value a dict key or a list item held, a container nothing else holds) and while a slice
// is recorded (their edges are begin's and complete's).
ShadowFrame* Tracer::step_putting(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                                  PyObject** sp) {
  if (recording_edges(counter_.value() + 1)) return nullptr;
  if (in.op == STORE_SUBSCR) {
    PyObject* container = sp[-2];
    PyObject* key = sp[-1];
    if (Py_REFCNT(container) < 2) return nullptr;
    if (PyDict_CheckExact(container) && plain_key(key)) {
      if (!replaces_quietly(container, key)) return nullptr;
    } else if (PyList_CheckExact(container) && PyLong_CheckExact(key)) {
      std::uint64_t slot = 0;
      PyObject* current = nullptr;  // the item the index names, if in range
      if (subscript_key(container, key, slot, &current) && !drops_quietly(current)) {
        return nullptr;
      }
    } else {
      return nullptr;
    }
  } else if (in.op == LIST_APPEND) {
    if (!PyList_CheckExact(sp[-1 - in.oparg])) return nullptr;
  } else {  // MAP_ADD: [..., dict, ..., key, value]
    PyObject* dict = sp[-2 - in.oparg];
    if (!PyDict_CheckExact(dict) || !plain_key(sp[-2]) || !replaces_quietly(dict, sp[-2])) {
      return nullptr;
    }
  }
  const int depth = static_cast<int>(sp - f->localsplus);
  ShadowFrame* sf = quick_event(ts, f, depth);
  if (sf == nullptr) return nullptr;
  const Tag now = counter_.value();
  if (in.op == STORE_SUBSCR) {
    begin_subscr_store(*sf, depth, now);
  } else if (in.op == LIST_APPEND) {
    begin_list_append(*sf, in, depth, now);
  } else {
    begin_map_add(*sf, in, depth, now);
  }
  return sf;
}

// An iterable whose iterator C makes, running no Python code: the containers a `for` commonly
// steps over, str, range, and iterators that are their own.
bool iterates_quietly(PyObject* v) {
  PyTypeObject* t = Py_TYPE(v);
  return t == &PyList_Type || t == &PyTuple_Type || t == &PyDict_Type || t == &PySet_Type ||
         t == &PyFrozenSet_Type || t == &PyUnicode_Type || t == &PyRange_Type ||
         t == &PyDictKeys_Type || t == &PyDictValues_Type || t == &PyDictItems_Type ||
         t == &PyListIter_Type || t == &PyTupleIter_Type || t == &PyRangeIter_Type ||
         t == &PyDictIterKey_Type || t == &PyDictIterValue_Type || t == &PyDictIterItem_Type ||
         t == &PyGen_Type;
}

// BUILD_TUPLE, BUILD_LIST, `{}` (BUILD_MAP of nothing), BUILD_CONST_KEY_MAP (its keys plain and
// distinct: hashing them runs no Python code, and no value is replaced, which could free it)
// and GET_ITER of what iterates quietly, while no slice is recorded: counted before they run;
// quick_built then tags what they made as complete_build_seq, complete_build_map and
// complete_get_iter do.
ShadowFrame* Tracer::step_building(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                                   PyObject** sp) {
  if (recording_edges(counter_.value() + 1)) return nullptr;
  if ((in.op == BUILD_MAP && in.oparg != 0) || (in.op == GET_ITER && !iterates_quietly(sp[-1]))) {
    return nullptr;
  }
  if (in.op == BUILD_CONST_KEY_MAP) {
    PyObject* keys = sp[-1];
    constexpr int kMostKeys = 32;  // checked pairwise
    if (!PyTuple_CheckExact(keys) || PyTuple_GET_SIZE(keys) != in.oparg || in.oparg > kMostKeys) {
      return nullptr;
    }
    for (int k = 0; k < in.oparg; ++k) {
      PyObject* key = PyTuple_GET_ITEM(keys, k);
      if (!plain_key(key)) return nullptr;
      // Equal constants of one code are one object (the compiler merges them).
      for (int j = 0; j < k; ++j) {
        if (PyTuple_GET_ITEM(keys, j) == key) return nullptr;
      }
    }
  }
  ShadowFrame* sf = quick_event(ts, f, static_cast<int>(sp - f->localsplus));
  if (sf == nullptr) return nullptr;
  if (in.op == BUILD_CONST_KEY_MAP) {
    built_keys_ = sp[-1];
    built_values_.assign(sp - 1 - in.oparg, sp - 1);
  } else if (in.op == GET_ITER) {
    built_values_.assign(sp - 1, sp);  // the iterable
  }
  return sf;
}

void Tracer::quick_built(ShadowFrame& sf, const Instr& in, int after) {
  const int base = after - 1;
  PyObject* obj = sf.iframe->localsplus[base];
  Tag* const s = sf.slots.data();
  const Tag now = counter_.value();
  const Tag first = s[base];  // the first item's tag, until the result's takes its place
  s[base] = now;
  if (in.op == GET_ITER) {
    PyObject* src = built_values_[0];  // alive if a list or a tuple: its iterator holds it
    if (obj == src) s[base] = first;
    drop_iters(sf, base);
    if (obj != src && (PyList_CheckExact(src) || PyTuple_CheckExact(src))) {
      sf.iters.push_back(IterState{base, obj, src, 0});
    }
    return;
  }
  if (!trackable(obj)) return;
  if (in.op == BUILD_CONST_KEY_MAP || in.op == BUILD_MAP) {
    if (!PyDict_Check(obj)) return;
    slots_.mark_created(addr(obj), now, PyDict_GET_SIZE(obj) == 0);
    for (int k = 0; k < in.oparg; ++k) {  // BUILD_MAP's oparg: 0
      std::uint64_t key = 0;
      if (!item_key(PyTuple_GET_ITEM(built_keys_, k), key) || key == 0) continue;
      set_slot(addr(obj), key, k == 0 ? first : s[base + k],
               addr(built_values_[static_cast<std::size_t>(k)]), now);
    }
    return;
  }
  slots_.mark_created(addr(obj), now, Py_SIZE(obj) == 0);
  const Py_ssize_t size = Py_SIZE(obj);
  for (Py_ssize_t k = 0; k < in.oparg && k < size; ++k) {
    const Tag t = k == 0 ? first : s[base + k];
    if (t != 0) set_slot(addr(obj), index_key(k), t, addr(seq_item(obj, k)), now);
  }
}

// What a quick attribute load pushed: LOAD_METHOD's [method, self] keeps self's tag (the method
// is the load's own value); an attribute (LOAD_ATTR's, or LOAD_METHOD's [NULL, attribute]) keeps
// the tag of the slot remembered if that slot still held it, else is a value of the load's own
// unless a slot holds that very object (complete_slot_load's and complete_load_method's rules).
void Tracer::quick_attribute(ShadowFrame& sf, const Instr& in, int before, int after, Tag tag,
                             std::uintptr_t value) {
  if (in.op == STORE_ATTR) return;
  Tag* const s = sf.slots.data();
  PyObject** const lp = sf.iframe->localsplus;
  const Tag now = counter_.value();
  const Tag owner = s[before - 1];
  if (in.op == LOAD_METHOD && lp[after - 2] != nullptr) {
    s[after - 2] = now;
    s[after - 1] = owner;
    return;
  }
  s[after - 1] = quick_read(lp[after - 1], tag, value);
  if (in.op == LOAD_METHOD) s[after - 2] = 0;
}

// A quickly counted operator raised: its pending half as begin would have left it (the inputs'
// tags are still in the shadow; their objects, freed or not, are not kept).
void Tracer::quick_raised(ShadowFrame& sf, int index, int depth) {
  const Instr& in = sf.code->instrs[static_cast<std::size_t>(index)];
  begin_pending(sf, in, index, depth);
  std::fill(sf.p.in_objs.begin(), sf.p.in_objs.end(), nullptr);
}

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
    if (!in.looped && kwnames == nullptr) goto handoff;
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
          quick = step_attribute(ts, f, in, sp, quick_tag, quick_value);
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
          v = PyDict_GetItemWithError(f->f_globals, name);
          if (v == nullptr && !PyErr_Occurred()) v = PyDict_GetItemWithError(f->f_builtins, name);
          if (v == nullptr) {
            if (!PyErr_Occurred()) format_check_arg(PyExc_NameError, kNameError, name);
            goto error;
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
        PyObject* res = PyObject_GetAttr(owner, PyTuple_GET_ITEM(names, oparg));
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
        const int found = _PyObject_GetMethod(obj, PyTuple_GET_ITEM(names, oparg), &meth);
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
