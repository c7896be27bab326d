// AddressTable and SlotMap against std::unordered_map: random insertions, lookups and
// erasures over addresses shaped like objects' (aligned, clustered), in phases that grow the
// tables, empty them, and leave holes by the thousand (so they are refilled and compacted).
// Prints "ok" and exits 0, or names the first disagreement and exits 1.
#include <cstdint>
#include <cstdio>
#include <random>
#include <unordered_map>
#include <vector>

#include "slots.hpp"

namespace {

struct Value {
  std::uint64_t a = 0;
  std::uint64_t b = 0;
};

int fail(const char* what, std::uint64_t key, long step) {
  std::printf("FAIL %s key=%llx step=%ld\n", what, static_cast<unsigned long long>(key), step);
  return 1;
}

int check_address_table(std::mt19937_64& rng) {
  sealtrace::AddressTable<Value> table;
  std::unordered_map<std::uintptr_t, Value> model;
  long step = 0;
  // Phase sizes: each phase inserts with probability p_insert among its keys' range.
  const struct {
    long steps;
    std::uint64_t range;
    int insert_percent;
  } phases[] = {{200000, 4096, 70}, {400000, 300000, 80}, {600000, 300000, 20},
                {300000, 64, 50},   {500000, 200000, 60}, {800000, 200000, 5}};
  for (const auto& phase : phases) {
    for (long k = 0; k < phase.steps; ++k, ++step) {
      // Mostly 16-aligned addresses in a few clusters; now and then address 0.
      std::uintptr_t key = (rng() % phase.range) * 16 + ((rng() & 3) << 40);
      if (rng() % 100000 == 0) key = 0;
      const int roll = static_cast<int>(rng() % 100);
      if (roll < phase.insert_percent) {
        auto [v, inserted] = table.try_emplace(key);
        const bool expected = model.find(key) == model.end();
        if (inserted != expected) return fail("try_emplace inserted", key, step);
        if (inserted && (v->a != 0 || v->b != 0)) return fail("fresh value", key, step);
        v->a = step;
        v->b = key ^ 0x5555;
        model[key] = *v;
      } else if (roll < phase.insert_percent + (100 - phase.insert_percent) / 2) {
        const bool erased = table.erase(key);
        if (erased != (model.erase(key) == 1)) return fail("erase", key, step);
      } else {
        const Value* v = table.find(key);
        auto it = model.find(key);
        if ((v == nullptr) != (it == model.end())) return fail("find presence", key, step);
        if (v != nullptr && (v->a != it->second.a || v->b != it->second.b)) {
          return fail("find value", key, step);
        }
      }
      if (table.size() != model.size()) return fail("size", key, step);
      if (table.positions() > 2 * table.size() + 1026) return fail("holes", key, step);
    }
    std::size_t seen = 0;
    bool right = true;
    table.for_each([&](std::uintptr_t key, const Value& v) {
      ++seen;
      auto it = model.find(key);
      right = right && it != model.end() && it->second.a == v.a && it->second.b == v.b;
    });
    if (!right || seen != model.size()) return fail("for_each", 0, step);
  }
  // Nine in ten erased (holes by the hundred thousand), then churn over what is left.
  std::vector<std::uintptr_t> keys;
  for (const auto& [key, value] : model) keys.push_back(key);
  for (std::size_t k = 0; k < keys.size(); ++k, ++step) {
    if (k % 10 == 0) continue;
    if (!table.erase(keys[k]) || model.erase(keys[k]) != 1) return fail("drain", keys[k], step);
    if (table.positions() > 2 * table.size() + 1026) return fail("holes", keys[k], step);
  }
  for (std::size_t k = 0; k < keys.size(); ++k, ++step) {
    const Value* v = table.find(keys[k]);
    if ((v != nullptr) != (k % 10 == 0)) return fail("after drain", keys[k], step);
  }
  // erase_if keeps an entry its predicate spares.
  auto [v, inserted] = table.try_emplace(0x1230);
  v->a = 7;
  if (table.erase_if(0x1230, [](const Value& x) { return x.a != 7; })) {
    return fail("erase_if spared", 0x1230, step);
  }
  if (table.find(0x1230) == nullptr) return fail("erase_if kept", 0x1230, step);
  return 0;
}

int check_slot_map(std::mt19937_64& rng) {
  sealtrace::SlotMap map;
  std::unordered_map<std::uint64_t, sealtrace::Slot> model;
  for (long step = 0; step < 600000; ++step) {
    const std::uint64_t range = step < 300000 ? 20000 : 12;
    const std::uint64_t key = sealtrace::slot_key(sealtrace::SlotKind::kIndex, rng() % range);
    const int roll = static_cast<int>(rng() % 100);
    if (roll < 55) {
      auto [slot, inserted] =
          map.try_emplace(key, sealtrace::Slot{static_cast<std::uint64_t>(step), key});
      if (inserted != (model.find(key) == model.end())) return fail("slot insert", key, step);
      model.emplace(key, *slot);
    } else if (roll < 80) {
      const sealtrace::Slot gone = map.erase(key);
      auto it = model.find(key);
      if ((gone.value != 0) != (it != model.end())) return fail("slot erase", key, step);
      if (it != model.end()) {
        if (gone.tag != it->second.tag) return fail("slot erase tag", key, step);
        model.erase(it);
      }
    } else {
      const sealtrace::Slot* slot = map.find(key);
      auto it = model.find(key);
      if ((slot == nullptr) != (it == model.end())) return fail("slot find", key, step);
      if (slot != nullptr && slot->tag != it->second.tag) return fail("slot tag", key, step);
    }
    if (map.size() != model.size()) return fail("slot size", key, step);
  }
  return 0;
}

}  // namespace

int main() {
  std::mt19937_64 rng(20261129);
  if (check_address_table(rng) != 0 || check_slot_map(rng) != 0) return 1;
  std::printf("ok\n");
  return 0;
}
