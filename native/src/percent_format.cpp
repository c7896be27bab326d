// `"%(levelname)s %(message)s" % record.__dict__`: a mapping formatted by a %-format string
// reads only the items its `%(name)` conversions name (logging's Formatter formats every
// record this way). A flow follows only those items (flows.cpp), as a backward trace has only
// them as inputs (gather_named_items, item_inputs.cpp).
//
// Reads the format's and the keys' text only where CPython keeps it as compact ASCII, so
// nothing is allocated or cached in the program's objects during a pass; anything else is
// not read here (the flow then checks every item).
#define Py_BUILD_CORE 1
#include <Python.h>

#include <cstring>
#include <string_view>

#include "py_values.hpp"
#include "tracer.hpp"

namespace sealtrace {

namespace {

constexpr std::size_t kMaxNames = 32;

std::string_view ascii(PyObject* s) {
  if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_COMPACT_ASCII(s)) return {};
  return {static_cast<const char*>(PyUnicode_DATA(s)),
          static_cast<std::size_t>(PyUnicode_GET_LENGTH(s))};
}

}  // namespace

// The tags of the items `fmt % mapping` names, into w: kAll when every one has a tag,
// kSome when not, kNotRead when this is not a mapping's %-format this reads.
Tracer::FormatRead Tracer::format_item_tags(const Pending& p, ItemWalk& w) const {
  if (p.op != kBinaryOp || p.oparg != kRemainder || p.in_objs.size() != 2) return kNotRead;
  PyObject* mapping = p.in_objs[1];
  if (mapping == nullptr || !PyDict_Check(mapping)) return kNotRead;
  const std::string_view fmt = ascii(p.in_objs[0]);
  if (fmt.empty()) return kNotRead;
  std::string_view names[kMaxNames];
  std::size_t count = 0;
  for (std::size_t i = 0; i + 1 < fmt.size(); ++i) {
    if (fmt[i] != '%') continue;
    if (fmt[i + 1] == '%') {
      ++i;
      continue;
    }
    if (fmt[i + 1] != '(') return kNotRead;  // a positional conversion: not a mapping's format
    const std::size_t close = fmt.find(')', i + 2);
    if (close == std::string_view::npos || count == kMaxNames) return kNotRead;
    names[count++] = fmt.substr(i + 2, close - i - 2);
    i = close;
  }
  if (count == 0) return kNotRead;
  bool all = true;
  for (std::size_t n = 0; n < count; ++n) {
    Py_ssize_t pos = 0;
    PyObject* k = nullptr;
    PyObject* v = nullptr;
    bool found = false;
    while (PyDict_Next(mapping, &pos, &k, &v)) {
      if (ascii(k) != names[n]) continue;
      found = true;
      std::uint64_t key = 0;
      item_key(k, key);
      const Tag t = item_tag_of(mapping, key, v);
      if (t != 0) {
        w.add(t);
      } else {
        all = false;
      }
      break;
    }
    if (!found) return kNotRead;  // the format raises KeyError, or the key is not ASCII
  }
  return all ? kAll : kSome;
}

}  // namespace sealtrace
