#include "slots.hpp"

#include <cstdlib>
#include <new>

namespace sealtrace {

// -- SlotMap ----------------------------------------------------------------------------------

std::uint32_t SlotMap::probe(std::uint64_t key) const noexcept {
  const std::uint32_t m = mask();
  for (auto i = static_cast<std::uint32_t>(key) & m;; i = (i + 1) & m) {
    const std::uint32_t at = index_[i];
    if (at == 0 || items_[at - 1].first == key) return i;
  }
}

Slot* SlotMap::find(std::uint64_t key) noexcept {
  if (index_ == nullptr) {
    for (std::uint32_t i = 0; i < size_; ++i) {
      if (items_[i].first == key) return &items_[i].second;
    }
    return nullptr;
  }
  const std::uint32_t at = index_[probe(key)];
  return at == 0 ? nullptr : &items_[at - 1].second;
}

void SlotMap::reindex() {
  std::free(index_);
  index_ = nullptr;
  if (cap_ <= kScan) return;
  index_ = static_cast<std::uint32_t*>(std::calloc(2 * static_cast<std::size_t>(cap_), 4));
  if (index_ == nullptr) throw std::bad_alloc();
  for (std::uint32_t k = 0; k < size_; ++k) index_[probe(items_[k].first)] = k + 1;
}

std::pair<Slot*, bool> SlotMap::try_emplace(std::uint64_t key, Slot slot) {
  if (Slot* found = find(key)) return {found, false};
  if (size_ == cap_) {
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
  if (index_ != nullptr) index_[probe(key)] = size_;
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
    at = index_[hole];
    if (at != 0) {
      // Backward-shift deletion: pull later entries of the probe run into the hole.
      const std::uint32_t m = mask();
      for (std::uint32_t j = (hole + 1) & m; index_[j] != 0; j = (j + 1) & m) {
        const std::uint32_t home = static_cast<std::uint32_t>(items_[index_[j] - 1].first) & m;
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
    if (index_ != nullptr) index_[probe(items_[last].first)] = at;
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

const Slot* SlotTable::slot(std::uintptr_t object, std::uint64_t key) const {
  auto it = records_.find(object);
  if (it == records_.end()) return nullptr;
  return it->second.slots.find(key);
}

Tag SlotTable::get(std::uintptr_t object, std::uint64_t key, std::uintptr_t value) const {
  const Slot* s = slot(object, key);
  return (s != nullptr && s->value == value) ? s->tag : 0;
}

void SlotTable::set(std::uintptr_t object, std::uint64_t key, Tag tag, std::uintptr_t value,
                    Tag now, bool hold) {
  ObjectRecord& record = records_[object];
  auto [slot, inserted] = record.slots.try_emplace(key, Slot{tag, value});
  if (inserted) {
    ++slot_count_;
  } else {
    unhold(object, slot->value);
    *slot = Slot{tag, value};
  }
  record.updated = now;
  if (hold && value != 0 && tag != 0) holders_[value] = Holder{object, key};
}

const Holder* SlotTable::holder(std::uintptr_t value) const {
  auto it = holders_.find(value);
  return it == holders_.end() ? nullptr : &it->second;
}

Tag SlotTable::held(const Holder& h, std::uintptr_t value) const {
  const Slot* s = slot(h.container, h.key);
  return s != nullptr && s->value == value ? s->tag : 0;
}

void SlotTable::drop_holder(std::uintptr_t value) noexcept { holders_.erase(value); }

void SlotTable::unhold(std::uintptr_t object, std::uintptr_t value) noexcept {
  if (holders_.empty()) return;
  auto it = holders_.find(value);
  if (it != holders_.end() && it->second.container == object) holders_.erase(it);
}

void SlotTable::erase(std::uintptr_t object, std::uint64_t key, Tag now) {
  auto it = records_.find(object);
  if (it == records_.end()) return;
  if (const Slot* slot = it->second.slots.find(key)) {
    unhold(object, slot->value);
    it->second.slots.erase(key);
    --slot_count_;
  }
  it->second.updated = now;
}

void SlotTable::drop_slots(std::uintptr_t object, Tag now) {
  auto it = records_.find(object);
  if (it == records_.end()) return;
  for (const auto& [key, slot] : it->second.slots) unhold(object, slot.value);
  slot_count_ -= it->second.slots.size();
  it->second.slots.clear();
  it->second.updated = now;
  it->second.dirty = true;
}

void SlotTable::reorder(std::uintptr_t object, Tag now) {
  auto it = records_.find(object);
  if (it == records_.end()) return;
  SlotMap members;
  for (const auto& [key, slot] : it->second.slots) {
    if (slot.value == 0) continue;
    *members.try_emplace(member_key(slot.value), slot).first = slot;
    auto h = holders_.find(slot.value);
    if (h != holders_.end() && h->second.container == object && h->second.key == key) {
      h->second.key = member_key(slot.value);
    }
  }
  slot_count_ -= it->second.slots.size();
  slot_count_ += members.size();
  it->second.slots.swap(members);
  it->second.updated = now;
}

void SlotTable::mark_created(std::uintptr_t object, Tag now, bool empty) {
  ObjectRecord& record = records_[object];
  if (record.created == 0) {
    record.created = now;
    record.created_empty = empty;
  }
}

void SlotTable::mark_dirty(std::uintptr_t object, Tag now) {
  ObjectRecord& record = records_[object];
  record.dirty = true;
  record.updated = now;
}

void SlotTable::mark_updated(std::uintptr_t object, Tag now) { records_[object].updated = now; }

void SlotTable::forget(std::uintptr_t object) noexcept {
  auto it = records_.find(object);
  if (it == records_.end()) return;
  for (const auto& [key, slot] : it->second.slots) unhold(object, slot.value);
  slot_count_ -= it->second.slots.size();
  records_.erase(it);
}

const ObjectRecord* SlotTable::find(std::uintptr_t object) const {
  auto it = records_.find(object);
  return it == records_.end() ? nullptr : &it->second;
}

void SlotTable::clear() noexcept {
  records_.clear();
  holders_.clear();
  slot_count_ = 0;
}

}  // namespace sealtrace
