// Which produced values are moves: reads and copies that hand on a value they were given (an
// item out of a container, an attribute, a list() of a list, bytes() of a bytearray, a tuple
// packed for a call). They make nodes when the engine lost a slot's tag, but they compute
// nothing, so a trace's depth does not count them: it counts computations and origins.
//
// Only query passes that keep inputs classify (keeps_inputs). A call's operands may be freed
// by the time it completes, so what a result is compared with is read before it runs: the
// arguments, the items of their lists, tuples and dicts (by identity), and a digest of their
// bytes or text.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <algorithm>

#include "ops.hpp"
#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

namespace {

constexpr std::size_t kMaxCandidates = 64;
constexpr Py_ssize_t kMaxDigested = 1 << 20;

// FNV-1a over a buffer, with its length: equal contents of bytes, bytearrays and ASCII text.
std::uint64_t content_digest(const char* data, Py_ssize_t n) {
  std::uint64_t h = 1469598103934665603ULL ^ static_cast<std::uint64_t>(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 1099511628211ULL;
  }
  return h;
}

// The digest of a bytes-like or ASCII str value's content, or 0 (never reads a cache it would
// have to fill: only compact ASCII text is read as it is).
std::uint64_t digest_of(PyObject* v) {
  if (PyBytes_Check(v) && PyBytes_GET_SIZE(v) <= kMaxDigested) {
    return content_digest(PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
  }
  if (PyByteArray_Check(v) && PyByteArray_GET_SIZE(v) <= kMaxDigested) {
    return content_digest(PyByteArray_AS_STRING(v), PyByteArray_GET_SIZE(v));
  }
  if (PyUnicode_Check(v) && PyUnicode_IS_COMPACT_ASCII(v) &&
      PyUnicode_GET_LENGTH(v) <= kMaxDigested) {
    return content_digest(static_cast<const char*>(PyUnicode_DATA(v)), PyUnicode_GET_LENGTH(v));
  }
  return 0;
}

}  // namespace

// Before a call or a subscript runs (query passes only): what its result could be a move of.
void Tracer::gather_move_candidates(Pending& p) {
  if (p.rule == Rule::kBinarySubscr) {
    PyObject* c = p.in_objs.size() == 2 ? p.in_objs[0] : nullptr;
    p.move_hint = c != nullptr && (PyList_Check(c) || PyTuple_Check(c) || PyDict_Check(c) ||
                                   PyUnicode_Check(c) || PyBytes_Check(c));
    return;
  }
  if (p.in_objs.size() < 2) return;
  if (compares_items(p)) return;
  // An argument (tag 0: a result that is an argument keeps its tag without a node) or an
  // item of one, with the item's tag.
  auto add = [&p](PyObject* v, Tag t) {
    if (p.move_candidates.size() < kMaxCandidates) {
      p.move_candidates.push_back(v);
      p.move_tags.push_back(t);
    }
  };
  for (std::size_t i = 2; i < p.in_objs.size(); ++i) {
    PyObject* v = p.in_objs[i];
    if (v == nullptr) continue;
    add(v, 0);
    // CALL_FUNCTION_EX's arguments sit in a tuple (and a dict): one level further.
    PyObject* containers[2] = {v, nullptr};
    if (p.rule == Rule::kCallFunctionEx && PyTuple_Check(v) && PyTuple_GET_SIZE(v) > 0) {
      containers[1] = PyTuple_GET_ITEM(v, 0);
      for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(v); ++k) add(PyTuple_GET_ITEM(v, k), 0);
    }
    for (PyObject* c : containers) {
      if (c == nullptr) continue;
      if (PyList_Check(c) || PyTuple_Check(c)) {
        for (Py_ssize_t k = 0; k < Py_SIZE(c) && k < static_cast<Py_ssize_t>(kMaxCandidates); ++k) {
          add(seq_item(c, k), item_tag_of(c, index_key(k), seq_item(c, k)));
        }
      } else if (PyDict_Check(c)) {
        Py_ssize_t pos = 0;
        PyObject* key = nullptr;
        PyObject* value = nullptr;
        while (PyDict_Next(c, &pos, &key, &value) && p.move_candidates.size() < kMaxCandidates) {
          std::uint64_t k = 0;
          item_key(key, k);
          add(value, item_tag_of(c, k, value));
        }
      }
      const std::uint64_t d = digest_of(c);
      if (d != 0) p.move_digests.push_back(d);
    }
  }
  // A method's self: list.copy(), str.strip() of what needs no stripping.
  if (p.in_objs[0] != nullptr) add(p.in_objs[1], 0);
  if (p.in_objs[0] != nullptr) {
    const std::uint64_t d = digest_of(p.in_objs[1]);
    if (d != 0) p.move_digests.push_back(d);
  }
}

bool Tracer::is_move(ShadowFrame& sf, int base, int depth) {
  Pending& p = sf.p;
  switch (p.rule) {
    case Rule::kForIter:
    case Rule::kUnpackSequence:
    case Rule::kUnpackEx:
    case Rule::kGetIter:
    case Rule::kLoadAttr:
    case Rule::kLoadMethod:
    case Rule::kImportFrom:
    case Rule::kBuildSeq:
    case Rule::kBuildMap:
    case Rule::kBuildConstKeyMap:
    case Rule::kBuildSet:
    case Rule::kMove:
    case Rule::kSend:
    case Rule::kPushExcInfo:
    case Rule::kCopy:
    case Rule::kSwap:
    case Rule::kLoadGlobal:
    case Rule::kLoadName:
    case Rule::kLoadDeref:
    case Rule::kLoadClassDeref:
      return true;
    case Rule::kBinarySubscr:
      return p.query_counter == p.counter && p.move_hint;
    case Rule::kCall:
    case Rule::kCallFunctionEx:
      if (p.query_counter != p.counter || compares_items(p)) return false;
      break;
    default:
      return false;
  }
  if (depth - base != 1) return false;
  PyObject* result = sf.iframe->localsplus[base];
  if (result == nullptr) return false;
  const auto& c = p.move_candidates;
  auto candidate = [&c](PyObject* v) { return std::find(c.begin(), c.end(), v) != c.end(); };
  auto found = std::find(c.begin(), c.end(), result);
  if (found != c.end()) {
    // An argument, or an item of one (itemgetter(row), max(xs)), handed back: what it read is
    // that item, not every item of the container.
    const Tag t = p.move_tags[static_cast<std::size_t>(found - c.begin())];
    p.move_item = true;
    p.move_item_tag = t;
    return true;
  }
  const std::uint64_t d = digest_of(result);
  if (d != 0 &&
      std::find(p.move_digests.begin(), p.move_digests.end(), d) != p.move_digests.end()) {
    return true;  // bytes() of a bytearray, a str() of a str: the same content
  }
  // A new list, tuple or dict of the very items an argument held: list(x), sorted(x), dict(d).
  if ((PyList_Check(result) || PyTuple_Check(result)) && Py_SIZE(result) > 0) {
    for (Py_ssize_t k = 0; k < Py_SIZE(result); ++k) {
      if (!candidate(seq_item(result, k))) return false;
    }
    return true;
  }
  if (PyDict_Check(result) && PyDict_GET_SIZE(result) > 0) {
    Py_ssize_t pos = 0;
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    while (PyDict_Next(result, &pos, &key, &value)) {
      if (!candidate(value)) return false;
    }
    return true;
  }
  return false;
}

}  // namespace sealtrace
