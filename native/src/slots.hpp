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
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>

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

// One object's slots, by key: a dense array of (key, slot) in insertion order, searched by
// scanning while it is small (most objects hold a few attributes or items) and through an
// open-addressed index of positions once it grows (a list of a million rows). 24 bytes a slot
// and 24 for the map, where a node-based hash map took about 56 a slot and 56 for the map.
class SlotMap {
 public:
  using value_type = std::pair<std::uint64_t, Slot>;
  SlotMap() noexcept = default;
  SlotMap(const SlotMap&) = delete;
  SlotMap& operator=(const SlotMap&) = delete;
  SlotMap(SlotMap&& other) noexcept { swap(other); }
  SlotMap& operator=(SlotMap&& other) noexcept {
    SlotMap(std::move(other)).swap(*this);
    return *this;
  }
  ~SlotMap() { clear(); }

  [[nodiscard]] const value_type* begin() const noexcept { return items_; }
  [[nodiscard]] const value_type* end() const noexcept { return items_ + size_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] Slot* find(std::uint64_t key) noexcept;
  [[nodiscard]] const Slot* find(std::uint64_t key) const noexcept {
    return const_cast<SlotMap*>(this)->find(key);
  }
  // The slot under key, inserted as `slot` if there was none; second: whether it was inserted.
  std::pair<Slot*, bool> try_emplace(std::uint64_t key, Slot slot);
  // The slot that was there (its value 0 when there was none).
  Slot erase(std::uint64_t key) noexcept;
  void clear() noexcept;
  void swap(SlotMap& other) noexcept;

 private:
  static constexpr std::uint32_t kScan = 8;  // up to this many, no index
  [[nodiscard]] std::uint32_t mask() const noexcept { return 2 * cap_ - 1; }
  // The index position that holds key's item, or the empty one where it would go.
  [[nodiscard]] std::uint32_t probe(std::uint64_t key) const noexcept;
  void reindex();
  value_type* items_ = nullptr;
  std::uint32_t* index_ = nullptr;  // 2 * cap_ entries: an item's position + 1, 0 = empty
  std::uint32_t size_ = 0;
  std::uint32_t cap_ = 0;
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
  SlotMap slots;
};

// Which slot last took a value: lets a value read back by C code (a slice, dict.items(),
// list(...), an attribute copied by copy.copy) recover its tag by identity, once the holder
// is checked to still hold it (the container's items, or the slot itself for attributes).
// Its tag is the slot's (SlotTable::held): a holder exists only while its slot holds the
// value, so a tag kept here too would be a copy (8 bytes for each of millions of values).
struct Holder {
  std::uintptr_t container = 0;
  std::uint64_t key = 0;
};

// Blocks of one size, carved from large chunks and reused through a free list: the table's
// hash nodes, millions of them for a program that keeps a million rows, without malloc's
// per-block header and rounding (a 40-byte holder node took 48 bytes, a record's 64 took 80).
class NodePool {
 public:
  // align: a power of two, at least a pointer's.
  NodePool(std::size_t size, std::size_t align) noexcept
      : size_((size + align - 1) & ~(align - 1)) {}
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;
  ~NodePool() = delete;  // lives as long as the process: tables may outlive static destructors
  void* take();
  void give(void* block) noexcept;

 private:
  static constexpr std::size_t kChunk = std::size_t{1} << 16;
  std::size_t size_;
  void* free_ = nullptr;
  char* carve_ = nullptr;
  char* carve_end_ = nullptr;
};

// An allocator that takes single nodes from one pool per node type, and arrays (a hash map's
// buckets) from the usual heap.
template <class T>
struct NodeAllocator {
  using value_type = T;
  NodeAllocator() noexcept = default;
  template <class U>
  NodeAllocator(const NodeAllocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    if (n != 1) return std::allocator<T>().allocate(n);
    return static_cast<T*>(pool().take());
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n != 1) {
      std::allocator<T>().deallocate(p, n);
    } else {
      pool().give(p);
    }
  }
  static NodePool& pool() {
    static NodePool& nodes =
        *new NodePool(sizeof(T), alignof(T) < alignof(void*) ? alignof(void*) : alignof(T));
    return nodes;
  }
  template <class U>
  bool operator==(const NodeAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const NodeAllocator<U>&) const noexcept {
    return false;
  }
};

template <class V>
using AddressMap =
    std::unordered_map<std::uintptr_t, V, std::hash<std::uintptr_t>, std::equal_to<std::uintptr_t>,
                       NodeAllocator<std::pair<const std::uintptr_t, V>>>;

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
  // The tag of the slot a holder names, if that slot still holds `value`; 0 otherwise.
  [[nodiscard]] Tag held(const Holder& h, std::uintptr_t value) const;
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
  // Every tag the table holds (slots, holders, objects' counters): the live tags a slice pass
  // keeps the edges of.
  template <class F>
  void for_each_tag(F&& visit) const {
    for (const auto& [object, record] : records_) {
      visit(record.created);
      visit(record.updated);
      for (const auto& [key, slot] : record.slots) visit(slot.tag);
    }
  }
  [[nodiscard]] std::size_t objects() const noexcept { return records_.size(); }
  [[nodiscard]] std::size_t slots() const noexcept { return slot_count_; }
  [[nodiscard]] bool empty() const noexcept { return records_.empty(); }
  void clear() noexcept;

 private:
  void unhold(std::uintptr_t object, std::uintptr_t value) noexcept;
  AddressMap<ObjectRecord> records_;
  AddressMap<Holder> holders_;
  std::size_t slot_count_ = 0;
};

}  // namespace sealtrace
