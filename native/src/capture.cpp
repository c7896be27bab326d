// Stops and captures: callbacks at a counter, a line or every n instructions; an
// instruction's inputs and outputs captured for its description; a live frame's tags.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "hooks.hpp"
#include "py_values.hpp"
#include "quiet.h"
#include "tracer.hpp"

namespace sealtrace {

void Tracer::stop_at_counter(std::uint64_t counter, PyObject* callback) {
  Py_XDECREF(stop_counter_cb_);
  Py_XINCREF(callback);
  stop_counter_cb_ = callback;
  stop_counter_ = counter;
}

void Tracer::stop_at_line(const std::string& filename, int line, std::uint64_t hit,
                          PyObject* callback) {
  Py_XDECREF(stop_line_cb_);
  Py_XINCREF(callback);
  stop_line_cb_ = callback;
  stop_file_ = filename;
  stop_line_ = line;
  stop_function_.clear();
  stop_hit_ = hit == 0 ? 1 : hit;
  hits_ = 0;
  ++breakpoint_generation_;
}

// The line-stop machinery with another breakpoint: every RETURN_VALUE of the function's code
// counts as a hit, even one on the line the frame was already on.
void Tracer::stop_at_return(const std::string& filename, const std::string& qualname,
                            std::uint64_t hit, PyObject* callback) {
  stop_at_line(filename, 0, hit, callback);
  stop_function_ = qualname;
}

void Tracer::set_end_file(const std::string& filename) { end_file_ = filename; }

void Tracer::every(std::uint64_t interval, PyObject* callback) {
  Py_XDECREF(every_cb_);
  Py_XINCREF(callback);
  every_cb_ = callback;
  every_interval_ = callback != nullptr ? interval : 0;
  every_next_ = 0;
}

void Tracer::capture(PyObject* counters, PyObject* pre, PyObject* post) {
  capture_.clear();
  capture_min_ = 1;
  capture_max_ = 0;
  PyObject* it = PyObject_GetIter(counters);
  if (it == nullptr) return;
  for (PyObject* item = PyIter_Next(it); item != nullptr; item = PyIter_Next(it)) {
    const std::uint64_t c = PyLong_AsUnsignedLongLong(item);
    Py_DECREF(item);
    if (c == static_cast<std::uint64_t>(-1) && PyErr_Occurred()) break;
    capture_min_ = capture_.empty() ? c : std::min(capture_min_, c);
    capture_max_ = capture_.empty() ? c : std::max(capture_max_, c);
    capture_.insert(c);
  }
  Py_DECREF(it);
  if (capture_.empty()) {
    capture_min_ = 1;
    capture_max_ = 0;
  }
  capture_order_.assign(capture_.begin(), capture_.end());
  std::sort(capture_order_.begin(), capture_order_.end());
  capture_at_ = 0;
  capture_next_ = 0;
  Py_XDECREF(capture_pre_);
  Py_XDECREF(capture_post_);
  Py_XINCREF(pre);
  Py_XINCREF(post);
  capture_pre_ = pre;
  capture_post_ = post;
}

// A query callback raised. Its error goes to the process's own stderr, never to sys.stderr:
// the program's stderr is a boundary the replay checks, and a write there would diverge.
void Tracer::callback_failed() noexcept {
  ++stats_.callback_errors;
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyObject* text = value != nullptr ? PyObject_Repr(value) : nullptr;
  const char* utf8 = text != nullptr ? PyUnicode_AsUTF8(text) : nullptr;
  if (utf8 != nullptr) {
    const std::string line = std::string("sealtrace: a query callback failed: ") + utf8 + "\n";
    const ssize_t written = ::write(2, line.data(), line.size());
    (void)written;
  }
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
}

// The frame object of an interpreter frame that is running: its own, or the current frame's
// (made now if it has none: the evaluation loop makes frame objects only when asked), set as
// a call event sets a traced frame's, so a callback that turns its opcode events off turns
// them off.
PyFrameObject* Tracer::frame_object(_PyInterpreterFrame* f) {
  PyFrameObject* frame = f->frame_obj;
  if (frame == nullptr) {
    PyFrameObject* current = PyEval_GetFrame();
    if (current == nullptr || current->f_frame != f) return nullptr;
    frame = current;
  }
  opcode_events_on(frame);
  return frame;
}

namespace {

// The frame objects a callback asks for, of a thread whose frames run in the evaluation loop
// (which makes none): the callback's frame, and any `f_back` walks to. Made from the
// program's heap, they would move the address of everything the program allocates after
// them, in this pass only, and a program's path can hang on addresses (a set of asyncio tasks
// iterates in the order of their ids: anyio found another root task, and the passes of one
// question counted different instructions). Made in a quiet scope instead, and dropped once
// the callback is done where nothing else holds them, innermost first (a child's object holds
// its parent's through f_back), so the frames are as a pass that asked nothing leaves them.
class CallbackFrames {
 public:
  explicit CallbackFrames(_PyInterpreterFrame* top) {
    for (_PyInterpreterFrame* f = top; f != nullptr; f = f->previous) {
      if (f->frame_obj == nullptr && f->owner == FRAME_OWNED_BY_THREAD) bare_.push_back(f);
    }
  }
  ~CallbackFrames() {
    QuietScope quiet;
    for (_PyInterpreterFrame* f : bare_) {
      PyFrameObject* made = f->frame_obj;
      if (made == nullptr || Py_REFCNT(made) != 1) continue;  // kept: it stays
      f->frame_obj = nullptr;
      Py_DECREF(made);
    }
  }
  CallbackFrames(const CallbackFrames&) = delete;
  CallbackFrames& operator=(const CallbackFrames&) = delete;

 private:
  QuietVector<_PyInterpreterFrame*> bare_;
};

}  // namespace

// Takes the reference to `callback` it is given and lets it go inside the quiet scope, where a
// callback the engine held alone (a stop's, or an `every` the callback itself replaced) is
// freed. Freed under the program, a tracked object counts one deallocation against the
// program's young generation, whose next collection then came an allocation later than in a
// pass that asked nothing: cyclic garbage was found at another instant and its finalizer ran
// at another counter (a served request's trace, resumed from a checkpoint the serve pass took
// after re-arming its interval, lost its socket branch).
void Tracer::call_stop(PyObject* callback, _PyInterpreterFrame* f) {
  const CallbackFrames made(f);
  QuietScope quiet;  // the frame object too, where the loop made none (CallbackFrames)
  if (PyFrameObject* frame = frame_object(f); frame != nullptr) {
    PyObject* r = PyObject_CallFunction(callback, "OK", reinterpret_cast<PyObject*>(frame),
                                        static_cast<unsigned long long>(counter_.value()));
    if (r == nullptr) callback_failed();
    Py_XDECREF(r);
  }
  Py_DECREF(callback);
}

void Tracer::capture_pre(_PyInterpreterFrame* f, const Pending& p) {
  if (capture_pre_ == nullptr) return;
  const CallbackFrames made(f);
  QuietScope quiet;
  PyFrameObject* frame = frame_object(f);
  if (frame == nullptr) return;
  PyObject* inputs = PyList_New(static_cast<Py_ssize_t>(p.in_objs.size()));
  if (inputs == nullptr) {
    PyErr_Clear();
    return;
  }
  for (std::size_t i = 0; i < p.in_objs.size(); ++i) {
    PyObject* item = Py_BuildValue("(OK)", p.in_objs[i] != nullptr ? p.in_objs[i] : Py_None,
                                   static_cast<unsigned long long>(p.in_tags[i]));
    if (item == nullptr) {
      PyErr_Clear();
      item = Py_None;
      Py_INCREF(item);
    }
    PyList_SET_ITEM(inputs, static_cast<Py_ssize_t>(i), item);
  }
  PyObject* r = PyObject_CallFunction(capture_pre_, "OKiO", reinterpret_cast<PyObject*>(frame),
                                      static_cast<unsigned long long>(p.counter), p.index, inputs);
  if (r == nullptr) callback_failed();
  Py_XDECREF(r);
  Py_DECREF(inputs);
}

void Tracer::capture_post(ShadowFrame& sf, int depth, int base, bool move) {
  if (capture_post_ == nullptr) return;
  QuietScope quiet;
  PyObject** lp = sf.iframe->localsplus;
  PyObject* outputs = PyList_New(0);
  if (outputs == nullptr) {
    PyErr_Clear();
    return;
  }
  for (int i = base; i < depth; ++i) {
    PyObject* item =
        Py_BuildValue("(OK)", lp[i] != nullptr ? lp[i] : Py_None,
                      static_cast<unsigned long long>(sf.slots[static_cast<std::size_t>(i)]));
    if (item != nullptr) {
      PyList_Append(outputs, item);
      Py_DECREF(item);
    }
  }
  // Every input the instruction's edges name (edge_inputs), as a slice pass records them.
  edge_inputs(sf.p, inputs_scratch_);
  PyObject* callbacks = PyList_New(0);
  for (Tag t : inputs_scratch_) {
    PyObject* v = PyLong_FromUnsignedLongLong(t);
    if (v != nullptr && callbacks != nullptr) PyList_Append(callbacks, v);
    Py_XDECREF(v);
  }
  PyObject* r =
      PyObject_CallFunction(capture_post_, "KOOOO", static_cast<unsigned long long>(sf.p.counter),
                            outputs, sf.p.raised ? Py_True : Py_False,
                            callbacks != nullptr ? callbacks : Py_None, move ? Py_True : Py_False);
  Py_XDECREF(callbacks);
  if (r == nullptr) callback_failed();
  Py_XDECREF(r);
  Py_DECREF(outputs);
}

PyObject* Tracer::frame_locals(PyFrameObject* frame) {
  ShadowFrame* sf = find_shadow(frame);
  _PyInterpreterFrame* f = frame->f_frame;
  PyCodeObject* code = f->f_code;
  PyObject* out = PyList_New(0);
  if (out == nullptr) return nullptr;
  for (int i = 0; i < code->co_nlocalsplus; ++i) {
    PyObject* name = PyTuple_GET_ITEM(code->co_localsplusnames, i);
    PyObject* v = f->localsplus[i];
    Tag tag = sf != nullptr ? sf->slots[static_cast<std::size_t>(i)] : 0;
    const int kind = sf != nullptr ? sf->code->kinds[static_cast<std::size_t>(i)] : 0;
    if ((kind & (CO_FAST_CELL | CO_FAST_FREE)) != 0 && v != nullptr && PyCell_Check(v)) {
      PyObject* content = PyCell_GET(v);
      tag = slots_.get(addr(v), kCellKey, addr(content));
      v = content;
    }
    PyObject* item = Py_BuildValue("(OOK)", name, v != nullptr ? v : Py_None,
                                   static_cast<unsigned long long>(tag));
    if (item == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    if (v == nullptr) {
      // An unbound local: say so rather than show None.
      Py_DECREF(item);
      continue;
    }
    PyList_Append(out, item);
    Py_DECREF(item);
  }
  return out;
}

PyObject* Tracer::frame_stack(PyFrameObject* frame) {
  ShadowFrame* sf = find_shadow(frame);
  _PyInterpreterFrame* f = frame->f_frame;
  PyObject* out = PyList_New(0);
  if (out == nullptr || sf == nullptr || f->stacktop < 0) return out;
  for (int i = sf->code->nlocalsplus; i < f->stacktop; ++i) {
    PyObject* v = f->localsplus[i];
    PyObject* item =
        Py_BuildValue("(OK)", v != nullptr ? v : Py_None,
                      static_cast<unsigned long long>(sf->slots[static_cast<std::size_t>(i)]));
    if (item != nullptr) {
      PyList_Append(out, item);
      Py_DECREF(item);
    }
  }
  return out;
}

}  // namespace sealtrace
