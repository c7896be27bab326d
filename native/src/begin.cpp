// The first half of an instruction: before it runs, its inputs (objects and tags) are read
// and the slots it writes are tagged. begin dispatches on the opcode's rule to its family's
// helper (ops_*.cpp).
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>

#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

// -- instructions ---------------------------------------------------------------------------

void Tracer::note_mismatch(const ShadowFrame& sf, const Instr& in, Tag counter) noexcept {
  if (stats_.depth_mismatches++ == 0) {
    stats_.first_mismatch_code = sf.code->index;
    stats_.first_mismatch_line = in.line;
    stats_.first_mismatch_counter = counter;
  }
  ++stats_.mismatches_by_op[in.op];
}

// A new instruction: reset the frame's pending half and read its inputs (objects and tags)
// off the stack, checking the modelled stack effect against the real depth.
void Tracer::begin_pending(ShadowFrame& sf, const Instr& in, int index, int depth) {
  PyObject** lp = sf.iframe->localsplus;
  Tag* s = sf.slots.data();
  Pending& p = sf.p;
  const Tag now = counter_.value();
  p.active = true;
  p.raised = false;
  p.has_return = false;
  p.taint_source = false;
  p.tainted_inputs = false;
  p.flag = false;
  p.kw = false;
  p.op = in.op;
  p.rule = in.rule;
  p.oparg = in.oparg;
  p.index = index;
  p.before = depth;
  p.counter = now;
  p.return_seq = return_seq_;
  p.return_tag = 0;
  p.aux_tag = 0;
  p.aux_value = nullptr;
  p.copy_of = nullptr;
  p.shares_state = false;
  p.pairs_yielded = false;
  p.input_served = false;
  p.filled = 0;
  p.fills_whole = false;
  p.empty_type = nullptr;
  if (!p.fill_tags.empty()) p.fill_tags.clear();
  p.callbacks.clear();
  p.callback_values.clear();
  int pops = in.pops;
  int peeks = in.peeks;
  const int stack_depth = depth - sf.code->nlocalsplus;
  if (pops + peeks > stack_depth) {
    note_mismatch(sf, in, now);
    pops = std::min(pops, stack_depth);
    peeks = std::max(0, std::min(peeks, stack_depth - pops));
  }
  p.pops = pops;
  const int n = pops + peeks;
  const int first = depth - n;
  p.in_objs.assign(lp + first, lp + first + n);
  p.in_tags.assign(s + first, s + first + n);
}

void Tracer::begin(ShadowFrame& sf, int index, int depth) {
  const Instr& in = sf.code->instrs[static_cast<std::size_t>(index)];
  begin_pending(sf, in, index, depth);
  if (in.rule == Rule::kCall || (!fills_.empty() && in.rule == Rule::kForIter)) {
    read_fills(sf.p);
  } else if (in.rule == Rule::kBinarySubscr && sf.p.in_objs.size() == 2 &&
             PyByteArray_Check(sf.p.in_objs[0]) && PySlice_Check(sf.p.in_objs[1])) {
    read_buffer_fills(sf.p);
  }
  if (tainting_) note_taint(sf);
  switch (in.rule) {
    case Rule::kStoreName:
    case Rule::kStoreGlobal:
    case Rule::kDeleteName:
    case Rule::kDeleteGlobal:
      begin_name_store(sf, in, depth);
      break;
    case Rule::kLoadGlobal:
    case Rule::kLoadName:
      begin_name_load(sf, in);
      break;
    case Rule::kLoadClassDeref:
      begin_class_deref(sf, in);
      break;
    case Rule::kLoadAttr:
    case Rule::kLoadMethod:
    case Rule::kImportFrom:
      begin_attr_load(sf, in, depth);
      break;
    case Rule::kStoreAttr:
    case Rule::kDeleteAttr:
      begin_attr_store(sf, in, depth);
      break;
    case Rule::kBinarySubscr:
      begin_subscr_load(sf, depth);
      if (keeps_inputs(sf.p.counter)) {
        prepare_query_inputs(sf.p);
        gather_move_candidates(sf.p);
      }
      break;
    case Rule::kStoreSubscr:
      begin_subscr_store(sf, depth, sf.p.counter);
      break;
    case Rule::kDeleteSubscr:
      begin_subscr_delete(sf, depth);
      break;
    case Rule::kLoadDeref:
      begin_deref_load(sf, in);
      break;
    case Rule::kStoreDeref:
    case Rule::kDeleteDeref:
      begin_deref_store(sf, in, depth);
      break;
    case Rule::kListAppend:
      begin_list_append(sf, in, depth, sf.p.counter);
      break;
    case Rule::kMapAdd:
      begin_map_add(sf, in, depth, sf.p.counter);
      break;
    case Rule::kListExtend:
      begin_list_extend(sf, in, depth);
      break;
    case Rule::kDictUpdate:
      begin_dict_update(sf, in, depth);
      break;
    case Rule::kBuildMap:
      begin_build_map(sf, in);
      break;
    case Rule::kBuildConstKeyMap:
      begin_build_const_key_map(sf, in, depth);
      break;
    case Rule::kBuildSeq:
      begin_build_seq(sf, in, depth);
      break;
    case Rule::kUnpackSequence:
      begin_unpack_sequence(sf, in, depth);
      break;
    case Rule::kUnpackEx:
      begin_unpack_ex(sf, depth);
      break;
    case Rule::kMatchKeys:
      begin_match_keys(sf, depth);
      break;
    case Rule::kMatchClass:
      begin_match_class(sf, in, depth);
      break;
    case Rule::kImportStar:
      begin_import_star(sf, depth);
      break;
    case Rule::kRaise:
      begin_raise(sf, in);
      break;
    case Rule::kPrecall:
      begin_precall(sf, in, depth);
      break;
    case Rule::kCall:
      begin_call(sf);
      if (keeps_inputs(sf.p.counter)) {
        prepare_query_inputs(sf.p);
        gather_item_inputs(sf);
        gather_move_candidates(sf.p);
      }
      break;
    case Rule::kCallFunctionEx:
      if (keeps_inputs(sf.p.counter)) {
        prepare_query_inputs(sf.p);
        gather_item_inputs(sf);
        gather_move_candidates(sf.p);
      }
      break;
    case Rule::kPushExcInfo:
      begin_push_exc_info(sf, depth);
      break;
    case Rule::kSetAdd:
    case Rule::kSetUpdate:
      begin_set_items(sf, in, depth);
      break;
    default:
      // Rules with no first half, but for a few opcodes.
      if (in.op == kKwNames) {
        sf.kw_pending = true;  // the next CALL's last arguments are keywords
      } else if (in.op == kPopExceptOp || in.op == kEndAsyncForOp) {
        begin_handler_exit(sf, in);
      } else if (in.op == kBinaryOp && in.oparg == kInplaceAdd && sf.p.in_objs.size() == 2 &&
                 PyByteArray_Check(sf.p.in_objs[0]) && trackable(sf.p.in_objs[0])) {
        model_fill(sf.p.in_objs[0], "extend", sf.p.in_tags[1], sf.p.counter);  // buffer += data
      }
      if ((in.op == kBinaryOp || in.op == kFormatValueOp || in.rule == Rule::kGetIter) &&
          keeps_inputs(sf.p.counter)) {
        prepare_query_inputs(sf.p);
        // f"{items}", "%s" % (items,), a + [b]; iter(items): what a loop or a generator
        // over it reads is its items, not the empty list it was filled from.
        gather_item_inputs(sf);
      }
      break;
  }
}

}  // namespace sealtrace
