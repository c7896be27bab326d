/* sealtrace.proxy._fastpath, built as one translation unit: each file holds one idea of the
 * per-call path, and compiling them together keeps what they share static, so the compiler
 * inlines and lays out the path as one unit (fastpath_internal.h, FP_UNITY). The order is
 * the path's own: encoding, digests, framing, the call path, proxy methods and state, the
 * module, and the pipeline's side. */
#define FP_UNITY 1

/* In the path's order, not the alphabet's. */
// clang-format off
#include "encode.c"
#include "digest.c"
#include "record.c"
#include "callpath.c"
#include "method.c"
#include "proxy_state.c"
#include "module.c"
#include "material.c"
// clang-format on
