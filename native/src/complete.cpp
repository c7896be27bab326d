// The second half of an instruction: at the next event of its frame, what it left on the
// stack is tagged by its opcode's rule (complete dispatches to its family's helper, ops_*.cpp;
// the moves within the frame, locals and stack, are here); an exception lands in its handler
// with its tag.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>

#include "ops.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

// A value the instruction made, unless it is one the tracer already knows.
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

// -- moves within the frame: locals and the value stack --------------------------------------

inline void Tracer::complete_load_fast(ShadowFrame& sf, int base, int depth) {
  if (depth - base == 1) sf.slots.data()[base] = sf.slots.data()[sf.p.oparg];
}

inline void Tracer::complete_store_fast(ShadowFrame& sf) {
  const Pending& p = sf.p;
  sf.slots.data()[p.oparg] = p.in_tags.empty() ? 0 : p.in_tags[0];
}

inline void Tracer::complete_delete_fast(ShadowFrame& sf) { sf.slots.data()[sf.p.oparg] = 0; }

inline void Tracer::complete_swap(ShadowFrame& sf) {
  const Pending& p = sf.p;
  Tag* s = sf.slots.data();
  if (p.oparg >= 2 && p.before - p.oparg >= sf.code->nlocalsplus) {
    std::swap(s[p.before - 1], s[p.before - p.oparg]);
  }
}

inline void Tracer::complete_copy(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  Tag* s = sf.slots.data();
  if (depth - base == 1 && p.before - p.oparg >= sf.code->nlocalsplus) {
    s[p.before] = s[p.before - p.oparg];
  } else {
    fill(sf, base, depth);
  }
}

// Re-pushes its inputs unchanged, then pushes one new value.
inline void Tracer::complete_keep(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  Tag* s = sf.slots.data();
  fill(sf, base, depth);
  for (int i = 0; i + 1 < depth - base && i < static_cast<int>(p.in_tags.size()); ++i) {
    s[base + i] = p.in_tags[static_cast<std::size_t>(i)];
  }
}

// One value in, the same value out.
inline void Tracer::complete_move(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  if (depth - base == 1 && !p.in_tags.empty()) {
    sf.slots.data()[base] = p.in_tags[0];
  } else {
    fill(sf, base, depth);
  }
}

// Every pushed value is new (or one the tracer knows).
inline void Tracer::complete_computed(ShadowFrame& sf, int base, int depth) {
  const Pending& p = sf.p;
  PyObject** lp = sf.iframe->localsplus;
  Tag* s = sf.slots.data();
  for (int i = std::max(base, sf.code->nlocalsplus); i < depth; ++i) {
    s[i] = computed(p, lp[i]);
  }
  if (p.rule == Rule::kBuildSet) complete_build_set(sf, base, depth);
  if (p.rule == Rule::kCompute && p.op == 132 && depth - base == 1 && (p.oparg & 1) != 0 &&
      trackable(lp[base])) {
    // MAKE_FUNCTION with defaults: remember where the defaults tuple came from.
    set_slot(addr(lp[base]), kDefaultsKey, p.in_tags[0], addr(p.in_objs[0]), p.counter);
  }
}

// -- the dispatcher --------------------------------------------------------------------------

void Tracer::complete(ShadowFrame& sf, int depth) {
  Pending& p = sf.p;
  p.active = false;
  if (p.raised || p.rule == Rule::kRaise) {  // a raise never falls through
    land_exception(sf, depth);
    return;
  }
  const int base = p.before - p.pops;
  const int pushed = depth - base;
  const int delta = depth - p.before;
  const Instr& in = sf.code->instrs[static_cast<std::size_t>(p.index)];
  if (delta != in.effect && delta != in.effect_jump) note_mismatch(sf, in, p.counter);
  const Tag now = p.counter;
  if (pushed < 0) {
    if (p.rule == Rule::kForIter) drop_iters(sf, p.before - 1);  // exhausted: its iterator goes
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
      case Rule::kSetAdd:
      case Rule::kSetUpdate:
      case Rule::kMapAdd:
      case Rule::kListExtend:
      case Rule::kDictUpdate:
      case Rule::kRaise:
      case Rule::kReturn:
      case Rule::kNotTraced:
      case Rule::kLoadConst:
        fill(sf, base, depth);
        break;
      case Rule::kSwap:
        complete_swap(sf);
        break;
      case Rule::kCopy:
        complete_copy(sf, base, depth);
        break;
      case Rule::kLoadFast:
        complete_load_fast(sf, base, depth);
        break;
      case Rule::kStoreFast:
        complete_store_fast(sf);
        break;
      case Rule::kDeleteFast:
        complete_delete_fast(sf);
        break;
      case Rule::kLoadGlobal:
      case Rule::kLoadName:
      case Rule::kLoadClassDeref:
      case Rule::kLoadDeref:
      case Rule::kImportFrom:
      case Rule::kLoadAttr:
      case Rule::kBinarySubscr:
        complete_slot_load(sf, base, depth);
        break;
      case Rule::kLoadMethod:
        complete_load_method(sf, base, depth);
        break;
      case Rule::kKeep:
        complete_keep(sf, base, depth);
        break;
      case Rule::kMatchKeys:
      case Rule::kMatchClass:
        complete_match(sf, base, depth);
        break;
      case Rule::kUnpackEx:
        complete_unpack_ex(sf, base, depth);
        break;
      case Rule::kPushExcInfo:
        complete_push_exc_info(sf, base, depth);
        break;
      case Rule::kMove:
        complete_move(sf, base, depth);
        break;
      case Rule::kBuildSeq:
        complete_build_seq(sf, base, depth);
        break;
      case Rule::kBuildMap:
      case Rule::kBuildConstKeyMap:
        complete_build_map(sf, base, depth);
        break;
      case Rule::kUnpackSequence:
        complete_unpack_sequence(sf, base, depth);
        break;
      case Rule::kGetIter:
        complete_get_iter(sf, base, depth);
        break;
      case Rule::kForIter:
        complete_for_iter(sf, base, depth);
        break;
      case Rule::kPrecall:
        complete_precall(sf);
        break;
      case Rule::kCall:
      case Rule::kCallFunctionEx:
        complete_call(sf, base, depth);
        break;
      case Rule::kYield:
      case Rule::kCompute:
      default:
        complete_computed(sf, base, depth);
        break;
    }
  }
  if (!p.fill_tags.empty()) apply_fills(sf, depth);
  if (p.filled != 0) fills_.consumed_before_newest(p.filled);
  if (p.tainted_inputs || p.taint_source) tainted_.insert(now);
  if (keeps_inputs(now)) {
    const bool move = pushed >= 0 && is_move(sf, base, depth);
    if (recording_edges(now)) record(p, move);
    if (now >= capture_min_ && now <= capture_max_ && capture_.count(now) != 0) {
      capture_post(sf, depth, std::max(base, sf.code->nlocalsplus), move);
    }
  }
}

}  // namespace sealtrace
