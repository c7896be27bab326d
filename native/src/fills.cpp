// Objects remember what filled them (fills.hpp). The replay runtime tells the engine each
// time it serves a recorded read (note_input): the instruction running then is where the
// read's data entered the program, and the object that instruction asked (a method call's
// self, `next()`'s iterator, the iterator of a `for`) keeps it as a fill. A later call or
// `for` step on that object that serves no read of its own hands out what earlier reads left
// in it (a buffered line, the next csv row): its inputs get the object's fills. A Python
// function that untraced code calls while a read is served (a sqlite3 row factory, called by
// the replay's cursor with the recorded row) gets the reading instruction's tag for its
// arguments.
#define Py_BUILD_CORE 1
#include "fills.hpp"

#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>
#include <cstring>

#include "hooks.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

void FillTable::add(std::uintptr_t object, Tag tag) {
  Fill& fill = fills_[object];
  const std::size_t n = fill.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (fill.tags[i] == tag) return;
  }
  fill.tags[fill.count % Fill::kMaxFills] = tag;
  ++fill.count;
}

void FillTable::consumed_before_newest(std::uintptr_t object) noexcept {
  auto it = fills_.find(object);
  if (it == fills_.end() || it->second.count <= 1) return;
  Fill& fill = it->second;
  fill.tags[0] = fill.tags[(fill.count - 1) % Fill::kMaxFills];
  fill.count = 1;
}

const Fill* FillTable::find(std::uintptr_t object) const {
  auto it = fills_.find(object);
  return it == fills_.end() ? nullptr : &it->second;
}

namespace {

// Values that hold no read's data of their own: code, types, modules, and the containers and
// buffers whose items the engine already tags one by one.
bool opaque(PyObject* v) {
  return !(PyModule_Check(v) || PyType_Check(v) || PyFunction_Check(v) || PyCFunction_Check(v) ||
           PyMethod_Check(v) || PyList_Check(v) || PyTuple_Check(v) || PyDict_Check(v) ||
           PyAnySet_Check(v) || PyByteArray_Check(v) || PyBytes_Check(v) || PyUnicode_Check(v) ||
           PyLong_Check(v) || PyFloat_Check(v) || v == Py_None || shared(v));
}

}  // namespace

// The object an instruction asks for data: a method call's self, the iterator `next(it)` or a
// `for` steps; nullptr for anything else.
PyObject* Tracer::fill_target(const Pending& p) const {
  PyObject* target = nullptr;
  if (p.rule == Rule::kForIter && !p.in_objs.empty()) {
    target = p.in_objs.back();
  } else if (p.rule == Rule::kCall && p.in_objs.size() >= 2) {
    PyObject* head = p.in_objs[0];
    PyObject* callable = p.in_objs[1];
    if (head != nullptr) {
      target = callable;  // [method, self, args...]
    } else if (PyCFunction_Check(callable)) {
      PyObject* self = PyCFunction_GET_SELF(callable);
      const char* name = reinterpret_cast<PyCFunctionObject*>(callable)->m_ml->ml_name;
      if (self == builtins_ && p.in_objs.size() >= 3 && std::strcmp(name, "next") == 0) {
        target = p.in_objs[2];
      } else if (self != nullptr && !PyModule_Check(self)) {
        target = self;
      }
    }
  }
  return target != nullptr && opaque(target) ? target : nullptr;
}

void Tracer::note_input(bool content) {
  ensure_thread();
  if (stack_.empty() || !stack_.back()->p.active) return;
  const Tag reader = stack_.back()->p.counter;  // where the read's data entered: its origin
  stack_.back()->p.input_served = true;
  if (!content) return;  // seekable(), tell(): nothing enters the object that asked
  // Every C object asked for data on the way down keeps the read: the innermost instruction
  // may be a Python layer's (SocketIO.readinto's recv_into) while the buffer that keeps the
  // bytes is the BufferedReader a caller asked (rfile.readline()). Objects of Python classes
  // keep their state in attributes the engine tags already (and the replay's stand-ins serve
  // every read as an event of its own).
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
    Pending& p = (*it)->p;
    if (!p.active) break;
    PyObject* target = fill_target(p);
    if (target == nullptr || Py_TYPE(target)->tp_dealloc == g_subtype_dealloc) continue;
    // The record must die with the object: hook its type's deallocation first.
    if (!hook_type(Py_TYPE(target))) continue;
    fills_.add(addr(target), reader);
    p.filled = addr(target);
    // An outer instruction still running hands out what this read brought.
    if (p.counter != reader &&
        std::find(p.fill_tags.begin(), p.fill_tags.end(), reader) == p.fill_tags.end()) {
      p.fill_tags.push_back(reader);
    }
  }
}

// An output the replay runtime served (a file's or a stream's write, a flush): the data that
// C objects on the way down were keeping (what `write` put in a buffered writer) left them.
// Whether it carried a followed value decides whether the output is reached.
void Tracer::note_output() {
  ensure_thread();
  if (stack_.empty() || !stack_.back()->p.active) return;
  Pending& innermost = stack_.back()->p;
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
    Pending& p = (*it)->p;
    if (!p.active) break;
    if (tainting_) {
      for (Tag t : p.fill_tags) {
        if (tainted_.count(t) != 0) innermost.tainted_inputs = true;
      }
    }
    PyObject* target = fill_target(p);
    if (target != nullptr && Py_TYPE(target)->tp_dealloc != g_subtype_dealloc) {
      fills_.forget(addr(target));
    }
  }
}

// Before a call or a `for` step: the fills of the object it asks, kept in case it serves no
// read of its own (its operands may be gone by the time it completes). A C object's `write`
// (io.StringIO, a buffered writer) keeps what was written as a fill: `getvalue()` hands it
// out, a flush sends it to an output.
void Tracer::read_fills(Pending& p) {
  // `SomeCType()`: note_made_empty checks, once it returned, that it made one of them.
  p.empty_type = p.rule == Rule::kCall && p.oparg == 0 && !p.kw && p.in_objs.size() == 2 &&
                         p.in_objs[0] == nullptr && PyType_Check(p.in_objs[1])
                     ? reinterpret_cast<PyTypeObject*>(p.in_objs[1])
                     : nullptr;
  PyObject* target = fill_target(p);
  if (target != nullptr && p.in_objs[0] != nullptr && p.rule == Rule::kCall && p.oparg >= 1 &&
      Py_TYPE(p.in_objs[0]) == &PyMethodDescr_Type &&
      Py_TYPE(target)->tp_dealloc != g_subtype_dealloc) {
    const char* name = reinterpret_cast<PyMethodDescrObject*>(p.in_objs[0])->d_method->ml_name;
    const Tag written = p.in_tags[2];
    if ((std::strcmp(name, "write") == 0 || std::strcmp(name, "writelines") == 0) && written != 0 &&
        hook_type(Py_TYPE(target))) {
      fills_.add(addr(target), written);
    }
  }
  if (target == nullptr || fills_.empty()) return;
  const Fill* fill = target != nullptr ? fills_.find(addr(target)) : nullptr;
  if (fill == nullptr) return;
  const std::size_t n = fill->size();
  const std::size_t first = fill->count % Fill::kMaxFills;  // the oldest kept, when full
  for (std::size_t i = 0; i < n; ++i) {
    p.fill_tags.push_back(fill->tags[(fill->dropped() ? first + i : i) % Fill::kMaxFills]);
  }
  if (fill->dropped()) p.fill_tags.push_back(kUnknownTag);  // older reads, not kept
  // Its fills are all it holds: they stand for it (a method's self), not its empty start.
  p.fills_whole = fill->made_empty && !fill->dropped() && n > 0 && p.in_objs[0] != nullptr &&
                  target == p.in_objs[1];
}

// `buffer[i:j]` of a bytearray (asyncio's StreamReader cuts a line out of its buffer this
// way): the slice's bytes came from the buffer's fills (model_fill), and it remembers them in
// turn, so `bytes(chunk)` or `chunk.decode()` has them as inputs.
void Tracer::read_buffer_fills(Pending& p) {
  PyObject* buffer = p.in_objs[0];
  const ObjectRecord* record = slots_.find(addr(buffer));
  if (record == nullptr) return;
  Py_ssize_t fills = 0;
  for (;; ++fills) {
    const Slot* fill = slots_.slot(addr(buffer), index_key(fills));
    if (fill == nullptr) break;
    p.fill_tags.push_back(fill->tag);
  }
  const bool whole =
      record->created_empty && !record->dirty && (fills > 0 || PyByteArray_GET_SIZE(buffer) == 0);
  if (!whole) p.fill_tags.push_back(kUnknownTag);
}

// After it: what it handed out came from the reads that filled the object, unless it served
// a read itself (its own origin then says where the data came from).
void Tracer::apply_fills(ShadowFrame& sf, int depth) {
  Pending& p = sf.p;
  if (p.input_served) return;
  if (p.rule == Rule::kBinarySubscr && depth > sf.code->nlocalsplus) {
    PyObject* chunk = sf.iframe->localsplus[depth - 1];
    if (chunk != nullptr && PyByteArray_Check(chunk) && Py_REFCNT(chunk) == 1 && trackable(chunk)) {
      slots_.mark_created(addr(chunk), p.counter, true);
      Py_ssize_t i = 0;
      for (Tag t : p.fill_tags) {
        if (t == kUnknownTag) {
          slots_.mark_dirty(addr(chunk), p.counter);
        } else {
          slots_.set(addr(chunk), index_key(i++), t, 0, p.counter, false);
        }
      }
    }
  }
  for (Tag t : p.fill_tags) {
    if (std::find(p.callbacks.begin(), p.callbacks.end(), t) == p.callbacks.end()) {
      p.callbacks.push_back(t);
    }
    if (tainting_ && tainted_.count(t) != 0) p.tainted_inputs = true;
  }
}

// A C object made by a constructor given nothing (`io.StringIO()`): what it later hands out is
// only what filled it, so those fills stand for it (read_fills), as a list's items do for the
// empty list a loop filled.
void Tracer::note_made_empty(const Pending& p, PyObject* result) {
  if (p.empty_type == nullptr || result == nullptr || Py_TYPE(result) != p.empty_type ||
      !opaque(result) || p.empty_type->tp_dealloc == g_subtype_dealloc ||
      !hook_type(p.empty_type)) {
    return;
  }
  fills_.made_empty(addr(result));
}

// A Python function untraced code called while `reader` served a read (a row factory called
// with the recorded row): its arguments came with that read.
void Tracer::fill_arguments(const Pending& reader, ShadowFrame& callee) {
  _PyInterpreterFrame* f = callee.iframe;
  for (int i = 0; i < callee.code->argslots; ++i) {
    PyObject* v = f->localsplus[i];
    if (v == nullptr) continue;
    if ((callee.code->kinds[static_cast<std::size_t>(i)] & CO_FAST_CELL) != 0 && PyCell_Check(v)) {
      PyObject* content = PyCell_GET(v);  // an argument a closure captures (a comprehension's)
      if (content != nullptr)
        set_slot(addr(v), kCellKey, reader.counter, addr(content), reader.counter);
      continue;
    }
    callee.slots[static_cast<std::size_t>(i)] = reader.counter;
  }
}

}  // namespace sealtrace
