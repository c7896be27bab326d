// Tags of values held inside objects: attributes, items, dict entries, cell contents.
//
// Keyed by object address, so an entry must be forgotten the moment its object is
// deallocated (the tracer hooks deallocation); a stale entry would hand a dead
// object's provenance to whatever is allocated at the same address next.
// Every object also carries the counter of the instruction that created it (when the
// tracer saw it being made) and of the last instruction that wrote into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>

namespace sealtrace {

using Tag = std::uint64_t;  // the counter of the producing instruction; 0 = not known

// kMember: an item of an unordered container (a set, a deque, a list whose order C code
// changed), keyed by the item's identity rather than by its position.
enum class SlotKind : std::uint8_t { kAttr = 1, kItem = 2, kIndex = 3, kCell = 4, kMember = 5 };

constexpr std::uint64_t slot_key(SlotKind kind, std::uint64_t hash) noexcept {
  // Mixing keeps attribute, item and index keys of one object apart.
  std::uint64_t x = hash ^ (static_cast<std::uint64_t>(kind) * 0x9E3779B97F4A7C15ULL);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 29;
  return x;
}

constexpr std::uint64_t member_key(std::uintptr_t value) noexcept {
  return slot_key(SlotKind::kMember, value);
}

// A slot remembers which value it tagged: a read only trusts the tag while the slot
// still holds that same value, so writes the tracer did not see (from C code) never
// lend an old tag to a new value.
struct Slot {
  Tag tag = 0;
  std::uintptr_t value = 0;
};

struct ObjectRecord {
  Tag created = 0;
  Tag updated = 0;
  // Made empty (`[]`, `{}`, `set()`, `defaultdict(int)`): an item with no tag was put there
  // by code the engine did not see, not by whatever made the container.
  bool created_empty = false;
  // Changed in a way the engine could not follow item by item (an unkeyed store, an update
  // from an iterator, a C function writing into it).
  bool dirty = false;
  std::unordered_map<std::uint64_t, Slot> slots;
};

// Which slot last took a value: lets a value read back by C code (a slice, dict.items(),
// list(...), an attribute copied by copy.copy) recover its tag by identity, once the holder
// is checked to still hold it (the container's items, or the slot itself for attributes).
struct Holder {
  std::uintptr_t container = 0;
  std::uint64_t key = 0;
  Tag tag = 0;
};

class SlotTable {
 public:
  // The tag in a slot if it still tags `value`, or 0.
  [[nodiscard]] Tag get(std::uintptr_t object, std::uint64_t key, std::uintptr_t value) const;
  [[nodiscard]] const Slot* slot(std::uintptr_t object, std::uint64_t key) const;
  // hold: also remember this slot as the value's holder (for values worth recognising by
  // identity; shared singletons and small ints are not).
  void set(std::uintptr_t object, std::uint64_t key, Tag tag, std::uintptr_t value, Tag now,
           bool hold = true);
  [[nodiscard]] const Holder* holder(std::uintptr_t value) const;
  void drop_holder(std::uintptr_t value) noexcept;
  void erase(std::uintptr_t object, std::uint64_t key, Tag now);
  // The object was reshaped (inserted into, cleared): its item tags no longer say which
  // value is where, and it is dirty.
  void drop_slots(std::uintptr_t object, Tag now);
  // The object's items were reordered (sorted, reversed): its positional item tags become
  // member tags, keyed by the items' identity.
  void reorder(std::uintptr_t object, Tag now);
  void mark_created(std::uintptr_t object, Tag now, bool empty = false);
  void mark_dirty(std::uintptr_t object, Tag now);
  void mark_updated(std::uintptr_t object, Tag now);
  // The object is being deallocated.
  void forget(std::uintptr_t object) noexcept;
  [[nodiscard]] const ObjectRecord* find(std::uintptr_t object) const;
  [[nodiscard]] std::size_t objects() const noexcept { return records_.size(); }
  [[nodiscard]] std::size_t slots() const noexcept { return slot_count_; }
  [[nodiscard]] bool empty() const noexcept { return records_.empty(); }
  void clear() noexcept;

 private:
  void unhold(std::uintptr_t object, std::uintptr_t value) noexcept;
  std::unordered_map<std::uintptr_t, ObjectRecord> records_;
  std::unordered_map<std::uintptr_t, Holder> holders_;
  std::size_t slot_count_ = 0;
};

}  // namespace sealtrace
