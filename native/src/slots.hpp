// Tags of values held inside objects: attributes, items, dict entries, cell contents.
//
// Keyed by object address, so an entry must be forgotten the moment its object is
// deallocated (the tracer hooks deallocation); a stale entry would hand a dead
// object's provenance to whatever is allocated at the same address next.
// Every object also carries the counter of the instruction that created it (when the
// tracer saw it being made) and of the last instruction that wrote into it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
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

// A word of an open-addressed index of positions (SlotMap's, AddressTable's): an entry's
// position + 1 in its low 28 bits (0: an empty word), and 4 bits of the key's hash above them.
// A probe passes over a word whose bits differ without reading its entry: in a table of
// millions each entry read is a cache miss, and at 3/4 load a missing key's probe passes over
// several words before the empty one.
constexpr unsigned kPositionBits = 28;
constexpr std::uint32_t kPositionMask = (std::uint32_t{1} << kPositionBits) - 1;
// The most entries an index can name.
constexpr std::uint32_t kMostEntries = kPositionMask - 1;
constexpr std::uint32_t index_print(std::uint64_t mixed) noexcept {
  return static_cast<std::uint32_t>(mixed >> 60) << kPositionBits;
}

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
  // find, trying first the position `hint` names (where this key was found last, in this map
  // or another: a namespace's names, read over and over), and leaving the key's position there.
  [[nodiscard]] Slot* find(std::uint64_t key, std::uint32_t& hint) noexcept {
    if (hint < size_ && items_[hint].first == key) return &items_[hint].second;
    const std::uint32_t at = position(key);
    if (at == 0) return nullptr;
    hint = at - 1;
    return &items_[at - 1].second;
  }
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
  // The key's item's position + 1, 0 if it has none.
  [[nodiscard]] std::uint32_t position(std::uint64_t key) const noexcept;
  void reindex();
  value_type* items_ = nullptr;
  std::uint32_t* index_ = nullptr;  // 2 * cap_ words (index_print)
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
// object records, millions of them for a program that keeps a million rows, without malloc's
// per-block header and rounding.
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

// Values by object address: an array of (address, value) and an open-addressed index of
// positions into it (linear probing in a power-of-two array of index words, at most 3/4 full;
// Fibonacci hashing spreads addresses, whose low bits are alignment; deletion shifts the index
// back, no tombstones). A lookup is two reads and no division, where a node-based hash map paid
// a division and a node's cache miss (half the time of a slot table write); an entry costs its
// own size plus 5-11 bytes of index, where a node cost its size plus 16 (a million-row report
// keeps millions). An erased entry leaves a hole the next insertion fills (moving another entry
// into it would cost a second index probe, a cache miss, on every erasure: objects freed by the
// million), the holes a list through their values; they are compacted away once they
// outnumber the entries. V is trivially copyable
// (entries move); address 0, which no object has, is kept aside and marks a hole.
template <class V>
class AddressTable {
  static_assert(sizeof(V) >= sizeof(std::uint32_t), "a hole keeps a position in its value");

 public:
  AddressTable() noexcept = default;
  AddressTable(const AddressTable&) = delete;
  AddressTable& operator=(const AddressTable&) = delete;
  ~AddressTable() { clear(); }

  [[nodiscard]] V* find(std::uintptr_t key) noexcept {
    if (key == 0) return has_zero_ ? &zero_ : nullptr;
    if (size_ == 0) return nullptr;
    const std::uint32_t at = index_[probe(key)] & kPositionMask;
    return at == 0 ? nullptr : &entries_[at - 1].value;
  }
  [[nodiscard]] const V* find(std::uintptr_t key) const noexcept {
    return const_cast<AddressTable*>(this)->find(key);
  }
  // The value under key, value-initialised if there was none; second: whether it was inserted.
  // The pointer lasts until the next insertion or erasure.
  std::pair<V*, bool> try_emplace(std::uintptr_t key) {
    if (key == 0) {
      const bool inserted = !has_zero_;
      if (inserted) zero_ = V{};
      has_zero_ = true;
      return {&zero_, inserted};
    }
    if (4 * (static_cast<std::size_t>(size_) + 1) > 3 * static_cast<std::size_t>(slots_)) {
      reindex(slots_ == 0 ? 16 : 2 * slots_);
    }
    const std::size_t pos = probe(key);
    if (index_[pos] != 0) return {&entries_[(index_[pos] & kPositionMask) - 1].value, false};
    std::uint32_t at = 0;  // the entry's position
    if (free_ != 0) {
      at = free_ - 1;
      std::memcpy(&free_, static_cast<const void*>(&entries_[at].value), sizeof free_);
    } else {
      if (used_ == capacity_) grow_entries();
      at = used_++;
    }
    entries_[at] = Entry{key, V{}};
    index_[pos] = (at + 1) | print_of(key);
    ++size_;
    return {&entries_[at].value, true};
  }
  // Whether key was there.
  bool erase(std::uintptr_t key) noexcept {
    return erase_if(key, [](const V&) { return true; });
  }
  // Erases key's entry where `doomed(value)` (one lookup); whether it did.
  template <class Pred>
  bool erase_if(std::uintptr_t key, Pred&& doomed) noexcept {
    if (key == 0) {
      const bool was = has_zero_ && doomed(zero_);
      if (was) has_zero_ = false;
      return was;
    }
    if (size_ == 0) return false;
    std::size_t hole = probe(key);
    const std::uint32_t at = index_[hole] & kPositionMask;
    if (at == 0 || !doomed(entries_[at - 1].value)) return false;
    const std::size_t m = slots_ - 1;
    for (std::size_t j = (hole + 1) & m; index_[j] != 0; j = (j + 1) & m) {
      const std::size_t home = home_of(entries_[(index_[j] & kPositionMask) - 1].key);
      // Position j may fill the hole unless its home lies cyclically in (hole, j].
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!stays) {
        index_[hole] = index_[j];
        hole = j;
      }
    }
    index_[hole] = 0;
    entries_[at - 1].key = 0;
    --size_;
    if (size_ == 0) {  // every position a hole
      used_ = 0;
      free_ = 0;
    } else if (at == used_) {
      --used_;
    } else if (used_ - size_ > size_ + kFewHoles) {
      compact();
    } else {  // the hole keeps the next one's position + 1 in its value's first bytes
      std::memcpy(static_cast<void*>(&entries_[at - 1].value), &free_, sizeof free_);
      free_ = at;
    }
    return true;
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_ + (has_zero_ ? 1 : 0); }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  // The positions the entries take, holes among them: at most twice the entries and a few.
  [[nodiscard]] std::size_t positions() const noexcept { return used_; }
  // visit(key, value) for every entry; it must not insert or erase.
  template <class F>
  void for_each(F&& visit) const {
    if (has_zero_) visit(std::uintptr_t{0}, zero_);
    for (std::uint32_t i = 0; i < used_; ++i) {
      if (entries_[i].key != 0) visit(entries_[i].key, entries_[i].value);
    }
  }
  void clear() noexcept {
    std::free(static_cast<void*>(entries_));
    std::free(index_);
    entries_ = nullptr;
    index_ = nullptr;
    size_ = used_ = capacity_ = slots_ = free_ = 0;
    shift_ = 64;
    has_zero_ = false;
  }

 private:
  struct Entry {
    std::uintptr_t key;  // 0: a hole
    V value;
  };
  [[nodiscard]] std::size_t home_of(std::uintptr_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> shift_);
  }
  // Another multiplier than home_of's: the bits do not repeat the home's.
  static std::uint32_t print_of(std::uintptr_t key) noexcept {
    return index_print(key * 0xD6E8FEB86659FD93ULL);
  }
  // The index position that holds key's entry, or the empty one where it would go.
  [[nodiscard]] std::size_t probe(std::uintptr_t key) const noexcept {
    const std::size_t m = slots_ - 1;
    const std::uint32_t print = print_of(key);
    for (std::size_t i = home_of(key);; i = (i + 1) & m) {
      const std::uint32_t word = index_[i];
      if (word == 0) return i;
      if ((word & ~kPositionMask) == print && entries_[(word & kPositionMask) - 1].key == key) {
        return i;
      }
    }
  }
  // Moves the entries down over the holes and indexes them again (in place: the index keeps
  // its size, the entries their memory).
  void compact() noexcept {
    std::uint32_t kept = 0;
    for (std::uint32_t i = 0; i < used_; ++i) {
      if (entries_[i].key != 0) entries_[kept++] = entries_[i];
    }
    used_ = kept;
    free_ = 0;
    std::fill(index_, index_ + slots_, 0U);
    index_entries();
  }
  // Every entry (holes aside) into the index, which holds none of them.
  void index_entries() noexcept {
    for (std::uint32_t k = 0; k < used_; ++k) {
      if (entries_[k].key != 0) {
        index_[probe(entries_[k].key)] = (k + 1) | print_of(entries_[k].key);
      }
    }
  }
  void grow_entries() {
    if (capacity_ > kMostEntries / 2) throw std::bad_alloc();
    const std::uint32_t capacity = capacity_ == 0 ? 8 : 2 * capacity_;
    void* grown = std::realloc(static_cast<void*>(entries_), capacity * sizeof(Entry));
    if (grown == nullptr) throw std::bad_alloc();
    entries_ = static_cast<Entry*>(grown);
    capacity_ = capacity;
  }
  void reindex(std::uint32_t slots) {
    auto* index = static_cast<std::uint32_t*>(std::calloc(slots, sizeof(std::uint32_t)));
    if (index == nullptr) throw std::bad_alloc();
    std::free(index_);
    index_ = index;
    slots_ = slots;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctz(slots));
    index_entries();
  }
  static constexpr std::uint32_t kFewHoles = 1024;  // holes left alone whatever the entries
  Entry* entries_ = nullptr;
  std::uint32_t* index_ = nullptr;  // slots_ words (index_print)
  std::uint32_t size_ = 0;          // entries with a key other than 0
  std::uint32_t used_ = 0;          // positions in use, holes among them
  std::uint32_t free_ = 0;  // the last hole left's position + 1, 0 = none (a list through them)
  std::uint32_t capacity_ = 0;
  std::uint32_t slots_ = 0;  // a power of two, or 0
  unsigned shift_ = 64;
  bool has_zero_ = false;
  V zero_{};
};

class SlotTable {
 public:
  SlotTable() noexcept = default;
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;
  ~SlotTable() { clear(); }
  // The tag in a slot if it still tags `value`, or 0.
  [[nodiscard]] Tag get(std::uintptr_t object, std::uint64_t key, std::uintptr_t value) const;
  [[nodiscard]] const Slot* slot(std::uintptr_t object, std::uint64_t key) const;
  // slot, through a position hint (SlotMap::find): a namespace's names, read over and over.
  [[nodiscard]] const Slot* slot(std::uintptr_t object, std::uint64_t key,
                                 std::uint32_t& hint) const {
    ObjectRecord* r = record_of(object);
    return r != nullptr ? r->slots.find(key, hint) : nullptr;
  }
  // hold: also remember this slot as the value's holder (for values worth recognising by
  // identity; shared singletons and small ints are not).
  // hint: a position hint for the key (SlotMap::find), for a namespace's names.
  void set(std::uintptr_t object, std::uint64_t key, Tag tag, std::uintptr_t value, Tag now,
           bool hold = true, std::uint32_t* hint = nullptr);
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
    records_.for_each([&visit](std::uintptr_t /*object*/, ObjectRecord* record) {
      visit(record->created);
      visit(record->updated);
      for (const auto& [key, slot] : record->slots) visit(slot.tag);
    });
  }
  [[nodiscard]] std::size_t objects() const noexcept { return records_.size(); }
  [[nodiscard]] std::size_t slots() const noexcept { return slot_count_; }
  [[nodiscard]] bool empty() const noexcept { return records_.empty(); }
  void clear() noexcept;

 private:
  void unhold(std::uintptr_t object, std::uintptr_t value) noexcept;
  // The object's record, made if there was none.
  ObjectRecord& record(std::uintptr_t object);
  [[nodiscard]] ObjectRecord* record_of(std::uintptr_t object) const noexcept {
    ObjectRecord* const* r = records_.find(object);
    return r != nullptr ? *r : nullptr;
  }
  void free_record(ObjectRecord* record) noexcept;
  // Records live in a pool (a pointer to one stays valid while the table grows), holders in
  // the table itself.
  AddressTable<ObjectRecord*> records_;
  AddressTable<Holder> holders_;
  std::size_t slot_count_ = 0;
};

}  // namespace sealtrace
