#include "slots.hpp"

namespace sealtrace {

const Slot* SlotTable::slot(std::uintptr_t object, std::uint64_t key) const {
  auto it = records_.find(object);
  if (it == records_.end()) return nullptr;
  auto found = it->second.slots.find(key);
  return found == it->second.slots.end() ? nullptr : &found->second;
}

Tag SlotTable::get(std::uintptr_t object, std::uint64_t key, std::uintptr_t value) const {
  const Slot* s = slot(object, key);
  return (s != nullptr && s->value == value) ? s->tag : 0;
}

void SlotTable::set(std::uintptr_t object, std::uint64_t key, Tag tag, std::uintptr_t value,
                    Tag now, bool hold) {
  ObjectRecord& record = records_[object];
  auto [it, inserted] = record.slots.try_emplace(key, Slot{tag, value});
  if (inserted) {
    ++slot_count_;
  } else {
    unhold(object, it->second.value);
    it->second = Slot{tag, value};
  }
  record.updated = now;
  if (hold && value != 0 && tag != 0) holders_[value] = Holder{object, key, tag};
}

const Holder* SlotTable::holder(std::uintptr_t value) const {
  auto it = holders_.find(value);
  return it == holders_.end() ? nullptr : &it->second;
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
  auto slot = it->second.slots.find(key);
  if (slot != it->second.slots.end()) {
    unhold(object, slot->second.value);
    it->second.slots.erase(slot);
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
  std::unordered_map<std::uint64_t, Slot> members;
  for (const auto& [key, slot] : it->second.slots) {
    if (slot.value == 0) continue;
    members[member_key(slot.value)] = slot;
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
