// The CHECK of the native unit tests: a failed condition is printed and
// counted, and the test goes on (main returns the count).
#pragma once

#include <cstdio>

inline int g_failures = 0;
#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::printf("%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      ++g_failures;                                                          \
    }                                                                        \
  } while (0)
