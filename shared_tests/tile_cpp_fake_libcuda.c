/* A stand-in libcuda.so.1 for test_tile_cpp_driver.py: records what tilerosetta_tile_cpp asks of the
 * driver (the cubin it loads, the kernel it looks up, the grid, block, stream and parameter bytes of a
 * launch) without a GPU. Compiled by the test with the host C compiler; never installed.
 *
 * Env: TR_FAKE_LOG (file to append records to), TR_FAKE_KINDS (the launch's parameter kinds, e.g.
 * "pppiif": p = 8-byte pointer, i = int32, f = float32; "|"-separated per launch of the process when they
 * differ, the last one repeating), TR_FAKE_CC (compute capability, e.g. 90), TR_FAKE_SMS (SM count, else 0:
 * the module then plans for the H200), TR_FAKE_FAIL (name of an entry point that returns error 500,
 * CUDA_ERROR_NOT_FOUND). Stream-ordered allocations return addresses from 0x7000000000 up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
static int ctx_token, mod_token, fn_token;

static FILE* log_file(void) {
  const char* path = getenv("TR_FAKE_LOG");
  return path ? fopen(path, "a") : NULL;
}

static int failing(const char* name) {
  const char* f = getenv("TR_FAKE_FAIL");
  return f && strcmp(f, name) == 0;
}

CUresult cuInit(unsigned flags) { return 0; }
CUresult cuGetErrorName(CUresult r, const char** s) { *s = r == 500 ? "CUDA_ERROR_NOT_FOUND" : "CUDA_ERROR_X"; return 0; }
CUresult cuGetErrorString(CUresult r, const char** s) { *s = r == 500 ? "named symbol not found" : "fake error"; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(int* d, int ordinal) { *d = ordinal; return 0; }
CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
  const char* cc = getenv("TR_FAKE_CC");
  int c = cc ? atoi(cc) : 90;
  const char* sms = getenv("TR_FAKE_SMS");
  if (attr == 16) *v = sms ? atoi(sms) : 0;  /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
  else *v = attr == 75 ? c / 10 : c % 10;
  return 0;
}

static unsigned long long next_alloc = 0x7000000000ULL;
CUresult cuMemAllocAsync(unsigned long long* p, size_t bytes, void* stream) {
  FILE* f = log_file();
  if (failing("cuMemAllocAsync")) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  *p = next_alloc;
  next_alloc += (bytes + 0xfffff) & ~0xfffffULL;
  if (f) { fprintf(f, "alloc %zu stream=%llu -> %llu\n", bytes, (unsigned long long)(size_t)stream, *p); fclose(f); }
  return 0;
}

CUresult cuMemFreeAsync(unsigned long long p, void* stream) {
  FILE* f = log_file();
  if (f) { fprintf(f, "free %llu stream=%llu\n", p, (unsigned long long)(size_t)stream); fclose(f); }
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) { *ctx = &ctx_token; return 0; }
CUresult cuCtxGetCurrent(void** ctx) { *ctx = NULL; return 0; }
CUresult cuCtxSetCurrent(void* ctx) { return 0; }

CUresult cuModuleLoadData(void** mod, const void* image) {
  const unsigned char* p = image;
  FILE* f = log_file();
  if (f) {
    fprintf(f, "load %02x%02x%02x%02x class=%d machine=%d\n", p[0], p[1], p[2], p[3], p[4], p[18] | (p[19] << 8));
    fclose(f);
  }
  *mod = &mod_token;
  return 0;
}

CUresult cuModuleGetFunction(void** fn, void* mod, const char* name) {
  FILE* f = log_file();
  if (f) { fprintf(f, "function %s\n", name); fclose(f); }
  if (failing("cuModuleGetFunction")) return 500;
  *fn = &fn_token;
  return 0;
}

CUresult cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void* stream, void** params, void** extra) {
  static int launches;
  FILE* f = log_file();
  const char* all = getenv("TR_FAKE_KINDS");
  char kinds[64] = "";
  if (all) { /* field number `launches` of the "|"-separated list, or its last field */
    const char* start = all;
    for (int n = 0; n < launches && strchr(start, '|'); ++n) start = strchr(start, '|') + 1;
    size_t len = strcspn(start, "|");
    if (len >= sizeof kinds) len = sizeof kinds - 1;
    memcpy(kinds, start, len);
    kinds[len] = 0;
  }
  ++launches;
  if (f) {
    fprintf(f, "launch grid=%u,%u,%u block=%u,%u,%u shared=%u stream=%llu params=", gx, gy, gz, bx, by, bz,
            shared, (unsigned long long)(size_t)stream);
    for (int i = 0; kinds[i]; ++i) {
      if (kinds[i] == 'p') fprintf(f, "p:%llu ", *(unsigned long long*)params[i]);
      else if (kinds[i] == 'i') fprintf(f, "i:%d ", *(int*)params[i]);
      else fprintf(f, "f:%.9g ", *(float*)params[i]);
    }
    fprintf(f, "\n");
    fclose(f);
  }
  return 0;
}
