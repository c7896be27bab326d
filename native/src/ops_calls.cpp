// Calls: PRECALL keeps a bound method's self for the call; CALL models the container methods
// and builtins written in C that move values in or out of slots (model_call), and its result
// is what the callee returned, an input passed through or a value the tracer holds a tag for.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "fields.h"
#include "ops.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

// PRECALL: a bound method whose NULL slot CALL will fill with self.
void Tracer::begin_precall(ShadowFrame& sf, const Instr& in, int depth) {
  Pending& p = sf.p;
  PyObject** lp = sf.iframe->localsplus;
  const int null_slot = depth - in.oparg - 2;
  if (lp[null_slot] == nullptr && PyMethod_Check(lp[null_slot + 1])) {
    p.flag = true;
    p.aux_tag = sf.slots.data()[null_slot + 1];
  }
}

// CALL: keyword calls (after KW_NAMES) are not modelled.
void Tracer::begin_call(ShadowFrame& sf) {
  Pending& p = sf.p;
  p.kw = sf.kw_pending;
  sf.kw_pending = false;
  if (!p.kw) model_call(sf);
}

// PRECALL unpacked the bound method into [function, self]: both keep the method's tag.
void Tracer::complete_precall(ShadowFrame& sf) {
  const Pending& p = sf.p;
  if (p.flag) {
    const int null_slot = p.before - p.oparg - 2;
    if (sf.iframe->localsplus[null_slot] != nullptr) {
      Tag* s = sf.slots.data();
      s[null_slot] = p.aux_tag;
      s[null_slot + 1] = p.aux_tag;
    }
  }
}

// CALL, CALL_FUNCTION_EX.
void Tracer::complete_call(ShadowFrame& sf, int base, int depth) {
  Tag* s = sf.slots.data();
  fill(sf, base, depth);
  if (depth - base == 1) s[base] = call_result(sf, sf.iframe->localsplus[base]);
}

Tag Tracer::call_result(ShadowFrame& sf, PyObject* result) {
  Pending& p = sf.p;
  if (p.has_return) return p.return_tag;
  if (result == nullptr) return 0;
  if (last_return_.seq > p.return_seq && last_return_.value == result) return last_return_.tag;
  if (p.aux_value == result && p.aux_tag != 0) return p.aux_tag;
  const bool compares = compares_items(p);
  if (!shared(result) && !compares) {
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
  if (p.shares_state && slots_.find(addr(p.copy_of)) != nullptr) {
    // Alive (its record is): the instance dict the call handed out holds its attributes.
    PyObject* dict = sealtrace_instance_dict(p.copy_of);
    if (dict != nullptr) share_attribute_slots(p.copy_of, dict);
  }
  if (!shared(result) && !compares) {
    const Tag held = held_tag(result);
    if (held != 0) return held;
  }
  note_made_empty(p, result);
  if (trackable(result) && Py_REFCNT(result) == 1) {
    slots_.mark_created(addr(result), p.counter, container_size(result, deque_type_) == 0);
    // list.copy(), dict.copy(): the same items, in the same places, with the same tags. The
    // original is still alive if its record is (deallocation drops it).
    const ObjectRecord* original = p.copy_of != nullptr ? slots_.find(addr(p.copy_of)) : nullptr;
    if (original != nullptr && (Py_TYPE(result) == Py_TYPE(p.copy_of) ||
                                (PyDict_Check(result) && PyDict_Check(p.copy_of)))) {
      std::vector<std::pair<std::uint64_t, Slot>> copy(original->slots.begin(),
                                                       original->slots.end());
      for (const auto& [k, slot] : copy) copy_slot(addr(result), k, slot, p.counter);
    }
    if (p.flag && PyDict_Check(result)) {  // dict(pairs): model_dict_construction
      for (std::size_t i = 0; i < p.keys.size(); ++i) {
        set_slot(addr(result), p.keys[i], p.items[i], addr(p.item_values[i]), p.counter);
      }
    }
  }
  return p.counter;
}

// A list method: append, pop and extend move values in or out of item slots; the methods
// that reorder or remove forget them.
inline void Tracer::model_list_method(Pending& p, PyObject* self, const char* name, PyObject** args,
                                      const Tag* tags, int argc) {
  const Tag now = p.counter;
  auto is = [name](const char* n) { return std::strcmp(name, n) == 0; };
  const Py_ssize_t len = PyList_GET_SIZE(self);
  if (is("copy") && argc == 0) {
    p.copy_of = self;  // call_result copies its slots to the new list
  } else if (is("append") && argc == 1) {
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
  } else if (is("sort") || is("reverse")) {
    slots_.reorder(addr(self), now);  // the same items: their tags follow them
  } else if (is("insert") || is("remove") || is("clear") || is("extend") || is("__setitem__") ||
             is("__delitem__")) {
    slots_.drop_slots(addr(self), now);
  }
}

// A set's or a deque's methods: what goes in keeps its tag in a member slot, what comes out
// (deque.pop, popleft) is read from one; what the engine cannot follow makes it dirty.
inline void Tracer::model_member_method(Pending& p, PyObject* self, const char* name,
                                        PyObject** args, const Tag* tags, int argc) {
  const Tag now = p.counter;
  auto is = [name](const char* n) { return std::strcmp(name, n) == 0; };
  const bool deque = Py_IS_TYPE(self, deque_type_);
  if ((is("add") || is("append") || is("appendleft")) && argc == 1) {
    set_slot(addr(self), member_key(addr(args[0])), tags[0], addr(args[0]), now);
  } else if (is("insert") && deque && argc == 2) {
    set_slot(addr(self), member_key(addr(args[1])), tags[1], addr(args[1]), now);
  } else if ((is("update") || is("extend") || is("extendleft")) && argc == 1) {
    copy_items_as_members(self, args[0], tags[0], now);
  } else if (deque && (is("pop") || is("popleft")) && argc == 0 && Py_SIZE(self) > 0) {
    PyObject* item = PySequence_GetItem(self, is("pop") ? Py_SIZE(self) - 1 : 0);  // C: no code
    if (item == nullptr) {
      PyErr_Clear();
      return;
    }
    p.aux_tag = slots_.get(addr(self), member_key(addr(item)), addr(item));
    p.aux_value = p.aux_tag != 0 ? item : nullptr;
    Py_DECREF(item);  // the deque holds it until the call takes it out
  } else if (is("difference_update") || is("intersection_update") ||
             is("symmetric_difference_update") || is("__ior__") || is("__iand__") ||
             is("__ixor__") || is("__isub__") || is("__iadd__") || is("__setitem__")) {
    slots_.mark_dirty(addr(self), now);
  }
}

// A bytearray filled in place (extend, append, a stream's readinto): each fill keeps the tag of
// what filled it, in order, so bytes(buffer) and buffer.decode() have them as inputs. What
// the engine cannot follow (a slice store, a clear) makes it dirty.
void Tracer::model_fill(PyObject* buffer, const char* name, Tag filler, Tag now) {
  auto is = [name](const char* n) { return std::strcmp(name, n) == 0; };
  if (is("extend") || is("append") || is("insert")) {
    const ObjectRecord* record = slots_.find(addr(buffer));
    const std::size_t fills = record != nullptr ? record->slots.size() : 0;
    if (filler == 0 || fills >= kMaxCallbacks) {
      slots_.mark_dirty(addr(buffer), now);
    } else {
      slots_.set(addr(buffer), index_key(static_cast<Py_ssize_t>(fills)), filler, 0, now, false);
    }
  } else if (!is("decode") && !is("hex") && !is("count") && !is("find") && !is("index") &&
             !is("startswith") && !is("endswith") && !is("copy")) {
    slots_.mark_dirty(addr(buffer), now);
  }
}

// C functions of the standard library that write into the container they are given.
inline void Tracer::model_module_function(PyObject* module, const char* name, PyObject** args,
                                          const Tag* tags, int argc, Tag now) {
  const char* mod = PyModule_GetName(module);
  if (mod == nullptr) {
    PyErr_Clear();
    return;
  }
  auto is = [name](const char* n) { return std::strcmp(name, n) == 0; };
  PyObject* target = args[0];
  if (!trackable(target)) return;
  if (std::strcmp(mod, "_heapq") == 0 && PyList_Check(target)) {
    // heappush(heap, item), heapify(heap), ...: the same items, in another order.
    if ((is("heappush") || is("heappushpop") || is("heapreplace")) && argc == 2) {
      set_slot(addr(target), member_key(addr(args[1])), tags[1], addr(args[1]), now);
    }
    slots_.reorder(addr(target), now);
  } else if (std::strcmp(mod, "_bisect") == 0 && PyList_Check(target) && argc >= 2 &&
             (is("insort_left") || is("insort_right") || is("insort"))) {
    slots_.reorder(addr(target), now);
    set_slot(addr(target), member_key(addr(args[1])), tags[1], addr(args[1]), now);
  } else if (std::strcmp(mod, "_collections") == 0 && is("_count_elements")) {
    slots_.mark_dirty(addr(target), now);  // Counter's counting, in C
  }
}

// A dict method: get, __getitem__, pop and setdefault read a slot; update copies slots.
inline void Tracer::model_dict_method(Pending& p, PyObject* self, const char* name, PyObject** args,
                                      const Tag* tags, int argc) {
  const Tag now = p.counter;
  auto is = [name](const char* n) { return std::strcmp(name, n) == 0; };
  std::uint64_t key = 0;
  if (is("copy") && argc == 0) {
    p.copy_of = self;  // call_result copies its slots to the new dict
    return;
  }
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
      std::vector<std::pair<std::uint64_t, Slot>> copy(record->slots.begin(), record->slots.end());
      for (const auto& [k, slot] : copy) copy_slot(addr(self), k, slot, now);
    }
    // Values with no slot of their own there (an instance's __dict__ that C handed over, as
    // copy.copy's state): the tag of the slot that still holds them, else the mapping's own
    // (whatever made it made them: json.loads, a row factory). Every key written is
    // overwritten, so an old value's tag never outlives it.
    if (PyDict_GET_SIZE(args[0]) <= static_cast<Py_ssize_t>(kMaxCopiedItems)) {
      Py_ssize_t pos = 0;
      PyObject* k = nullptr;
      PyObject* v = nullptr;
      while (PyDict_Next(args[0], &pos, &k, &v)) {
        std::uint64_t slot_key = 0;
        if (!item_key(k, slot_key) || slots_.get(addr(args[0]), slot_key, addr(v)) != 0) continue;
        const Tag t = held_tag(v);
        set_slot(addr(self), slot_key, t != 0 ? t : tags[0], addr(v), now);
      }
    } else {
      slots_.drop_slots(addr(self), now);
    }
  } else if (is("clear") || is("popitem") || is("update")) {
    slots_.drop_slots(addr(self), now);
  } else if (is("__setitem__") || is("__delitem__") || is("fromkeys")) {
    slots_.mark_dirty(addr(self), now);
  }
}

// dict(mapping), OrderedDict(pairs): each key's value keeps the tag of the slot it came from
// (a mapping's slot, a pair's second item); call_result writes them into the new dict.
void Tracer::model_dict_construction(Pending& p, PyObject* source) {
  if (PyDict_Check(source)) {
    p.copy_of = source;
    return;
  }
  p.keys.clear();
  p.items.clear();
  p.item_values.clear();
  if (!(PyList_Check(source) || PyTuple_Check(source))) {
    p.pairs_yielded = true;  // an iterator's pairs: take_yielded_pair reads each as it comes
    return;
  }
  if (static_cast<std::size_t>(Py_SIZE(source)) > kMaxCopiedItems) return;
  for (Py_ssize_t i = 0; i < Py_SIZE(source); ++i) {
    PyObject* pair = seq_item(source, i);
    std::uint64_t key = 0;
    PyObject* value = nullptr;
    const Tag t = pair_value_tag(pair, item_tag_of(source, index_key(i), pair), key, &value);
    if (t == 0) continue;
    p.keys.push_back(key);
    p.items.push_back(t);
    p.item_values.push_back(value);
  }
  p.flag = !p.keys.empty();
}

// dict() of a generator: a pair Python code just yielded to it (alive now, maybe not when the
// call completes); call_result writes the slots.
void Tracer::take_yielded_pair(Pending& p, PyObject* pair, Tag tag) {
  std::uint64_t key = 0;
  PyObject* value = nullptr;
  const Tag t = pair_value_tag(pair, tag, key, &value);
  if (t == 0 || p.keys.size() >= kMaxCopiedItems) return;
  p.keys.push_back(key);
  p.items.push_back(t);
  p.item_values.push_back(value);
  p.flag = true;
}

// A (key, value) pair's value slot: the pair's item slot, else the pair's own tag (whatever
// made the pair made its items: a line.split(",")), or 0 when it is no simple pair.
Tag Tracer::pair_value_tag(PyObject* pair, Tag pair_tag, std::uint64_t& key, PyObject** value) {
  if (!(PyTuple_CheckExact(pair) || PyList_CheckExact(pair)) || Py_SIZE(pair) != 2 ||
      !item_key(seq_item(pair, 0), key)) {
    return 0;
  }
  *value = seq_item(pair, 1);
  const Tag t = slots_.get(addr(pair), index_key(1), addr(*value));
  return t != 0 ? t : pair_tag;
}

// getattr(owner, name[, default]) reads an attribute slot, setattr writes one.
inline void Tracer::model_builtin_attr(Pending& p, const char* name, PyObject** args,
                                       const Tag* tags, int argc) {
  const Tag now = p.counter;
  auto is = [name](const char* n) { return std::strcmp(name, n) == 0; };
  PyObject* owner = args[0];
  PyObject* ns = namespace_of(owner);
  PyObject* target = ns != nullptr ? ns : owner;
  const std::uint64_t key = ns != nullptr ? name_key(args[1]) : attr_key(args[1]);
  if (is("getattr")) {
    const Slot* slot = slots_.slot(addr(target), key);
    if (slot == nullptr && ns == nullptr && PyUnicode_Check(args[1])) {
      // Written through the instance's __dict__ (copy's state, ORMs), as LOAD_ATTR reads it.
      PyObject* dict = sealtrace_instance_dict(owner);
      if (dict != nullptr) slot = slots_.slot(addr(dict), name_key(args[1]));
    }
    if (slot != nullptr) {
      p.aux_tag = slot->tag;
      p.aux_value = reinterpret_cast<PyObject*>(slot->value);
    } else if (ns == nullptr && PyUnicode_Check(args[1])) {
      PyObject* v = nullptr;
      p.aux_tag = class_attr_slot(owner, args[1], &v);  // a class attribute read through it
      p.aux_value = v;
    }
  } else if (is("setattr") && argc == 3 && trackable(target)) {
    set_slot(addr(target), key, tags[2], addr(args[2]), now);
  }
}

// Container methods and builtins implemented in C that move values in or out of slots.
void Tracer::model_call(ShadowFrame& sf) {
  Pending& p = sf.p;
  PyObject* self = nullptr;
  const char* name = nullptr;
  PyObject* head = p.in_objs[0];
  PyObject* callable = p.in_objs[1];
  PyObject** args = p.in_objs.data() + 2;
  const Tag* tags = p.in_tags.data() + 2;
  const int argc = p.oparg;
  if (head != nullptr && Py_TYPE(head) == &PyMethodDescr_Type) {
    self = callable;
    name = reinterpret_cast<PyMethodDescrObject*>(head)->d_method->ml_name;
  } else if (head == nullptr && PyCFunction_Check(callable)) {
    self = PyCFunction_GET_SELF(callable);
    name = reinterpret_cast<PyCFunctionObject*>(callable)->m_ml->ml_name;
  } else if (head == nullptr && Py_IS_TYPE(callable, &PyWrapperDescr_Type) && argc == 3 &&
             PyUnicode_Check(args[1]) &&
             std::strcmp(reinterpret_cast<PyWrapperDescrObject*>(callable)->d_base->name,
                         "__setattr__") == 0) {
    // object.__setattr__(self, name, value): how frozen dataclasses and ORMs set attributes.
    PyObject* ns = namespace_of(args[0]);
    PyObject* target = ns != nullptr ? ns : args[0];
    if (trackable(target)) {
      set_slot(addr(target), ns != nullptr ? name_key(args[1]) : attr_key(args[1]), tags[2],
               addr(args[2]), p.counter);
    }
    return;
  }
  if (head == nullptr && argc == 1 && !p.kw && PyType_Check(callable) &&
      PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(callable), &PyDict_Type)) {
    model_dict_construction(p, args[0]);
    return;
  }
  if (self == nullptr || name == nullptr) return;
  if (std::strcmp(name, "__reduce_ex__") == 0 || std::strcmp(name, "__reduce__") == 0 ||
      std::strcmp(name, "__getstate__") == 0) {
    p.copy_of = self;  // copy's state is self.__dict__: call_result shares its slots
    p.shares_state = true;
    return;
  }
  if (PyList_Check(self) && trackable(self)) {
    model_list_method(p, self, name, args, tags, argc);
  } else if (PyDict_Check(self) && trackable(self)) {
    model_dict_method(p, self, name, args, tags, argc);
  } else if ((PyAnySet_Check(self) || Py_IS_TYPE(self, deque_type_)) && trackable(self)) {
    model_member_method(p, self, name, args, tags, argc);
  } else if (PyByteArray_Check(self) && trackable(self)) {
    model_fill(self, name, argc >= 1 ? tags[argc - 1] : 0, p.counter);
  } else if (argc >= 1 && PyByteArray_Check(args[0]) && trackable(args[0]) &&
             (std::strcmp(name, "readinto") == 0 || std::strcmp(name, "readinto1") == 0 ||
              std::strcmp(name, "recv_into") == 0)) {
    // stream.readinto(buffer): what fills the buffer is what this call read (a recorded read,
    // or what earlier reads left in the stream: its fills, fills.cpp).
    model_fill(args[0], "extend", p.counter, p.counter);
  } else if (self == builtins_ && argc >= 2 && PyUnicode_Check(args[1])) {
    model_builtin_attr(p, name, args, tags, argc);
  } else if (PyModule_Check(self) && argc >= 1) {
    model_module_function(self, name, args, tags, argc, p.counter);
  }
}

}  // namespace sealtrace
