// A quiet scope: while sealtrace's own code runs inside the replayed program (the engine's
// callbacks, the replay runtime's hooks into a query), nothing it allocates, frees or keeps
// may change what the program does next.
//
// Every pass of a query replays the same run and names its instructions by counter, so the
// passes must execute exactly the same instructions. A program's control flow can depend on
// memory addresses (a set of objects iterates in the order of their ids) and on when the
// cyclic garbage collector runs (weakref callbacks, finalizers); the values a capture pass
// keeps, and its temporaries, would otherwise move both. Inside a scope:
//   - allocations go to the quiet heap (quiet_heap.h), never to pymalloc's pools or to
//     malloc's heap, where the program's objects live (this needs the default allocators:
//     under PYTHONMALLOC=debug or malloc, allocations are not moved);
//   - the tuple, list, dict and float free lists, the one-slice cache and the contexts' and
//     async generators' free lists are set aside, so the program's next objects come from
//     the same blocks as in a pass that asked nothing, and its young generation counts the
//     same allocations (a reused object is not counted, a new one is);
//   - automatic collection is off, the allocation counts that schedule it are restored on
//     exit, and containers created in the scope leave the young generation for the
//     permanent one, so they never count towards, or take part in, the program's collections
//     (inside a collection too: a finalizer's or a weakref callback's scope).
// What a scope made should be freed inside one as well: freed under the program, a tracked
// object counts a deallocation against its young generation (Tracer::call_stop lets go of a
// callback inside its scope).
// Scopes nest; only the outermost does the work. Needs the GIL.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

void sealtrace_quiet_enter(void);
void sealtrace_quiet_exit(void);

#ifdef __cplusplus
}

namespace sealtrace {

class QuietScope {
 public:
  QuietScope() noexcept { sealtrace_quiet_enter(); }
  ~QuietScope() { sealtrace_quiet_exit(); }
  QuietScope(const QuietScope&) = delete;
  QuietScope& operator=(const QuietScope&) = delete;
};

}  // namespace sealtrace
#endif
