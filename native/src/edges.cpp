// Backward slices: the input tags every producing instruction keeps while a query pass
// records edges, and the slice walked back from a tag.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include "hooks.hpp"
#include "py_values.hpp"
#include "quiet.h"
#include "tracer.hpp"

namespace sealtrace {

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
    QuietScope quiet;
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

}  // namespace sealtrace
