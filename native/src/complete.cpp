// The second half of an instruction: at the next event of its frame, what it left on the
// stack is tagged by its opcode's rule; an exception lands in its handler with its tag.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>

#include "hooks.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

Tag Tracer::computed(const Pending& p, PyObject* value) const noexcept {
  if (last_return_.seq > p.return_seq && last_return_.value == value && value != nullptr) {
    return last_return_.tag;  // a Python function called from C returned this very object
  }
  if (p.rule == Rule::kBinarySubscr || p.rule == Rule::kForIter || p.rule == Rule::kLoadAttr ||
      p.rule == Rule::kLoadMethod || p.rule == Rule::kUnpackSequence) {
    const Tag held = held_tag(value);
    if (held != 0) return held;
  }
  return p.counter;
}

Tag Tracer::call_result(ShadowFrame& sf, PyObject* result) {
  Pending& p = sf.p;
  if (p.has_return) return p.return_tag;
  if (result == nullptr) return 0;
  if (last_return_.seq > p.return_seq && last_return_.value == result) return last_return_.tag;
  if (p.aux_value == result && p.aux_tag != 0) return p.aux_tag;
  if (!shared(result)) {
    const std::size_t first = p.in_objs[0] != nullptr ? 1 : 2;
    for (std::size_t j = first; j < p.in_objs.size(); ++j) {
      if (p.in_objs[j] == result) return p.in_tags[j];
    }
  }
  if (PyGen_CheckExact(result) || PyCoro_CheckExact(result) || PyAsyncGen_CheckExact(result)) {
    adopt_generator(p, result);
  }
  if (PyType_Check(result) && class_slots_seq_ > p.return_seq && !class_slots_.empty()) {
    // __build_class__ made this class from the body that just returned: its attributes
    // keep the tags they had in the class namespace.
    for (const auto& cs : class_slots_) {
      slots_.set(addr(result), cs.key, cs.tag, cs.value, p.counter, false);
    }
    class_slots_.clear();
  }
  if (!shared(result)) {
    const Tag held = held_tag(result);
    if (held != 0) return held;
  }
  if (trackable(result) && Py_REFCNT(result) == 1) slots_.mark_created(addr(result), p.counter);
  return p.counter;
}

void Tracer::complete(ShadowFrame& sf, int depth) {
  Pending& p = sf.p;
  p.active = false;
  if (p.raised || p.rule == Rule::kRaise) {  // a raise never falls through
    land_exception(sf, depth);
    return;
  }
  PyObject** lp = sf.iframe->localsplus;
  Tag* s = sf.slots.data();
  const int base = p.before - p.pops;
  const int pushed = depth - base;
  const int delta = depth - p.before;
  const Instr& in = sf.code->instrs[static_cast<std::size_t>(p.index)];
  if (delta != in.effect && delta != in.effect_jump) note_mismatch(sf, in, p.counter);
  const Tag now = p.counter;
  auto fill = [&](int from) {
    for (int i = std::max(from, sf.code->nlocalsplus); i < depth; ++i) s[i] = now;
  };
  if (pushed < 0) {
    if (p.rule == Rule::kForIter) {
      const int slot = p.before - 1;
      sf.iters.erase(std::remove_if(sf.iters.begin(), sf.iters.end(),
                                    [slot](const IterState& st) { return st.slot >= slot; }),
                     sf.iters.end());
    }
  } else {
    switch (p.rule) {
      case Rule::kNone:
      case Rule::kPop:
      case Rule::kStoreName:
      case Rule::kStoreGlobal:
      case Rule::kDeleteName:
      case Rule::kDeleteGlobal:
      case Rule::kStoreAttr:
      case Rule::kDeleteAttr:
      case Rule::kStoreSubscr:
      case Rule::kDeleteSubscr:
      case Rule::kStoreDeref:
      case Rule::kDeleteDeref:
      case Rule::kListAppend:
      case Rule::kMapAdd:
      case Rule::kListExtend:
      case Rule::kDictUpdate:
      case Rule::kRaise:
      case Rule::kReturn:
      case Rule::kNotTraced:
        fill(base);
        break;
      case Rule::kSwap:
        if (p.oparg >= 2 && p.before - p.oparg >= sf.code->nlocalsplus) {
          std::swap(s[p.before - 1], s[p.before - p.oparg]);
        }
        break;
      case Rule::kCopy:
        if (pushed == 1 && p.before - p.oparg >= sf.code->nlocalsplus) {
          s[p.before] = s[p.before - p.oparg];
        } else {
          fill(base);
        }
        break;
      case Rule::kLoadFast:
        if (pushed == 1) s[base] = s[p.oparg];
        break;
      case Rule::kStoreFast:
        s[p.oparg] = p.in_tags.empty() ? 0 : p.in_tags[0];
        break;
      case Rule::kDeleteFast:
        s[p.oparg] = 0;
        break;
      case Rule::kLoadConst:
        fill(base);
        break;
      case Rule::kLoadGlobal:
      case Rule::kLoadName:
      case Rule::kLoadClassDeref:
      case Rule::kLoadDeref:
      case Rule::kImportFrom:
      case Rule::kLoadAttr:
      case Rule::kBinarySubscr: {
        fill(base);
        if (pushed >= 1) {
          PyObject* v = lp[depth - 1];
          const bool attr_like = p.rule == Rule::kLoadAttr || p.rule == Rule::kBinarySubscr;
          if (p.aux_tag != 0 && v == p.aux_value) {
            s[depth - 1] = p.aux_tag;
          } else if (attr_like) {
            s[depth - 1] = computed(p, v);
          }
          if (pushed == 2) s[base] = 0;  // LOAD_GLOBAL's NULL
        }
        break;
      }
      case Rule::kLoadMethod:
        fill(base);
        if (pushed == 2) {
          if (lp[base] != nullptr) {
            s[base + 1] = p.in_tags.back();  // [method, self]
          } else {
            s[base] = 0;  // [NULL, attribute]
            PyObject* v = lp[base + 1];
            s[base + 1] = (p.aux_tag != 0 && v == p.aux_value) ? p.aux_tag : computed(p, v);
          }
        }
        break;
      case Rule::kKeep:
        fill(base);
        for (int i = 0; i + 1 < pushed && i < static_cast<int>(p.in_tags.size()); ++i) {
          s[base + i] = p.in_tags[static_cast<std::size_t>(i)];
        }
        break;
      case Rule::kMatchKeys:
      case Rule::kMatchClass: {
        fill(base);
        for (int i = 0; i + 1 < pushed && i < static_cast<int>(p.in_tags.size()); ++i) {
          s[base + i] = p.in_tags[static_cast<std::size_t>(i)];  // MATCH_KEYS keeps its inputs
        }
        PyObject* values = pushed >= 1 ? lp[depth - 1] : nullptr;
        if (values == nullptr || !PyTuple_CheckExact(values) || !trackable(values) ||
            PyTuple_GET_SIZE(values) != static_cast<Py_ssize_t>(p.items.size())) {
          break;
        }
        slots_.mark_created(addr(values), now);
        for (std::size_t i = 0; i < p.items.size(); ++i) {
          const auto at = static_cast<Py_ssize_t>(i);
          PyObject* v = PyTuple_GET_ITEM(values, at);
          if (p.items[i] != 0 && addr(v) == p.keys[i]) {
            set_slot(addr(values), index_key(at), p.items[i], addr(v), now);
          }
        }
        break;
      }
      case Rule::kUnpackEx: {
        // From the top: the leading items, the starred list, then the trailing items with
        // the sequence's last item deepest.
        fill(base);
        const int lead = p.oparg & 0xFF;
        const int trail = p.oparg >> 8;
        const auto n = static_cast<int>(p.items.size());
        if (pushed != lead + 1 + trail || n < lead + trail) break;
        auto item_tag = [&](int i) { return p.items[static_cast<std::size_t>(i)]; };
        for (int i = 0; i < lead; ++i) {
          if (item_tag(i) != 0) s[depth - 1 - i] = item_tag(i);
        }
        for (int k = 0; k < trail; ++k) {
          if (item_tag(n - 1 - k) != 0) s[base + k] = item_tag(n - 1 - k);
        }
        PyObject* rest = lp[base + trail];
        if (!PyList_CheckExact(rest) || !trackable(rest)) break;
        slots_.mark_created(addr(rest), now);
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(rest) && lead + j < n - trail; ++j) {
          const Tag t = item_tag(lead + static_cast<int>(j));
          if (t != 0) set_slot(addr(rest), index_key(j), t, addr(PyList_GET_ITEM(rest, j)), now);
        }
        break;
      }
      case Rule::kPushExcInfo:
        fill(base);
        if (pushed == 2) {
          s[base] = 0;
          s[base + 1] = p.in_tags.empty() ? now : p.in_tags[0];
        }
        break;
      case Rule::kMove:
        if (pushed == 1 && !p.in_tags.empty()) {
          s[base] = p.in_tags[0];
        } else {
          fill(base);
        }
        break;
      case Rule::kBuildSeq: {
        fill(base);
        PyObject* obj = pushed == 1 ? lp[base] : nullptr;
        if (obj == nullptr || !trackable(obj)) break;
        slots_.mark_created(addr(obj), now);
        const bool from_list = p.op == kListToTuple;
        const Py_ssize_t size = Py_SIZE(obj);
        const auto count = static_cast<Py_ssize_t>(from_list ? p.items.size() : p.in_tags.size());
        for (Py_ssize_t i = 0; i < count && i < size; ++i) {
          const Tag t = from_list ? p.items[static_cast<std::size_t>(i)]
                                  : p.in_tags[static_cast<std::size_t>(i)];
          if (t != 0) set_slot(addr(obj), index_key(i), t, addr(seq_item(obj, i)), now);
        }
        break;
      }
      case Rule::kBuildMap:
      case Rule::kBuildConstKeyMap: {
        fill(base);
        PyObject* obj = pushed == 1 ? lp[base] : nullptr;
        if (obj == nullptr || !PyDict_Check(obj) || !trackable(obj)) break;
        slots_.mark_created(addr(obj), now);
        const bool pairs = p.rule == Rule::kBuildMap;
        for (std::size_t i = 0; i < p.keys.size(); ++i) {
          if (p.keys[i] == 0) continue;
          const std::size_t vi = pairs ? 2 * i + 1 : i;
          if (vi >= p.in_objs.size()) break;
          set_slot(addr(obj), p.keys[i], p.in_tags[vi], addr(p.in_objs[vi]), now);
        }
        break;
      }
      case Rule::kUnpackSequence: {
        fill(base);
        const int count = static_cast<int>(p.items.size());
        if (pushed == count) {
          for (int i = 0; i < count; ++i) {
            Tag t = p.items[static_cast<std::size_t>(i)];
            if (t == 0) t = held_tag(lp[base + (count - 1 - i)]);
            if (t != 0) s[base + (count - 1 - i)] = t;
          }
        }
        break;
      }
      case Rule::kGetIter: {
        fill(base);
        if (pushed != 1) break;
        PyObject* iter = lp[base];
        PyObject* src = p.in_objs.empty() ? nullptr : p.in_objs[0];
        if (iter == src && src != nullptr) s[base] = p.in_tags[0];
        sf.iters.erase(std::remove_if(sf.iters.begin(), sf.iters.end(),
                                      [base](const IterState& st) { return st.slot >= base; }),
                       sf.iters.end());
        if (src != nullptr && iter != src && (PyList_CheckExact(src) || PyTuple_CheckExact(src))) {
          sf.iters.push_back(IterState{base, iter, src, 0});
        }
        break;
      }
      case Rule::kForIter: {
        if (pushed != 1) {
          fill(base);
          break;
        }
        PyObject* item = lp[p.before];
        Tag tag = 0;
        const int slot = p.before - 1;
        for (auto& st : sf.iters) {
          if (st.slot != slot) continue;
          if (st.iter == lp[slot]) {
            const Py_ssize_t i = st.next++;
            if (i < Py_SIZE(st.seq) && seq_item(st.seq, i) == item) {
              tag = slots_.get(addr(st.seq), index_key(i), addr(item));
            }
          }
          break;
        }
        if (tag == 0) tag = iterated_item_tag(slots_, lp[slot], item);
        s[p.before] = tag != 0 ? tag : computed(p, item);
        break;
      }
      case Rule::kPrecall:
        if (p.flag) {
          const int null_slot = p.before - p.oparg - 2;
          if (lp[null_slot] != nullptr) {
            s[null_slot] = p.aux_tag;
            s[null_slot + 1] = p.aux_tag;
          }
        }
        break;
      case Rule::kCall:
      case Rule::kCallFunctionEx:
        fill(base);
        if (pushed == 1) s[base] = call_result(sf, lp[base]);
        break;
      case Rule::kYield:
      case Rule::kCompute:
      default:
        for (int i = std::max(base, sf.code->nlocalsplus); i < depth; ++i) {
          s[i] = computed(p, lp[i]);
        }
        if (p.rule == Rule::kCompute && p.op == 132 && pushed == 1 && (p.oparg & 1) != 0 &&
            trackable(lp[base])) {
          // MAKE_FUNCTION with defaults: remember where the defaults tuple came from.
          set_slot(addr(lp[base]), kDefaultsKey, p.in_tags[0], addr(p.in_objs[0]), now);
        }
        break;
    }
  }
  if (p.tainted_inputs || p.taint_source) tainted_.insert(now);
  if (now <= edges_upto_) record(p);
  if (now >= capture_min_ && now <= capture_max_ && capture_.count(now) != 0) {
    capture_post(sf, depth, std::max(base, sf.code->nlocalsplus));
  }
}

void Tracer::land_exception(ShadowFrame& sf, int depth) {
  Pending& p = sf.p;
  Tag* s = sf.slots.data();
  const int top = depth - 1;
  const int keep = std::min(top, p.before);
  for (int i = std::max(keep, sf.code->nlocalsplus); i < top; ++i) s[i] = 0;
  if (top >= sf.code->nlocalsplus) s[top] = exc_tag_;
  sf.iters.erase(std::remove_if(sf.iters.begin(), sf.iters.end(),
                                [top](const IterState& st) { return st.slot >= top; }),
                 sf.iters.end());
  if (p.counter <= edges_upto_) record(p);
  if (p.counter >= capture_min_ && p.counter <= capture_max_ && capture_.count(p.counter) != 0) {
    capture_post(sf, depth, depth);
  }
}

}  // namespace sealtrace
