// The instructions the engine's evaluation loop tags itself (eval_loop.cpp), while no question
// watches the instant: an instruction that only moves a value, an operator on plain values, a
// load or a store of a name, a step of an iteration over a container, an item or an attribute
// read or stored, a container built. Each step_* is asked before its instruction runs: it counts
// the instruction (Tracer::quick_event) and remembers what it read, or refuses, and the tracer's
// usual event (on_opcode) runs instead. After the instruction its quick_* tags what it left, as
// the two halves (begin.cpp, complete.cpp) would have. Calls are quick_calls.cpp's.
//
// A step must refuse wherever its instruction could run Python code (a __del__, a __hash__, a
// descriptor: quiet_values.hpp) or where a question could see the instant: the tracer's events
// are the only place Python code of the program may run between an instruction's halves.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#include <opcode.h>

#include <algorithm>
#include <cstdint>

#include "eval_loop.hpp"
#include "eval_pending.h"
#include "fields.h"
#include "ops.hpp"
#include "py_values.hpp"
#include "quiet_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

namespace {

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

}  // namespace

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
                                    PyObject** sp, Tag& tag, std::uintptr_t& value,
                                    AttrFound& found) {
  PyObject* owner = sp[-1];
  PyTypeObject* tp = Py_TYPE(owner);
  if (Py_REFCNT(owner) < 2 || !fills_.empty() || recording_edges(counter_.value() + 1)) {
    return nullptr;
  }
  PyObject* name = PyTuple_GET_ITEM(f->f_code->co_names, in.oparg);
  int known = 0;
  PyObject* own = nullptr;
  PyObject* descr = nullptr;
  if (in.op == STORE_ATTR) {
    if (tp->tp_setattro != PyObject_GenericSetAttr || PyModule_Check(owner) ||
        tp->tp_dictoffset == 0 || _PyType_Lookup(tp, name) != nullptr || !trackable(owner)) {
      return nullptr;
    }
    own = sealtrace_instance_attr(owner, name, &known);
    if (known == 0 || (own != nullptr && !drops_quietly(own))) return nullptr;
  } else {
    if (tp->tp_getattro != PyObject_GenericGetAttr) return nullptr;
    descr = _PyType_Lookup(tp, name);
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
  // The generic lookup with no descriptor of that name finds the instance's own attribute;
  // LOAD_METHOD's finds it too if it has one, else the type's method descriptor.
  found = own != nullptr ? AttrFound{own, false} : AttrFound{descr, true};
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

// BUILD_TUPLE, BUILD_LIST, `{}` (BUILD_MAP of nothing), BUILD_CONST_KEY_MAP (its keys plain and
// distinct: hashing them runs no Python code, and no value is replaced, which could free it)
// and GET_ITER of what iterates quietly, while no slice is recorded: counted before they run;
// quick_built then tags what they made with complete_build_seq's, complete_build_map's and
// complete_get_iter's own helpers (tag_new_sequence, tag_new_dict, tag_new_iterator).
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
  built_keys_.clear();
  if (in.op == BUILD_CONST_KEY_MAP) {
    const_map_keys(sp[-1], in.oparg, built_keys_);
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
  if (in.op == GET_ITER) {
    const Tag src_tag = s[base];
    s[base] = now;
    tag_new_iterator(sf, base, built_values_[0], src_tag);
    return;
  }
  // The items' tags are still in the shadow stack, from the result's slot up.
  if (in.op == BUILD_CONST_KEY_MAP || in.op == BUILD_MAP) {
    tag_new_dict(obj, built_keys_.data(), built_keys_.size(), s + base, built_values_.data(), 1,
                 now);
  } else {
    tag_new_sequence(obj, s + base, in.oparg, now);
  }
  s[base] = now;
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

}  // namespace sealtrace
