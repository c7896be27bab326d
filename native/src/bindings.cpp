// Python bindings for the provenance engine. pybind11 appears in this file only.
#include <pybind11/pybind11.h>

#include <patchlevel.h>

#include "counter.hpp"

namespace py = pybind11;

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
}
