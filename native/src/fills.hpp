// What filled an opaque object: the instructions during which a recorded read brought data
// into it (a file's buffer, a csv reader, a socket's stream, a cursor), so what it hands out
// later, with no read of its own, has those reads as inputs.
//
// Such objects read on demand: a buffered file, a text wrapper, a csv reader or a socket's
// file asks for more only when what it holds cannot answer the request, so once an
// instruction that had to read is done, every older read's data has been handed out (the
// start of a line that spanned the reads went out with it). What the object hands out next
// comes from the newest read alone: the older fills are consumed, not dropped, and are
// forgotten (consumed_before_newest). A sequential reader of any length so keeps one fill.
//
// Keyed by object address, so a record must be forgotten when its object is deallocated (the
// tracer hooks the type's deallocation before the first fill: hook_type); a stale record
// would lend a dead object's reads to whatever is allocated at its address next. Bounded: an
// object keeps its newest kMaxFills reads, and says that older ones were dropped.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "slots.hpp"

namespace sealtrace {

struct Fill {
  static constexpr std::size_t kMaxFills = 32;
  std::array<Tag, kMaxFills> tags{};  // a ring: the newest kMaxFills reads
  std::uint32_t count = 0;            // reads noted, the dropped ones too
  bool made_empty = false;            // made by a constructor given nothing: all it holds is fills
  [[nodiscard]] std::size_t size() const noexcept { return count < kMaxFills ? count : kMaxFills; }
  [[nodiscard]] bool dropped() const noexcept { return count > kMaxFills; }
};

class FillTable {
 public:
  // `tag` filled `object` (the same read noted twice counts once).
  void add(std::uintptr_t object, Tag tag);
  [[nodiscard]] const Fill* find(std::uintptr_t object) const;
  void forget(std::uintptr_t object) noexcept { fills_.erase(object); }
  // An instruction that had to read into `object` is done: its older fills are handed out.
  void consumed_before_newest(std::uintptr_t object) noexcept;
  void made_empty(std::uintptr_t object) { fills_[object].made_empty = true; }
  [[nodiscard]] bool empty() const noexcept { return fills_.empty(); }
  [[nodiscard]] std::size_t objects() const noexcept { return fills_.size(); }
  template <class F>
  void for_each_tag(F&& visit) const {
    for (const auto& [object, fill] : fills_) {
      for (std::size_t i = 0; i < fill.size(); ++i) visit(fill.tags[i]);
    }
  }

 private:
  std::unordered_map<std::uintptr_t, Fill> fills_;
};

}  // namespace sealtrace
