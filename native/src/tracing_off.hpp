// While the tracer runs (and any Python code it calls), nothing is traced: what the trace
// callback's caller does around it (PyThreadState_EnterTracing and LeaveTracing, inline).
#pragma once

#include <Python.h>

namespace sealtrace {

class TracingOff {
 public:
  explicit TracingOff(PyThreadState* ts) noexcept : ts_(ts) {
    ++ts_->tracing;
    ts_->cframe->use_tracing = 0;
  }
  ~TracingOff() {
    --ts_->tracing;
    ts_->cframe->use_tracing =
        ts_->c_tracefunc != nullptr || ts_->c_profilefunc != nullptr ? 255 : 0;
  }
  TracingOff(const TracingOff&) = delete;
  TracingOff& operator=(const TracingOff&) = delete;

 private:
  PyThreadState* ts_;
};

}  // namespace sealtrace
