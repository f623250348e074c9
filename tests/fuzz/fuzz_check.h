// Shared by the fuzz targets: a property check that crashes (so libFuzzer saves the input), and
// the rule that the only exceptions a reader may throw on bad input are normlab::Error ones.
#pragma once
#include <cstdio>

#include "normlab/errors.h"

// A violated property: print what and where, then crash.
#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: fuzz property violated: %s\n", __FILE__, __LINE__, #cond); \
      __builtin_trap();                                                                    \
    }                                                                                      \
  } while (0)

// Runs `body`; a normlab::Error that reports bad input is an accepted outcome, and the return
// value says whether `body` completed. InternalError (a broken invariant, "a bug in normlab, never
// the user's fault") crashes, and so does any other exception: it propagates out of the fuzz
// callback and libFuzzer reports it as a deadly signal.
template <class F>
bool accepts(F&& body) {
  try {
    body();
    return true;
  } catch (const normlab::InternalError& e) {
    std::fprintf(stderr, "InternalError on fuzz input: %s\n", e.what());
    __builtin_trap();
  } catch (const normlab::Error&) {
    return false;
  }
}
