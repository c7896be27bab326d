// Backward slices: the input tags every producing instruction keeps while a query pass
// records edges, and the slice walked back from a tag.
//
// A slice pass runs the whole program up to its root, so keeping every instruction's edges
// would be O(instructions). An edge can only ever be part of the root's slice if some tag the
// engine still holds (a local, a stack entry, an item, an in-flight instruction's inputs) leads
// back to it: a value's tag is fixed when it is made, and every later instruction takes its
// inputs from those holders. So whenever the edges have doubled since the last look, the ones
// no held tag reaches are dropped (compact_edges): what is kept is the ancestry of the live
// values, and a long computation whose intermediate values are gone costs nothing. With a depth
// bound (the deepest slice a question can ask), only the part of it within that many levels. What
// is kept is packed (sorted by counter, each number a varint relative to its neighbour's, with an
// index every kBlock edges): a kept edge costs a few bytes instead of 16 and 8 an input, so a
// million live rows' ancestry fits in tens of MiB.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string>
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
namespace {
// Compact once this many edges were recorded since the last compaction, or a quarter of what it
// kept if that is more.
constexpr std::size_t kCompactMin = std::size_t{1} << 20;
// An edge's level no live tag leads back to (compact_edges); the deepest bound is one less.
constexpr std::uint8_t kUnreached = 0xFF;
// The levels a depth bound keeps the edges of (record_edges' depth, 0: none said).
std::uint8_t kept_levels(std::size_t depth) {
  return static_cast<std::uint8_t>(std::min<std::size_t>(depth, kUnreached - 1));
}
constexpr std::size_t kBlock = 32;         // packed edges between two index entries
constexpr std::size_t kInputsPerEdge = 3;  // what the recent buffer's inputs are sized for
constexpr std::size_t kChunkBytes = std::size_t{1} << 20;  // a packed chunk, give or take a block

void put_varint(QuietVector<std::uint8_t>& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<std::uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<std::uint8_t>(v));
}

std::uint64_t get_varint(const std::uint8_t*& p) noexcept {
  std::uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const std::uint8_t b = *p++;
    v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return v;
  }
}

// An input relative to its instruction: usually a little older, sometimes newer (a value a
// generator yielded to the C function that called it) or a marker tag far above every counter.
std::uint64_t zigzag(Tag counter, Tag input) noexcept {
  const auto d = static_cast<std::int64_t>(counter - input);
  return (static_cast<std::uint64_t>(d) << 1) ^ static_cast<std::uint64_t>(d >> 63);
}

Tag unzigzag(Tag counter, std::uint64_t z) noexcept {
  const std::uint64_t d = (z >> 1) ^ (~(z & 1) + 1);
  return counter - d;
}

constexpr std::uint32_t kFarInput = 0xFFFFFFFFU;  // the next two entries hold the whole tag
}  // namespace

void Tracer::recent_inputs(const Edges& e, QuietVector<Tag>& out) const {
  out.clear();
  const std::uint32_t* p = edge_tags_.data() + e.begin;
  const std::uint32_t* end = p + e.count;
  while (p < end) {
    if (*p == kFarInput) {
      out.push_back((static_cast<Tag>(p[1]) << 32) | p[2]);
      p += 3;
    } else {
      out.push_back(unzigzag(e.counter, *p++));
    }
  }
}

// The inputs a description of this instruction names (edge_inputs): a call's arguments (and
// self), not the callable; the values Python code handed back to C while it ran; the items C
// read out of containers.
void Tracer::record(const Pending& p, bool move) {
  edge_inputs(p, inputs_scratch_);
  record_inputs(p.counter, move);
}

// The edges of the instruction at `counter`: the inputs in inputs_scratch_.
void Tracer::record_inputs(Tag counter, bool move) {
  if (!edges_.empty() && edge_tags_.size() + 3 * inputs_scratch_.size() > edge_tags_.capacity()) {
    compact_edges(counter, false);  // the batch's buffer is full: compact, don't grow it
  }
  const auto begin = static_cast<std::uint32_t>(edge_tags_.size());
  for (const Tag input : inputs_scratch_) {
    const std::uint64_t z = zigzag(counter, input);
    if (z < kFarInput) {
      edge_tags_.push_back(static_cast<std::uint32_t>(z));
    } else {
      edge_tags_.push_back(kFarInput);
      edge_tags_.push_back(static_cast<std::uint32_t>(input >> 32));
      edge_tags_.push_back(static_cast<std::uint32_t>(input));
    }
  }
  const auto count = static_cast<std::uint32_t>(edge_tags_.size() - begin);
  if (count != 0) edges_.push_back(Edges{counter, begin, count, move ? 1U : 0U});
  if (edges_.size() >= edges_compact_at_) compact_edges(counter, false);
  bool full = packed_tags_ + edge_tags_.size() > edges_limit_;
  if (full && small_batches() && !edges_.empty()) {
    // A pass packing in small batches has a small limit: first drop what nothing leads back
    // to, and stop only once half the limit is kept (no room left for the next batch).
    compact_edges(counter, false);
    full = packed_tags_ > edges_limit_ / 2;
  }
  if (full) {
    edges_overflow_ = true;
    edges_upto_ = 0;  // stop recording; what is kept still answers the nearest steps
    edges_open_ = false;
  }
  if (counter == edges_upto_) edges_open_ = false;  // the root completed
  if (counter == edges_upto_ && edges_done_ != nullptr) {
    // The root is done: only its own ancestry is still wanted.
    compact_edges(counter, true);
    QuietScope quiet;
    PyObject* cb = edges_done_;
    edges_done_ = nullptr;
    PyObject* r = PyObject_CallNoArgs(cb);
    if (r == nullptr) callback_failed();
    Py_XDECREF(r);
    Py_DECREF(cb);
  }
}

template <class F>
void Tracer::live_tags(F&& visit) const {
  slots_.for_each_tag(visit);
  // Every frame of the pool: suspended and free ones too (a free frame's stale tags only keep
  // a little more than needed).
  for (const auto& frame : pool_) {
    const ShadowFrame& sf = *frame;
    for (Tag t : sf.slots) visit(t);
    const Pending& p = sf.p;
    visit(p.counter);
    visit(p.return_tag);
    visit(p.aux_tag);
    visit(p.move_item_tag);
    for (Tag t : p.in_tags) visit(t);
    for (Tag t : p.items) visit(t);
    for (Tag t : p.callbacks) visit(t);
    for (Tag t : p.item_inputs) visit(t);
    for (Tag t : p.move_tags) visit(t);
    for (Tag t : p.fill_tags) visit(t);
    for (const auto& h : sf.handled) visit(h.second);
  }
  for (Tag t : inputs_scratch_) visit(t);  // an edge being recorded: its inputs are live
  visit(last_return_.tag);
  visit(exc_tag_);
  visit(exc_origin_);
  for (const auto& c : class_slots_) visit(c.tag);
  fills_.for_each_tag(visit);  // what filled C objects: read back by later calls on them
}

std::size_t Tracer::packed_block(Tag counter) const noexcept {
  // The last block whose first edge is at or before counter (npos: none).
  auto it = std::upper_bound(packed_blocks_.begin(), packed_blocks_.end(), counter,
                             [](Tag c, const PackedBlock& b) { return c < b.counter; });
  if (it == packed_blocks_.begin()) return static_cast<std::size_t>(-1);
  return static_cast<std::size_t>(it - packed_blocks_.begin()) - 1;
}

template <class F>
void Tracer::packed_decode(std::size_t block, QuietVector<Tag>& inputs, F&& visit) const {
  const std::uint8_t* p =
      packed_[packed_blocks_[block].chunk].data() + packed_blocks_[block].offset;
  Tag counter = packed_blocks_[block].counter;
  const std::size_t first = block * kBlock;
  const std::size_t n = std::min(kBlock, packed_count_ - first);
  for (std::size_t k = 0; k < n; ++k) {
    counter += get_varint(p);
    const std::uint64_t head = get_varint(p);
    inputs.clear();
    for (std::uint64_t j = 0; j < (head >> 1); ++j)
      inputs.push_back(unzigzag(counter, get_varint(p)));
    if (!visit(first + k, counter, (head & 1) != 0, inputs)) return;
  }
}

bool Tracer::find_edge(Tag counter, QuietVector<Tag>& inputs, bool& move,
                       std::size_t& ordinal) const {
  const std::size_t block = packed_block(counter);
  if (block == static_cast<std::size_t>(-1)) return false;
  bool found = false;
  packed_decode(block, inputs, [&](std::size_t i, Tag c, bool m, const QuietVector<Tag>&) {
    if (c < counter) return true;
    if (c == counter) {
      found = true;
      move = m;
      ordinal = i;
    }
    return false;
  });
  return found;
}

// The recent edges by counter, stably: of two records of one instruction the slice reads the
// first, and a packed one was recorded before any recent one. They arrive nearly in order (an
// instruction's edges when it completes, a call's after its callee's), so the few below the
// running maximum are taken out, sorted and merged back from the end, in place: a general sort
// took a buffer of half the batch for every compaction, and a page fault for each of its pages.
void Tracer::sort_recent_edges() {
  auto before = [](const Edges& a, const Edges& b) { return a.counter < b.counter; };
  if (std::is_sorted(edges_.begin(), edges_.end(), before)) return;
  QuietVector<Edges> late;
  std::size_t kept = 0;
  Tag high = 0;
  for (std::size_t i = 0; i < edges_.size(); ++i) {
    if (edges_[i].counter >= high) {
      high = edges_[i].counter;
      edges_[kept++] = edges_[i];
    } else {
      late.push_back(edges_[i]);
    }
  }
  std::stable_sort(late.begin(), late.end(), before);
  // Of equal counters the one kept in place was recorded first: it stays first.
  std::size_t i = kept;
  std::size_t j = late.size();
  std::size_t out = edges_.size();
  while (j > 0) {
    if (i > 0 && late[j - 1].counter < edges_[i - 1].counter) {
      edges_[--out] = edges_[--i];
    } else {
      edges_[--out] = late[--j];
    }
  }
}

void Tracer::compact_edges(Tag current, bool only_current) {
  sort_recent_edges();
  // Each edge's level: the fewest computations from a live tag back to its instruction (moves
  // count none, as in backward_slice), kUnreached for an edge no live tag leads back to. With a
  // depth bound, an edge further than that from every live tag is dropped too: a slice of any
  // later root reaches an old edge only through a tag live now, at least as many levels
  // back, so no slice within the bound can need it. An accumulator's ancestry is the whole run;
  // its last bound's worth of levels is what any question can read.
  QuietVector<std::uint8_t> level_recent(edges_.size(), kUnreached);
  QuietVector<std::uint8_t> level_packed(packed_count_, kUnreached);
  // Inputs still to follow, with their level. Inputs are mostly older than the instruction,
  // but not all (what a generator yielded to sum() while it ran): a work list, not one pass by
  // age. It is drained after each live tag, so it holds one value's ancestry's frontier at a
  // time, levels in order (a move's inputs at the front, as deep as it is; a computation's at
  // the back, one deeper): an edge is followed again only from another live tag that reaches
  // it in fewer levels.
  std::deque<std::pair<Tag, std::uint8_t>, QuietAllocator<std::pair<Tag, std::uint8_t>>> todo;
  const std::uint8_t bound = kept_levels(edges_depth_);
  auto follow = [&](const Tag* in, std::size_t n, std::uint8_t level, bool move) {
    // Without a bound every level is 0: each edge is followed once, as its first reach.
    const auto next = static_cast<std::uint8_t>(edges_depth_ == 0 || move ? level : level + 1);
    if (next > bound && edges_depth_ != 0) return;  // beyond the bound: not followed
    for (std::size_t j = 0; j < n; ++j) {
      if (next == level) {
        todo.emplace_front(in[j], next);
      } else {
        todo.emplace_back(in[j], next);
      }
    }
  };
  QuietVector<Tag> recent;  // a recent edge's inputs, decoded
  // Packed blocks decoded once for many lookups (a walk back through an ancestry reads the
  // edges of one block after another): a few, each where its index falls.
  struct Decoded {
    std::size_t block = static_cast<std::size_t>(-1);
    QuietVector<Tag> counters;
    QuietVector<std::uint8_t> moves;
    QuietVector<std::uint32_t> starts;  // where each edge's inputs begin in `inputs`, and end
    QuietVector<Tag> inputs;
  };
  constexpr std::size_t kDecoded = 16;
  QuietVector<Decoded> decoded(kDecoded);
  QuietVector<Tag> in_block;
  auto decode = [&](std::size_t block) -> const Decoded& {
    Decoded& d = decoded[block % kDecoded];
    if (d.block == block) return d;
    d.block = block;
    d.counters.clear();
    d.moves.clear();
    d.starts.assign(1, 0);
    d.inputs.clear();
    packed_decode(block, in_block, [&](std::size_t, Tag c, bool m, const QuietVector<Tag>& in) {
      d.counters.push_back(c);
      d.moves.push_back(m ? 1 : 0);
      d.inputs.insert(d.inputs.end(), in.begin(), in.end());
      d.starts.push_back(static_cast<std::uint32_t>(d.inputs.size()));
      return true;
    });
    return d;
  };
  std::size_t last_block = static_cast<std::size_t>(-1);
  auto mark = [&](Tag t, std::uint8_t level) {
    if (!edges_.empty() && t >= edges_.front().counter) {  // most inputs are older than these
      auto it = std::lower_bound(edges_.begin(), edges_.end(), t,
                                 [](const Edges& e, Tag c) { return e.counter < c; });
      for (; it != edges_.end() && it->counter == t; ++it) {
        const auto i = static_cast<std::size_t>(it - edges_.begin());
        if (level_recent[i] <= level) continue;
        level_recent[i] = level;
        recent_inputs(*it, recent);
        follow(recent.data(), recent.size(), level, it->move != 0);
      }
    }
    if (packed_count_ == 0) return;
    // packed_block(t), without its search where t falls in the block last looked in.
    std::size_t block = last_block;
    if (block == static_cast<std::size_t>(-1) || t < packed_blocks_[block].counter ||
        (block + 1 < packed_blocks_.size() && t >= packed_blocks_[block + 1].counter)) {
      block = packed_block(t);
    }
    if (block == static_cast<std::size_t>(-1)) return;
    last_block = block;
    const Decoded& d = decode(block);
    // The block's first edge of this counter (find_edge's: of two records the first).
    auto at = std::lower_bound(d.counters.begin(), d.counters.end(), t);
    if (at == d.counters.end() || *at != t) return;
    const auto k = static_cast<std::size_t>(at - d.counters.begin());
    const std::size_t ordinal = block * kBlock + k;
    if (level_packed[ordinal] <= level) return;
    level_packed[ordinal] = level;
    follow(d.inputs.data() + d.starts[k], d.starts[k + 1] - d.starts[k], level, d.moves[k] != 0);
  };
  QuietVector<Tag> inputs;
  auto drain = [&]() {
    while (!todo.empty()) {
      const auto [t, level] = todo.front();
      todo.pop_front();
      mark(t, level);
    }
  };
  std::size_t live = 0;
  auto root = [&](Tag t) {
    if (t == 0) return;
    ++live;
    mark(t, 0);
    drain();
  };
  if (!only_current) live_tags(root);
  root(current);
  // Merge what is kept of both, by counter, into a new packed run, chunk by chunk; each old
  // chunk is freed once the merge has read its last block.
  decltype(packed_) chunks;
  QuietVector<PackedBlock> blocks;
  blocks.reserve(packed_blocks_.size() + edges_.size() / kBlock + 1);
  std::size_t count = 0;
  std::size_t tags = 0;
  Tag prev = 0;
  auto put = [&](Tag counter, bool move, const Tag* in, std::size_t n) {
    if (count % kBlock == 0) {
      if (chunks.empty() || chunks.back().size() >= kChunkBytes) {
        chunks.emplace_back();
        chunks.back().reserve(kChunkBytes + kChunkBytes / 8);
      }
      blocks.push_back(PackedBlock{counter, static_cast<std::uint32_t>(chunks.size() - 1),
                                   static_cast<std::uint32_t>(chunks.back().size())});
      prev = counter;
    }
    QuietVector<std::uint8_t>& bytes = chunks.back();
    put_varint(bytes, counter - prev);
    prev = counter;
    put_varint(bytes, (static_cast<std::uint64_t>(n) << 1) | (move ? 1U : 0U));
    for (std::size_t j = 0; j < n; ++j) put_varint(bytes, zigzag(counter, in[j]));
    ++count;
    tags += n;
  };
  std::size_t r = 0;
  Tag last = 0;
  bool any = false;
  auto put_recent_before = [&](Tag bound, bool inclusive) {
    for (; r < edges_.size() &&
           (edges_[r].counter < bound || (inclusive && edges_[r].counter == bound));
         ++r) {
      const Edges& e = edges_[r];
      if (level_recent[r] == kUnreached || (any && e.counter == last)) continue;
      recent_inputs(e, recent);
      put(e.counter, e.move != 0, recent.data(), recent.size());
      last = e.counter;
      any = true;
    }
  };
  for (std::size_t b = 0; b < packed_blocks_.size(); ++b) {
    packed_decode(b, inputs, [&](std::size_t i, Tag c, bool m, const QuietVector<Tag>& in) {
      put_recent_before(c, false);
      if (level_packed[i] != kUnreached) {
        put(c, m, in.data(), in.size());
        last = c;
        any = true;
      }
      return true;
    });
    const std::uint32_t chunk = packed_blocks_[b].chunk;
    if (b + 1 == packed_blocks_.size() || packed_blocks_[b + 1].chunk != chunk) {
      QuietVector<std::uint8_t>().swap(packed_[chunk]);  // read: free it
    }
  }
  put_recent_before(static_cast<Tag>(-1), true);
  if (!chunks.empty()) chunks.back().shrink_to_fit();
  packed_.swap(chunks);
  packed_blocks_.swap(blocks);
  packed_count_ = count;
  packed_tags_ = tags;
  edges_.clear();
  edge_tags_.clear();
  if (only_current) {
    edges_.shrink_to_fit();
    edge_tags_.shrink_to_fit();
  }
  edges_compact_at_ = std::max(edges_batch_, packed_count_ / 4);
  // Amortised: a compaction walks every live tag and every kept edge, so with small batches
  // the next one waits for at least half as many new edges as there are live tags.
  if (small_batches()) edges_compact_at_ = std::max(edges_compact_at_, live / 2);
  if (!only_current) {
    // The next batch in buffers of its size (grown by doubling they would reach up to twice
    // it); record() compacts before either would have to grow.
    edges_.reserve(edges_compact_at_);
    edge_tags_.reserve(edges_compact_at_ * kInputsPerEdge);
  }
  ++stats_.edge_compactions;
  stats_.edges_kept = std::max(stats_.edges_kept, packed_count_);
  stats_.live_tags = std::max(stats_.live_tags, live);
}

bool Tracer::small_batches() const noexcept { return edges_batch_ < kCompactMin; }

void Tracer::record_edges(std::uint64_t upto, std::size_t limit, PyObject* on_done, bool keep,
                          std::size_t batch, std::size_t depth) {
  edges_upto_ = upto;
  edges_depth_ = depth;
  edges_open_ = upto != 0;
  edges_limit_ = limit;
  edges_batch_ = batch != 0 ? batch : kCompactMin;
  if (!keep) {
    edges_compact_at_ = edges_batch_;
    edges_overflow_ = false;
    edges_.clear();
    edge_tags_.clear();
    packed_.clear();
    packed_blocks_.clear();
    packed_count_ = 0;
    packed_tags_ = 0;
  }
  Py_XDECREF(edges_done_);
  Py_XINCREF(on_done);
  edges_done_ = on_done;
}

std::vector<std::pair<Tag, int>> Tracer::backward_slice(Tag root, int depth, std::size_t max_nodes,
                                                        bool& truncated) const {
  // Edges kept within a depth bound answer the slices within it: a deeper one would show the
  // values at the bound as if nothing had made them.
  if (edges_depth_ != 0 && std::max(depth, 0) > kept_levels(edges_depth_)) {
    throw std::invalid_argument("a slice " + std::to_string(depth) +
                                " levels deep over edges kept within " +
                                std::to_string(edges_depth_));
  }
  truncated = edges_overflow_;
  const RecentEdges recent = recent_edges();  // few: the root's own ancestry is packed
  QuietVector<Tag> inputs;
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
    bool move = false;
    if (!kept_edge(tag, recent, inputs, move)) continue;
    const int next = lvl + (move ? 0 : 1);
    if (next > depth) continue;  // the depth bound: the tree says where it stopped
    for (const Tag input : inputs) {
      auto [pos, inserted] = level.try_emplace(input, next);
      if (!inserted) {
        if (pos->second <= next) continue;
        pos->second = next;
      }
      if (move) {
        queue.push_front(input);
      } else {
        queue.push_back(input);
      }
    }
  }
  return out;
}

Tracer::RecentEdges Tracer::recent_edges() const {
  RecentEdges recent;
  for (const auto& e : edges_) recent.emplace(e.counter, &e);
  return recent;
}

bool Tracer::kept_edge(Tag counter, const RecentEdges& recent, QuietVector<Tag>& inputs,
                       bool& move) const {
  std::size_t ordinal = 0;
  if (find_edge(counter, inputs, move, ordinal)) return true;
  auto it = recent.find(counter);
  if (it == recent.end()) return false;
  move = it->second->move != 0;
  recent_inputs(*it->second, inputs);
  return true;
}

std::vector<std::optional<std::vector<Tag>>> Tracer::recorded_inputs(
    const std::vector<Tag>& tags) const {
  const RecentEdges recent = recent_edges();
  std::vector<std::optional<std::vector<Tag>>> out;
  out.reserve(tags.size());
  QuietVector<Tag> inputs;
  for (const Tag tag : tags) {
    bool move = false;
    if (kept_edge(tag, recent, inputs, move)) {
      out.emplace_back(std::vector<Tag>(inputs.begin(), inputs.end()));
    } else {
      out.emplace_back(std::nullopt);
    }
  }
  return out;
}

}  // namespace sealtrace
