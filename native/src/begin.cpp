// The first half of an instruction: before it runs, its inputs (objects and tags) are read
// and the slots it writes are tagged; container methods and builtins written in C are
// modelled here too (model_call).
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>
#include <cstring>

#include "hooks.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

// -- instructions ---------------------------------------------------------------------------

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
      if (slot == nullptr && lp[in.oparg] != nullptr)
        slot = slots_.slot(addr(lp[in.oparg]), kCellKey);
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

}  // namespace sealtrace
