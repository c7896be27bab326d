// The provenance tracer: a C-level trace function that follows every bytecode
// instruction of a replayed CPython 3.11 program and keeps a tag on every value.
//
// A tag is the instruction counter of the instruction that produced the value.
// Each traced frame has a shadow of its locals and value stack; objects keep tags
// for their attributes, items and cell contents in the SlotTable. An instruction
// is modelled in two halves: before it runs, its inputs (objects and tags) are
// read; at the next event of its frame, what it left on the stack is tagged by
// its opcode's rule (opcodes.hpp). Describing a tag (the operation, location and
// inputs of the instruction that made it) is done by re-executing the run to
// that counter and capturing the instruction there, so live state stays
// O(live values), never O(instructions executed).
//
// Never raises into the traced program and never calls its code: callbacks run
// sealtrace's own query code with tracing suspended by the interpreter.
#pragma once

#include <Python.h>
#include <frameobject.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "counter.hpp"
#include "fills.hpp"
#include "opcodes.hpp"
#include "quiet_heap.h"
#include "slots.hpp"

struct _PyInterpreterFrame;

namespace sealtrace {

enum QuickKind : std::uint8_t {
  kQuickNo,
  kQuickInline,
  kQuickMove,
  kQuickCompute,
  kQuickLoad,
  kQuickStore,
  kQuickIter,
  kQuickSubscr,
  kQuickAttr,
  kQuickPut,
  kQuickCall,
  kQuickBuild
};

struct Instr {
  std::uint8_t op = 0;
  Rule rule = Rule::kNone;
  bool looped = false;      // the evaluation loop runs it (set when the loop first sees the code)
  std::uint8_t quick = 0;   // the loop may tag it itself (quick_steps.cpp: quick_kind)
  bool guarded = false;     // the loop runs it only where loop_runs says (eval_loop.cpp)
  std::int32_t effect = 0;  // stack effect without and with the jump (BUILD_TUPLE 300: -299)
  std::int32_t effect_jump = 0;
  std::int32_t oparg = 0;
  std::int32_t line = -1;
  std::int32_t at = 0;    // the code unit of the instruction itself (after its EXTENDED_ARGs)
  std::int32_t next = 0;  // the code unit after it and its inline caches
  std::int32_t pops = 0;  // what begin reads off the stack (op_pops, op_peeks)
  std::int32_t peeks = 0;
};

// What a LOAD_GLOBAL found, and in which states of the two namespaces: a dict's version tag
// changes with every change to it and is never shared by two dicts, so while both tags are
// the same the lookups would find the same value (which the globals or builtins still hold).
struct GlobalHit {
  std::uint64_t globals = 0;
  std::uint64_t builtins = 0;
  PyObject* value = nullptr;  // borrowed from the namespace that holds it
};

// What a LOAD_ATTR or LOAD_METHOD the loop counts itself found while step_attribute checked
// it could (borrowed: nothing runs between the step and the instruction): the value the
// instruction's generic lookup finds, and for LOAD_METHOD whether it is the type's method
// (pushed before the owner) or the instance's own attribute.
struct AttrFound {
  PyObject* value = nullptr;
  bool method = false;
};

struct CodeInfo {
  std::uint64_t generation = 0;  // the tracer that built it
  std::uint32_t index = 0;
  bool own = false;        // sealtrace's own code or the import system: not traced
  bool watch_end = false;  // the main module's body: "end" is its last instruction
  int nlocalsplus = 0;
  int stacksize = 0;
  int argslots = 0;
  std::vector<Instr> instrs;  // by code unit; EXTENDED_ARG units hold the full instruction
  std::vector<std::uint8_t> kinds;
  std::vector<std::uint8_t> breakpoint;  // per code unit, only when a stop line is here
  std::int8_t loop = -1;  // the evaluation loop starts it: -1 not yet known, 0 no, 1 yes
  std::vector<GlobalHit> global_hits;  // by code unit, where it has a LOAD_GLOBAL (the loop's)
  // Its arguments are exactly its positional parameters, none a cell (no defaults needed, no
  // keyword-only, *args or **kwargs): a call passing that many binds each to its position.
  bool positional_only_args = false;
  std::uint64_t breakpoint_generation = 0;
};

struct CodeName {
  std::string filename;
  std::string qualname;
  int firstlineno = 0;
};

struct Pending {
  bool active = false;
  bool raised = false;
  bool has_return = false;
  bool kw = false;
  bool taint_source = false;
  bool tainted_inputs = false;
  bool flag = false;
  std::uint8_t op = 0;
  Rule rule = Rule::kNone;
  std::int32_t oparg = 0;
  std::int32_t index = 0;
  std::int32_t before = 0;
  std::int32_t pops = 0;
  Tag counter = 0;
  std::uint64_t return_seq = 0;
  Tag return_tag = 0;
  Tag aux_tag = 0;
  PyObject* aux_value = nullptr;       // compared, never dereferenced
  PyObject* copy_of = nullptr;         // list.copy()/dict.copy()'s self; checked alive before use
  bool shares_state = false;           // copy_of's __reduce_ex__: its __dict__ gets its slots
  bool pairs_yielded = false;          // dict() of an iterator: its pairs come back as yields
  bool input_served = false;           // a recorded read was served while it ran (fills.cpp)
  std::uintptr_t filled = 0;           // the C object that read filled while it ran (fills.cpp)
  std::vector<Tag> fill_tags;          // the fills of the object it asks, read before it ran
  bool fills_whole = false;            // they are all that object holds: they stand for it
  PyTypeObject* empty_type = nullptr;  // a C type called with nothing: compared only
  std::vector<PyObject*> in_objs;      // borrowed: alive while the instruction runs
  std::vector<Tag> in_tags;
  std::vector<Tag> items;
  std::vector<std::uint64_t> keys;
  std::vector<PyObject*> item_values;  // dict(pairs): the value of each key (compared only)
  // Values Python functions returned or yielded to C code while this instruction ran
  // (sum over a generator, sorted's key): inputs that never sat on this frame's stack.
  std::vector<Tag> callbacks;
  std::vector<PyObject*> callback_values;  // what each callback handed back: compared only
  // The items of containers C code read while it ran (sum over a list, "".join, json.dumps),
  // kept by query passes only (item_inputs.cpp); bit i of `replaced`: operand i's items all
  // had tags and stand for it.
  // Query passes only; valid while query_counter is this instruction's counter (the hot path
  // never touches them).
  Tag query_counter = 0;
  QuietVector<Tag> item_inputs;
  std::uint64_t replaced = 0;
  // What the result may be a move of (moves.cpp), read before the instruction runs.
  bool move_hint = false;
  bool move_item = false;  // the result is one of the items read: its inputs are that item
  Tag move_item_tag = 0;
  QuietVector<PyObject*> move_candidates;  // compared, never dereferenced
  QuietVector<Tag> move_tags;
  QuietVector<std::uint64_t> move_digests;
};

struct IterState {
  int slot = 0;
  PyObject* iter = nullptr;
  PyObject* seq = nullptr;
  Py_ssize_t next = 0;
};

// A CALL the evaluation loop counted itself (Tracer::step_calling) while its callee, a Python
// function, runs: the callee's arguments are bound from the caller's stack tags by position and
// its return is handed back here, with no pending half. Whatever else starts or returns in the
// caller meanwhile makes the pending half after all (Tracer::make_call_pending).
// A class called (kConstructs): the callee is its __init__, which C hands the new instance
// before the arguments; what it returns is not the call's result (the instance is). C code
// (kCCode) has no callee: any Python code it runs makes the pending half.
struct QuickCall {
  // kConstructs: a class's __init__ (constructs_quietly); kCCode: C code the two halves model
  // by its result alone (calls_c_quietly).
  enum Kind : std::uint8_t { kFunction, kConstructs, kCCode };
  bool active = false;
  bool has_return = false;  // the callee returned (return_tag, returned_value)
  Kind kind = kFunction;
  Tag counter = 0;                        // the CALL's
  std::uint64_t return_seq = 0;           // Tracer::return_seq_ when it began
  std::int32_t index = 0;                 // the CALL's code unit
  std::int32_t before = 0;                // the stack depth the CALL found
  PyObject* function = nullptr;           // compared, never dereferenced
  _PyInterpreterFrame* callee = nullptr;  // once bound
  Tag return_tag = 0;
  PyObject* returned_value = nullptr;  // compared, never dereferenced
};

struct ShadowFrame {
  _PyInterpreterFrame* iframe = nullptr;
  CodeInfo* code = nullptr;
  std::vector<Tag> slots;  // localsplus then the value stack
  Pending p;
  QuickCall call;
  bool kw_pending = false;
  int last_line = -1;
  int last_index = -1;
  std::vector<IterState> iters;
  // Exceptions this frame is handling (PUSH_EXC_INFO .. POP_EXCEPT) and their tags.
  std::vector<std::pair<PyObject*, Tag>> handled;

  // Whether this frame waits in a quick CALL for `callee` to return (its return event, in
  // either way, hands the value's tag back with `returned`).
  [[nodiscard]] bool awaits(const _PyInterpreterFrame* callee) const noexcept;
  void returned(Tag tag, PyObject* value) noexcept {
    call.has_return = true;
    call.return_tag = tag;
    call.returned_value = value;
  }
};

struct Reach {
  std::uint32_t code = 0;
  int line = 0;
  Tag first = 0;
  std::uint64_t count = 0;
};

struct Stats {
  std::uint64_t instructions = 0;  // counted by the instruction event (on_opcode)
  std::uint64_t frames = 0;
  std::uint64_t depth_mismatches = 0;
  std::uint64_t frame_resyncs = 0;
  std::uint64_t untracked_writes = 0;
  std::uint64_t exceptions = 0;
  std::uint64_t callback_errors = 0;
  std::uint64_t loop_frames = 0;    // frames the evaluation loop started (eval_loop.cpp)
  std::uint64_t loop_handoffs = 0;  // ... and left to CPython's loop partway
  std::uint64_t loop_quick = 0;     // instructions the loop tagged itself (quick_tick)
  std::uint64_t loop_calls = 0;     // ... of them calls (step_calling)
  std::size_t max_shadow_depth = 0;
  // A slice pass's edges: how often they were compacted and the most kept after one.
  std::uint64_t edge_compactions = 0;
  std::size_t edges_kept = 0;
  std::size_t live_tags = 0;
  std::uint64_t mismatches_by_op[256] = {};
  // Where the first mismatch happened (code index, line, step), for diagnosis.
  std::uint32_t first_mismatch_code = 0;
  int first_mismatch_line = 0;
  std::uint64_t first_mismatch_counter = 0;
  // Every instruction counted: the events' and the loop's own.
  [[nodiscard]] std::uint64_t counted() const noexcept { return instructions + loop_quick; }
};

class Tracer {
 public:
  // own_code(filename) -> bool decides, once per code object, what is not traced.
  // eval_loop: run traced frames in the engine's own evaluation loop (eval_loop.cpp) rather
  // than CPython's under a trace callback; the same events, so the same answers.
  explicit Tracer(PyObject* own_code, bool eval_loop = false);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  void attach();
  void detach();
  // A thread of the program's other than the attaching one: trace it from now on (called in
  // that thread, before its first instruction), and no more (when its function returned).
  void attach_thread();
  void detach_thread();
  [[nodiscard]] bool attached() const noexcept { return attached_; }
  // Attached partway through the run: inputs with no tag become kBeforeWindowTag.
  void open_window() noexcept { window_ = true; }
  [[nodiscard]] bool windowed() const noexcept { return window_; }
  [[nodiscard]] std::uint64_t counter() const noexcept { return counter_.value(); }

  // Stops call callback(frame, counter) before the instruction runs; one-shot.
  void stop_at_counter(std::uint64_t counter, PyObject* callback);
  // callback(frame, counter) before every instruction whose counter is a multiple of
  // interval (0 turns it off): where checkpoints are taken.
  void every(std::uint64_t interval, PyObject* callback);
  void stop_at_line(const std::string& filename, int line, std::uint64_t hit, PyObject* callback);
  // Before the hit-th RETURN_VALUE of a function (file, qualname): its frame is still whole.
  void stop_at_return(const std::string& filename, const std::string& qualname, std::uint64_t hit,
                      PyObject* callback);
  void set_end_file(const std::string& filename);
  [[nodiscard]] std::uint64_t end_counter() const noexcept { return end_counter_; }
  [[nodiscard]] std::uint64_t crash_counter() const noexcept { return crash_counter_; }

  // pre(frame, counter, index, inputs) before, post(counter, outputs, raised) after.
  // counters: an iterable of ints (read here, so no temporary of the question's size is made).
  void capture(PyObject* counters, PyObject* pre, PyObject* post);

  // The instruction the innermost traced frame is executing (0 when none).
  [[nodiscard]] std::uint64_t current() const noexcept;
  void taint(PyObject* tags);  // an iterable of ints
  void taint_current() noexcept;
  // The replay runtime served a recorded read to the running instruction (fills.cpp).
  // content: the read brought data (bytes, text, rows) that the objects asked for it keep;
  // a result that is no content (a flag, a position, a time) is only the instruction's origin.
  void note_input(bool content = true);
  // ... and an output: what buffered C objects kept left them (fills.cpp).
  void note_output();
  [[nodiscard]] bool current_tainted() const noexcept;
  [[nodiscard]] std::vector<Reach> reached() const;
  [[nodiscard]] std::size_t tainted_count() const noexcept { return tainted_.size(); }

  // Tags of a live frame's locals: (name, value or None, tag), and of its stack.
  PyObject* frame_locals(PyFrameObject* frame);
  PyObject* frame_stack(PyFrameObject* frame);
  Tag attr_tag(PyObject* owner, PyObject* name, PyObject* value);
  Tag item_tag(PyObject* container, PyObject* key, PyObject* value);
  std::pair<Tag, Tag> object_counters(PyObject* obj) const;
  // Give the value now in a slot a tag of the caller's choosing (an origin, or a flow to
  // follow from here on); false when the slot cannot be tracked.
  bool seed_item(PyObject* container, PyObject* key, Tag tag);
  bool seed_attr(PyObject* owner, PyObject* name, PyObject* value, Tag tag);
  // A live frame's local (not a cell), for a flow that follows that variable alone (flows.cpp).
  bool seed_local(PyFrameObject* frame, PyObject* name, Tag tag);

  // Backward slices in one pass: while recording, every producing instruction up to
  // `upto` keeps its input tags (a query pass only: this is O(instructions), bounded by
  // `limit` edges). on_done() (if not null) is called once `upto` itself has completed; with
  // `upto` past every counter, edges are kept until the pass ends (a locate that slices too).
  // keep: go on from the edges kept so far (a worker forked from a checkpoint of a pass that
  // recorded them from its start) instead of starting afresh here.
  // batch: compact once this many edges were recorded since the last compaction (at least;
  // 0: a million). A smaller batch keeps less unpacked at any time (what a fork checkpoint
  // copies as the pass goes on writing it).
  // depth: the deepest slice any question will walk over these edges (0: no bound); a
  // compaction drops the edges further than that from every live value (compact_edges).
  void record_edges(std::uint64_t upto, std::size_t limit, PyObject* on_done, bool keep = false,
                    std::size_t batch = 0, std::size_t depth = 0);
  // The edge limit stopped the recording: what is kept answers only the nearest steps.
  [[nodiscard]] bool edges_overflowed() const noexcept { return edges_overflow_; }
  // The input tags the recorded edges hold (packed and not yet packed): their memory.
  [[nodiscard]] std::size_t edge_tags() const noexcept { return packed_tags_ + edge_tags_.size(); }
  // Counters reachable backwards from root within depth computations (moves cost nothing),
  // nearest first, at most max_nodes; seeded origin tags are included as leaves. Sets truncated
  // if edges ran out or max_nodes cut the slice (the depth bound is the tree's to report).
  std::vector<std::pair<Tag, int>> backward_slice(Tag root, int depth, std::size_t max_nodes,
                                                  bool& truncated) const;
  // The inputs the recorded edges hold for each of these counters, as backward_slice reads
  // them (absent where none is kept): what a capture of the same steps must name as well.
  std::vector<std::optional<std::vector<Tag>>> recorded_inputs(const std::vector<Tag>& tags) const;

  [[nodiscard]] const std::vector<CodeName>& codes() const noexcept { return code_names_; }
  std::int64_t code_index(PyObject* code);
  [[nodiscard]] const Stats& stats() const noexcept { return stats_; }
  [[nodiscard]] const SlotTable& slot_table() const noexcept { return slots_; }
  [[nodiscard]] std::size_t live_frames() const noexcept {
    return stack_.size() + suspended_.size();
  }

  // Called from the trampoline and the deallocation hooks.
  int on_event(PyFrameObject* frame, int what, PyObject* arg);
  void on_dealloc(PyObject* obj) noexcept;
  // The evaluation loop's frame (PEP 523), from evaluate_frame (eval_loop.cpp).
  PyObject* evaluate(PyThreadState* ts, _PyInterpreterFrame* f, int throwflag);
  [[nodiscard]] bool eval_loop() const noexcept { return eval_loop_; }

 private:
  CodeInfo* code_info(PyCodeObject* code);
  CodeInfo* known_code_info(PyCodeObject* code) const noexcept;
  CodeInfo* build_code_info(PyCodeObject* code);
  // The events, from the trace callback (on_event) or the evaluation loop (eval_loop.cpp).
  void on_call(_PyInterpreterFrame* f, CodeInfo* info);
  int on_opcode(_PyInterpreterFrame* f);
  int on_return(_PyInterpreterFrame* f, PyObject* value);
  int on_exception(_PyInterpreterFrame* f, PyObject* arg);
  ShadowFrame* resync(_PyInterpreterFrame* f);
  static PyFrameObject* frame_object(_PyInterpreterFrame* f);
  bool loopable(CodeInfo& info, PyCodeObject* code);
  // Instructions the loop tags itself while no question watches (quick_steps.cpp,
  // quick_calls.cpp).
  ShadowFrame* quick_ready(PyThreadState* ts, _PyInterpreterFrame* f, int depth);
  // quick_ready, then quick_tick where it let the instruction through: a run's next
  // instruction inline (the commonest), any other out of line.
  ShadowFrame* quick_event(PyThreadState* ts, _PyInterpreterFrame* f, int depth) {
    if (run_live_ && run_unwatched()) {
      run_.frame = f;
      quick_tick(*run_.shadow);
      return run_.shadow;
    }
    return quick_event_anew(ts, f, depth);
  }
  ShadowFrame* quick_event_anew(PyThreadState* ts, _PyInterpreterFrame* f, int depth);
  // A run of quick instructions in one frame: after one, nothing but another quick instruction
  // has run (no event, no Python code), so the next needs only its counter checked against
  // the next watched instant (quick_ready). Any event or call out ends the run.
  struct QuickRun {
    const _PyInterpreterFrame* frame = nullptr;  // the frame of the last quick instruction
    ShadowFrame* shadow = nullptr;
    Tag until = 0;  // the next instant a question may watch: quick_ready checks it in full
  };
  QuickRun run_;
  bool run_live_ = false;  // this instruction continues run_ (the loop's top says)
  // No question watches the next instruction: a run's next one needs no other check.
  [[nodiscard]] bool run_unwatched() const noexcept { return counter_.value() + 1 < run_.until; }
  // Counts an instruction quick_ready let through (the run's end so far, in the main module's
  // body). Inline: once an instruction.
  Tag quick_tick(const ShadowFrame& sf) {
    const Tag now = counter_.tick();
    ++stats_.loop_quick;  // among the instructions (Stats::counted)
    if (sf.code->watch_end) end_counter_ = now;
    return now;
  }
  bool watched_at(std::uint64_t now);
  bool step_quietly(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in, PyObject** sp);
  ShadowFrame* step_computing(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                              PyObject** sp);
  void quick_made(ShadowFrame& sf, const Instr& in, int before, int after);
  ShadowFrame* step_loading(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                            PyObject** sp, Tag& tag, std::uintptr_t& value);
  void quick_loaded(ShadowFrame& sf, int before, int after, Tag tag, std::uintptr_t value);
  ShadowFrame* step_storing(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                            PyObject** sp);
  ShadowFrame* step_iterating(PyThreadState* ts, _PyInterpreterFrame* f, PyObject** sp);
  void quick_iterated(ShadowFrame& sf, int before, int after);
  ShadowFrame* step_subscripting(PyThreadState* ts, _PyInterpreterFrame* f, PyObject** sp, Tag& tag,
                                 std::uintptr_t& value);
  void quick_subscripted(ShadowFrame& sf, int after, Tag tag, std::uintptr_t value);
  Tag quick_read(PyObject* v, Tag tag, std::uintptr_t value) const noexcept;
  // found: for a load, what the instruction's own lookup will find (step_attribute).
  ShadowFrame* step_attribute(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                              PyObject** sp, Tag& tag, std::uintptr_t& value, AttrFound& found);
  void quick_attribute(ShadowFrame& sf, const Instr& in, int before, int after, Tag tag,
                       std::uintptr_t value);
  ShadowFrame* step_building(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                             PyObject** sp);
  void quick_built(ShadowFrame& sf, const Instr& in, int after);
  ShadowFrame* step_putting(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                            PyObject** sp);
  void quick_raised(ShadowFrame& sf, int index, int depth);
  ShadowFrame* step_calling(PyThreadState* ts, _PyInterpreterFrame* f, const Instr& in,
                            PyObject** sp, int index);
  void called(PyThreadState* ts, ShadowFrame& sf, PyObject* result, PyObject** sp);
  void note_call(ShadowFrame& sf, QuickCall::Kind kind, PyObject* function, int index, int depth);
  static bool constructs_quietly(PyObject* callable, int argc) noexcept;
  static PyObject* init_name() noexcept;
  bool calls_c_quietly(PyObject* head, PyObject* callable, PyObject** args, int argc) const;
  // The tag call_result gives a CALL's result when no Python code ran in it and no model
  // applied: an input's (the result is one), a slot's that holds it, or the call's own.
  Tag c_result(ShadowFrame& sf, PyObject* result, int first, int end, Tag counter);
  void make_call_pending(ShadowFrame& sf);
  bool returns_quickly(const ShadowFrame& sf) const noexcept;
  void raise_event(_PyInterpreterFrame* f, PyObject** sp);
  ShadowFrame* acquire(_PyInterpreterFrame* iframe, CodeInfo* code);
  void release(ShadowFrame* frame);
  // An instruction's two halves: begin reads its inputs before it runs, complete tags what
  // it left on the stack; each dispatches on the opcode's rule to its family's helpers.
  void begin(ShadowFrame& sf, int index, int depth);
  void begin_pending(ShadowFrame& sf, const Instr& in, int index, int depth);
  void note_mismatch(const ShadowFrame& sf, const Instr& in, Tag counter) noexcept;
  void complete(ShadowFrame& sf, int depth);
  // The helpers of the halves by opcode family. begin_*(sf, in[, depth]) run before the
  // instruction; complete_*(sf, base, depth) after it, when it has pushed from base to depth.
  // Locals and the value stack (complete.cpp).
  void complete_load_fast(ShadowFrame& sf, int base, int depth);
  void complete_store_fast(ShadowFrame& sf);
  void complete_delete_fast(ShadowFrame& sf);
  void complete_swap(ShadowFrame& sf);
  void complete_copy(ShadowFrame& sf, int base, int depth);
  void complete_keep(ShadowFrame& sf, int base, int depth);
  void complete_move(ShadowFrame& sf, int base, int depth);
  void complete_computed(ShadowFrame& sf, int base, int depth);
  // Names, globals, cells and `import *` (ops_names.cpp).
  void begin_name_store(ShadowFrame& sf, const Instr& in, int depth);
  void set_name_slot(_PyInterpreterFrame* f, const Instr& in, Tag tag, PyObject* value, Tag now);
  void begin_name_load(ShadowFrame& sf, const Instr& in);
  const Slot* name_slot(_PyInterpreterFrame* f, const Instr& in) const;
  void begin_class_deref(ShadowFrame& sf, const Instr& in);
  void begin_deref_load(ShadowFrame& sf, const Instr& in);
  void begin_deref_store(ShadowFrame& sf, const Instr& in, int depth);
  void begin_import_star(ShadowFrame& sf, int depth);
  void complete_slot_load(ShadowFrame& sf, int base, int depth);
  // Attributes (ops_attributes.cpp).
  void begin_attr_load(ShadowFrame& sf, const Instr& in, int depth);
  void begin_attr_store(ShadowFrame& sf, const Instr& in, int depth);
  void complete_load_method(ShadowFrame& sf, int base, int depth);
  // Subscripts (ops_subscripts.cpp).
  void begin_subscr_load(ShadowFrame& sf, int depth);
  // The stores' slots, set before the instruction runs at `now` (begin's; the loop's quick
  // puts, step_putting).
  void begin_subscr_store(ShadowFrame& sf, int depth, Tag now);
  void begin_subscr_delete(ShadowFrame& sf, int depth);
  void complete_missing(ShadowFrame& sf, int depth);
  // Building and extending containers (ops_containers.cpp).
  void begin_list_append(ShadowFrame& sf, const Instr& in, int depth, Tag now);
  void begin_map_add(ShadowFrame& sf, const Instr& in, int depth, Tag now);
  void begin_list_extend(ShadowFrame& sf, const Instr& in, int depth);
  void begin_dict_update(ShadowFrame& sf, const Instr& in, int depth);
  void begin_build_map(ShadowFrame& sf, const Instr& in);
  void begin_build_const_key_map(ShadowFrame& sf, const Instr& in, int depth);
  void begin_build_seq(ShadowFrame& sf, const Instr& in, int depth);
  void begin_set_items(ShadowFrame& sf, const Instr& in, int depth);
  void complete_build_set(ShadowFrame& sf, int base, int depth);
  void complete_build_seq(ShadowFrame& sf, int base, int depth);
  void complete_build_map(ShadowFrame& sf, int base, int depth);
  static void const_map_keys(PyObject* keys, int count, std::vector<std::uint64_t>& out);
  void tag_new_sequence(PyObject* obj, const Tag* tags, Py_ssize_t count, Tag now);
  void tag_new_dict(PyObject* obj, const std::uint64_t* keys, std::size_t count, const Tag* tags,
                    PyObject* const* values, std::size_t stride, Tag now);
  // Unpacking and pattern matching (ops_unpack.cpp).
  void begin_unpack_sequence(ShadowFrame& sf, const Instr& in, int depth);
  void begin_unpack_ex(ShadowFrame& sf, int depth);
  void begin_match_keys(ShadowFrame& sf, int depth);
  void begin_match_class(ShadowFrame& sf, const Instr& in, int depth);
  void complete_unpack_sequence(ShadowFrame& sf, int base, int depth);
  void complete_unpack_ex(ShadowFrame& sf, int base, int depth);
  // The tag of a value Python code handed back to C while this instruction ran (a generator's
  // yield that UNPACK_EX or UNPACK_SEQUENCE took as item `position` of `count`), or 0.
  [[nodiscard]] Tag callback_tag(const Pending& p, PyObject* v, std::size_t position,
                                 std::size_t count) const noexcept;
  void complete_match(ShadowFrame& sf, int base, int depth);
  // Calls (ops_calls.cpp).
  void begin_precall(ShadowFrame& sf, const Instr& in, int depth);
  void begin_call(ShadowFrame& sf);
  void complete_precall(ShadowFrame& sf);
  void complete_call(ShadowFrame& sf, int base, int depth);
  // Raising and handling exceptions (ops_exceptions.cpp).
  void begin_raise(ShadowFrame& sf, const Instr& in);
  void begin_push_exc_info(ShadowFrame& sf, int depth);
  void begin_handler_exit(ShadowFrame& sf, const Instr& in);
  void complete_push_exc_info(ShadowFrame& sf, int base, int depth);
  void land_exception(ShadowFrame& sf, int depth);
  // Iteration (ops_iteration.cpp).
  void complete_get_iter(ShadowFrame& sf, int base, int depth);
  void tag_new_iterator(ShadowFrame& sf, int base, PyObject* src, Tag src_tag);
  Tag iterated_tag(ShadowFrame& sf, int slot, PyObject* item);
  void complete_for_iter(ShadowFrame& sf, int base, int depth);
  void tag_iterated_tuple(PyObject* iter, PyObject* tuple, Tag now);
  void bind_arguments(const Pending& p, ShadowFrame& callee);
  Tag match_argument(const Pending& p, PyObject* value, int position, int posbase,
                     PyObject* function, bool self_first = false);
  void adopt_generator(const Pending& p, PyObject* gen);
  bool trackable(PyObject* obj) const noexcept;
  // Containers' items as inputs of the values C makes from them (item_inputs.cpp).
  struct ItemWalk {
    QuietVector<Tag> tags;
    QuietSet<Tag> seen;
    std::size_t scanned = 0;
    bool unknown = false;
    bool cut = false;
    void add(Tag t);
  };
  // Whether this pass records the edge of the instruction at `now` (a slice up to its root, a
  // serve pass's ancestry). Inline: the hot path.
  [[nodiscard]] bool recording_edges(Tag now) const noexcept {
    return now <= edges_upto_ || edges_open_;
  }
  // Whether this pass keeps the inputs of the instruction at `now` (its edge, or a capture of
  // it): only then are containers' items and moves read. Inline: the hot path.
  [[nodiscard]] bool keeps_inputs(Tag now) const noexcept {
    return recording_edges(now) ||
           (now >= capture_min_ && now <= capture_max_ && capture_.count(now) != 0);
  }
  [[nodiscard]] bool is_container(PyObject* v) const noexcept;
  Tag item_tag_of(PyObject* container, std::uint64_t key, PyObject* item) const noexcept;
  bool walk_items(PyObject* c, int depth, ItemWalk& w);
  void prepare_query_inputs(Pending& p);
  void gather_item_inputs(ShadowFrame& sf);
  bool gather_named_items(Pending& p);
  // The items `fmt % mapping` names, for a flow (percent_format.cpp).
  enum FormatRead { kNotRead, kSome, kAll };
  FormatRead format_item_tags(const Pending& p, ItemWalk& w) const;
  void edge_inputs(const Pending& p, QuietVector<Tag>& out) const;
  // One input of the instruction at `counter` into `out`, as its edge names it.
  void add_input(QuietVector<Tag>& out, Tag counter, Tag t) const;
  // Moves: produced values that compute nothing and cost no depth (moves.cpp).
  void gather_move_candidates(Pending& p);
  // min() and max(): every item (or argument) compared decided which one is the result, so it
  // is a computation over all of them, never a move of the one chosen. Compares pointers only
  // (the callable may be gone when the call completes).
  [[nodiscard]] bool compares_items(const Pending& p) const noexcept {
    return p.in_objs.size() >= 2 && p.in_objs[0] == nullptr &&
           (p.in_objs[1] == builtin_min_ || p.in_objs[1] == builtin_max_);
  }
  // Sets Pending::move_item when the result is an item of an argument (moves.cpp).
  bool is_move(ShadowFrame& sf, int base, int depth);
  Tag computed(const Pending& p, PyObject* value) const noexcept;
  // The tag of a value some slot still holds (checked), for values C code read back out of
  // containers; 0 when no slot holds it or it is an object shared by unrelated values.
  Tag held_tag(PyObject* value) const noexcept;
  bool deque_holds(PyObject* deque, PyObject* value) const noexcept;
  // Every value passed here is alive (it is on a stack, in a container or being stored).
  // hint: a position hint for the key (SlotMap::find), for a namespace's names.
  void set_slot(std::uintptr_t object, std::uint64_t key, Tag tag, std::uintptr_t value, Tag now,
                std::uint32_t* hint = nullptr);
  void copy_slot(std::uintptr_t object, std::uint64_t key, const Slot& slot, Tag now);
  Tag class_attr_slot(PyObject* owner, PyObject* name, PyObject** value) const;
  // The slot an attribute load of an instance (not a module) reads: the instance's own, else,
  // via_dict, its __dict__'s, else, via_class, a class's; a tag of 0 where none tags it.
  Slot instance_attr_source(PyObject* owner, PyObject* name, bool via_dict, bool via_class) const;
  void model_call(ShadowFrame& sf);
  void model_list_method(Pending& p, PyObject* self, const char* name, PyObject** args,
                         const Tag* tags, int argc);
  void model_dict_construction(Pending& p, PyObject* source);
  Tag pair_value_tag(PyObject* pair, Tag pair_tag, std::uint64_t& key, PyObject** value);
  void take_yielded_pair(Pending& p, PyObject* pair, Tag tag);
  void share_attribute_slots(PyObject* owner, PyObject* dict);
  void model_dict_method(Pending& p, PyObject* self, const char* name, PyObject** args,
                         const Tag* tags, int argc);
  void model_builtin_attr(Pending& p, const char* name, PyObject** args, const Tag* tags, int argc);
  void model_member_method(Pending& p, PyObject* self, const char* name, PyObject** args,
                           const Tag* tags, int argc);
  void model_module_function(PyObject* module, const char* name, PyObject** args, const Tag* tags,
                             int argc, Tag now);
  void copy_items_as_members(PyObject* into, PyObject* from, Tag fallback, Tag now);
  void model_fill(PyObject* buffer, const char* name, Tag filler, Tag now);
  // Objects that remember the reads that filled them (fills.cpp).
  PyObject* fill_target(const Pending& p) const;
  void read_fills(Pending& p);
  void note_made_empty(const Pending& p, PyObject* result);
  void read_buffer_fills(Pending& p);
  void apply_fills(ShadowFrame& sf, int depth);
  void fill_arguments(const Pending& reader, ShadowFrame& callee);
  Tag call_result(ShadowFrame& sf, PyObject* result);
  void note_taint(ShadowFrame& sf);
  // A followed value among a container's items; a builtin that reads none of what a value
  // holds (flows.cpp).
  bool items_tainted(ShadowFrame& sf);
  bool reveals_no_content(const Pending& p) const;
  void capture_pre(_PyInterpreterFrame* f, const Pending& p);
  void capture_post(ShadowFrame& sf, int depth, int base, bool move);
  void call_stop(PyObject* callback, _PyInterpreterFrame* f);  // takes `callback`'s reference
  void callback_failed() noexcept;
  ShadowFrame* find_shadow(PyFrameObject* frame) const;

  PyObject* own_code_;
  bool attached_ = false;
  bool eval_loop_ = false;
  bool window_ = false;
  InstructionCounter counter_;
  SlotTable slots_;
  FillTable fills_;
  std::vector<ShadowFrame*> stack_;
  std::unordered_map<_PyInterpreterFrame*, ShadowFrame*> suspended_;
  std::vector<std::unique_ptr<ShadowFrame>> pool_;
  std::vector<ShadowFrame*> free_;
  std::vector<CodeName> code_names_;
  std::uint64_t generation_ = 0;
  PyObject* builtins_ = nullptr;
  // collections.deque and defaultdict (their module's types, found when attaching).
  PyTypeObject* deque_type_ = nullptr;
  PyObject* builtin_min_ = nullptr;
  PyObject* builtin_max_ = nullptr;
  PyTypeObject* defaultdict_type_ = nullptr;

  struct LastReturn {
    PyObject* value = nullptr;
    Tag tag = 0;
    std::uint64_t seq = 0;
  };
  LastReturn last_return_;
  std::uint64_t return_seq_ = 0;
  // A class body's namespace tags, waiting for __build_class__ to return the class.
  struct ClassSlot {
    std::uint64_t key;
    Tag tag;
    std::uintptr_t value;
  };
  std::vector<ClassSlot> class_slots_;
  std::uint64_t class_slots_seq_ = 0;
  PyObject* exc_value_ = nullptr;
  Tag exc_tag_ = 0;
  Tag exc_origin_ = 0;
  std::uint64_t end_counter_ = 0;
  std::uint64_t crash_counter_ = 0;
  std::string end_file_;

  // The program's threads, one running at a time (the replay's scheduler hands them a
  // baton): the running one's shadow stack and exception state are in the fields above
  // (stack_, last_return_, exc_*), every other thread's are parked here until it runs again.
  // Objects' slots, fills and the instruction counter are the program's, shared by all.
  struct ThreadCtx {
    std::vector<ShadowFrame*> stack;
    LastReturn last_return;
    PyObject* exc_value = nullptr;  // compared only
    Tag exc_tag = 0;
    Tag exc_origin = 0;
  };
  PyThreadState* thread_ = nullptr;  // whose state the fields hold
  std::unordered_map<PyThreadState*, ThreadCtx> parked_;
  void switch_thread(PyThreadState* now);
  void ensure_thread() {
    PyThreadState* now = PyThreadState_GET();
    if (now != thread_) switch_thread(now);
  }
  // The shadow stack of the calling thread, wherever it is kept.
  [[nodiscard]] const std::vector<ShadowFrame*>& caller_stack() const noexcept;

  std::uint64_t every_interval_ = 0;
  std::uint64_t every_next_ = 0;  // the next multiple of the interval (watched_at)
  PyObject* every_cb_ = nullptr;
  std::uint64_t breakpoint_generation_ = 0;
  void refresh_breakpoints(CodeInfo& info);
  std::uint64_t stop_counter_ = 0;
  PyObject* stop_counter_cb_ = nullptr;
  std::string stop_file_;
  int stop_line_ = 0;
  std::string stop_function_;  // a return stop: this qualname's returns, not a line
  std::uint64_t stop_hit_ = 0;
  std::uint64_t hits_ = 0;
  PyObject* stop_line_cb_ = nullptr;

  // What one question asks for lives in the quiet heap: passes asking different things must
  // leave the program's heaps alike (quiet.h).
  QuietSet<std::uint64_t> capture_;
  std::uint64_t capture_min_ = 1;
  std::uint64_t capture_max_ = 0;
  // The same counters in order, for the loop's quick events (eval_loop.cpp: watched_at): the
  // next one at or after the last instant asked, and where it is.
  std::vector<std::uint64_t> capture_order_;
  std::size_t capture_at_ = 0;
  std::uint64_t capture_next_ = 0;
  PyObject* capture_pre_ = nullptr;
  PyObject* capture_post_ = nullptr;

  struct Edges {
    std::uint64_t counter;
    std::uint32_t begin;
    std::uint32_t count : 31;
    std::uint32_t move : 1;  // a move: its inputs are as deep as it is
  };
  void record(const Pending& p, bool move);
  void record_inputs(Tag counter, bool move);
  // Drops the edges no tag the engine still holds leads back to, or, once the root is done,
  // every edge but the root's ancestry (edges.cpp).
  void compact_edges(Tag current, bool only_current);
  void sort_recent_edges();
  // visit(tag) for every tag the engine holds (0s included).
  template <class F>
  void live_tags(F&& visit) const;
  std::size_t edges_compact_at_ = 0;
  std::size_t edges_batch_ = 0;
  std::size_t edges_depth_ = 0;  // record_edges' depth
  // Packing in batches smaller than a slice pass's (a serve pass keeping edges for its
  // checkpoints): compactions also come at the limit and at least half the live tags apart.
  [[nodiscard]] bool small_batches() const noexcept;
  // Edges kept by compactions, packed: sorted by counter, varints, an index entry every block.
  struct PackedBlock {
    std::uint64_t counter;  // the block's first edge
    std::uint32_t chunk;    // the chunk holding it (a block never spans two)
    std::uint32_t offset;   // its first byte there
  };
  [[nodiscard]] std::size_t packed_block(Tag counter) const noexcept;
  // visit(ordinal, counter, move, inputs) for each edge of a block, until it returns false.
  template <class F>
  void packed_decode(std::size_t block, QuietVector<Tag>& inputs, F&& visit) const;
  // The packed edge of this counter: its inputs, whether it is a move, its ordinal.
  bool find_edge(Tag counter, QuietVector<Tag>& inputs, bool& move, std::size_t& ordinal) const;
  // The edges recorded since the last compaction, by counter (the first of each).
  using RecentEdges = std::unordered_map<Tag, const Edges*>;
  [[nodiscard]] RecentEdges recent_edges() const;
  // The edge a slice reads for this counter, packed or recent: its inputs and whether it is a
  // move; false where none is kept.
  bool kept_edge(Tag counter, const RecentEdges& recent, QuietVector<Tag>& inputs,
                 bool& move) const;
  // The packed run, in chunks of about kChunkBytes: a compaction writes the new run while it
  // reads the old one, and frees each old chunk once read, so the two never both stay whole.
  std::vector<QuietVector<std::uint8_t>, QuietAllocator<QuietVector<std::uint8_t>>> packed_;
  QuietVector<PackedBlock> packed_blocks_;
  std::size_t packed_count_ = 0;
  std::size_t packed_tags_ = 0;
  std::uint64_t edges_upto_ = 0;
  // The root has not completed: what runs while it does (a generator sum() drives, a key
  // function sorted() calls) comes after it by counter but is its ancestry.
  bool edges_open_ = false;
  std::size_t edges_limit_ = 0;
  bool edges_overflow_ = false;
  PyObject* edges_done_ = nullptr;
  QuietVector<Edges> edges_;
  // The recent batch's inputs, each as 32 bits relative to its instruction (zigzag), or, for
  // one too far away (a marker tag), kFarInput and then the tag's two halves.
  QuietVector<std::uint32_t> edge_tags_;
  void recent_inputs(const Edges& e, QuietVector<Tag>& out) const;
  QuietVector<Tag> inputs_scratch_;

  bool tainting_ = false;
  QuietSet<Tag> tainted_;
  std::unordered_map<std::uint64_t, Reach, std::hash<std::uint64_t>, std::equal_to<std::uint64_t>,
                     QuietAllocator<std::pair<const std::uint64_t, Reach>>>
      reach_;

  Stats stats_;
  // Where each name was last found in a namespace's slots, by its key (name_slot): a hint,
  // checked before it is used.
  mutable std::array<std::uint32_t, 256> name_hints_{};

  // calls_c_quietly's: list.append's method descriptor and builtins that run no Python code of
  // their own and that the two halves model by their result alone.
  PyObject* list_append_ = nullptr;
  std::vector<PyObject*> quiet_builtins_;
  // step_building's: a BUILD_CONST_KEY_MAP's values and keys (GET_ITER's iterable), gone from the
  // stack once it ran (the values compared, never dereferenced).
  std::vector<PyObject*> built_values_;
  std::vector<std::uint64_t> built_keys_;  // const_map_keys of its keys (none for `{}`)
};

}  // namespace sealtrace
