// Shadow frames: the tags of a traced frame's locals and value stack, taken from a pool,
// found again after a resync, and bound to a call's argument tags when the callee starts.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include "hooks.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

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
  sf->call.active = false;
  sf->kw_pending = false;
  sf->last_line = -1;
  sf->last_index = -1;
  sf->iters.clear();
  sf->handled.clear();
  return sf;
}

bool ShadowFrame::awaits(const _PyInterpreterFrame* callee) const noexcept {
  return call.active && call.callee == callee && iframe == callee->previous;
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
  for (const auto& [ts, ctx] : parked_) {  // a frame of another thread's
    for (auto* sf : ctx.stack) {
      if (sf->iframe == f) return sf;
    }
  }
  auto s = suspended_.find(f);
  return s == suspended_.end() ? nullptr : s->second;
}

ShadowFrame* Tracer::resync(_PyInterpreterFrame* f) {
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
  // A class called: C hands its __init__ the new instance before the call's arguments, so
  // parameter k is argument k - 1 (argument k only by coincidence, where the two are one
  // object: `Point(0, 0)`'s y is the second 0, not the first).
  bool self_first = false;
  if (p.rule == Rule::kCall && posbase == 2 && PyType_Check(p.in_objs[1])) {
    self_first =
        _PyType_Lookup(reinterpret_cast<PyTypeObject*>(p.in_objs[1]), init_name()) == function;
  }
  for (int i = 0; i < callee.code->argslots; ++i) {
    PyObject* v = f->localsplus[i];
    if (v == nullptr) continue;
    PyObject* cell = nullptr;
    if ((callee.code->kinds[static_cast<std::size_t>(i)] & CO_FAST_CELL) != 0 && PyCell_Check(v)) {
      cell = v;
      v = PyCell_GET(cell);
      if (v == nullptr) continue;
    }
    const Tag tag = match_argument(p, v, i, posbase, function, self_first);
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
                           PyObject* function, bool self_first) {
  const auto n = static_cast<int>(p.in_objs.size());
  if (posbase > 0) {
    const int own = posbase + position;  // the argument at the parameter's own position
    for (int j : {self_first ? own - 1 : own, self_first ? own : own - 1}) {
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

}  // namespace sealtrace
