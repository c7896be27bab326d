#include "slots.hpp"

#include <cstdlib>
#include <new>

namespace sealtrace {

// -- SlotMap ----------------------------------------------------------------------------------

std::uint32_t SlotMap::probe(std::uint64_t key) const noexcept {
  const std::uint32_t m = mask();
  const std::uint32_t print = index_print(key);
  for (auto i = static_cast<std::uint32_t>(key) & m;; i = (i + 1) & m) {
    const std::uint32_t word = index_[i];
    if (word == 0) return i;
    if ((word & ~kPositionMask) == print && items_[(word & kPositionMask) - 1].first == key) {
      return i;
    }
  }
}

std::uint32_t SlotMap::position(std::uint64_t key) const noexcept {
  if (index_ == nullptr) {
    for (std::uint32_t i = 0; i < size_; ++i) {
      if (items_[i].first == key) return i + 1;
    }
    return 0;
  }
  return index_[probe(key)] & kPositionMask;
}

Slot* SlotMap::find(std::uint64_t key) noexcept {
  const std::uint32_t at = position(key);
  return at == 0 ? nullptr : &items_[at - 1].second;
}

void SlotMap::reindex() {
  std::free(index_);
  index_ = nullptr;
  if (cap_ <= kScan) return;
  index_ = static_cast<std::uint32_t*>(std::calloc(2 * static_cast<std::size_t>(cap_), 4));
  if (index_ == nullptr) throw std::bad_alloc();
  for (std::uint32_t k = 0; k < size_; ++k) {
    index_[probe(items_[k].first)] = (k + 1) | index_print(items_[k].first);
  }
}

std::pair<Slot*, bool> SlotMap::try_emplace(std::uint64_t key, Slot slot) {
  if (Slot* found = find(key)) return {found, false};
  if (size_ == cap_) {
    if (cap_ > kMostEntries / 2) throw std::bad_alloc();
    const std::uint32_t cap = cap_ == 0 ? 1 : cap_ < 4 ? cap_ + 1 : 2 * cap_;
    void* grown = std::realloc(static_cast<void*>(items_), cap * sizeof(value_type));
    if (grown == nullptr) throw std::bad_alloc();
    items_ = static_cast<value_type*>(grown);
    const bool reshape = cap > kScan && (cap & (cap - 1)) == 0;
    cap_ = cap;
    if (reshape) reindex();
  }
  new (&items_[size_]) value_type{key, slot};
  ++size_;
  if (index_ != nullptr) index_[probe(key)] = size_ | index_print(key);
  return {&items_[size_ - 1].second, true};
}

Slot SlotMap::erase(std::uint64_t key) noexcept {
  std::uint32_t at = 0;
  if (index_ == nullptr) {
    for (std::uint32_t i = 0; i < size_ && at == 0; ++i) {
      if (items_[i].first == key) at = i + 1;
    }
  } else {
    std::uint32_t hole = probe(key);
    at = index_[hole] & kPositionMask;
    if (at != 0) {
      // Backward-shift deletion: pull later entries of the probe run into the hole.
      const std::uint32_t m = mask();
      for (std::uint32_t j = (hole + 1) & m; index_[j] != 0; j = (j + 1) & m) {
        const std::uint32_t home =
            static_cast<std::uint32_t>(items_[(index_[j] & kPositionMask) - 1].first) & m;
        const bool between = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!between) {
          index_[hole] = index_[j];
          hole = j;
        }
      }
      index_[hole] = 0;
    }
  }
  if (at == 0) return Slot{};
  const Slot removed = items_[at - 1].second;
  const std::uint32_t last = size_ - 1;
  if (at - 1 != last) {
    if (index_ != nullptr) index_[probe(items_[last].first)] = at | index_print(items_[last].first);
    items_[at - 1] = items_[last];
  }
  --size_;
  return removed;
}

void SlotMap::clear() noexcept {
  std::free(static_cast<void*>(items_));
  std::free(index_);
  items_ = nullptr;
  index_ = nullptr;
  size_ = cap_ = 0;
}

void SlotMap::swap(SlotMap& other) noexcept {
  std::swap(items_, other.items_);
  std::swap(index_, other.index_);
  std::swap(size_, other.size_);
  std::swap(cap_, other.cap_);
}

// -- NodePool ---------------------------------------------------------------------------------

void* NodePool::take() {
  if (free_ != nullptr) {
    void* block = free_;
    free_ = *static_cast<void**>(block);
    return block;
  }
  if (carve_ == nullptr || carve_ + size_ > carve_end_) {
    void* chunk = std::malloc(kChunk);
    if (chunk == nullptr) throw std::bad_alloc();
    carve_ = static_cast<char*>(chunk);
    carve_end_ = carve_ + kChunk;
  }
  void* block = carve_;
  carve_ += size_;
  return block;
}

void NodePool::give(void* block) noexcept {
  *static_cast<void**>(block) = free_;
  free_ = block;
}

// -- SlotTable --------------------------------------------------------------------------------

namespace {

NodePool& record_pool() {
  static NodePool& pool = *new NodePool(sizeof(ObjectRecord), alignof(ObjectRecord));
  return pool;
}

}  // namespace

ObjectRecord& SlotTable::record(std::uintptr_t object) {
  auto [entry, inserted] = records_.try_emplace(object);
  if (inserted) {
    try {
      *entry = new (record_pool().take()) ObjectRecord();
    } catch (...) {
      records_.erase(object);
      throw;
    }
  }
  return **entry;
}

void SlotTable::free_record(ObjectRecord* record) noexcept {
  record->~ObjectRecord();
  record_pool().give(record);
}

const Slot* SlotTable::slot(std::uintptr_t object, std::uint64_t key) const {
  const ObjectRecord* r = record_of(object);
  return r != nullptr ? r->slots.find(key) : nullptr;
}

Tag SlotTable::get(std::uintptr_t object, std::uint64_t key, std::uintptr_t value) const {
  const Slot* s = slot(object, key);
  return (s != nullptr && s->value == value) ? s->tag : 0;
}

void SlotTable::set(std::uintptr_t object, std::uint64_t key, Tag tag, std::uintptr_t value,
                    Tag now, bool hold, std::uint32_t* hint) {
  ObjectRecord& r = record(object);
  Slot* had = hint != nullptr ? r.slots.find(key, *hint) : nullptr;
  auto [slot, inserted] = had != nullptr ? std::pair<Slot*, bool>{had, false}
                                         : r.slots.try_emplace(key, Slot{tag, value});
  if (inserted) {
    ++slot_count_;
  } else {
    unhold(object, slot->value);
    *slot = Slot{tag, value};
  }
  r.updated = now;
  if (hold && value != 0 && tag != 0) *holders_.try_emplace(value).first = Holder{object, key};
}

const Holder* SlotTable::holder(std::uintptr_t value) const { return holders_.find(value); }

Tag SlotTable::held(const Holder& h, std::uintptr_t value) const {
  const Slot* s = slot(h.container, h.key);
  return s != nullptr && s->value == value ? s->tag : 0;
}

void SlotTable::drop_holder(std::uintptr_t value) noexcept { holders_.erase(value); }

void SlotTable::unhold(std::uintptr_t object, std::uintptr_t value) noexcept {
  if (holders_.empty()) return;
  holders_.erase_if(value, [object](const Holder& h) { return h.container == object; });
}

void SlotTable::erase(std::uintptr_t object, std::uint64_t key, Tag now) {
  ObjectRecord* r = record_of(object);
  if (r == nullptr) return;
  if (const Slot* slot = r->slots.find(key)) {
    unhold(object, slot->value);
    r->slots.erase(key);
    --slot_count_;
  }
  r->updated = now;
}

void SlotTable::drop_slots(std::uintptr_t object, Tag now) {
  ObjectRecord* r = record_of(object);
  if (r == nullptr) return;
  for (const auto& [key, slot] : r->slots) unhold(object, slot.value);
  slot_count_ -= r->slots.size();
  r->slots.clear();
  r->updated = now;
  r->dirty = true;
}

void SlotTable::reorder(std::uintptr_t object, Tag now) {
  ObjectRecord* r = record_of(object);
  if (r == nullptr) return;
  SlotMap members;
  for (const auto& [key, slot] : r->slots) {
    if (slot.value == 0) continue;
    *members.try_emplace(member_key(slot.value), slot).first = slot;
    Holder* h = holders_.find(slot.value);
    if (h != nullptr && h->container == object && h->key == key) h->key = member_key(slot.value);
  }
  slot_count_ -= r->slots.size();
  slot_count_ += members.size();
  r->slots.swap(members);
  r->updated = now;
}

void SlotTable::mark_created(std::uintptr_t object, Tag now, bool empty) {
  ObjectRecord& r = record(object);
  if (r.created == 0) {
    r.created = now;
    r.created_empty = empty;
  }
}

void SlotTable::mark_dirty(std::uintptr_t object, Tag now) {
  ObjectRecord& r = record(object);
  r.dirty = true;
  r.updated = now;
}

void SlotTable::mark_updated(std::uintptr_t object, Tag now) { record(object).updated = now; }

void SlotTable::forget(std::uintptr_t object) noexcept {
  ObjectRecord* r = record_of(object);
  if (r == nullptr) return;
  for (const auto& [key, slot] : r->slots) unhold(object, slot.value);
  slot_count_ -= r->slots.size();
  records_.erase(object);
  free_record(r);
}

const ObjectRecord* SlotTable::find(std::uintptr_t object) const { return record_of(object); }

void SlotTable::clear() noexcept {
  records_.for_each([this](std::uintptr_t /*object*/, ObjectRecord* r) { free_record(r); });
  records_.clear();
  holders_.clear();
  slot_count_ = 0;
}

}  // namespace sealtrace
