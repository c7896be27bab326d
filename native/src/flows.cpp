// Forward flows through containers: a followed value put into a list, a tuple of arguments or
// an object's __dict__ taints what C makes from that container (`"%s" % record.__dict__`,
// `",".join(parts)`, `json.dumps(row)`), as a backward trace has its items as inputs
// (item_inputs.cpp). Only flows passes walk items, and only for the instructions whose
// backward inputs include them: calls into C, binary operators and f-string formatting.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <frameobject.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <cstring>

#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

bool Tracer::items_tainted(ShadowFrame& sf) {
  Pending& p = sf.p;
  const bool call = p.rule == Rule::kCall || p.rule == Rule::kCallFunctionEx;
  if (!call && p.op != kBinaryOp && p.op != kFormatValueOp) return false;
  ItemWalk w;
  if (format_item_tags(p, w) != kNotRead) {
    for (Tag t : w.tags) {
      if (tainted_.count(t) != 0) return true;
    }
    return false;  // "%(message)s" % record.__dict__: only the fields it names
  }
  for (std::size_t i = call ? 1 : 0; i < p.in_objs.size(); ++i) {
    PyObject* v = p.in_objs[i];
    if (v == nullptr || !is_container(v) || shared(v)) continue;
    walk_items(v, 1, w);
    if (w.cut) break;
  }
  for (Tag t : w.tags) {
    if (tainted_.count(t) != 0) return true;
  }
  return false;
}

// Values that share a tag (the items one `a, b = text.split()` unpacked, with no tags of their
// own) would all be followed from a tag: a flow from `b` follows its variable instead.
bool Tracer::seed_local(PyFrameObject* frame, PyObject* name, Tag tag) {
  ShadowFrame* sf = find_shadow(frame);
  if (sf == nullptr) return false;
  PyCodeObject* code = frame->f_frame->f_code;
  for (int i = 0; i < code->co_nlocalsplus; ++i) {
    const int kind = sf->code->kinds[static_cast<std::size_t>(i)];
    if ((kind & (CO_FAST_CELL | CO_FAST_FREE)) != 0) continue;
    if (PyUnicode_Compare(PyTuple_GET_ITEM(code->co_localsplusnames, i), name) == 0) {
      sf->slots[static_cast<std::size_t>(i)] = tag;
      return true;
    }
  }
  if (PyErr_Occurred()) PyErr_Clear();
  return false;
}

// `len(text)`, `isinstance(x, T)`: builtins that say something about a value, not what it
// holds. A flow follows what a value holds (an email's characters), so their results do not
// carry it: a count of characters logged is not the email.
bool Tracer::reveals_no_content(const Pending& p) const {
  if (p.rule != Rule::kCall || p.in_objs.size() < 2 || p.in_objs[0] != nullptr) return false;
  PyObject* callable = p.in_objs[1];
  if (!PyCFunction_Check(callable) || PyCFunction_GET_SELF(callable) != builtins_) return false;
  const char* name = reinterpret_cast<PyCFunctionObject*>(callable)->m_ml->ml_name;
  for (const char* n : {"len", "isinstance", "issubclass", "id", "callable", "hasattr"}) {
    if (std::strcmp(name, n) == 0) return true;
  }
  return false;
}

}  // namespace sealtrace
