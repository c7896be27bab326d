// What C code reads out of containers: a value C makes from a container (sum, max, sorted,
// "".join, json.dumps, an f-string of a list) has the container's items as inputs, not the
// container. Only a query pass that keeps inputs (a slice, a capture) reads them: the items
// are gathered before the instruction runs, when its operands are alive for certain.
//
// An operand whose items all have tags is replaced by them. One with items the engine has no
// tag for stays an input (whatever made it may have made them too); and if it was made empty
// or changed in ways the engine could not follow, the untagged items came from code the engine
// does not trace: the UNKNOWN marker says so, instead of letting the container's literal pass
// for their origin. Past the item budget the operand stays and the CUT marker says the items
// were not all read.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "fields.h"
#include "ops.hpp"
#include "py_values.hpp"
#include "quiet.h"
#include "tracer.hpp"

namespace sealtrace {

namespace {

constexpr int kMaxItemDepth = 3;           // containers in containers in containers
constexpr std::size_t kMaxScanned = 4096;  // items looked at for one instruction
constexpr std::size_t kMaxItemTags = 256;  // distinct item tags kept for one instruction

// Builtins whose result says nothing about the items of what they are given.
bool reads_no_items(const char* name) {
  static const char* const kNames[] = {"len",      "isinstance", "issubclass", "id",
                                       "hasattr",  "getattr",    "setattr",    "delattr",
                                       "callable", "iter",       "hash",       "vars",
                                       "dir",      "globals",    "locals",     "__import__"};
  for (const char* n : kNames) {
    if (std::strcmp(name, n) == 0) return true;
  }
  return false;
}

// Methods that read their own container's items to make a value.
bool reads_own_items(const char* name) {
  return std::strcmp(name, "copy") == 0 || std::strcmp(name, "count") == 0 ||
         std::strcmp(name, "index") == 0 || std::strcmp(name, "__copy__") == 0 ||
         std::strcmp(name, "__reduce_ex__") == 0 || std::strcmp(name, "decode") == 0;
}

bool python_callable(PyObject* c) {
  if (PyFunction_Check(c)) return true;
  return PyMethod_Check(c) && PyFunction_Check(PyMethod_GET_FUNCTION(c));
}

}  // namespace

bool Tracer::is_container(PyObject* v) const noexcept {
  return PyList_Check(v) || PyTuple_Check(v) || PyDict_Check(v) || PyAnySet_Check(v) ||
         PyByteArray_Check(v) || (deque_type_ != nullptr && Py_IS_TYPE(v, deque_type_)) ||
         PyDictValues_Check(v) || PyDictItems_Check(v) || Py_IS_TYPE(v, &PyListIter_Type) ||
         Py_IS_TYPE(v, &PyTupleIter_Type);
}

// The tag of one item of a container: its positional or keyed slot, its member slot, or
// the slot some other container still holds it in.
Tag Tracer::item_tag_of(PyObject* container, std::uint64_t key, PyObject* item) const noexcept {
  Tag t = key != 0 ? slots_.get(addr(container), key, addr(item)) : 0;
  if (t == 0) t = slots_.get(addr(container), member_key(addr(item)), addr(item));
  if (t == 0) t = held_tag(item);
  return t;
}

// Adds the tags of c's items to w; true when every item had one (they stand for c).
bool Tracer::walk_items(PyObject* c, int depth, ItemWalk& w) {
  bool all = true;
  PyObject* owner = c;
  auto visit = [&](PyObject* item, std::uint64_t key) {
    if (w.cut) return;
    if (++w.scanned > kMaxScanned) {
      w.cut = true;
      all = false;
      return;
    }
    const Tag t = item_tag_of(owner, key, item);
    if (depth < kMaxItemDepth && is_container(item) && !shared(item)) {
      // A container in a container: its items, or its own tag if they are not all known.
      if (walk_items(item, depth + 1, w)) return;
      if (w.cut) {
        all = false;
        return;
      }
      if (t != 0) {
        w.add(t);
        return;
      }
    } else if (t != 0) {
      w.add(t);
      return;
    }
    all = false;
    const ObjectRecord* record = slots_.find(addr(owner));
    if (record != nullptr && (record->created_empty || record->dirty)) w.unknown = true;
  };
  if (PyList_Check(c) || PyTuple_Check(c)) {
    for (Py_ssize_t i = 0; i < Py_SIZE(c) && !w.cut; ++i) visit(seq_item(c, i), index_key(i));
  } else if (Py_IS_TYPE(c, &PyListIter_Type) || Py_IS_TYPE(c, &PyTupleIter_Type)) {
    const auto* it = reinterpret_cast<const SeqIterLayout*>(c);
    owner = it->it_seq;
    if (owner == nullptr) return true;
    for (Py_ssize_t i = std::max<Py_ssize_t>(it->it_index, 0); i < Py_SIZE(owner) && !w.cut; ++i) {
      visit(seq_item(owner, i), index_key(i));
    }
  } else if (PyDict_Check(c) || PyDictValues_Check(c) || PyDictItems_Check(c)) {
    if (!PyDict_Check(c))
      owner = reinterpret_cast<PyObject*>(reinterpret_cast<_PyDictViewObject*>(c)->dv_dict);
    if (owner == nullptr) return true;
    Py_ssize_t pos = 0;
    PyObject* k = nullptr;
    PyObject* v = nullptr;
    while (!w.cut && PyDict_Next(owner, &pos, &k, &v)) {
      std::uint64_t key = 0;
      item_key(k, key);
      visit(v, key);
    }
  } else if (PyAnySet_Check(c)) {
    Py_ssize_t pos = 0;
    PyObject* k = nullptr;
    Py_hash_t hash = 0;
    while (!w.cut && _PySet_NextEntry(c, &pos, &k, &hash)) visit(k, 0);
  } else if (PyByteArray_Check(c)) {
    // Its fills, in order (model_fill): they stand for it if it was made empty and filled only
    // in ways the engine followed.
    const ObjectRecord* record = slots_.find(addr(c));
    if (record == nullptr) return false;
    Py_ssize_t fills = 0;
    for (;; ++fills) {
      const Slot* fill = slots_.slot(addr(c), index_key(fills));
      if (fill == nullptr) break;
      w.add(fill->tag);
    }
    // Bytes with no fill the engine saw came from somewhere it did not see.
    const bool whole =
        record->created_empty && !record->dirty && (fills > 0 || PyByteArray_GET_SIZE(c) == 0);
    if (!whole && (record->created_empty || record->dirty)) w.unknown = true;
    return whole && !w.cut;
  } else if (deque_type_ != nullptr && Py_IS_TYPE(c, deque_type_)) {
    QuietScope quiet;  // only query passes walk it: the iterator must not move the heap
    PyObject* it = PyObject_GetIter(c);  // the deque's own iterator: C, runs no Python code
    if (it == nullptr) {
      PyErr_Clear();
      return false;
    }
    for (PyObject* item = PyIter_Next(it); item != nullptr; item = PyIter_Next(it)) {
      visit(item, 0);
      Py_DECREF(item);
      if (w.cut) break;
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) PyErr_Clear();
  }
  return all && !w.cut;
}

void Tracer::ItemWalk::add(Tag t) {
  if (t == 0 || cut) return;
  if (!seen.insert(t).second) return;
  if (tags.size() >= kMaxItemTags) {
    cut = true;
    return;
  }
  tags.push_back(t);
}

// `text % mapping` reads only the keys its `%(name)s` fields name (a logging formatter's
// `fmt % record.__dict__`): those items stand for the mapping when each has a tag.
bool Tracer::gather_named_items(Pending& p) {
  QuietScope quiet;  // the key strings it makes must not move the program's next objects
  PyObject* fmt = p.in_objs[0];
  PyObject* mapping = p.in_objs[1];
  // An ASCII string's characters are its UTF-8. Any other's UTF-8 is read from a copy, freed
  // in this scope: PyUnicode_AsUTF8AndSize would keep one in the program's string, in this
  // pass only (sys.getsizeof(fmt) then grew by its size in a capture pass and not in a slice).
  struct Copy {
    PyObject* bytes = nullptr;
    ~Copy() { Py_XDECREF(bytes); }
  } copy;
  const char* text = nullptr;
  Py_ssize_t n = 0;
  if (PyUnicode_IS_ASCII(fmt)) {
    text = static_cast<const char*>(PyUnicode_DATA(fmt));
    n = PyUnicode_GET_LENGTH(fmt);
  } else {
    copy.bytes = PyUnicode_AsUTF8String(fmt);
    if (copy.bytes == nullptr) {
      PyErr_Clear();
      return false;
    }
    text = PyBytes_AS_STRING(copy.bytes);
    n = PyBytes_GET_SIZE(copy.bytes);
  }
  ItemWalk w;
  for (Py_ssize_t i = 0; i + 1 < n; ++i) {
    if (text[i] != '%') continue;
    if (text[i + 1] == '%') {
      ++i;
      continue;
    }
    if (text[i + 1] != '(') return false;  // a positional field: the mapping itself is read
    const char* start = text + i + 2;
    const char* end =
        static_cast<const char*>(std::memchr(start, ')', static_cast<std::size_t>(n - i - 2)));
    if (end == nullptr) return false;
    PyObject* key = PyUnicode_FromStringAndSize(start, end - start);
    if (key == nullptr) {
      PyErr_Clear();
      return false;
    }
    PyObject* value = PyDict_GetItemWithError(mapping, key);  // exact str keys: no Python code
    std::uint64_t slot_key = 0;
    const bool keyed = item_key(key, slot_key);
    Py_DECREF(key);
    if (value == nullptr) {
      PyErr_Clear();
      return false;
    }
    const Tag t = keyed ? item_tag_of(mapping, slot_key, value) : 0;
    if (t == 0) return false;
    w.add(t);
    i = end - text;
  }
  if (w.cut) return false;
  p.replaced |= std::uint64_t{1} << 1;
  p.item_inputs = std::move(w.tags);
  return true;
}

// Before a call into C, an f-string's FORMAT_VALUE or a binary operator runs (in a pass that
// keeps inputs: begin checks): the items of the containers among its operands.
void Tracer::gather_item_inputs(ShadowFrame& sf) {
  Pending& p = sf.p;
  if (p.op == kBinaryOp && p.oparg == kRemainder && p.in_objs.size() == 2 &&
      PyUnicode_CheckExact(p.in_objs[0]) && PyDict_CheckExact(p.in_objs[1]) &&
      gather_named_items(p)) {
    return;
  }
  std::size_t first = 0;
  if (p.rule == Rule::kCall || p.rule == Rule::kCallFunctionEx) {
    if (p.in_objs.size() < 2) return;
    PyObject* head = p.in_objs[0];
    PyObject* callable = p.in_objs[1];
    PyObject* target = head != nullptr ? head : callable;
    if (python_callable(target) || target == reinterpret_cast<PyObject*>(&PyType_Type)) return;
    const char* name = nullptr;
    if (Py_TYPE(target) == &PyMethodDescr_Type) {
      name = reinterpret_cast<PyMethodDescrObject*>(target)->d_method->ml_name;
    } else if (PyCFunction_Check(target)) {
      name = reinterpret_cast<PyCFunctionObject*>(target)->m_ml->ml_name;
    }
    const bool builtin = PyCFunction_Check(target) && PyCFunction_GET_SELF(target) == builtins_;
    if (name != nullptr && builtin && reads_no_items(name)) return;
    // A method's self (in_objs[1] after a method descriptor) is read only by some methods.
    const bool own = head != nullptr && name != nullptr && reads_own_items(name);
    first = own ? 1 : 2;
  }
  ItemWalk w;
  for (std::size_t i = first; i < p.in_objs.size() && i < 64; ++i) {
    PyObject* v = p.in_objs[i];
    if (v == nullptr || !is_container(v) || shared(v)) continue;
    // CALL_FUNCTION_EX's argument tuple holds the arguments themselves: its items are walked,
    // and stand for it, like any container's.
    if (walk_items(v, 1, w)) {
      p.replaced |= std::uint64_t{1} << i;
    } else if (w.cut) {
      break;
    }
  }
  p.item_inputs = std::move(w.tags);
  if (w.unknown) p.item_inputs.push_back(kUnknownTag);
  if (w.cut) p.item_inputs.push_back(kCutTag);
}

// A query pass reads more of this instruction (its containers' items, what it may be a move
// of): forget what was read for another.
void Tracer::prepare_query_inputs(Pending& p) {
  p.query_counter = p.counter;
  p.item_inputs.clear();
  p.replaced = 0;
  p.move_hint = false;
  p.move_item = false;
  p.move_item_tag = 0;
  p.move_candidates.clear();
  p.move_tags.clear();
  p.move_digests.clear();
}

void Tracer::add_input(QuietVector<Tag>& out, Tag counter, Tag t) const {
  if (t == 0 && window_) t = kBeforeWindowTag;  // made before the window opened
  if (t != 0 && t != counter && std::find(out.begin(), out.end(), t) == out.end()) {
    out.push_back(t);
  }
}

// The inputs an instruction records and a capture reports: its operands (a call's callable
// aside, operands replaced by their items aside), the values Python code handed back to C
// while it ran, and the items C read.
void Tracer::edge_inputs(const Pending& p, QuietVector<Tag>& out) const {
  out.clear();
  std::size_t first = 0;
  if (p.rule == Rule::kCall || p.rule == Rule::kCallFunctionEx) {
    first = (!p.in_objs.empty() && p.in_objs[0] != nullptr) ? 1 : 2;
  }
  auto push = [&](Tag t) { add_input(out, p.counter, t); };
  const bool read = p.query_counter == p.counter;  // items and moves were read for it
  // A result that is one item of an argument (moves.cpp) was read from it alone.
  // Its data is that item's alone: the container it sat in and the key or index that chose
  // it select, they are not where it came from (an item whose tag was lost keeps them).
  const bool one_item = read && p.move_item;
  if (one_item && p.move_item_tag != 0) {
    push(p.move_item_tag);
    for (Tag t : p.callbacks) push(t);
    return;
  }
  const std::uint64_t replaced = read && !one_item ? p.replaced : 0;
  // A subscript of a list, tuple, dict, str or bytes: the key selects, the container holds.
  const std::size_t selector = p.rule == Rule::kBinarySubscr && read && p.move_hint ? 1 : SIZE_MAX;
  // A method's self made empty and filled only by what its fills name: they stand for it.
  const std::size_t filled_self = p.fills_whole && !p.input_served ? 1 : SIZE_MAX;
  for (std::size_t i = first; i < p.in_tags.size(); ++i) {
    if (i < 64 && (replaced & (std::uint64_t{1} << i)) != 0) continue;
    if (i == selector || i == filled_self) continue;
    push(p.in_tags[i]);
  }
  for (Tag t : p.callbacks) push(t);
  if (one_item) {
    push(p.move_item_tag);
  } else if (read) {
    for (Tag t : p.item_inputs) push(t);
  }
}

}  // namespace sealtrace
