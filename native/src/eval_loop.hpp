// The engine's own evaluation loop (PEP 523): while an engine made with eval_loop=True is
// attached, CPython hands it every frame; it runs a traced frame's bytecode itself, giving the
// tracer the events the trace callback would, and leaves every other frame to CPython (and the
// rest of a frame, from an opcode it does not implement).
#pragma once

#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>

#include <cstdint>

namespace sealtrace {

PyObject* evaluate_frame(PyThreadState* ts, _PyInterpreterFrame* f, int throwflag);
void install_eval_loop();
void remove_eval_loop();
// The (de-specialised) opcodes the loop runs itself; a code object with any other runs in
// CPython's loop under the trace callback.
bool loop_implements(int op);
// Whether the loop may tag an instruction of opcode `op` itself, and how (quick_steps.cpp):
// Instr::quick.
std::uint8_t quick_kind(int op);

}  // namespace sealtrace
