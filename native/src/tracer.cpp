// The provenance tracer (see tracer.hpp). CPython 3.11 only: it reads the
// interpreter's frame layout (_PyInterpreterFrame) to see the live value stack.
#define Py_BUILD_CORE 1
#include "tracer.hpp"

#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>
#include <cstring>

namespace sealtrace {
namespace {

Tracer* g_tracer = nullptr;
std::uint64_t g_generation = 0;
Py_ssize_t g_extra_index = -1;
destructor g_subtype_dealloc = nullptr;

constexpr std::uint8_t kResume = 151;
constexpr std::uint8_t kExtendedArg = 144;
constexpr std::uint8_t kKwNames = 172;
constexpr std::uint8_t kLoadGlobalOp = 116;
constexpr std::uint8_t kListToTuple = 82;
constexpr std::uint64_t kCellKey = slot_key(SlotKind::kCell, 0);
constexpr std::uint64_t kDefaultsKey = slot_key(SlotKind::kAttr, 0xDEF);
constexpr std::size_t kMaxCopiedItems = 4096;
constexpr std::size_t kMaxCallbacks = 64;
constexpr std::uint8_t kPrecallOp = 166;
constexpr std::uint8_t kCallOp = 171;
constexpr std::uint8_t kForIterOp = 93;
constexpr std::uint8_t kSendOp = 123;
constexpr std::uint8_t kReraiseOp = 119;
constexpr std::uint8_t kPopExceptOp = 89;
constexpr std::uint8_t kEndAsyncForOp = 54;

inline std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

void free_code_info(void* info) { delete static_cast<CodeInfo*>(info); }

// Deallocation hooks: an object's slot tags die with it, before its address can be reused.
struct Hook {
  PyTypeObject* type;
  destructor original;
  destructor hook;
};
constexpr int kHooks = 10;
Hook g_hooks[kHooks];

template <int N>
void hooked_dealloc(PyObject* obj) {
  if (g_tracer != nullptr) g_tracer->on_dealloc(obj);
  g_hooks[N].original(obj);
}

template <int... N>
void fill_hook_functions(std::integer_sequence<int, N...>) {
  ((g_hooks[N].hook = &hooked_dealloc<N>), ...);
}

void install_hooks() {
  PyTypeObject* types[kHooks] = {&PyList_Type,     &PyDict_Type,   &PyTuple_Type,
                                 &PyCell_Type,     &PyBaseObject_Type, &PyFunction_Type,
                                 &PyGen_Type,      &PyCoro_Type,   &PyAsyncGen_Type,
                                 &PyType_Type};
  fill_hook_functions(std::make_integer_sequence<int, kHooks>{});
  for (int i = 0; i < kHooks; ++i) {
    g_hooks[i].type = types[i];
    if (types[i]->tp_dealloc != g_hooks[i].hook) {
      g_hooks[i].original = types[i]->tp_dealloc;
      types[i]->tp_dealloc = g_hooks[i].hook;
    }
  }
}

void remove_hooks() {
  for (auto& h : g_hooks) {
    if (h.type != nullptr && h.type->tp_dealloc == h.hook) h.type->tp_dealloc = h.original;
  }
}

bool hooked(destructor d) {
  for (const auto& h : g_hooks) {
    if (h.hook == d) return true;
  }
  return false;
}

int trampoline(PyObject*, PyFrameObject* frame, int what, PyObject* arg) {
  Tracer* t = g_tracer;
  return t == nullptr ? 0 : t->on_event(frame, what, arg);
}

// Objects the interpreter shares between unrelated values: identity says nothing.
bool shared(PyObject* v) {
  if (v == Py_None || v == Py_True || v == Py_False || v == Py_Ellipsis) return true;
  if (PyLong_CheckExact(v)) {
    int overflow = 0;
    long x = PyLong_AsLongAndOverflow(v, &overflow);
    return overflow == 0 && x >= -5 && x <= 256;
  }
  if (PyUnicode_CheckExact(v)) return PyUnicode_GET_LENGTH(v) <= 1;
  if (PyBytes_CheckExact(v)) return PyBytes_GET_SIZE(v) <= 1;
  if (PyTuple_CheckExact(v)) return PyTuple_GET_SIZE(v) == 0;
  return false;
}

// Dict keys whose hash runs no Python code.
bool item_key(PyObject* key, std::uint64_t& out) {
  PyTypeObject* t = Py_TYPE(key);
  if (t != &PyUnicode_Type && t != &PyLong_Type && t != &PyBytes_Type && t != &PyFloat_Type &&
      t != &PyBool_Type && key != Py_None) {
    return false;
  }
  Py_hash_t h = PyObject_Hash(key);
  if (h == -1) {
    PyErr_Clear();
    return false;
  }
  out = slot_key(SlotKind::kItem, static_cast<std::uint64_t>(h));
  return true;
}

std::uint64_t name_key(PyObject* name) {
  std::uint64_t k = 0;
  return item_key(name, k) ? k : 0;
}

std::uint64_t attr_key(PyObject* name) {
  Py_hash_t h = PyObject_Hash(name);
  if (h == -1) {
    PyErr_Clear();
    return 0;
  }
  return slot_key(SlotKind::kAttr, static_cast<std::uint64_t>(h));
}

std::uint64_t index_key(Py_ssize_t i) {
  return slot_key(SlotKind::kIndex, static_cast<std::uint64_t>(i));
}

// The slot of container[key], for lists, tuples and dicts.
bool subscript_key(PyObject* container, PyObject* key, std::uint64_t& out, PyObject** current) {
  *current = nullptr;
  if (PyList_Check(container) || PyTuple_Check(container)) {
    if (!PyLong_CheckExact(key)) return false;
    Py_ssize_t i = PyLong_AsSsize_t(key);
    if (i == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    Py_ssize_t n = Py_SIZE(container);
    if (i < 0) i += n;
    if (i < 0 || i >= n) return false;
    out = index_key(i);
    *current = PyList_Check(container) ? PyList_GET_ITEM(container, i)
                                       : PyTuple_GET_ITEM(container, i);
    return true;
  }
  if (PyDict_Check(container)) {
    if (!item_key(key, out)) return false;
    *current = PyDict_GetItemWithError(container, key);
    if (*current == nullptr) PyErr_Clear();
    return true;
  }
  return false;
}

PyObject* seq_item(PyObject* seq, Py_ssize_t i) {
  return PyList_Check(seq) ? PyList_GET_ITEM(seq, i) : PyTuple_GET_ITEM(seq, i);
}

std::string utf8(PyObject* s) {
  if (s == nullptr || !PyUnicode_Check(s)) return {};
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &n);
  if (p == nullptr) {
    PyErr_Clear();
    return {};
  }
  return std::string(p, static_cast<std::size_t>(n));
}

PyObject* namespace_of(PyObject* owner) {
  return PyModule_Check(owner) ? PyModule_GetDict(owner) : nullptr;
}

// 3.11 keeps these structs private (listobject.c, tupleobject.c, genobject.c); their
// layouts are fixed for the release the engine is built for.
struct SeqIterLayout {
  PyObject_HEAD
  Py_ssize_t it_index;  // of the next item
  PyObject* it_seq;     // NULL once exhausted
};
struct AsyncGenWrappedLayout {
  PyObject_HEAD
  PyObject* agw_val;
};

// The slot tag of the item a list or tuple iterator just returned: iterators made in
// another frame (a comprehension's `.0`, a generator expression's) still know the index.
Tag iterated_item_tag(const SlotTable& slots, PyObject* iter, PyObject* item) {
  if (!Py_IS_TYPE(iter, &PyListIter_Type) && !Py_IS_TYPE(iter, &PyTupleIter_Type)) return 0;
  const auto* it = reinterpret_cast<const SeqIterLayout*>(iter);
  const Py_ssize_t i = it->it_index - 1;
  PyObject* seq = it->it_seq;
  if (seq == nullptr || i < 0 || i >= Py_SIZE(seq) || seq_item(seq, i) != item) return 0;
  return slots.get(addr(seq), index_key(i), addr(item));
}

// An async generator yields its values wrapped; the consumer receives the value inside.
PyObject* unwrap_async_gen_value(PyObject* v) {
  if (v == nullptr || !Py_IS_TYPE(v, &_PyAsyncGenWrappedValue_Type)) return v;
  return reinterpret_cast<AsyncGenWrappedLayout*>(v)->agw_val;
}

}  // namespace

Tracer::Tracer(PyObject* own_code) : own_code_(own_code) {
  Py_XINCREF(own_code_);
  generation_ = ++g_generation;
}

Tracer::~Tracer() {
  detach();
  for (auto* cb : {stop_counter_cb_, stop_line_cb_, capture_pre_, capture_post_, own_code_,
                   builtins_, edges_done_, every_cb_}) {
    Py_XDECREF(cb);
  }
}

void Tracer::attach() {
  if (attached_) return;
  if (g_tracer != nullptr) throw std::runtime_error("another provenance engine is attached");
  if (g_extra_index < 0) {
    g_extra_index = _PyEval_RequestCodeExtraIndex(free_code_info);
    if (g_extra_index < 0) throw std::runtime_error("no code-object extra slot available");
  }
  if (g_subtype_dealloc == nullptr) {
    // The deallocator every class statement's type gets: found on a throwaway class.
    PyObject* cls = PyObject_CallFunction(reinterpret_cast<PyObject*>(&PyType_Type), "s()O",
                                          "_sealtrace_probe", PyDict_New());
    if (cls == nullptr) throw std::runtime_error("cannot probe the class deallocator");
    g_subtype_dealloc = reinterpret_cast<PyTypeObject*>(cls)->tp_dealloc;
    Py_DECREF(cls);
  }
  if (builtins_ == nullptr) builtins_ = PyImport_ImportModule("builtins");
  if (builtins_ == nullptr) throw std::runtime_error("cannot import builtins");
  g_tracer = this;
  install_hooks();
  PyEval_SetTrace(trampoline, nullptr);
  attached_ = true;
}

void Tracer::detach() {
  if (!attached_) return;
  PyEval_SetTrace(nullptr, nullptr);
  remove_hooks();
  g_tracer = nullptr;
  attached_ = false;
  for (auto* sf : stack_) release(sf);
  stack_.clear();
  for (auto& [f, sf] : suspended_) release(sf);
  suspended_.clear();
}

// -- code objects ---------------------------------------------------------------------------

CodeInfo* Tracer::code_info(PyCodeObject* code) {
  void* extra = nullptr;
  if (_PyCode_GetExtra(reinterpret_cast<PyObject*>(code), g_extra_index, &extra) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  auto* info = static_cast<CodeInfo*>(extra);
  if (info != nullptr && info->generation == generation_) return info;
  // An older tracer's record is freed by _PyCode_SetExtra when it is replaced.
  info = build_code_info(code);
  if (_PyCode_SetExtra(reinterpret_cast<PyObject*>(code), g_extra_index, info) < 0) {
    PyErr_Clear();
    delete info;
    return nullptr;
  }
  return info;
}

CodeInfo* Tracer::build_code_info(PyCodeObject* code) {
  auto* info = new CodeInfo;
  info->generation = generation_;
  info->index = static_cast<std::uint32_t>(code_names_.size());
  std::string filename = utf8(code->co_filename);
  std::string qualname = utf8(code->co_qualname);
  code_names_.push_back({filename, qualname, code->co_firstlineno});
  info->own = filename.rfind("<frozen ", 0) == 0;
  if (!info->own && own_code_ != nullptr) {
    PyObject* r = PyObject_CallOneArg(own_code_, code->co_filename);
    if (r == nullptr) {
      PyErr_Clear();
      ++stats_.callback_errors;
    } else {
      info->own = PyObject_IsTrue(r) == 1;
      Py_DECREF(r);
    }
  }
  if (info->own) return info;
  info->nlocalsplus = code->co_nlocalsplus;
  info->stacksize = code->co_stacksize;
  info->argslots = code->co_argcount + code->co_kwonlyargcount +
                   ((code->co_flags & CO_VARARGS) ? 1 : 0) +
                   ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
  if (code->co_localspluskinds != nullptr && PyBytes_Check(code->co_localspluskinds)) {
    const char* k = PyBytes_AS_STRING(code->co_localspluskinds);
    info->kinds.assign(k, k + PyBytes_GET_SIZE(code->co_localspluskinds));
  }
  info->kinds.resize(static_cast<std::size_t>(info->nlocalsplus), 0);
  // co_code gives the de-specialised instructions, as the tracer sees them executed.
  PyObject* bytes = PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_code");
  if (bytes == nullptr || !PyBytes_Check(bytes)) {
    PyErr_Clear();
    Py_XDECREF(bytes);
    info->own = true;  // cannot model it: leave it untraced rather than guess
    return info;
  }
  const auto* raw = reinterpret_cast<const std::uint8_t*>(PyBytes_AS_STRING(bytes));
  const Py_ssize_t units = PyBytes_GET_SIZE(bytes) / 2;
  info->instrs.resize(static_cast<std::size_t>(units));
  Py_ssize_t run_start = -1;
  std::int32_t ext = 0;
  for (Py_ssize_t i = 0; i < units; ++i) {
    const std::uint8_t op = raw[2 * i];
    const std::uint8_t arg = raw[2 * i + 1];
    if (op == kExtendedArg) {
      if (run_start < 0) run_start = i;
      ext = (ext | arg) << 8;
      continue;
    }
    Instr in;
    in.op = op;
    in.rule = op_model(op).rule;
    in.oparg = ext | arg;
    in.line = PyCode_Addr2Line(code, static_cast<int>(i * 2));
    int e0 = PyCompile_OpcodeStackEffectWithJump(op, in.oparg, 0);
    int e1 = PyCompile_OpcodeStackEffectWithJump(op, in.oparg, 1);
    in.effect = e0;
    in.effect_jump = e1;
    if (PyErr_Occurred()) PyErr_Clear();
    // The compiler books CALL's argument pops on PRECALL; at run time CALL does them.
    if (op == kPrecallOp) in.effect = in.effect_jump = 0;
    if (op == kCallOp) {
      in.effect = in.effect_jump = -(in.oparg + 1);
    }
    for (Py_ssize_t j = (run_start < 0 ? i : run_start); j <= i; ++j) {
      info->instrs[static_cast<std::size_t>(j)] = in;
    }
    run_start = -1;
    ext = 0;
  }
  Py_DECREF(bytes);
  refresh_breakpoints(*info);
  info->watch_end = !end_file_.empty() && filename == end_file_ && qualname == "<module>";
  return info;
}

std::int64_t Tracer::code_index(PyObject* code) {
  if (!PyCode_Check(code)) return -1;
  CodeInfo* info = code_info(reinterpret_cast<PyCodeObject*>(code));
  return info == nullptr ? -1 : static_cast<std::int64_t>(info->index);
}

// -- shadow frames --------------------------------------------------------------------------

ShadowFrame* Tracer::acquire(_PyInterpreterFrame* iframe, CodeInfo* code) {
  ShadowFrame* sf;
  if (free_.empty()) {
    pool_.push_back(std::make_unique<ShadowFrame>());
    sf = pool_.back().get();
  } else {
    sf = free_.back();
    free_.pop_back();
  }
  sf->iframe = iframe;
  sf->code = code;
  sf->slots.assign(static_cast<std::size_t>(code->nlocalsplus + code->stacksize + 1), 0);
  sf->p.active = false;
  sf->kw_pending = false;
  sf->last_line = -1;
  sf->last_index = -1;
  sf->iters.clear();
  sf->handled.clear();
  return sf;
}

void Tracer::release(ShadowFrame* sf) {
  sf->p.active = false;
  free_.push_back(sf);
}

ShadowFrame* Tracer::find_shadow(PyFrameObject* frame) const {
  _PyInterpreterFrame* f = frame->f_frame;
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
    if ((*it)->iframe == f) return *it;
  }
  auto s = suspended_.find(f);
  return s == suspended_.end() ? nullptr : s->second;
}

ShadowFrame* Tracer::resync(PyFrameObject* frame) {
  _PyInterpreterFrame* f = frame->f_frame;
  ++stats_.frame_resyncs;
  for (std::size_t i = stack_.size(); i-- > 0;) {
    if (stack_[i]->iframe == f) {
      while (stack_.size() > i + 1) {
        release(stack_.back());
        stack_.pop_back();
      }
      return stack_.back();
    }
  }
  CodeInfo* info = code_info(f->f_code);
  if (info == nullptr || info->own) return nullptr;
  ShadowFrame* sf = acquire(f, info);
  stack_.push_back(sf);
  return sf;
}

// -- events ---------------------------------------------------------------------------------

int Tracer::on_event(PyFrameObject* frame, int what, PyObject* arg) {
  switch (what) {
    case PyTrace_OPCODE:
      return on_opcode(frame);
    case PyTrace_CALL:
      return on_call(frame);
    case PyTrace_RETURN:
      return on_return(frame, arg);
    case PyTrace_EXCEPTION:
      return on_exception(frame, arg);
    default:
      return 0;
  }
}

int Tracer::on_call(PyFrameObject* frame) {
  _PyInterpreterFrame* f = frame->f_frame;
  CodeInfo* info = code_info(f->f_code);
  if (info == nullptr || info->own) {
    frame->f_trace_opcodes = 0;
    frame->f_trace_lines = 0;
    return 0;
  }
  frame->f_trace_lines = 0;
  frame->f_trace_opcodes = 1;
  ++stats_.frames;
  auto parked = suspended_.find(f);
  if (parked != suspended_.end()) {
    ShadowFrame* sf = parked->second;
    suspended_.erase(parked);
    if (sf->code == info) {
      stack_.push_back(sf);
      stats_.max_shadow_depth = std::max(stats_.max_shadow_depth, stack_.size());
      return 0;
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
  if (fresh && caller != nullptr && caller->iframe == f->previous && caller->p.active) {
    bind_arguments(caller->p, *sf);
  }
  return 0;
}

int Tracer::on_opcode(PyFrameObject* frame) {
  _PyInterpreterFrame* f = frame->f_frame;
  ShadowFrame* sf = stack_.empty() ? nullptr : stack_.back();
  if (sf == nullptr || sf->iframe != f) {
    sf = resync(frame);
    if (sf == nullptr) return 0;
  }
  const int depth = f->stacktop;
  if (depth < sf->code->nlocalsplus ||
      depth > sf->code->nlocalsplus + sf->code->stacksize) {
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
    call_stop(cb, frame);
    Py_DECREF(cb);
  }
  if (stop_line_cb_ != nullptr && info->breakpoint_generation != breakpoint_generation_) {
    refresh_breakpoints(*info);
  }
  if (!info->breakpoint.empty()) {
    const int line = info->instrs[static_cast<std::size_t>(index)].line;
    if (info->breakpoint[static_cast<std::size_t>(index)] != 0) {
      const bool entered = sf->last_line != line || index <= sf->last_index;
      if (entered && stop_line_cb_ != nullptr && ++hits_ == stop_hit_) {
        PyObject* cb = stop_line_cb_;
        stop_line_cb_ = nullptr;
        call_stop(cb, frame);
        Py_DECREF(cb);
      }
    }
    sf->last_line = line;
    sf->last_index = index;
  }
  if (now == stop_counter_ && stop_counter_cb_ != nullptr) {
    PyObject* cb = stop_counter_cb_;
    stop_counter_cb_ = nullptr;
    call_stop(cb, frame);
    Py_DECREF(cb);
  }
  if (now >= capture_min_ && now <= capture_max_ && capture_.count(now) != 0) {
    capture_pre(frame, sf->p);
  }
  return 0;
}

int Tracer::on_return(PyFrameObject* frame, PyObject* value) {
  _PyInterpreterFrame* f = frame->f_frame;
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
      PyObject* outputs = Py_BuildValue("[(OK)]", value, static_cast<unsigned long long>(ret));
      if (outputs != nullptr) {
        PyObject* r = PyObject_CallFunction(capture_post_, "KOOO",
                                            static_cast<unsigned long long>(p.counter), outputs,
                                            Py_False, Py_None);
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
    if (!f->is_entry && caller != nullptr && caller->iframe == f->previous &&
        caller->p.active) {
      caller->p.has_return = true;
      caller->p.return_tag = ret;
    } else {
      last_return_.value = value;
      last_return_.tag = ret;
      last_return_.seq = ++return_seq_;
      // A generator's final return only ends the iteration; its yields are the values.
      const bool final_return = !yielding && (f->f_code->co_flags &
                                              (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) != 0;
      if (!final_return && caller != nullptr && caller->iframe == f->previous &&
          caller->p.active) {
        Pending& cp = caller->p;
        if (ret != 0 && cp.callbacks.size() < kMaxCallbacks &&
            (cp.callbacks.empty() || cp.callbacks.back() != ret)) {
          cp.callbacks.push_back(ret);
        }
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

int Tracer::on_exception(PyFrameObject* frame, PyObject* arg) {
  ++stats_.exceptions;
  if (stack_.empty() || stack_.back()->iframe != frame->f_frame) return 0;
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

// -- instructions ---------------------------------------------------------------------------

bool Tracer::trackable(PyObject* obj) const noexcept {
  PyTypeObject* t = Py_TYPE(obj);
  while (t != nullptr && t->tp_dealloc == g_subtype_dealloc) t = t->tp_base;
  return t != nullptr && hooked(t->tp_dealloc);
}

void Tracer::note_mismatch(const ShadowFrame& sf, const Instr& in, Tag counter) noexcept {
  if (stats_.depth_mismatches++ == 0) {
    stats_.first_mismatch_code = sf.code->index;
    stats_.first_mismatch_line = in.line;
    stats_.first_mismatch_counter = counter;
  }
  ++stats_.mismatches_by_op[in.op];
}

void Tracer::begin(ShadowFrame& sf, int index, int depth) {
  const Instr& in = sf.code->instrs[static_cast<std::size_t>(index)];
  _PyInterpreterFrame* f = sf.iframe;
  PyCodeObject* code = f->f_code;
  PyObject** lp = f->localsplus;
  Tag* s = sf.slots.data();
  Pending& p = sf.p;
  const Tag now = counter_.value();
  p.active = true;
  p.raised = false;
  p.has_return = false;
  p.taint_source = false;
  p.tainted_inputs = false;
  p.flag = false;
  p.kw = false;
  p.op = in.op;
  p.rule = in.rule;
  p.oparg = in.oparg;
  p.index = index;
  p.before = depth;
  p.counter = now;
  p.return_seq = return_seq_;
  p.return_tag = 0;
  p.aux_tag = 0;
  p.aux_value = nullptr;
  p.callbacks.clear();
  int pops = op_pops(in.op, in.oparg);
  int peeks = op_peeks(in.op, in.oparg);
  const int stack_depth = depth - sf.code->nlocalsplus;
  if (pops + peeks > stack_depth) {
    note_mismatch(sf, in, now);
    pops = std::min(pops, stack_depth);
    peeks = std::max(0, std::min(peeks, stack_depth - pops));
  }
  p.pops = pops;
  const int n = pops + peeks;
  const int first = depth - n;
  p.in_objs.resize(static_cast<std::size_t>(n));
  p.in_tags.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    p.in_objs[static_cast<std::size_t>(i)] = lp[first + i];
    p.in_tags[static_cast<std::size_t>(i)] = s[first + i];
  }
  if (tainting_) note_taint(sf);
  auto top = [&](int k) -> PyObject* { return lp[depth - 1 - k]; };
  auto top_tag = [&](int k) -> Tag { return s[depth - 1 - k]; };
  auto remember = [&](const Slot* slot) {
    if (slot != nullptr) {
      p.aux_tag = slot->tag;
      p.aux_value = reinterpret_cast<PyObject*>(slot->value);
    }
  };
  switch (in.rule) {
    case Rule::kStoreName:
    case Rule::kStoreGlobal:
    case Rule::kDeleteName:
    case Rule::kDeleteGlobal: {
      const bool local = in.rule == Rule::kStoreName || in.rule == Rule::kDeleteName;
      PyObject* ns = local ? f->f_locals : f->f_globals;
      if (ns == nullptr || !trackable(ns)) break;
      const std::uint64_t key = name_key(PyTuple_GET_ITEM(code->co_names, in.oparg));
      if (in.rule == Rule::kStoreName || in.rule == Rule::kStoreGlobal) {
        set_slot(addr(ns), key, top_tag(0), addr(top(0)), now);
      } else {
        slots_.erase(addr(ns), key, now);
      }
      break;
    }
    case Rule::kLoadGlobal:
    case Rule::kLoadName: {
      const int name_index = in.op == kLoadGlobalOp ? (in.oparg >> 1) : in.oparg;
      const std::uint64_t key = name_key(PyTuple_GET_ITEM(code->co_names, name_index));
      const Slot* slot = nullptr;
      if (in.rule == Rule::kLoadName && f->f_locals != nullptr) {
        slot = slots_.slot(addr(f->f_locals), key);
      }
      if (slot == nullptr) slot = slots_.slot(addr(f->f_globals), key);
      remember(slot);
      break;
    }
    case Rule::kLoadClassDeref: {
      PyObject* name = PyTuple_GET_ITEM(code->co_localsplusnames, in.oparg);
      const Slot* slot = nullptr;
      if (f->f_locals != nullptr) slot = slots_.slot(addr(f->f_locals), name_key(name));
      if (slot == nullptr && lp[in.oparg] != nullptr) slot = slots_.slot(addr(lp[in.oparg]), kCellKey);
      remember(slot);
      break;
    }
    case Rule::kLoadAttr:
    case Rule::kLoadMethod:
    case Rule::kImportFrom: {
      PyObject* owner = top(0);
      PyObject* name = PyTuple_GET_ITEM(code->co_names, in.oparg);
      PyObject* ns = namespace_of(owner);
      remember(ns != nullptr ? slots_.slot(addr(ns), name_key(name))
                             : slots_.slot(addr(owner), attr_key(name)));
      if (p.aux_tag == 0 && ns == nullptr && in.rule != Rule::kImportFrom) {
        PyObject* v = nullptr;
        p.aux_tag = class_attr_slot(owner, name, &v);
        p.aux_value = v;
      }
      break;
    }
    case Rule::kStoreAttr:
    case Rule::kDeleteAttr: {
      PyObject* owner = top(0);
      PyObject* name = PyTuple_GET_ITEM(code->co_names, in.oparg);
      PyObject* ns = namespace_of(owner);
      PyObject* target = ns != nullptr ? ns : owner;
      const std::uint64_t key = ns != nullptr ? name_key(name) : attr_key(name);
      if (!trackable(target)) {
        ++stats_.untracked_writes;
      } else if (in.rule == Rule::kStoreAttr) {
        set_slot(addr(target), key, top_tag(1), addr(top(1)), now);
      } else {
        slots_.erase(addr(target), key, now);
      }
      break;
    }
    case Rule::kBinarySubscr: {
      std::uint64_t key = 0;
      PyObject* current = nullptr;
      if (subscript_key(top(1), top(0), key, &current)) {
        const Tag t = slots_.get(addr(top(1)), key, addr(current));
        if (t != 0) {
          p.aux_tag = t;
          p.aux_value = current;
        }
      }
      break;
    }
    case Rule::kStoreSubscr: {
      PyObject* container = top(1);
      PyObject* key_obj = top(0);
      std::uint64_t key = 0;
      PyObject* current = nullptr;
      if (!trackable(container)) {
        ++stats_.untracked_writes;
      } else if ((PyList_Check(container) || PyDict_Check(container)) &&
                 (subscript_key(container, key_obj, key, &current) ||
                  (PyDict_Check(container) && item_key(key_obj, key)))) {
        set_slot(addr(container), key, top_tag(2), addr(top(2)), now);
      } else {
        slots_.drop_slots(addr(container), now);
      }
      break;
    }
    case Rule::kDeleteSubscr: {
      PyObject* container = top(1);
      std::uint64_t key = 0;
      if (PyDict_Check(container) && item_key(top(0), key)) {
        slots_.erase(addr(container), key, now);
      } else {
        slots_.drop_slots(addr(container), now);
      }
      break;
    }
    case Rule::kLoadDeref: {
      PyObject* cell = lp[in.oparg];
      if (cell != nullptr) remember(slots_.slot(addr(cell), kCellKey));
      break;
    }
    case Rule::kStoreDeref:
    case Rule::kDeleteDeref: {
      PyObject* cell = lp[in.oparg];
      if (cell == nullptr || !PyCell_Check(cell)) break;
      if (in.rule == Rule::kStoreDeref) {
        set_slot(addr(cell), kCellKey, top_tag(0), addr(top(0)), now);
      } else {
        slots_.erase(addr(cell), kCellKey, now);
      }
      break;
    }
    case Rule::kListAppend: {
      PyObject* list = lp[depth - 1 - in.oparg];
      if (PyList_Check(list) && trackable(list)) {
        set_slot(addr(list), index_key(PyList_GET_SIZE(list)), top_tag(0), addr(top(0)), now);
      }
      break;
    }
    case Rule::kMapAdd: {
      PyObject* map = lp[depth - 2 - in.oparg];
      std::uint64_t key = 0;
      if (PyDict_Check(map) && trackable(map) && item_key(top(1), key)) {
        set_slot(addr(map), key, top_tag(0), addr(top(0)), now);
      }
      break;
    }
    case Rule::kListExtend: {
      PyObject* list = lp[depth - 1 - in.oparg];
      PyObject* src = top(0);
      if (!PyList_Check(list) || !trackable(list)) break;
      if ((PyList_Check(src) || PyTuple_Check(src)) &&
          static_cast<std::size_t>(Py_SIZE(src)) <= kMaxCopiedItems) {
        const Py_ssize_t base = PyList_GET_SIZE(list);
        for (Py_ssize_t j = 0; j < Py_SIZE(src); ++j) {
          PyObject* item = seq_item(src, j);
          Tag t = slots_.get(addr(src), index_key(j), addr(item));
          set_slot(addr(list), index_key(base + j), t != 0 ? t : top_tag(0), addr(item), now);
        }
      } else {
        slots_.mark_updated(addr(list), now);
      }
      break;
    }
    case Rule::kDictUpdate: {
      PyObject* dict = lp[depth - 1 - in.oparg];
      PyObject* src = top(0);
      const ObjectRecord* record = slots_.find(addr(src));
      if (!PyDict_Check(dict) || !trackable(dict)) break;
      if (record != nullptr && PyDict_Check(src)) {
        std::vector<std::pair<std::uint64_t, Slot>> copy(record->slots.begin(),
                                                         record->slots.end());
        for (const auto& [key, slot] : copy) copy_slot(addr(dict), key, slot, now);
      } else {
        slots_.mark_updated(addr(dict), now);
      }
      break;
    }
    case Rule::kBuildMap: {
      p.keys.assign(static_cast<std::size_t>(in.oparg), 0);
      for (int i = 0; i < in.oparg; ++i) {
        item_key(p.in_objs[static_cast<std::size_t>(2 * i)], p.keys[static_cast<std::size_t>(i)]);
      }
      break;
    }
    case Rule::kBuildConstKeyMap: {
      PyObject* keys = top(0);
      p.keys.assign(static_cast<std::size_t>(in.oparg), 0);
      if (PyTuple_Check(keys) && PyTuple_GET_SIZE(keys) == in.oparg) {
        for (int i = 0; i < in.oparg; ++i) {
          item_key(PyTuple_GET_ITEM(keys, i), p.keys[static_cast<std::size_t>(i)]);
        }
      }
      break;
    }
    case Rule::kBuildSeq: {
      if (in.op != kListToTuple) break;
      PyObject* list = top(0);
      p.items.assign(static_cast<std::size_t>(PyList_Check(list) ? PyList_GET_SIZE(list) : 0), 0);
      for (std::size_t j = 0; j < p.items.size() && j < kMaxCopiedItems; ++j) {
        const auto i = static_cast<Py_ssize_t>(j);
        p.items[j] = slots_.get(addr(list), index_key(i), addr(PyList_GET_ITEM(list, i)));
      }
      break;
    }
    case Rule::kUnpackSequence: {
      PyObject* seq = top(0);
      p.items.assign(static_cast<std::size_t>(in.oparg), 0);
      if ((PyTuple_CheckExact(seq) || PyList_CheckExact(seq)) && Py_SIZE(seq) == in.oparg) {
        for (int i = 0; i < in.oparg; ++i) {
          p.items[static_cast<std::size_t>(i)] =
              slots_.get(addr(seq), index_key(i), addr(seq_item(seq, i)));
        }
      }
      break;
    }
    case Rule::kUnpackEx: {
      p.items.clear();
      if (p.in_objs.empty()) break;
      PyObject* seq = top(0);
      if ((PyTuple_CheckExact(seq) || PyList_CheckExact(seq)) &&
          static_cast<std::size_t>(Py_SIZE(seq)) <= kMaxCopiedItems) {
        p.items.resize(static_cast<std::size_t>(Py_SIZE(seq)));
        for (std::size_t j = 0; j < p.items.size(); ++j) {
          PyObject* item = seq_item(seq, static_cast<Py_ssize_t>(j));
          p.items[j] = slots_.get(addr(seq), index_key(static_cast<Py_ssize_t>(j)), addr(item));
        }
      }
      break;
    }
    case Rule::kMatchKeys:
    case Rule::kMatchClass: {
      // The slot each value of the result tuple would be read from: its tag, and the value
      // it tagged (compared, once the tuple exists, with what the instruction found).
      const bool keys = in.rule == Rule::kMatchKeys;
      p.items.clear();
      p.keys.clear();
      if (p.in_objs.size() < (keys ? 2U : 3U)) break;
      PyObject* subject = top(keys ? 1 : 2);
      auto want = [&](const Slot* slot) {
        p.items.push_back(slot != nullptr ? slot->tag : 0);
        p.keys.push_back(slot != nullptr ? static_cast<std::uint64_t>(slot->value) : 0);
      };
      if (keys) {
        if (!PyDict_Check(subject) || !PyTuple_Check(top(0))) break;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(top(0)); ++i) {
          std::uint64_t key = 0;
          const bool known = item_key(PyTuple_GET_ITEM(top(0), i), key);
          want(known ? slots_.slot(addr(subject), key) : nullptr);
        }
        break;
      }
      PyObject* names = top(0);
      if (!PyType_Check(top(1)) || !PyTuple_Check(names)) break;
      auto* cls = reinterpret_cast<PyTypeObject*>(top(1));
      static PyObject* const match_args_name = [] {
        PyObject* name = PyUnicode_InternFromString("__match_args__");
        if (name == nullptr) PyErr_Clear();
        return name;
      }();
      PyObject* match_args = in.oparg > 0 && match_args_name != nullptr
                                 ? _PyType_Lookup(cls, match_args_name)
                                 : nullptr;
      for (int i = 0; i < in.oparg; ++i) {
        if (match_args != nullptr && PyTuple_Check(match_args) &&
            i < PyTuple_GET_SIZE(match_args)) {
          want(slots_.slot(addr(subject), attr_key(PyTuple_GET_ITEM(match_args, i))));
        } else if (i == 0 && match_args == nullptr &&
                   PyType_HasFeature(cls, _Py_TPFLAGS_MATCH_SELF)) {
          p.items.push_back(p.in_tags[0]);  // `case int(v)`: the subject itself
          p.keys.push_back(addr(subject));
        } else {
          want(nullptr);
        }
      }
      for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(names); ++j) {
        want(slots_.slot(addr(subject), attr_key(PyTuple_GET_ITEM(names, j))));
      }
      break;
    }
    case Rule::kImportStar: {
      // `from m import *` copies the module's names here in C; their slots come along (a
      // read still checks that a slot holds the value it tagged).
      PyObject* module_ns = p.in_objs.empty() ? nullptr : namespace_of(top(0));
      const ObjectRecord* record = module_ns != nullptr ? slots_.find(addr(module_ns)) : nullptr;
      if (record == nullptr || f->f_locals == nullptr || !trackable(f->f_locals)) break;
      std::vector<std::pair<std::uint64_t, Slot>> copy(record->slots.begin(), record->slots.end());
      for (const auto& [key, slot] : copy) {
        copy_slot(addr(f->f_locals), key, slot, now);
      }
      break;
    }
    case Rule::kRaise: {
      // RERAISE and a bare `raise` unwind without an exception event: what lands in a
      // handler is the exception on the stack, or the one being handled.
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
      break;
    }
    case Rule::kPrecall: {
      const int null_slot = depth - in.oparg - 2;
      if (lp[null_slot] == nullptr && PyMethod_Check(lp[null_slot + 1])) {
        p.flag = true;
        p.aux_tag = s[null_slot + 1];
      }
      break;
    }
    case Rule::kCall:
      p.kw = sf.kw_pending;
      sf.kw_pending = false;
      if (!p.kw) model_call(sf);
      break;
    case Rule::kPushExcInfo:
      if (depth > sf.code->nlocalsplus) sf.handled.emplace_back(top(0), top_tag(0));
      break;
    default:
      if (in.op == kKwNames) sf.kw_pending = true;
      if (in.op == kPopExceptOp && !sf.handled.empty()) sf.handled.pop_back();
      if (in.op == kEndAsyncForOp && p.in_objs.size() == 2 && p.in_objs[1] != nullptr &&
          !PyErr_GivenExceptionMatches(p.in_objs[1], PyExc_StopAsyncIteration)) {
        // Anything else ends `async for` by being re-raised, without an exception event.
        exc_value_ = p.in_objs[1];
        exc_tag_ = p.in_tags[1];
        p.raised = true;
      }
      break;
  }
}

// Container methods and builtins implemented in C that move values in or out of slots.
void Tracer::model_call(ShadowFrame& sf) {
  Pending& p = sf.p;
  const Tag now = p.counter;
  PyObject* self = nullptr;
  const char* name = nullptr;
  PyObject* head = p.in_objs[0];
  PyObject* callable = p.in_objs[1];
  if (head != nullptr && Py_TYPE(head) == &PyMethodDescr_Type) {
    self = callable;
    name = reinterpret_cast<PyMethodDescrObject*>(head)->d_method->ml_name;
  } else if (head == nullptr && PyCFunction_Check(callable)) {
    self = PyCFunction_GET_SELF(callable);
    name = reinterpret_cast<PyCFunctionObject*>(callable)->m_ml->ml_name;
  }
  if (self == nullptr || name == nullptr) return;
  PyObject** args = p.in_objs.data() + 2;
  const Tag* tags = p.in_tags.data() + 2;
  const int argc = p.oparg;
  auto is = [&](const char* n) { return std::strcmp(name, n) == 0; };
  if (PyList_Check(self) && trackable(self)) {
    const Py_ssize_t len = PyList_GET_SIZE(self);
    if (is("append") && argc == 1) {
      set_slot(addr(self), index_key(len), tags[0], addr(args[0]), now);
    } else if (is("pop") && argc <= 1) {
      Py_ssize_t i = len - 1;
      if (argc == 1 && PyLong_CheckExact(args[0])) {
        i = PyLong_AsSsize_t(args[0]);
        if (i == -1 && PyErr_Occurred()) PyErr_Clear();
        if (i < 0) i += len;
      }
      if (i >= 0 && i < len) {
        PyObject* item = PyList_GET_ITEM(self, i);
        p.aux_tag = slots_.get(addr(self), index_key(i), addr(item));
        p.aux_value = p.aux_tag != 0 ? item : nullptr;
      }
      if (i == len - 1) {
        slots_.erase(addr(self), index_key(i), now);
      } else {
        slots_.drop_slots(addr(self), now);
      }
    } else if (is("extend") && argc == 1 && (PyList_Check(args[0]) || PyTuple_Check(args[0])) &&
               static_cast<std::size_t>(Py_SIZE(args[0])) <= kMaxCopiedItems) {
      for (Py_ssize_t j = 0; j < Py_SIZE(args[0]); ++j) {
        PyObject* item = seq_item(args[0], j);
        Tag t = slots_.get(addr(args[0]), index_key(j), addr(item));
        set_slot(addr(self), index_key(len + j), t != 0 ? t : tags[0], addr(item), now);
      }
    } else if (is("insert") || is("remove") || is("sort") || is("reverse") || is("clear") ||
               is("extend") || is("__setitem__") || is("__delitem__")) {
      slots_.drop_slots(addr(self), now);
    }
  } else if (PyDict_Check(self) && trackable(self)) {
    std::uint64_t key = 0;
    if (argc >= 1 && (is("get") || is("__getitem__") || is("pop") || is("setdefault")) &&
        item_key(args[0], key)) {
      PyObject* current = PyDict_GetItemWithError(self, args[0]);
      if (current == nullptr) PyErr_Clear();
      if (current != nullptr) {
        p.aux_tag = slots_.get(addr(self), key, addr(current));
        p.aux_value = p.aux_tag != 0 ? current : nullptr;
      } else if (is("setdefault") && argc == 2) {
        set_slot(addr(self), key, tags[1], addr(args[1]), now);
        p.aux_tag = tags[1];
        p.aux_value = args[1];
      } else if (argc == 2) {  // get/pop default
        p.aux_tag = tags[1];
        p.aux_value = args[1];
      }
      if (is("pop")) slots_.erase(addr(self), key, now);
    } else if (is("update") && argc == 1 && PyDict_Check(args[0])) {
      const ObjectRecord* record = slots_.find(addr(args[0]));
      if (record != nullptr) {
        std::vector<std::pair<std::uint64_t, Slot>> copy(record->slots.begin(),
                                                         record->slots.end());
        for (const auto& [k, slot] : copy) copy_slot(addr(self), k, slot, now);
      }
    } else if (is("clear") || is("popitem") || is("update")) {
      slots_.drop_slots(addr(self), now);
    }
  } else if (self == builtins_ && argc >= 2 && PyUnicode_Check(args[1])) {
    PyObject* owner = args[0];
    PyObject* ns = namespace_of(owner);
    PyObject* target = ns != nullptr ? ns : owner;
    const std::uint64_t key = ns != nullptr ? name_key(args[1]) : attr_key(args[1]);
    if (is("getattr")) {
      const Slot* slot = slots_.slot(addr(target), key);
      if (slot != nullptr) {
        p.aux_tag = slot->tag;
        p.aux_value = reinterpret_cast<PyObject*>(slot->value);
      }
    } else if (is("setattr") && argc == 3 && trackable(target)) {
      set_slot(addr(target), key, tags[2], addr(args[2]), now);
    }
  }
}

Tag Tracer::computed(const Pending& p, PyObject* value) const noexcept {
  if (last_return_.seq > p.return_seq && last_return_.value == value && value != nullptr) {
    return last_return_.tag;  // a Python function called from C returned this very object
  }
  if (p.rule == Rule::kBinarySubscr || p.rule == Rule::kForIter || p.rule == Rule::kLoadAttr ||
      p.rule == Rule::kLoadMethod || p.rule == Rule::kUnpackSequence) {
    const Tag held = held_tag(value);
    if (held != 0) return held;
  }
  return p.counter;
}

// A slot copied from another object's record: its value may be gone (C code may have
// replaced it unseen), so it is never dereferenced and never registered as a holder.
void Tracer::copy_slot(std::uintptr_t object, std::uint64_t key, const Slot& slot, Tag now) {
  slots_.set(object, key, slot.tag, slot.value, now, false);
}

void Tracer::set_slot(std::uintptr_t object, std::uint64_t key, Tag tag, std::uintptr_t value,
                      Tag now) {
  const bool hold = value != 0 && !shared(reinterpret_cast<PyObject*>(value));
  slots_.set(object, key, tag, value, now, hold);
}

Tag Tracer::held_tag(PyObject* value) const noexcept {
  if (value == nullptr || shared(value)) return 0;
  if (PyUnicode_CheckExact(value) && PyUnicode_CHECK_INTERNED(value)) return 0;
  const Holder* h = slots_.holder(addr(value));
  if (h == nullptr) return 0;
  auto* c = reinterpret_cast<PyObject*>(h->container);
  constexpr Py_ssize_t kScan = 1024;
  if (PyList_Check(c) || PyTuple_Check(c)) {
    const Py_ssize_t n = std::min(Py_SIZE(c), kScan);
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (seq_item(c, i) == value) return h->tag;
    }
  } else if (PyDict_Check(c)) {
    if (PyDict_GET_SIZE(c) > kScan) return 0;
    Py_ssize_t pos = 0;
    PyObject* k = nullptr;
    PyObject* v = nullptr;
    while (PyDict_Next(c, &pos, &k, &v)) {
      if (v == value) return h->tag;
    }
  } else if (PyCell_Check(c)) {
    if (PyCell_GET(c) == value) return h->tag;
  }
  return 0;  // attribute holders cannot be checked without their name
}

// A class attribute read through the class or one of its instances.
Tag Tracer::class_attr_slot(PyObject* owner, PyObject* name, PyObject** value) const {
  PyTypeObject* start = PyType_Check(owner) ? reinterpret_cast<PyTypeObject*>(owner) : Py_TYPE(owner);
  PyObject* mro = start->tp_mro;
  if (mro == nullptr || !PyTuple_Check(mro)) return 0;
  const std::uint64_t key = attr_key(name);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    const Slot* slot = slots_.slot(addr(PyTuple_GET_ITEM(mro, i)), key);
    if (slot != nullptr) {
      *value = reinterpret_cast<PyObject*>(slot->value);
      return slot->tag;
    }
  }
  return 0;
}

Tag Tracer::call_result(ShadowFrame& sf, PyObject* result) {
  Pending& p = sf.p;
  if (p.has_return) return p.return_tag;
  if (result == nullptr) return 0;
  if (last_return_.seq > p.return_seq && last_return_.value == result) return last_return_.tag;
  if (p.aux_value == result && p.aux_tag != 0) return p.aux_tag;
  if (!shared(result)) {
    const std::size_t first = p.in_objs[0] != nullptr ? 1 : 2;
    for (std::size_t j = first; j < p.in_objs.size(); ++j) {
      if (p.in_objs[j] == result) return p.in_tags[j];
    }
  }
  if (PyGen_CheckExact(result) || PyCoro_CheckExact(result) || PyAsyncGen_CheckExact(result)) {
    adopt_generator(p, result);
  }
  if (PyType_Check(result) && class_slots_seq_ > p.return_seq && !class_slots_.empty()) {
    // __build_class__ made this class from the body that just returned: its attributes
    // keep the tags they had in the class namespace.
    for (const auto& cs : class_slots_) {
      slots_.set(addr(result), cs.key, cs.tag, cs.value, p.counter, false);
    }
    class_slots_.clear();
  }
  if (!shared(result)) {
    const Tag held = held_tag(result);
    if (held != 0) return held;
  }
  if (trackable(result) && Py_REFCNT(result) == 1) slots_.mark_created(addr(result), p.counter);
  return p.counter;
}

// A generator's arguments are bound when it is created, long before its first resume.
void Tracer::adopt_generator(const Pending& p, PyObject* gen) {
  auto* g = reinterpret_cast<PyGenObject*>(gen);
  if (g->gi_frame_state != FRAME_CREATED) return;
  auto* f = reinterpret_cast<_PyInterpreterFrame*>(g->gi_iframe);
  CodeInfo* info = code_info(f->f_code);
  if (info == nullptr || info->own || suspended_.count(f) != 0) return;
  ShadowFrame* sf = acquire(f, info);
  bind_arguments(p, *sf);
  suspended_[f] = sf;
}

void Tracer::bind_arguments(const Pending& p, ShadowFrame& callee) {
  _PyInterpreterFrame* f = callee.iframe;
  int posbase = 0;
  if (p.rule == Rule::kCall && p.in_objs.size() >= 2) posbase = p.in_objs[0] != nullptr ? 1 : 2;
  PyObject* function = reinterpret_cast<PyObject*>(f->f_func);
  const Tag now = p.counter;
  for (int i = 0; i < callee.code->argslots; ++i) {
    PyObject* v = f->localsplus[i];
    if (v == nullptr) continue;
    PyObject* cell = nullptr;
    if ((callee.code->kinds[static_cast<std::size_t>(i)] & CO_FAST_CELL) != 0 && PyCell_Check(v)) {
      cell = v;
      v = PyCell_GET(cell);
      if (v == nullptr) continue;
    }
    const Tag tag = match_argument(p, v, i, posbase, function);
    if (cell != nullptr) {
      set_slot(addr(cell), kCellKey, tag, addr(v), now);
    } else {
      callee.slots[static_cast<std::size_t>(i)] = tag;
    }
  }
  // The call built *args and **kwargs: their items keep the tags of the arguments.
  PyCodeObject* code = f->f_code;
  int extra = code->co_argcount + code->co_kwonlyargcount;
  PyObject* args = (code->co_flags & CO_VARARGS) != 0 ? f->localsplus[extra++] : nullptr;
  PyObject* kwargs = (code->co_flags & CO_VARKEYWORDS) != 0 ? f->localsplus[extra] : nullptr;
  if (args != nullptr && PyTuple_CheckExact(args) && trackable(args) &&
      static_cast<std::size_t>(PyTuple_GET_SIZE(args)) <= kMaxCopiedItems) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(args); ++k) {
      PyObject* item = PyTuple_GET_ITEM(args, k);
      const int position = code->co_argcount + static_cast<int>(k);
      const Tag tag = match_argument(p, item, position, posbase, nullptr);
      if (tag != p.counter) set_slot(addr(args), index_key(k), tag, addr(item), now);
    }
  }
  if (kwargs != nullptr && PyDict_CheckExact(kwargs) && trackable(kwargs)) {
    Py_ssize_t pos = 0;
    PyObject* key = nullptr;
    PyObject* item = nullptr;
    while (PyDict_Next(kwargs, &pos, &key, &item)) {
      std::uint64_t slot = 0;
      if (!item_key(key, slot)) continue;
      const Tag tag = match_argument(p, item, -1, 0, nullptr);
      if (tag != p.counter) set_slot(addr(kwargs), slot, tag, addr(item), now);
    }
  }
}

Tag Tracer::match_argument(const Pending& p, PyObject* value, int position, int posbase,
                           PyObject* function) {
  const auto n = static_cast<int>(p.in_objs.size());
  if (posbase > 0) {
    for (int j : {posbase + position, posbase + position - 1}) {
      if (j >= posbase && j < n && p.in_objs[static_cast<std::size_t>(j)] == value) {
        return p.in_tags[static_cast<std::size_t>(j)];
      }
    }
  }
  if (p.rule == Rule::kCallFunctionEx && n >= 3) {
    PyObject* args = p.in_objs[2];
    if (PyTuple_Check(args)) {
      for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(args); ++k) {
        if (PyTuple_GET_ITEM(args, k) == value) {
          const Tag t = slots_.get(addr(args), index_key(k), addr(value));
          return t != 0 ? t : p.in_tags[2];
        }
      }
    }
    if (n >= 4 && PyDict_Check(p.in_objs[3])) {
      const ObjectRecord* record = slots_.find(addr(p.in_objs[3]));
      if (record != nullptr) {
        for (const auto& [key, slot] : record->slots) {
          if (slot.value == addr(value)) return slot.tag;
        }
      }
    }
  }
  // A call's first input is NULL or the function; any other instruction that calls Python
  // code (an operator's dunder, the display hook) passes its inputs from the first on.
  const bool call = p.rule == Rule::kCall || p.rule == Rule::kCallFunctionEx;
  if (!shared(value)) {
    for (int j = call ? 1 : 0; j < n; ++j) {
      if (p.in_objs[static_cast<std::size_t>(j)] == value) {
        return p.in_tags[static_cast<std::size_t>(j)];
      }
    }
  }
  if (function != nullptr && PyFunction_Check(function)) {
    PyObject* defaults = PyFunction_GET_DEFAULTS(function);
    if (defaults != nullptr && PyTuple_Check(defaults)) {
      for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(defaults); ++k) {
        if (PyTuple_GET_ITEM(defaults, k) == value) {
          Tag t = slots_.get(addr(defaults), index_key(k), addr(value));
          if (t == 0) t = slots_.get(addr(function), kDefaultsKey, addr(defaults));
          if (t != 0) return t;
        }
      }
    }
    PyObject* kwdefaults = PyFunction_GET_KW_DEFAULTS(function);
    auto* fcode = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(function));
    if (kwdefaults != nullptr && PyDict_CheckExact(kwdefaults) && position >= 0 &&
        position < fcode->co_nlocalsplus) {
      PyObject* name = PyTuple_GET_ITEM(fcode->co_localsplusnames, position);
      PyObject* current = PyDict_GetItemWithError(kwdefaults, name);
      if (current == nullptr) PyErr_Clear();
      if (current == value) {
        const Tag t = slots_.get(addr(kwdefaults), name_key(name), addr(value));
        if (t != 0) return t;
      }
    }
  }
  // C code calling back with the items of a list or tuple it was given (sorted's key,
  // min, filter): the item keeps its slot's tag.
  if (!shared(value)) {
    for (PyObject* seq : p.in_objs) {
      if (seq == nullptr || !(PyList_CheckExact(seq) || PyTuple_CheckExact(seq)) ||
          static_cast<std::size_t>(Py_SIZE(seq)) > kMaxCopiedItems) {
        continue;
      }
      for (Py_ssize_t k = 0; k < Py_SIZE(seq); ++k) {
        if (seq_item(seq, k) != value) continue;
        const Tag t = slots_.get(addr(seq), index_key(k), addr(value));
        if (t != 0) return t;
      }
    }
    const Tag held = held_tag(value);
    if (held != 0) return held;
  }
  return p.counter;
}

void Tracer::complete(ShadowFrame& sf, int depth) {
  Pending& p = sf.p;
  p.active = false;
  if (p.raised || p.rule == Rule::kRaise) {  // a raise never falls through
    land_exception(sf, depth);
    return;
  }
  PyObject** lp = sf.iframe->localsplus;
  Tag* s = sf.slots.data();
  const int base = p.before - p.pops;
  const int pushed = depth - base;
  const int delta = depth - p.before;
  const Instr& in = sf.code->instrs[static_cast<std::size_t>(p.index)];
  if (delta != in.effect && delta != in.effect_jump) note_mismatch(sf, in, p.counter);
  const Tag now = p.counter;
  auto fill = [&](int from) {
    for (int i = std::max(from, sf.code->nlocalsplus); i < depth; ++i) s[i] = now;
  };
  if (pushed < 0) {
    if (p.rule == Rule::kForIter) {
      const int slot = p.before - 1;
      sf.iters.erase(std::remove_if(sf.iters.begin(), sf.iters.end(),
                                    [slot](const IterState& st) { return st.slot >= slot; }),
                     sf.iters.end());
    }
  } else {
    switch (p.rule) {
      case Rule::kNone:
      case Rule::kPop:
      case Rule::kStoreName:
      case Rule::kStoreGlobal:
      case Rule::kDeleteName:
      case Rule::kDeleteGlobal:
      case Rule::kStoreAttr:
      case Rule::kDeleteAttr:
      case Rule::kStoreSubscr:
      case Rule::kDeleteSubscr:
      case Rule::kStoreDeref:
      case Rule::kDeleteDeref:
      case Rule::kListAppend:
      case Rule::kMapAdd:
      case Rule::kListExtend:
      case Rule::kDictUpdate:
      case Rule::kRaise:
      case Rule::kReturn:
      case Rule::kNotTraced:
        fill(base);
        break;
      case Rule::kSwap:
        if (p.oparg >= 2 && p.before - p.oparg >= sf.code->nlocalsplus) {
          std::swap(s[p.before - 1], s[p.before - p.oparg]);
        }
        break;
      case Rule::kCopy:
        if (pushed == 1 && p.before - p.oparg >= sf.code->nlocalsplus) {
          s[p.before] = s[p.before - p.oparg];
        } else {
          fill(base);
        }
        break;
      case Rule::kLoadFast:
        if (pushed == 1) s[base] = s[p.oparg];
        break;
      case Rule::kStoreFast:
        s[p.oparg] = p.in_tags.empty() ? 0 : p.in_tags[0];
        break;
      case Rule::kDeleteFast:
        s[p.oparg] = 0;
        break;
      case Rule::kLoadConst:
        fill(base);
        break;
      case Rule::kLoadGlobal:
      case Rule::kLoadName:
      case Rule::kLoadClassDeref:
      case Rule::kLoadDeref:
      case Rule::kImportFrom:
      case Rule::kLoadAttr:
      case Rule::kBinarySubscr: {
        fill(base);
        if (pushed >= 1) {
          PyObject* v = lp[depth - 1];
          const bool attr_like = p.rule == Rule::kLoadAttr || p.rule == Rule::kBinarySubscr;
          if (p.aux_tag != 0 && v == p.aux_value) {
            s[depth - 1] = p.aux_tag;
          } else if (attr_like) {
            s[depth - 1] = computed(p, v);
          }
          if (pushed == 2) s[base] = 0;  // LOAD_GLOBAL's NULL
        }
        break;
      }
      case Rule::kLoadMethod:
        fill(base);
        if (pushed == 2) {
          if (lp[base] != nullptr) {
            s[base + 1] = p.in_tags.back();  // [method, self]
          } else {
            s[base] = 0;  // [NULL, attribute]
            PyObject* v = lp[base + 1];
            s[base + 1] = (p.aux_tag != 0 && v == p.aux_value) ? p.aux_tag : computed(p, v);
          }
        }
        break;
      case Rule::kKeep:
        fill(base);
        for (int i = 0; i + 1 < pushed && i < static_cast<int>(p.in_tags.size()); ++i) {
          s[base + i] = p.in_tags[static_cast<std::size_t>(i)];
        }
        break;
      case Rule::kMatchKeys:
      case Rule::kMatchClass: {
        fill(base);
        for (int i = 0; i + 1 < pushed && i < static_cast<int>(p.in_tags.size()); ++i) {
          s[base + i] = p.in_tags[static_cast<std::size_t>(i)];  // MATCH_KEYS keeps its inputs
        }
        PyObject* values = pushed >= 1 ? lp[depth - 1] : nullptr;
        if (values == nullptr || !PyTuple_CheckExact(values) || !trackable(values) ||
            PyTuple_GET_SIZE(values) != static_cast<Py_ssize_t>(p.items.size())) {
          break;
        }
        slots_.mark_created(addr(values), now);
        for (std::size_t i = 0; i < p.items.size(); ++i) {
          const auto at = static_cast<Py_ssize_t>(i);
          PyObject* v = PyTuple_GET_ITEM(values, at);
          if (p.items[i] != 0 && addr(v) == p.keys[i]) {
            set_slot(addr(values), index_key(at), p.items[i], addr(v), now);
          }
        }
        break;
      }
      case Rule::kUnpackEx: {
        // From the top: the leading items, the starred list, then the trailing items with
        // the sequence's last item deepest.
        fill(base);
        const int lead = p.oparg & 0xFF;
        const int trail = p.oparg >> 8;
        const auto n = static_cast<int>(p.items.size());
        if (pushed != lead + 1 + trail || n < lead + trail) break;
        auto item_tag = [&](int i) { return p.items[static_cast<std::size_t>(i)]; };
        for (int i = 0; i < lead; ++i) {
          if (item_tag(i) != 0) s[depth - 1 - i] = item_tag(i);
        }
        for (int k = 0; k < trail; ++k) {
          if (item_tag(n - 1 - k) != 0) s[base + k] = item_tag(n - 1 - k);
        }
        PyObject* rest = lp[base + trail];
        if (!PyList_CheckExact(rest) || !trackable(rest)) break;
        slots_.mark_created(addr(rest), now);
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(rest) && lead + j < n - trail; ++j) {
          const Tag t = item_tag(lead + static_cast<int>(j));
          if (t != 0) set_slot(addr(rest), index_key(j), t, addr(PyList_GET_ITEM(rest, j)), now);
        }
        break;
      }
      case Rule::kPushExcInfo:
        fill(base);
        if (pushed == 2) {
          s[base] = 0;
          s[base + 1] = p.in_tags.empty() ? now : p.in_tags[0];
        }
        break;
      case Rule::kMove:
        if (pushed == 1 && !p.in_tags.empty()) {
          s[base] = p.in_tags[0];
        } else {
          fill(base);
        }
        break;
      case Rule::kBuildSeq: {
        fill(base);
        PyObject* obj = pushed == 1 ? lp[base] : nullptr;
        if (obj == nullptr || !trackable(obj)) break;
        slots_.mark_created(addr(obj), now);
        const bool from_list = p.op == kListToTuple;
        const Py_ssize_t size = Py_SIZE(obj);
        const auto count = static_cast<Py_ssize_t>(from_list ? p.items.size() : p.in_tags.size());
        for (Py_ssize_t i = 0; i < count && i < size; ++i) {
          const Tag t = from_list ? p.items[static_cast<std::size_t>(i)]
                                  : p.in_tags[static_cast<std::size_t>(i)];
          if (t != 0) set_slot(addr(obj), index_key(i), t, addr(seq_item(obj, i)), now);
        }
        break;
      }
      case Rule::kBuildMap:
      case Rule::kBuildConstKeyMap: {
        fill(base);
        PyObject* obj = pushed == 1 ? lp[base] : nullptr;
        if (obj == nullptr || !PyDict_Check(obj) || !trackable(obj)) break;
        slots_.mark_created(addr(obj), now);
        const bool pairs = p.rule == Rule::kBuildMap;
        for (std::size_t i = 0; i < p.keys.size(); ++i) {
          if (p.keys[i] == 0) continue;
          const std::size_t vi = pairs ? 2 * i + 1 : i;
          if (vi >= p.in_objs.size()) break;
          set_slot(addr(obj), p.keys[i], p.in_tags[vi], addr(p.in_objs[vi]), now);
        }
        break;
      }
      case Rule::kUnpackSequence: {
        fill(base);
        const int count = static_cast<int>(p.items.size());
        if (pushed == count) {
          for (int i = 0; i < count; ++i) {
            Tag t = p.items[static_cast<std::size_t>(i)];
            if (t == 0) t = held_tag(lp[base + (count - 1 - i)]);
            if (t != 0) s[base + (count - 1 - i)] = t;
          }
        }
        break;
      }
      case Rule::kGetIter: {
        fill(base);
        if (pushed != 1) break;
        PyObject* iter = lp[base];
        PyObject* src = p.in_objs.empty() ? nullptr : p.in_objs[0];
        if (iter == src && src != nullptr) s[base] = p.in_tags[0];
        sf.iters.erase(std::remove_if(sf.iters.begin(), sf.iters.end(),
                                      [base](const IterState& st) { return st.slot >= base; }),
                       sf.iters.end());
        if (src != nullptr && iter != src && (PyList_CheckExact(src) || PyTuple_CheckExact(src))) {
          sf.iters.push_back(IterState{base, iter, src, 0});
        }
        break;
      }
      case Rule::kForIter: {
        if (pushed != 1) {
          fill(base);
          break;
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
        break;
      }
      case Rule::kPrecall:
        if (p.flag) {
          const int null_slot = p.before - p.oparg - 2;
          if (lp[null_slot] != nullptr) {
            s[null_slot] = p.aux_tag;
            s[null_slot + 1] = p.aux_tag;
          }
        }
        break;
      case Rule::kCall:
      case Rule::kCallFunctionEx:
        fill(base);
        if (pushed == 1) s[base] = call_result(sf, lp[base]);
        break;
      case Rule::kYield:
      case Rule::kCompute:
      default:
        for (int i = std::max(base, sf.code->nlocalsplus); i < depth; ++i) {
          s[i] = computed(p, lp[i]);
        }
        if (p.rule == Rule::kCompute && p.op == 132 && pushed == 1 && (p.oparg & 1) != 0 &&
            trackable(lp[base])) {
          // MAKE_FUNCTION with defaults: remember where the defaults tuple came from.
          set_slot(addr(lp[base]), kDefaultsKey, p.in_tags[0], addr(p.in_objs[0]), now);
        }
        break;
    }
  }
  if (p.tainted_inputs || p.taint_source) tainted_.insert(now);
  if (now <= edges_upto_) record(p);
  if (now >= capture_min_ && now <= capture_max_ && capture_.count(now) != 0) {
    capture_post(sf, depth, std::max(base, sf.code->nlocalsplus));
  }
}

void Tracer::land_exception(ShadowFrame& sf, int depth) {
  Pending& p = sf.p;
  Tag* s = sf.slots.data();
  const int top = depth - 1;
  const int keep = std::min(top, p.before);
  for (int i = std::max(keep, sf.code->nlocalsplus); i < top; ++i) s[i] = 0;
  if (top >= sf.code->nlocalsplus) s[top] = exc_tag_;
  sf.iters.erase(std::remove_if(sf.iters.begin(), sf.iters.end(),
                                [top](const IterState& st) { return st.slot >= top; }),
                 sf.iters.end());
  if (p.counter <= edges_upto_) record(p);
  if (p.counter >= capture_min_ && p.counter <= capture_max_ && capture_.count(p.counter) != 0) {
    capture_post(sf, depth, depth);
  }
}

// The inputs a description of this instruction names: a call's arguments (and self), not
// the callable; the values Python code handed back to C while it ran.
void Tracer::record(const Pending& p) {
  std::size_t first = 0;
  if (p.rule == Rule::kCall || p.rule == Rule::kCallFunctionEx) {
    first = (!p.in_objs.empty() && p.in_objs[0] != nullptr) ? 1 : 2;
  }
  const auto begin = static_cast<std::uint32_t>(edge_tags_.size());
  for (std::size_t i = first; i < p.in_tags.size(); ++i) {
    if (p.in_tags[i] != 0 && p.in_tags[i] != p.counter) edge_tags_.push_back(p.in_tags[i]);
  }
  for (Tag t : p.callbacks) {
    if (t != 0 && t != p.counter) edge_tags_.push_back(t);
  }
  const auto count = static_cast<std::uint32_t>(edge_tags_.size() - begin);
  if (count != 0) edges_.push_back(Edges{p.counter, begin, count});
  if (edge_tags_.size() > edges_limit_) {
    edges_overflow_ = true;
    edges_upto_ = 0;  // stop recording; what is kept still answers the nearest steps
  }
  if (p.counter == edges_upto_ && edges_done_ != nullptr) {
    PyObject* cb = edges_done_;
    edges_done_ = nullptr;
    PyObject* r = PyObject_CallNoArgs(cb);
    if (r == nullptr) {
      PyErr_Print();
      ++stats_.callback_errors;
    }
    Py_XDECREF(r);
    Py_DECREF(cb);
  }
}

void Tracer::record_edges(std::uint64_t upto, std::size_t limit, PyObject* on_done) {
  edges_upto_ = upto;
  edges_limit_ = limit;
  edges_overflow_ = false;
  edges_.clear();
  edge_tags_.clear();
  Py_XDECREF(edges_done_);
  Py_XINCREF(on_done);
  edges_done_ = on_done;
}

std::vector<std::pair<Tag, int>> Tracer::backward_slice(Tag root, int depth, std::size_t max_nodes,
                                                        bool& truncated) const {
  truncated = edges_overflow_;
  std::unordered_map<Tag, const Edges*> index;
  index.reserve(edges_.size());
  for (const auto& e : edges_) index.emplace(e.counter, &e);
  std::vector<std::pair<Tag, int>> out;
  std::unordered_set<Tag> seen{root};
  std::vector<std::pair<Tag, int>> frontier{{root, 0}};
  for (std::size_t i = 0; i < frontier.size() && out.size() < max_nodes; ++i) {
    const auto [tag, level] = frontier[i];
    out.emplace_back(tag, level);
    if (level >= depth) continue;
    auto it = index.find(tag);
    if (it == index.end()) continue;
    const Edges& e = *it->second;
    for (std::uint32_t k = 0; k < e.count; ++k) {
      const Tag input = edge_tags_[e.begin + k];
      if (seen.insert(input).second) frontier.emplace_back(input, level + 1);
    }
  }
  if (out.size() >= max_nodes) truncated = true;
  return out;
}

// -- queries --------------------------------------------------------------------------------

void Tracer::note_taint(ShadowFrame& sf) {
  Pending& p = sf.p;
  for (Tag t : p.in_tags) {
    if (t != 0 && tainted_.count(t) != 0) {
      p.tainted_inputs = true;
      break;
    }
  }
  if (!p.tainted_inputs) return;
  const int line = sf.code->instrs[static_cast<std::size_t>(p.index)].line;
  const std::uint64_t key = (static_cast<std::uint64_t>(sf.code->index) << 32) |
                            static_cast<std::uint32_t>(line);
  auto [it, inserted] = reach_.try_emplace(key, Reach{sf.code->index, line, p.counter, 0});
  ++it->second.count;
}

void Tracer::taint(const std::vector<Tag>& tags) {
  tainting_ = true;
  tainted_.insert(tags.begin(), tags.end());
}

void Tracer::taint_current() noexcept {
  tainting_ = true;
  if (!stack_.empty() && stack_.back()->p.active) stack_.back()->p.taint_source = true;
}

bool Tracer::current_tainted() const noexcept {
  if (stack_.empty() || !stack_.back()->p.active) return false;
  return stack_.back()->p.tainted_inputs;
}

std::uint64_t Tracer::current() const noexcept {
  if (stack_.empty() || !stack_.back()->p.active) return 0;
  return stack_.back()->p.counter;
}

std::vector<Reach> Tracer::reached() const {
  std::vector<Reach> out;
  out.reserve(reach_.size());
  for (const auto& [key, r] : reach_) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const Reach& a, const Reach& b) { return a.first < b.first; });
  return out;
}

void Tracer::stop_at_counter(std::uint64_t counter, PyObject* callback) {
  Py_XDECREF(stop_counter_cb_);
  Py_XINCREF(callback);
  stop_counter_cb_ = callback;
  stop_counter_ = counter;
}

void Tracer::stop_at_line(const std::string& filename, int line, std::uint64_t hit,
                          PyObject* callback) {
  Py_XDECREF(stop_line_cb_);
  Py_XINCREF(callback);
  stop_line_cb_ = callback;
  stop_file_ = filename;
  stop_line_ = line;
  stop_hit_ = hit == 0 ? 1 : hit;
  hits_ = 0;
  ++breakpoint_generation_;
}

void Tracer::set_end_file(const std::string& filename) { end_file_ = filename; }

void Tracer::every(std::uint64_t interval, PyObject* callback) {
  Py_XDECREF(every_cb_);
  Py_XINCREF(callback);
  every_cb_ = callback;
  every_interval_ = callback != nullptr ? interval : 0;
}

// The instructions of this code where the line stop is: computed when a code object is
// first seen, and again when a stop is armed later (in a worker forked from a checkpoint).
void Tracer::refresh_breakpoints(CodeInfo& info) {
  info.breakpoint_generation = breakpoint_generation_;
  info.breakpoint.clear();
  if (stop_file_.empty() || info.index >= code_names_.size() ||
      code_names_[info.index].filename != stop_file_) {
    return;
  }
  info.breakpoint.assign(info.instrs.size(), 0);
  for (std::size_t i = 0; i < info.instrs.size(); ++i) {
    info.breakpoint[i] = info.instrs[i].line == stop_line_ ? 1 : 0;
  }
}

void Tracer::capture(const std::vector<std::uint64_t>& counters, PyObject* pre, PyObject* post) {
  capture_.clear();
  capture_.insert(counters.begin(), counters.end());
  capture_min_ = counters.empty() ? 1 : *std::min_element(counters.begin(), counters.end());
  capture_max_ = counters.empty() ? 0 : *std::max_element(counters.begin(), counters.end());
  Py_XDECREF(capture_pre_);
  Py_XDECREF(capture_post_);
  Py_XINCREF(pre);
  Py_XINCREF(post);
  capture_pre_ = pre;
  capture_post_ = post;
}

void Tracer::call_stop(PyObject* callback, PyFrameObject* frame) {
  PyObject* r = PyObject_CallFunction(callback, "OK", reinterpret_cast<PyObject*>(frame),
                                      static_cast<unsigned long long>(counter_.value()));
  if (r == nullptr) {
    PyErr_Print();
    ++stats_.callback_errors;
  }
  Py_XDECREF(r);
}

void Tracer::capture_pre(PyFrameObject* frame, const Pending& p) {
  if (capture_pre_ == nullptr) return;
  PyObject* inputs = PyList_New(static_cast<Py_ssize_t>(p.in_objs.size()));
  if (inputs == nullptr) {
    PyErr_Clear();
    return;
  }
  for (std::size_t i = 0; i < p.in_objs.size(); ++i) {
    PyObject* item = Py_BuildValue("(OK)", p.in_objs[i] != nullptr ? p.in_objs[i] : Py_None,
                                   static_cast<unsigned long long>(p.in_tags[i]));
    if (item == nullptr) {
      PyErr_Clear();
      item = Py_None;
      Py_INCREF(item);
    }
    PyList_SET_ITEM(inputs, static_cast<Py_ssize_t>(i), item);
  }
  PyObject* r = PyObject_CallFunction(capture_pre_, "OKiO", reinterpret_cast<PyObject*>(frame),
                                      static_cast<unsigned long long>(p.counter), p.index, inputs);
  if (r == nullptr) {
    PyErr_Print();
    ++stats_.callback_errors;
  }
  Py_XDECREF(r);
  Py_DECREF(inputs);
}

void Tracer::capture_post(ShadowFrame& sf, int depth, int base) {
  if (capture_post_ == nullptr) return;
  PyObject** lp = sf.iframe->localsplus;
  PyObject* outputs = PyList_New(0);
  if (outputs == nullptr) {
    PyErr_Clear();
    return;
  }
  for (int i = base; i < depth; ++i) {
    PyObject* item = Py_BuildValue("(OK)", lp[i] != nullptr ? lp[i] : Py_None,
                                   static_cast<unsigned long long>(sf.slots[static_cast<std::size_t>(i)]));
    if (item != nullptr) {
      PyList_Append(outputs, item);
      Py_DECREF(item);
    }
  }
  PyObject* callbacks = PyList_New(0);
  for (Tag t : sf.p.callbacks) {
    PyObject* v = PyLong_FromUnsignedLongLong(t);
    if (v != nullptr && callbacks != nullptr) PyList_Append(callbacks, v);
    Py_XDECREF(v);
  }
  PyObject* r = PyObject_CallFunction(capture_post_, "KOOO",
                                      static_cast<unsigned long long>(sf.p.counter), outputs,
                                      sf.p.raised ? Py_True : Py_False,
                                      callbacks != nullptr ? callbacks : Py_None);
  Py_XDECREF(callbacks);
  if (r == nullptr) {
    PyErr_Print();
    ++stats_.callback_errors;
  }
  Py_XDECREF(r);
  Py_DECREF(outputs);
}

PyObject* Tracer::frame_locals(PyFrameObject* frame) {
  ShadowFrame* sf = find_shadow(frame);
  _PyInterpreterFrame* f = frame->f_frame;
  PyCodeObject* code = f->f_code;
  PyObject* out = PyList_New(0);
  if (out == nullptr) return nullptr;
  for (int i = 0; i < code->co_nlocalsplus; ++i) {
    PyObject* name = PyTuple_GET_ITEM(code->co_localsplusnames, i);
    PyObject* v = f->localsplus[i];
    Tag tag = sf != nullptr ? sf->slots[static_cast<std::size_t>(i)] : 0;
    const int kind = sf != nullptr ? sf->code->kinds[static_cast<std::size_t>(i)] : 0;
    if ((kind & (CO_FAST_CELL | CO_FAST_FREE)) != 0 && v != nullptr && PyCell_Check(v)) {
      PyObject* content = PyCell_GET(v);
      tag = slots_.get(addr(v), kCellKey, addr(content));
      v = content;
    }
    PyObject* item = Py_BuildValue("(OOK)", name, v != nullptr ? v : Py_None,
                                   static_cast<unsigned long long>(tag));
    if (item == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    if (v == nullptr) {
      // An unbound local: say so rather than show None.
      Py_DECREF(item);
      continue;
    }
    PyList_Append(out, item);
    Py_DECREF(item);
  }
  return out;
}

PyObject* Tracer::frame_stack(PyFrameObject* frame) {
  ShadowFrame* sf = find_shadow(frame);
  _PyInterpreterFrame* f = frame->f_frame;
  PyObject* out = PyList_New(0);
  if (out == nullptr || sf == nullptr || f->stacktop < 0) return out;
  for (int i = sf->code->nlocalsplus; i < f->stacktop; ++i) {
    PyObject* v = f->localsplus[i];
    PyObject* item = Py_BuildValue("(OK)", v != nullptr ? v : Py_None,
                                   static_cast<unsigned long long>(sf->slots[static_cast<std::size_t>(i)]));
    if (item != nullptr) {
      PyList_Append(out, item);
      Py_DECREF(item);
    }
  }
  return out;
}

Tag Tracer::attr_tag(PyObject* owner, PyObject* name, PyObject* value) {
  PyObject* ns = namespace_of(owner);
  if (ns != nullptr) return slots_.get(addr(ns), name_key(name), addr(value));
  return slots_.get(addr(owner), attr_key(name), addr(value));
}

Tag Tracer::item_tag(PyObject* container, PyObject* key, PyObject* value) {
  std::uint64_t k = 0;
  PyObject* current = nullptr;
  if (!subscript_key(container, key, k, &current)) {
    if (!item_key(key, k)) return 0;
  }
  return slots_.get(addr(container), k, addr(value));
}

std::pair<Tag, Tag> Tracer::object_counters(PyObject* obj) const {
  const ObjectRecord* r = slots_.find(addr(obj));
  return r == nullptr ? std::pair<Tag, Tag>{0, 0} : std::pair<Tag, Tag>{r->created, r->updated};
}

bool Tracer::seed_item(PyObject* container, PyObject* key, Tag tag) {
  std::uint64_t k = 0;
  PyObject* current = nullptr;
  if (!trackable(container) || !subscript_key(container, key, k, &current) || current == nullptr) {
    return false;
  }
  set_slot(addr(container), k, tag, addr(current), counter_.value());
  return true;
}

bool Tracer::seed_attr(PyObject* owner, PyObject* name, PyObject* value, Tag tag) {
  PyObject* ns = namespace_of(owner);
  PyObject* target = ns != nullptr ? ns : owner;
  if (!trackable(target)) return false;
  set_slot(addr(target), ns != nullptr ? name_key(name) : attr_key(name), tag, addr(value),
             counter_.value());
  return true;
}

void Tracer::on_dealloc(PyObject* obj) noexcept {
  if (!slots_.empty()) slots_.forget(addr(obj));
  if (!suspended_.empty() &&
      (PyGen_CheckExact(obj) || PyCoro_CheckExact(obj) || PyAsyncGen_CheckExact(obj))) {
    auto* f = reinterpret_cast<_PyInterpreterFrame*>(reinterpret_cast<PyGenObject*>(obj)->gi_iframe);
    auto it = suspended_.find(f);
    if (it != suspended_.end()) {
      release(it->second);
      suspended_.erase(it);
    }
  }
}

}  // namespace sealtrace
