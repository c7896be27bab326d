// The instruction counter: a monotonic address for every executed bytecode.
//
// Every point of a replayed execution is named by the value this counter held
// when the instruction ran, so it must never go backwards and never wrap.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>

namespace sealtrace {

class InstructionCounter {
 public:
  InstructionCounter() = default;

  // Advances by one and returns the new value (the first instruction is 1;
  // 0 means "before anything ran"). Inline: once an instruction.
  std::uint64_t tick() {
    // Wrapping would alias two different instants of the run: refuse instead.
    if (value_ == std::numeric_limits<std::uint64_t>::max()) [[unlikely]] {
      wrapped();
    }
    return ++value_;
  }

  // Advances by n (n may be 0) and returns the new value.
  std::uint64_t advance(std::uint64_t n);

  [[nodiscard]] std::uint64_t value() const noexcept { return value_; }

 private:
  // Out of line: the throw keeps tick() small enough to inline into the loop's every case.
  [[noreturn]] static void wrapped();
  std::uint64_t value_ = 0;
};

}  // namespace sealtrace
