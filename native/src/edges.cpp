// Backward slices: the input tags every producing instruction keeps while a query pass
// records edges, and the slice walked back from a tag.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "hooks.hpp"
#include "py_values.hpp"
#include "quiet.h"
#include "tracer.hpp"

namespace sealtrace {

// The inputs a description of this instruction names (edge_inputs): a call's arguments (and
// self), not the callable; the values Python code handed back to C while it ran; the items C
// read out of containers.
void Tracer::record(const Pending& p, bool move) {
  const auto begin = static_cast<std::uint32_t>(edge_tags_.size());
  edge_inputs(p, inputs_scratch_);
  edge_tags_.insert(edge_tags_.end(), inputs_scratch_.begin(), inputs_scratch_.end());
  const auto count = static_cast<std::uint32_t>(edge_tags_.size() - begin);
  if (count != 0) edges_.push_back(Edges{p.counter, begin, count, move ? 1U : 0U});
  if (edge_tags_.size() > edges_limit_) {
    edges_overflow_ = true;
    edges_upto_ = 0;  // stop recording; what is kept still answers the nearest steps
  }
  if (p.counter == edges_upto_ && edges_done_ != nullptr) {
    QuietScope quiet;
    PyObject* cb = edges_done_;
    edges_done_ = nullptr;
    PyObject* r = PyObject_CallNoArgs(cb);
    if (r == nullptr) callback_failed();
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
  // Levels count computations: a move's inputs are as deep as it is (0-1 breadth-first).
  std::vector<std::pair<Tag, int>> out;
  std::unordered_map<Tag, int> level{{root, 0}};
  std::unordered_set<Tag> done;
  std::deque<Tag> queue{root};
  while (!queue.empty()) {
    const Tag tag = queue.front();
    queue.pop_front();
    if (!done.insert(tag).second) continue;
    if (out.size() >= max_nodes) {
      truncated = true;  // the node limit cut what is left
      break;
    }
    const int lvl = level[tag];
    out.emplace_back(tag, lvl);
    auto it = index.find(tag);
    if (it == index.end()) continue;
    const Edges& e = *it->second;
    const int next = lvl + (e.move != 0 ? 0 : 1);
    if (next > depth) continue;  // the depth bound: the tree says where it stopped
    for (std::uint32_t k = 0; k < e.count; ++k) {
      const Tag input = edge_tags_[e.begin + k];
      auto [pos, inserted] = level.try_emplace(input, next);
      if (!inserted) {
        if (pos->second <= next) continue;
        pos->second = next;
      }
      if (e.move != 0) {
        queue.push_front(input);
      } else {
        queue.push_back(input);
      }
    }
  }
  return out;
}

}  // namespace sealtrace
