// Per-code-object metadata: each instruction's opcode, rule, stack effects and line, built
// once per code object and kept in the code object's extra slot; and its line stops.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>

#include "hooks.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

namespace {
constexpr std::uint8_t kReturnValueOp = 83;  // RETURN_VALUE (3.11): where a return stop stops

// The inline cache entries after an instruction (3.11's opcode._inline_cache_entries).
int inline_caches(std::uint8_t op) {
  switch (op) {
    case 25:   // BINARY_SUBSCR
    case 95:   // STORE_ATTR
    case 106:  // LOAD_ATTR
    case 171:  // CALL
      return 4;
    case 60:   // STORE_SUBSCR
    case 92:   // UNPACK_SEQUENCE
    case 122:  // BINARY_OP
    case 166:  // PRECALL
      return 1;
    case 107:  // COMPARE_OP
      return 2;
    case 116:  // LOAD_GLOBAL
      return 5;
    case 160:  // LOAD_METHOD
      return 10;
    default:
      return 0;
  }
}
// A cursor over a code object's line table, read forward once: each instruction's line in
// amortised constant time. PyCode_Addr2Line reads the table from its start on every call
// (unless CPython made the code's line array, which only its line tracing does), so asking it
// for each instruction in turn cost the square of the code's length: a module body of a few
// thousand instructions took milliseconds, paid by every import under the engine.
class LineCursor {
 public:
  explicit LineCursor(PyCodeObject* code) {
    // What CPython's _PyCode_InitAddressRange does (not exported): before the first range.
    const char* table = PyBytes_AS_STRING(code->co_linetable);
    range_.opaque.lo_next = reinterpret_cast<const std::uint8_t*>(table);
    range_.opaque.limit = range_.opaque.lo_next + PyBytes_GET_SIZE(code->co_linetable);
    range_.opaque.computed_line = code->co_firstlineno;
    range_.ar_start = -1;
    range_.ar_end = 0;
    range_.ar_line = -1;
  }
  // The line of the instruction at byte offset `at` (-1: none), as PyCode_Addr2Line gives it.
  int line(int at) { return _PyCode_CheckLineNumber(at, &range_); }

 private:
  PyCodeAddressRange range_{};
};

}  // namespace

// -- code objects ---------------------------------------------------------------------------

// The record this tracer built of a code object, if any: read as _PyCode_GetExtra reads it
// (once a call: the exported function's checks cost more than the read). CPython 3.11 keeps
// its layout in Objects/codeobject.c, not a header.
CodeInfo* Tracer::known_code_info(PyCodeObject* code) const noexcept {
  struct CodeExtras {
    Py_ssize_t ce_size;
    void* ce_extras[1];
  };
  const auto* extras = static_cast<const CodeExtras*>(code->co_extra);
  if (extras != nullptr && g_extra_index < extras->ce_size) {
    auto* info = static_cast<CodeInfo*>(extras->ce_extras[g_extra_index]);
    if (info != nullptr && info->generation == generation_) return info;
  }
  return nullptr;
}

CodeInfo* Tracer::code_info(PyCodeObject* code) {
  CodeInfo* known = known_code_info(code);
  if (known != nullptr) return known;
  void* extra = nullptr;
  if (_PyCode_GetExtra(reinterpret_cast<PyObject*>(code), g_extra_index, &extra) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  auto* info = static_cast<CodeInfo*>(extra);
  if (info != nullptr && info->generation == generation_) return info;
  // An older tracer's record is freed by _PyCode_SetExtra when it is replaced.
  info = build_code_info(code);
  if (_PyCode_SetExtra(reinterpret_cast<PyObject*>(code), g_extra_index, info) < 0) {
    PyErr_Clear();
    delete info;
    return nullptr;
  }
  return info;
}

CodeInfo* Tracer::build_code_info(PyCodeObject* code) {
  auto* info = new CodeInfo;
  info->generation = generation_;
  info->index = static_cast<std::uint32_t>(code_names_.size());
  std::string filename = utf8(code->co_filename);
  std::string qualname = utf8(code->co_qualname);
  code_names_.push_back({filename, qualname, code->co_firstlineno});
  info->own = filename.rfind("<frozen ", 0) == 0;
  if (!info->own && own_code_ != nullptr) {
    PyObject* r = PyObject_CallOneArg(own_code_, code->co_filename);
    if (r == nullptr) {
      PyErr_Clear();
      ++stats_.callback_errors;
    } else {
      info->own = PyObject_IsTrue(r) == 1;
      Py_DECREF(r);
    }
  }
  if (info->own) return info;
  info->nlocalsplus = code->co_nlocalsplus;
  info->stacksize = code->co_stacksize;
  info->argslots = code->co_argcount + code->co_kwonlyargcount +
                   ((code->co_flags & CO_VARARGS) ? 1 : 0) +
                   ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
  if (code->co_localspluskinds != nullptr && PyBytes_Check(code->co_localspluskinds)) {
    const char* k = PyBytes_AS_STRING(code->co_localspluskinds);
    info->kinds.assign(k, k + PyBytes_GET_SIZE(code->co_localspluskinds));
  }
  info->kinds.resize(static_cast<std::size_t>(info->nlocalsplus), 0);
  info->positional_only_args =
      info->argslots == code->co_argcount &&
      std::none_of(info->kinds.begin(), info->kinds.begin() + code->co_argcount,
                   [](std::uint8_t kind) { return (kind & CO_FAST_CELL) != 0; });
  // co_code gives the de-specialised instructions, as the tracer sees them executed.
  PyObject* bytes = PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_code");
  if (bytes == nullptr || !PyBytes_Check(bytes)) {
    PyErr_Clear();
    Py_XDECREF(bytes);
    info->own = true;  // cannot model it: leave it untraced rather than guess
    return info;
  }
  const auto* raw = reinterpret_cast<const std::uint8_t*>(PyBytes_AS_STRING(bytes));
  const Py_ssize_t units = PyBytes_GET_SIZE(bytes) / 2;
  info->instrs.resize(static_cast<std::size_t>(units));
  Py_ssize_t run_start = -1;
  std::int32_t ext = 0;
  LineCursor lines(code);
  for (Py_ssize_t i = 0; i < units; ++i) {
    const std::uint8_t op = raw[2 * i];
    const std::uint8_t arg = raw[2 * i + 1];
    if (op == kExtendedArg) {
      if (run_start < 0) run_start = i;
      ext = (ext | arg) << 8;
      continue;
    }
    Instr in;
    in.op = op;
    in.rule = op_model(op).rule;
    in.oparg = ext | arg;
    in.line = lines.line(static_cast<int>(i * 2));
    in.at = static_cast<std::int32_t>(i);
    in.next = static_cast<std::int32_t>(i + 1 + inline_caches(op));
    in.pops = op_pops(op, in.oparg);
    in.peeks = op_peeks(op, in.oparg);
    int e0 = PyCompile_OpcodeStackEffectWithJump(op, in.oparg, 0);
    int e1 = PyCompile_OpcodeStackEffectWithJump(op, in.oparg, 1);
    in.effect = e0;
    in.effect_jump = e1;
    if (PyErr_Occurred()) PyErr_Clear();
    // The compiler books CALL's argument pops on PRECALL; at run time CALL does them.
    if (op == kPrecallOp) in.effect = in.effect_jump = 0;
    if (op == kCallOp) {
      in.effect = in.effect_jump = -(in.oparg + 1);
    }
    for (Py_ssize_t j = (run_start < 0 ? i : run_start); j <= i; ++j) {
      info->instrs[static_cast<std::size_t>(j)] = in;
    }
    run_start = -1;
    ext = 0;
  }
  Py_DECREF(bytes);
  refresh_breakpoints(*info);
  info->watch_end = !end_file_.empty() && filename == end_file_ && qualname == "<module>";
  return info;
}

std::int64_t Tracer::code_index(PyObject* code) {
  if (!PyCode_Check(code)) return -1;
  CodeInfo* info = code_info(reinterpret_cast<PyCodeObject*>(code));
  return info == nullptr ? -1 : static_cast<std::int64_t>(info->index);
}

// The instructions of this code where the line or return stop is: computed when a code object is
// first seen, and again when a stop is armed later (in a worker forked from a checkpoint).
void Tracer::refresh_breakpoints(CodeInfo& info) {
  info.breakpoint_generation = breakpoint_generation_;
  info.breakpoint.clear();
  if (stop_file_.empty() || info.index >= code_names_.size() ||
      code_names_[info.index].filename != stop_file_) {
    return;
  }
  if (!stop_function_.empty()) {  // a return stop: mark 2, every execution of which is a hit
    if (code_names_[info.index].qualname != stop_function_) return;
    info.breakpoint.assign(info.instrs.size(), 0);
    for (std::size_t i = 0; i < info.instrs.size(); ++i) {
      info.breakpoint[i] = info.instrs[i].op == kReturnValueOp ? 2 : 0;
    }
    return;
  }
  // A code with no instruction on the line needs no marks: its instructions need not even say
  // which line they are on (the loop may then tag them itself, Tracer::quick_ready).
  if (std::none_of(info.instrs.begin(), info.instrs.end(),
                   [this](const Instr& in) { return in.line == stop_line_; })) {
    return;
  }
  info.breakpoint.assign(info.instrs.size(), 0);
  for (std::size_t i = 0; i < info.instrs.size(); ++i) {
    info.breakpoint[i] = info.instrs[i].line == stop_line_ ? 1 : 0;
  }
}

}  // namespace sealtrace
