// Queries on a run: tainted values and where they reached, the instruction running now.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>
#include <cstdint>

#include "hooks.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

// -- queries --------------------------------------------------------------------------------

void Tracer::note_taint(ShadowFrame& sf) {
  Pending& p = sf.p;
  // A subscript's key selects the item; the item's data is not the key's (edge_inputs).
  std::size_t selector = SIZE_MAX;
  if (p.rule == Rule::kBinarySubscr && p.in_objs.size() == 2 && p.in_objs[0] != nullptr) {
    PyObject* c = p.in_objs[0];
    if (PyList_Check(c) || PyTuple_Check(c) || PyDict_Check(c) || PyUnicode_Check(c) ||
        PyBytes_Check(c)) {
      selector = 1;
    }
  }
  for (std::size_t i = 0; i < p.in_tags.size(); ++i) {
    const Tag t = p.in_tags[i];
    if (i == selector) continue;
    if (t != 0 && tainted_.count(t) != 0) {
      p.tainted_inputs = true;
      break;
    }
  }
  if (!p.tainted_inputs && items_tainted(sf)) p.tainted_inputs = true;  // flows.cpp
  if (p.tainted_inputs && reveals_no_content(p)) p.tainted_inputs = false;
  if (!p.tainted_inputs) return;
  const int line = sf.code->instrs[static_cast<std::size_t>(p.index)].line;
  const std::uint64_t key =
      (static_cast<std::uint64_t>(sf.code->index) << 32) | static_cast<std::uint32_t>(line);
  auto [it, inserted] = reach_.try_emplace(key, Reach{sf.code->index, line, p.counter, 0});
  ++it->second.count;
}

void Tracer::taint(PyObject* tags) {
  tainting_ = true;
  PyObject* it = PyObject_GetIter(tags);
  if (it == nullptr) return;
  for (PyObject* item = PyIter_Next(it); item != nullptr; item = PyIter_Next(it)) {
    const Tag t = PyLong_AsUnsignedLongLong(item);
    Py_DECREF(item);
    if (t == static_cast<Tag>(-1) && PyErr_Occurred()) break;
    tainted_.insert(t);
  }
  Py_DECREF(it);
}

void Tracer::taint_current() noexcept {
  tainting_ = true;
  ensure_thread();
  if (!stack_.empty() && stack_.back()->p.active) stack_.back()->p.taint_source = true;
}

bool Tracer::current_tainted() const noexcept {
  const auto& stack = caller_stack();
  if (stack.empty() || !stack.back()->p.active) return false;
  return stack.back()->p.tainted_inputs;
}

std::uint64_t Tracer::current() const noexcept {
  const auto& stack = caller_stack();
  if (stack.empty() || !stack.back()->p.active) return 0;
  return stack.back()->p.counter;
}

std::vector<Reach> Tracer::reached() const {
  std::vector<Reach> out;
  out.reserve(reach_.size());
  for (const auto& [key, r] : reach_) out.push_back(r);
  std::sort(out.begin(), out.end(),
            [](const Reach& a, const Reach& b) { return a.first < b.first; });
  return out;
}

}  // namespace sealtrace
