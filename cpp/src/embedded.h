// The cubins compiled at build time, embedded in the module by a CMake-generated source
// (embedded_cubins.cpp, one .incbin per op x arch). One cubin holds every dtype/config of one op.
#pragma once
#include <cstddef>

struct TrCubin {
  const char* op;
  int arch;  // 80 for sm_80, 90, 100, 120
  const unsigned char* begin;
  const unsigned char* end;
  size_t size() const { return static_cast<size_t>(end - begin); }
};

extern const TrCubin tr_cubins[];
extern const size_t tr_num_cubins;
