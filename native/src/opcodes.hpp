// The provenance model of every CPython 3.11 opcode (de-specialised forms).
//
// For each opcode: how many stack values it consumes (its inputs), how many it
// only reads, and the rule that gives tags to what it leaves on the stack.
// The tracer checks the modelled stack effect against the real stack depth at
// every instruction; this table is also what docs/opcodes.md is generated from.
#pragma once

#include <cstdint>
#include <string_view>

namespace sealtrace {

enum class Rule : std::uint8_t {
  kNone,       // no value moves (jumps, NOP, RESUME, KW_NAMES)
  kPop,        // consumes inputs, pushes nothing
  kCompute,    // every pushed value is new, derived from the inputs
  kKeep,       // re-pushes its inputs unchanged, then pushes new values
  kLoadFast,   // move: local -> stack
  kStoreFast,  // move: stack -> local
  kDeleteFast,
  kLoadConst,    // constant origin
  kLoadGlobal,   // move from a globals slot, or a builtin
  kLoadName,     // move from a locals/globals slot, or a builtin
  kStoreName,    // move: stack -> locals slot
  kStoreGlobal,  // move: stack -> globals slot
  kDeleteName,
  kDeleteGlobal,
  kLoadAttr,  // move from an attribute slot, or computed from the owner
  kLoadMethod,
  kStoreAttr,  // move: stack -> attribute slot
  kDeleteAttr,
  kBinarySubscr,  // move from an item slot, or computed
  kStoreSubscr,   // move: stack -> item slot
  kDeleteSubscr,
  kLoadDeref,  // move from a cell
  kLoadClassDeref,
  kStoreDeref,  // move: stack -> cell
  kDeleteDeref,
  kCopy,
  kSwap,
  kBuildSeq,  // tuple/list: items keep their tags in the new container
  kBuildMap,
  kBuildConstKeyMap,
  kListAppend,
  kMapAdd,
  kListExtend,
  kDictUpdate,
  kUnpackSequence,
  kUnpackEx,
  kGetIter,
  kForIter,
  kPrecall,
  kCall,
  kCallFunctionEx,
  kReturn,
  kYield,
  kRaise,
  kPushExcInfo,
  kImportFrom,
  kMove,  // one value in, the same value out (GET_YIELD_FROM_ITER, ASYNC_GEN_WRAP)
  kSend,
  kNotTraced,    // runs before a frame's first traceable instruction
  kResume,       // no opcode event: its call event binds the arguments (when oparg is 0)
  kExtendedArg,  // modelled as the instruction it extends, at the same counter
  kMatchKeys,    // keep subject and keys; the values tuple's items keep the dict's slot tags
  kMatchClass,   // compute; the attributes tuple's items keep the subject's attribute tags
  kImportStar,   // move: the module's name slots -> this namespace's name slots
  kBuildSet,     // compute; each item keeps its stack tag in a member slot of the new set
  kSetAdd,       // move: stack -> member slot (a set comprehension's SET_ADD)
  kSetUpdate,    // move: items' tags -> member slots ({*a, b})
};

struct OpModel {
  std::string_view name;
  Rule rule;
  // Its two exits leave stacks one value apart: FOR_ITER and SEND pop one more when they
  // jump, JUMP_IF_{TRUE,FALSE}_OR_POP when they fall through.
  bool may_pop_more;
};

// The model for a de-specialised opcode; name is empty for numbers 3.11 does not use.
const OpModel& op_model(std::uint8_t op) noexcept;

// Stack values the instruction consumes (they are its provenance inputs).
int op_pops(std::uint8_t op, int oparg) noexcept;

// Stack values below the consumed ones that the instruction reads and leaves in place.
int op_peeks(std::uint8_t op, int oparg) noexcept;

std::string_view rule_name(Rule rule) noexcept;

}  // namespace sealtrace
