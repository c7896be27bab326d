#include "opcodes.hpp"

#include <array>

namespace sealtrace {
namespace {

struct Entry {
  std::uint8_t op;
  OpModel model;
};

// Numbers are CPython 3.11's (Lib/opcode.py); a test checks them against dis.opmap.
constexpr Entry kEntries[] = {
    {1, {"POP_TOP", Rule::kPop, false}},
    {2, {"PUSH_NULL", Rule::kCompute, false}},
    {9, {"NOP", Rule::kNone, false}},
    {10, {"UNARY_POSITIVE", Rule::kCompute, false}},
    {11, {"UNARY_NEGATIVE", Rule::kCompute, false}},
    {12, {"UNARY_NOT", Rule::kCompute, false}},
    {15, {"UNARY_INVERT", Rule::kCompute, false}},
    {25, {"BINARY_SUBSCR", Rule::kBinarySubscr, false}},
    {30, {"GET_LEN", Rule::kKeep, false}},
    {31, {"MATCH_MAPPING", Rule::kKeep, false}},
    {32, {"MATCH_SEQUENCE", Rule::kKeep, false}},
    {33, {"MATCH_KEYS", Rule::kMatchKeys, false}},
    {35, {"PUSH_EXC_INFO", Rule::kPushExcInfo, false}},
    {36, {"CHECK_EXC_MATCH", Rule::kKeep, false}},
    {37, {"CHECK_EG_MATCH", Rule::kCompute, false}},
    {49, {"WITH_EXCEPT_START", Rule::kCompute, false}},
    {50, {"GET_AITER", Rule::kCompute, false}},
    {51, {"GET_ANEXT", Rule::kCompute, false}},
    {52, {"BEFORE_ASYNC_WITH", Rule::kCompute, false}},
    {53, {"BEFORE_WITH", Rule::kCompute, false}},
    {54, {"END_ASYNC_FOR", Rule::kPop, false}},
    {60, {"STORE_SUBSCR", Rule::kStoreSubscr, false}},
    {61, {"DELETE_SUBSCR", Rule::kDeleteSubscr, false}},
    {68, {"GET_ITER", Rule::kGetIter, false}},
    {69, {"GET_YIELD_FROM_ITER", Rule::kMove, false}},
    {70, {"PRINT_EXPR", Rule::kPop, false}},
    {71, {"LOAD_BUILD_CLASS", Rule::kCompute, false}},
    {74, {"LOAD_ASSERTION_ERROR", Rule::kCompute, false}},
    {75, {"RETURN_GENERATOR", Rule::kNotTraced, false}},
    {82, {"LIST_TO_TUPLE", Rule::kBuildSeq, false}},
    {83, {"RETURN_VALUE", Rule::kReturn, false}},
    {84, {"IMPORT_STAR", Rule::kImportStar, false}},
    {85, {"SETUP_ANNOTATIONS", Rule::kNone, false}},
    {86, {"YIELD_VALUE", Rule::kYield, false}},
    {87, {"ASYNC_GEN_WRAP", Rule::kMove, false}},
    {88, {"PREP_RERAISE_STAR", Rule::kCompute, false}},
    {89, {"POP_EXCEPT", Rule::kPop, false}},
    {90, {"STORE_NAME", Rule::kStoreName, false}},
    {91, {"DELETE_NAME", Rule::kDeleteName, false}},
    {92, {"UNPACK_SEQUENCE", Rule::kUnpackSequence, false}},
    {93, {"FOR_ITER", Rule::kForIter, true}},
    {94, {"UNPACK_EX", Rule::kUnpackEx, false}},
    {95, {"STORE_ATTR", Rule::kStoreAttr, false}},
    {96, {"DELETE_ATTR", Rule::kDeleteAttr, false}},
    {97, {"STORE_GLOBAL", Rule::kStoreGlobal, false}},
    {98, {"DELETE_GLOBAL", Rule::kDeleteGlobal, false}},
    {99, {"SWAP", Rule::kSwap, false}},
    {100, {"LOAD_CONST", Rule::kLoadConst, false}},
    {101, {"LOAD_NAME", Rule::kLoadName, false}},
    {102, {"BUILD_TUPLE", Rule::kBuildSeq, false}},
    {103, {"BUILD_LIST", Rule::kBuildSeq, false}},
    {104, {"BUILD_SET", Rule::kBuildSet, false}},
    {105, {"BUILD_MAP", Rule::kBuildMap, false}},
    {106, {"LOAD_ATTR", Rule::kLoadAttr, false}},
    {107, {"COMPARE_OP", Rule::kCompute, false}},
    {108, {"IMPORT_NAME", Rule::kCompute, false}},
    {109, {"IMPORT_FROM", Rule::kImportFrom, false}},
    {110, {"JUMP_FORWARD", Rule::kNone, false}},
    {111, {"JUMP_IF_FALSE_OR_POP", Rule::kNone, true}},
    {112, {"JUMP_IF_TRUE_OR_POP", Rule::kNone, true}},
    {114, {"POP_JUMP_FORWARD_IF_FALSE", Rule::kPop, false}},
    {115, {"POP_JUMP_FORWARD_IF_TRUE", Rule::kPop, false}},
    {116, {"LOAD_GLOBAL", Rule::kLoadGlobal, false}},
    {117, {"IS_OP", Rule::kCompute, false}},
    {118, {"CONTAINS_OP", Rule::kCompute, false}},
    {119, {"RERAISE", Rule::kRaise, false}},
    {120, {"COPY", Rule::kCopy, false}},
    {122, {"BINARY_OP", Rule::kCompute, false}},
    {123, {"SEND", Rule::kSend, true}},
    {124, {"LOAD_FAST", Rule::kLoadFast, false}},
    {125, {"STORE_FAST", Rule::kStoreFast, false}},
    {126, {"DELETE_FAST", Rule::kDeleteFast, false}},
    {128, {"POP_JUMP_FORWARD_IF_NOT_NONE", Rule::kPop, false}},
    {129, {"POP_JUMP_FORWARD_IF_NONE", Rule::kPop, false}},
    {130, {"RAISE_VARARGS", Rule::kRaise, false}},
    {131, {"GET_AWAITABLE", Rule::kCompute, false}},
    {132, {"MAKE_FUNCTION", Rule::kCompute, false}},
    {133, {"BUILD_SLICE", Rule::kCompute, false}},
    {134, {"JUMP_BACKWARD_NO_INTERRUPT", Rule::kNone, false}},
    {135, {"MAKE_CELL", Rule::kNotTraced, false}},
    {136, {"LOAD_CLOSURE", Rule::kCompute, false}},
    {137, {"LOAD_DEREF", Rule::kLoadDeref, false}},
    {138, {"STORE_DEREF", Rule::kStoreDeref, false}},
    {139, {"DELETE_DEREF", Rule::kDeleteDeref, false}},
    {140, {"JUMP_BACKWARD", Rule::kNone, false}},
    {142, {"CALL_FUNCTION_EX", Rule::kCallFunctionEx, false}},
    {144, {"EXTENDED_ARG", Rule::kExtendedArg, false}},
    {145, {"LIST_APPEND", Rule::kListAppend, false}},
    {146, {"SET_ADD", Rule::kSetAdd, false}},
    {147, {"MAP_ADD", Rule::kMapAdd, false}},
    {148, {"LOAD_CLASSDEREF", Rule::kLoadClassDeref, false}},
    {149, {"COPY_FREE_VARS", Rule::kNotTraced, false}},
    {151, {"RESUME", Rule::kResume, false}},
    {152, {"MATCH_CLASS", Rule::kMatchClass, false}},
    {155, {"FORMAT_VALUE", Rule::kCompute, false}},
    {156, {"BUILD_CONST_KEY_MAP", Rule::kBuildConstKeyMap, false}},
    {157, {"BUILD_STRING", Rule::kCompute, false}},
    {160, {"LOAD_METHOD", Rule::kLoadMethod, false}},
    {162, {"LIST_EXTEND", Rule::kListExtend, false}},
    {163, {"SET_UPDATE", Rule::kSetUpdate, false}},
    {164, {"DICT_MERGE", Rule::kDictUpdate, false}},
    {165, {"DICT_UPDATE", Rule::kDictUpdate, false}},
    {166, {"PRECALL", Rule::kPrecall, false}},
    {171, {"CALL", Rule::kCall, false}},
    {172, {"KW_NAMES", Rule::kNone, false}},
    {173, {"POP_JUMP_BACKWARD_IF_NOT_NONE", Rule::kPop, false}},
    {174, {"POP_JUMP_BACKWARD_IF_NONE", Rule::kPop, false}},
    {175, {"POP_JUMP_BACKWARD_IF_FALSE", Rule::kPop, false}},
    {176, {"POP_JUMP_BACKWARD_IF_TRUE", Rule::kPop, false}},
};

constexpr std::array<OpModel, 256> build_table() {
  std::array<OpModel, 256> table{};
  for (auto& m : table) m = OpModel{"", Rule::kNone, false};
  for (const auto& e : kEntries) table[e.op] = e.model;
  return table;
}

constexpr std::array<OpModel, 256> kTable = build_table();

}  // namespace

const OpModel& op_model(std::uint8_t op) noexcept { return kTable[op]; }

int op_pops(std::uint8_t op, int oparg) noexcept {
  switch (op) {
    case 1:
    case 10:
    case 11:
    case 12:
    case 15:  // POP_TOP, UNARY_*
    case 30:
    case 31:
    case 32:  // GET_LEN, MATCH_MAPPING/SEQUENCE
    case 35:  // PUSH_EXC_INFO
    case 50:
    case 52:
    case 53:  // GET_AITER, BEFORE_(ASYNC_)WITH
    case 68:
    case 69:
    case 70:
    case 82:
    case 83:  // GET_ITER .. RETURN_VALUE
    case 84:
    case 86:
    case 87:
    case 89:
    case 90:  // IMPORT_STAR .. STORE_NAME
    case 92:
    case 94:
    case 96:
    case 97:  // UNPACK_*, DELETE_ATTR, STORE_GLOBAL
    case 106:
    case 114:
    case 115:
    case 119:  // LOAD_ATTR, POP_JUMP_*, RERAISE
    case 125:
    case 128:
    case 129:
    case 131:  // STORE_FAST, POP_JUMP_*, GET_AWAITABLE
    case 138:
    case 145:
    case 146:  // STORE_DEREF, LIST_APPEND, SET_ADD
    case 160:
    case 162:
    case 163:
    case 164:
    case 165:  // LOAD_METHOD, *_EXTEND/UPDATE/MERGE
    case 173:
    case 174:
    case 175:
    case 176:  // POP_JUMP_BACKWARD_*
      return 1;
    case 25:
    case 33:
    case 36:
    case 37:
    case 54:  // BINARY_SUBSCR .. END_ASYNC_FOR
    case 61:
    case 88:
    case 95:
    case 107:
    case 108:  // DELETE_SUBSCR .. IMPORT_NAME
    case 117:
    case 118:
    case 122:
    case 147:  // IS_OP, CONTAINS_OP, BINARY_OP, MAP_ADD
    case 123:  // SEND (value and receiver)
      return 2;
    case 60:
    case 152:  // STORE_SUBSCR, MATCH_CLASS
      return 3;
    case 102:
    case 103:
    case 104:
    case 130:
    case 133:
    case 157:
      return oparg;  // BUILD_TUPLE/LIST/SET, RAISE, SLICE, STRING
    case 105:
      return 2 * oparg;  // BUILD_MAP
    case 156:
      return oparg + 1;  // BUILD_CONST_KEY_MAP
    case 132: {          // MAKE_FUNCTION: code + flagged extras
      int n = 1;
      for (int bit = 0; bit < 4; ++bit) n += (oparg >> bit) & 1;
      return n;
    }
    case 142:
      return 3 + (oparg & 1);  // CALL_FUNCTION_EX: NULL, func, args[, kw]
    case 155:
      return 1 + ((oparg & 4) ? 1 : 0);  // FORMAT_VALUE [with spec]
    case 171:
      return oparg + 2;  // CALL: NULL|method, callable|self, args
    default:
      return 0;
  }
}

int op_peeks(std::uint8_t op, int oparg) noexcept {
  switch (op) {
    case 49:
      return 4;  // WITH_EXCEPT_START reads exit, lasti, prev exc, exc
    case 51:
      return 1;  // GET_ANEXT
    case 93:
      return 1;  // FOR_ITER reads the iterator
    case 109:
      return 1;  // IMPORT_FROM reads the module
    case 111:
    case 112:
      return 1;
    case 120:
      return oparg;  // COPY
    case 99:
      return oparg;  // SWAP
    case 166:
      return oparg + 2;  // PRECALL may unpack a bound method in place
    default:
      return 0;
  }
}

std::string_view rule_name(Rule rule) noexcept {
  switch (rule) {
    case Rule::kNone:
      return "none";
    case Rule::kPop:
      return "pop";
    case Rule::kCompute:
      return "compute";
    case Rule::kKeep:
      return "keep-inputs+compute";
    case Rule::kLoadFast:
      return "move:local->stack";
    case Rule::kStoreFast:
      return "move:stack->local";
    case Rule::kDeleteFast:
      return "clear-local";
    case Rule::kLoadConst:
      return "constant";
    case Rule::kLoadGlobal:
      return "move:global-slot->stack|builtin";
    case Rule::kLoadName:
      return "move:name-slot->stack|builtin";
    case Rule::kStoreName:
      return "move:stack->name-slot";
    case Rule::kStoreGlobal:
      return "move:stack->global-slot";
    case Rule::kDeleteName:
      return "clear-name-slot";
    case Rule::kDeleteGlobal:
      return "clear-global-slot";
    case Rule::kLoadAttr:
      return "move:attr-slot->stack|compute";
    case Rule::kLoadMethod:
      return "compute+keep-self";
    case Rule::kStoreAttr:
      return "move:stack->attr-slot";
    case Rule::kDeleteAttr:
      return "clear-attr-slot";
    case Rule::kBinarySubscr:
      return "move:item-slot->stack|compute";
    case Rule::kStoreSubscr:
      return "move:stack->item-slot";
    case Rule::kDeleteSubscr:
      return "clear-item-slot";
    case Rule::kLoadDeref:
      return "move:cell->stack";
    case Rule::kLoadClassDeref:
      return "move:name-slot|cell->stack";
    case Rule::kStoreDeref:
      return "move:stack->cell";
    case Rule::kDeleteDeref:
      return "clear-cell";
    case Rule::kCopy:
      return "move:copy";
    case Rule::kSwap:
      return "move:swap";
    case Rule::kBuildSeq:
      return "compute+item-slots";
    case Rule::kBuildMap:
      return "compute+key-slots";
    case Rule::kBuildConstKeyMap:
      return "compute+key-slots";
    case Rule::kListAppend:
      return "move:stack->item-slot";
    case Rule::kMapAdd:
      return "move:stack->key-slot";
    case Rule::kListExtend:
      return "move:items->item-slots";
    case Rule::kBuildSet:
      return "compute+member-slots";
    case Rule::kSetAdd:
      return "move:stack->member-slot";
    case Rule::kSetUpdate:
      return "move:items->member-slots";
    case Rule::kDictUpdate:
      return "move:key-slots->key-slots";
    case Rule::kUnpackSequence:
      return "move:item-slots->stack|compute";
    case Rule::kUnpackEx:
      return "move:item-slots->stack|compute";
    case Rule::kGetIter:
      return "compute+iteration";
    case Rule::kForIter:
      return "move:item-slot->stack|compute";
    case Rule::kPrecall:
      return "move:bound-method->self";
    case Rule::kCall:
      return "move:return|compute|external";
    case Rule::kCallFunctionEx:
      return "move:return|compute|external";
    case Rule::kReturn:
      return "move:return";
    case Rule::kYield:
      return "move:yield";
    case Rule::kRaise:
      return "move:exception";
    case Rule::kPushExcInfo:
      return "keep-exception";
    case Rule::kImportFrom:
      return "move:module-slot->stack|compute";
    case Rule::kMove:
      return "move";
    case Rule::kSend:
      return "move:return|compute";
    case Rule::kNotTraced:
      return "not-traced";
    case Rule::kResume:
      return "call-event:bind-arguments";
    case Rule::kExtendedArg:
      return "prefix:modelled-with-the-next-instruction";
    case Rule::kMatchKeys:
      return "keep-inputs+compute+item-slots";
    case Rule::kMatchClass:
      return "compute+attr-slots";
    case Rule::kImportStar:
      return "move:module-slots->name-slots";
  }
  return "?";
}

}  // namespace sealtrace
