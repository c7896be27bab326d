// The one attached tracer and its hooks into the interpreter: the trace trampoline, the
// code-object extra slot, and the deallocation hooks that drop an object's slot tags before
// its address can be reused.
#pragma once

#include <Python.h>

#include <cstdint>

namespace sealtrace {

class Tracer;

extern Tracer* g_tracer;
extern std::uint64_t g_generation;
extern Py_ssize_t g_extra_index;
extern destructor g_subtype_dealloc;

void free_code_info(void* info);
// extra: C types whose deallocation is not a hooked one's (deque, defaultdict), or NULL.
void install_hooks(PyTypeObject* const* extra, int count);
void remove_hooks();
// Hooks one more type's deallocation (until remove_hooks); false when no hook is left.
bool hook_type(PyTypeObject* type);
// Whether d is one of the deallocation hooks (the type's slots are tracked).
bool hooked(destructor d);
int trampoline(PyObject*, PyFrameObject* frame, int what, PyObject* arg);
// Whether a traced frame's object asks for opcode events. Under the trace callback a traced
// frame has its object from its call event on, set to opcode events and no line events; one
// still as CPython makes them (line events on: the evaluation loop makes none at a call, so the
// program, a traceback or a stop made it) is set so now. A tool that turned a frame's opcode
// events off finds them off.
bool opcode_events_on(PyFrameObject* frame);

}  // namespace sealtrace
