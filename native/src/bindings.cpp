// Python bindings for the provenance engine. pybind11 appears in this file only.
#include <patchlevel.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "counter.hpp"
#include "eval_loop.hpp"
#include "fields.h"
#include "opcodes.hpp"
#include "quiet.h"
#include "tracer.hpp"

namespace py = pybind11;
using sealtrace::Tracer;

namespace {

// `with quiet():` runs sealtrace's own code inside the replayed program without moving it.
struct Quiet {
  std::optional<sealtrace::QuietScope> scope;
};

PyFrameObject* as_frame(const py::handle& frame) {
  if (!PyFrame_Check(frame.ptr())) throw py::type_error("a frame object is required");
  return reinterpret_cast<PyFrameObject*>(frame.ptr());
}

py::object steal_or_throw(PyObject* obj) {
  if (obj == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(obj);
}

}  // namespace

PYBIND11_MODULE(_engine, m) {
  m.doc() = "sealtrace provenance engine (CPython 3.11). Attached only during replay.";
  m.attr("__version__") = SEALTRACE_ENGINE_VERSION;
  m.attr("PY_VERSION_BUILT") = PY_VERSION;
  m.attr("PY_VERSION_HEX_BUILT") = PY_VERSION_HEX;

  py::class_<sealtrace::InstructionCounter>(m, "InstructionCounter")
      .def(py::init<>())
      .def("tick", &sealtrace::InstructionCounter::tick,
           "Advance by one and return the new counter value.")
      .def("advance", &sealtrace::InstructionCounter::advance, py::arg("n"),
           "Advance by n and return the new counter value; OverflowError if it would wrap.")
      .def_property_readonly("value", &sealtrace::InstructionCounter::value);

  m.def(
      "opcode_table",
      []() {
        py::list out;
        for (int op = 0; op < 256; ++op) {
          const auto& model = sealtrace::op_model(static_cast<std::uint8_t>(op));
          if (model.name.empty()) continue;
          out.append(py::make_tuple(op, std::string(model.name),
                                    std::string(sealtrace::rule_name(model.rule)),
                                    model.may_pop_more));
        }
        return out;
      },
      "(opcode, name, provenance rule, may pop one more on a branch) for every opcode.");
  m.def(
      "eval_loop_opcodes",
      []() {
        py::list out;
        for (int op = 0; op < 256; ++op) {
          if (sealtrace::loop_implements(op)) out.append(op);
        }
        return out;
      },
      "The opcodes the engine's own evaluation loop runs; a code object with any other runs in "
      "CPython's loop under the trace callback.");
  m.def(
      "op_inputs",
      [](int op, int oparg) {
        return py::make_tuple(sealtrace::op_pops(static_cast<std::uint8_t>(op), oparg),
                              sealtrace::op_peeks(static_cast<std::uint8_t>(op), oparg));
      },
      py::arg("op"), py::arg("oparg"), "(values consumed, values read below them).");

  py::class_<Quiet>(m, "Quiet")
      .def("__enter__", [](Quiet& q) { q.scope.emplace(); })
      .def("__exit__", [](Quiet& q, const py::args&) {
        q.scope.reset();
        return false;
      });
  m.def(
      "instance_fields",
      [](py::handle obj) { return steal_or_throw(sealtrace_instance_fields(obj.ptr())); },
      py::arg("obj"),
      "The instance's __dict__, a new dict of the attributes it keeps inline, or None; never "
      "gives the instance a __dict__ it did not have.");
  m.def(
      "quiet", []() { return std::make_unique<Quiet>(); },
      "A context in which sealtrace's own code runs inside the replayed program without changing "
      "what it does next: its allocations, free lists and garbage collection are its own.");

  py::class_<Tracer>(m, "Engine")
      .def(py::init([](py::object own_code, bool eval_loop) {
             return new Tracer(own_code.ptr(), eval_loop);
           }),
           py::arg("own_code"), py::arg("eval_loop") = false)
      .def_property_readonly("eval_loop", &Tracer::eval_loop)
      .def("attach", &Tracer::attach, "Start tracing this thread.")
      .def("detach", &Tracer::detach)
      .def("attach_thread", &Tracer::attach_thread,
           "Trace the calling thread too (a thread of the program's, before it runs).")
      .def("detach_thread", &Tracer::detach_thread, "Stop tracing the calling thread.")
      .def_property_readonly("attached", &Tracer::attached)
      .def("open_window", &Tracer::open_window,
           "Attached partway through the run: an input with no tag counts as made before.")
      .def_property_readonly("windowed", &Tracer::windowed)
      .def_property_readonly("counter", &Tracer::counter)
      .def_property_readonly("end_counter", &Tracer::end_counter)
      .def_property_readonly("crash_counter", &Tracer::crash_counter)
      .def("stop_at_counter", [](Tracer& t, std::uint64_t counter,
                                 py::object cb) { t.stop_at_counter(counter, cb.ptr()); })
      .def("stop_at_line", [](Tracer& t, const std::string& file, int line, std::uint64_t hit,
                              py::object cb) { t.stop_at_line(file, line, hit, cb.ptr()); })
      .def("stop_at_return",
           [](Tracer& t, const std::string& file, const std::string& qualname, std::uint64_t hit,
              py::object cb) { t.stop_at_return(file, qualname, hit, cb.ptr()); })
      .def("set_end_file", &Tracer::set_end_file)
      .def("every", [](Tracer& t, std::uint64_t interval,
                       py::object cb) { t.every(interval, cb.is_none() ? nullptr : cb.ptr()); })
      .def("capture",
           [](Tracer& t, py::iterable counters, py::object pre, py::object post) {
             t.capture(counters.ptr(), pre.ptr(), post.ptr());
             if (PyErr_Occurred()) throw py::error_already_set();
           })
      .def(
          "record_edges",
          [](Tracer& t, std::uint64_t upto, std::size_t limit, py::object on_done, bool keep,
             std::size_t batch, std::size_t depth) {
            t.record_edges(upto, limit, on_done.is_none() ? nullptr : on_done.ptr(), keep, batch,
                           depth);
          },
          py::arg("upto"), py::arg("limit"), py::arg("on_done"), py::arg("keep") = false,
          py::arg("batch") = 0, py::arg("depth") = 0)
      .def_property_readonly("edges_overflowed", &Tracer::edges_overflowed)
      .def_property_readonly("edge_tags", &Tracer::edge_tags)
      .def("backward_slice",
           [](const Tracer& t, std::uint64_t root, int depth, std::size_t max_nodes) {
             bool truncated = false;
             auto nodes = t.backward_slice(root, depth, max_nodes, truncated);
             return py::make_tuple(nodes, truncated);
           })
      .def("recorded_inputs", &Tracer::recorded_inputs, py::arg("tags"))
      .def("current", &Tracer::current)
      .def("taint",
           [](Tracer& t, py::iterable tags) {
             t.taint(tags.ptr());
             if (PyErr_Occurred()) throw py::error_already_set();
           })
      .def("taint_current", &Tracer::taint_current)
      .def("note_input", &Tracer::note_input, py::arg("content") = true)
      .def("note_output", &Tracer::note_output)
      .def("current_tainted", &Tracer::current_tainted)
      .def_property_readonly("tainted_count", &Tracer::tainted_count)
      .def("reached",
           [](const Tracer& t) {
             py::list out;
             for (const auto& r : t.reached()) {
               out.append(py::make_tuple(r.code, r.line, r.first, r.count));
             }
             return out;
           })
      .def("frame_locals",
           [](Tracer& t, py::handle frame) {
             return steal_or_throw(t.frame_locals(as_frame(frame)));
           })
      .def("frame_stack",
           [](Tracer& t, py::handle frame) {
             return steal_or_throw(t.frame_stack(as_frame(frame)));
           })
      .def("attr_tag",
           [](Tracer& t, py::handle owner, py::handle name, py::handle value) {
             return t.attr_tag(owner.ptr(), name.ptr(), value.ptr());
           })
      .def("item_tag",
           [](Tracer& t, py::handle container, py::handle key, py::handle value) {
             return t.item_tag(container.ptr(), key.ptr(), value.ptr());
           })
      .def("object_counters",
           [](const Tracer& t, py::handle obj) { return t.object_counters(obj.ptr()); })
      .def("seed_item",
           [](Tracer& t, py::handle container, py::handle key, std::uint64_t tag) {
             return t.seed_item(container.ptr(), key.ptr(), tag);
           })
      .def("seed_attr",
           [](Tracer& t, py::handle owner, py::handle name, py::handle value, std::uint64_t tag) {
             return t.seed_attr(owner.ptr(), name.ptr(), value.ptr(), tag);
           })
      .def("seed_local",
           [](Tracer& t, py::handle frame, py::handle name, std::uint64_t tag) {
             return t.seed_local(as_frame(frame), name.ptr(), tag);
           })
      .def("code_index", [](Tracer& t, py::handle code) { return t.code_index(code.ptr()); })
      .def("codes",
           [](const Tracer& t) {
             py::list out;
             for (const auto& c : t.codes()) {
               out.append(py::make_tuple(c.filename, c.qualname, c.firstlineno));
             }
             return out;
           })
      .def("stats", [](const Tracer& t) {
        const auto& s = t.stats();
        py::dict d;
        d["instructions"] = s.counted();
        d["frames"] = s.frames;
        d["depth_mismatches"] = s.depth_mismatches;
        d["frame_resyncs"] = s.frame_resyncs;
        d["untracked_writes"] = s.untracked_writes;
        d["exceptions"] = s.exceptions;
        d["callback_errors"] = s.callback_errors;
        d["loop_frames"] = s.loop_frames;
        d["loop_handoffs"] = s.loop_handoffs;
        d["loop_quick"] = s.loop_quick;
        d["loop_calls"] = s.loop_calls;
        d["max_shadow_depth"] = s.max_shadow_depth;
        d["edge_compactions"] = s.edge_compactions;
        d["edges_kept"] = s.edges_kept;
        d["live_tags"] = s.live_tags;
        d["live_frames"] = t.live_frames();
        d["tracked_objects"] = t.slot_table().objects();
        d["tracked_slots"] = t.slot_table().slots();
        py::dict by_op;
        for (int op = 0; op < 256; ++op) {
          if (s.mismatches_by_op[op] != 0) {
            by_op[py::str(std::string(sealtrace::op_model(static_cast<std::uint8_t>(op)).name))] =
                s.mismatches_by_op[op];
          }
        }
        d["mismatches_by_op"] = by_op;
        if (s.depth_mismatches != 0 && s.first_mismatch_code < t.codes().size()) {
          const auto& code = t.codes()[s.first_mismatch_code];
          d["first_mismatch"] = py::make_tuple(code.filename, code.qualname, s.first_mismatch_line,
                                               s.first_mismatch_counter);
        }
        return d;
      });
}
