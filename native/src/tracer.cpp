// The provenance tracer (see tracer.hpp): attaching to the interpreter and detaching.
// CPython 3.11 only: it reads the interpreter's frame layout (_PyInterpreterFrame) to see
// the live value stack.
#define Py_BUILD_CORE 1
#include "tracer.hpp"

#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include "eval_loop.hpp"
#include "hooks.hpp"
#include "py_values.hpp"

namespace sealtrace {

Tracer::Tracer(PyObject* own_code, bool eval_loop) : own_code_(own_code), eval_loop_(eval_loop) {
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
  if (builtin_min_ == nullptr) {
    builtin_min_ = PyObject_GetAttrString(builtins_, "min");  // kept: compared, never called
    builtin_max_ = PyObject_GetAttrString(builtins_, "max");
    if (builtin_min_ == nullptr || builtin_max_ == nullptr) {
      throw std::runtime_error("builtins has no min or max");
    }
  }
  if (list_append_ == nullptr) {
    list_append_ = PyDict_GetItemString(PyList_Type.tp_dict, "append");  // borrowed: lives on
    if (list_append_ == nullptr) throw std::runtime_error("list has no append");
    for (const char* name :
         {"len", "isinstance", "abs", "round", "repr", "ord", "chr", "hash", "id", "callable"}) {
      PyObject* function = PyObject_GetAttrString(builtins_, name);  // kept: compared only
      if (function == nullptr) throw std::runtime_error("builtins lacks a function");
      quiet_builtins_.push_back(function);
    }
  }
  if (deque_type_ == nullptr) {
    // collections' C types keep their items out of reach of list's and dict's hooks (deque)
    // or deallocate through their own function first (defaultdict).
    PyObject* module = PyImport_ImportModule("_collections");
    if (module == nullptr) throw std::runtime_error("cannot import _collections");
    PyObject* deque = PyObject_GetAttrString(module, "deque");
    PyObject* defaultdict = PyObject_GetAttrString(module, "defaultdict");
    Py_DECREF(module);
    if (deque == nullptr || defaultdict == nullptr || !PyType_Check(deque) ||
        !PyType_Check(defaultdict)) {
      Py_XDECREF(deque);
      Py_XDECREF(defaultdict);
      throw std::runtime_error("_collections has no deque or defaultdict type");
    }
    deque_type_ = reinterpret_cast<PyTypeObject*>(deque);  // kept: the types live forever
    defaultdict_type_ = reinterpret_cast<PyTypeObject*>(defaultdict);
  }
  g_tracer = this;
  PyTypeObject* const extra[] = {deque_type_, defaultdict_type_};
  install_hooks(extra, 2);
  thread_ = PyThreadState_GET();
  PyEval_SetTrace(trampoline, nullptr);
  if (eval_loop_) install_eval_loop();
  attached_ = true;
}

void Tracer::attach_thread() {
  if (!attached_) return;
  ensure_thread();
  PyEval_SetTrace(trampoline, nullptr);
}

void Tracer::detach_thread() {
  if (!attached_) return;
  PyEval_SetTrace(nullptr, nullptr);
  ensure_thread();
  for (auto* sf : stack_) release(sf);
  stack_.clear();
  last_return_ = LastReturn{};
  exc_value_ = nullptr;
  exc_tag_ = exc_origin_ = 0;
}

void Tracer::switch_thread(PyThreadState* now) {
  ThreadCtx& out = parked_[thread_];
  out.stack.swap(stack_);
  out.last_return = last_return_;
  out.exc_value = exc_value_;
  out.exc_tag = exc_tag_;
  out.exc_origin = exc_origin_;
  auto in = parked_.find(now);
  if (in != parked_.end()) {
    stack_.swap(in->second.stack);
    last_return_ = in->second.last_return;
    exc_value_ = in->second.exc_value;
    exc_tag_ = in->second.exc_tag;
    exc_origin_ = in->second.exc_origin;
    parked_.erase(in);
  } else {
    stack_.clear();
    last_return_ = LastReturn{};
    exc_value_ = nullptr;
    exc_tag_ = exc_origin_ = 0;
  }
  thread_ = now;
}

const std::vector<ShadowFrame*>& Tracer::caller_stack() const noexcept {
  static const std::vector<ShadowFrame*> kNone;
  PyThreadState* now = PyThreadState_GET();
  if (now == thread_) return stack_;
  auto it = parked_.find(now);
  return it == parked_.end() ? kNone : it->second.stack;
}

void Tracer::detach() {
  if (!attached_) return;
  PyEval_SetTrace(nullptr, nullptr);
  if (eval_loop_) remove_eval_loop();
  remove_hooks();
  g_tracer = nullptr;
  attached_ = false;
  for (auto* sf : stack_) release(sf);
  stack_.clear();
  for (auto& [ts, ctx] : parked_) {
    for (auto* sf : ctx.stack) release(sf);
  }
  parked_.clear();
  for (auto& [f, sf] : suspended_) release(sf);
  suspended_.clear();
}

void Tracer::on_dealloc(PyObject* obj) noexcept {
  if (!slots_.empty()) slots_.forget(addr(obj));
  // The exception unwinding and the value last returned are remembered by address: once freed,
  // the next object made at that address is another (a new exception raised there must not
  // take the old one's tag and origin, as if it were still unwinding).
  if (obj == exc_value_) exc_value_ = nullptr;
  if (obj == last_return_.value) last_return_.value = nullptr;
  for (auto& [ts, ctx] : parked_) {
    if (obj == ctx.exc_value) ctx.exc_value = nullptr;
    if (obj == ctx.last_return.value) ctx.last_return.value = nullptr;
  }
  if (!fills_.empty()) fills_.forget(addr(obj));
  if (!suspended_.empty() &&
      (PyGen_CheckExact(obj) || PyCoro_CheckExact(obj) || PyAsyncGen_CheckExact(obj))) {
    auto* f =
        reinterpret_cast<_PyInterpreterFrame*>(reinterpret_cast<PyGenObject*>(obj)->gi_iframe);
    auto it = suspended_.find(f);
    if (it != suspended_.end()) {
      release(it->second);
      suspended_.erase(it);
    }
  }
}

}  // namespace sealtrace
