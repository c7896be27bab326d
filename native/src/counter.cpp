#include "counter.hpp"

#include <limits>

namespace sealtrace {

std::uint64_t InstructionCounter::advance(std::uint64_t n) {
  // Wrapping would alias two different instants of the run: refuse instead.
  if (n > std::numeric_limits<std::uint64_t>::max() - value_) wrapped();
  value_ += n;
  return value_;
}

void InstructionCounter::wrapped() { throw std::overflow_error("instruction counter would wrap"); }

}  // namespace sealtrace
