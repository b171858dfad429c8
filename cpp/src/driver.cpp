#include "driver.h"

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "embedded.h"

namespace tr {
namespace {

constexpr int kAttrCcMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrCcMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
constexpr int kAttrSmCount = 16;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT

struct Driver {
  std::string error;  // why the driver cannot be used ("" = usable)
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuMemAllocAsync)(unsigned long long*, size_t, CUstream) = nullptr;
  CUresult (*cuMemFreeAsync)(unsigned long long, CUstream) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**) = nullptr;
};

template <typename F>
bool resolve(void* lib, const char* name, F& fn, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn && error.empty()) error = std::string("CUDA driver lacks ") + name;
  return fn != nullptr;
}

Driver& drv() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* why = dlerror();
      d.error = std::string("CUDA driver not found (dlopen libcuda.so.1: ") + (why ? why : "?") + ")";
      return;
    }
    std::string& e = d.error;
    resolve(lib, "cuInit", d.cuInit, e);
    resolve(lib, "cuGetErrorName", d.cuGetErrorName, e);
    resolve(lib, "cuGetErrorString", d.cuGetErrorString, e);
    resolve(lib, "cuDeviceGetCount", d.cuDeviceGetCount, e);
    resolve(lib, "cuDeviceGet", d.cuDeviceGet, e);
    resolve(lib, "cuDeviceGetAttribute", d.cuDeviceGetAttribute, e);
    resolve(lib, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain, e);
    resolve(lib, "cuCtxGetCurrent", d.cuCtxGetCurrent, e);
    resolve(lib, "cuCtxSetCurrent", d.cuCtxSetCurrent, e);
    resolve(lib, "cuModuleLoadData", d.cuModuleLoadData, e);
    resolve(lib, "cuModuleGetFunction", d.cuModuleGetFunction, e);
    resolve(lib, "cuLaunchKernel", d.cuLaunchKernel, e);
    resolve(lib, "cuMemAllocAsync", d.cuMemAllocAsync, e);  // CUDA 11.2+
    resolve(lib, "cuMemFreeAsync", d.cuMemFreeAsync, e);
    if (!e.empty()) return;
    CUresult r = d.cuInit(0);
    if (r != 0) {
      const char* msg = nullptr;
      d.cuGetErrorString(r, &msg);
      e = std::string("cuInit failed: ") + (msg ? msg : "unknown error");
    }
  });
  return d;
}

[[noreturn]] void fail(CUresult r, const std::string& what) {
  Driver& d = drv();
  const char* name = nullptr;
  const char* msg = nullptr;
  if (d.cuGetErrorName) d.cuGetErrorName(r, &name);
  if (d.cuGetErrorString) d.cuGetErrorString(r, &msg);
  throw std::runtime_error(what + " failed: " + (name ? name : "CUDA error " + std::to_string(r)) +
                           ": " + (msg ? msg : "no message"));
}

void check(CUresult r, const std::string& what) {
  if (r != 0) fail(r, what);
}

Driver& ready() {
  Driver& d = drv();
  if (!d.error.empty()) throw std::runtime_error(d.error);
  return d;
}

// The caches below are process-wide: a caller that releases the GIL (or a second interpreter thread
// once pybind11 releases it around a launch) must not race on them, so each has its own mutex (two,
// because get_function makes a context current, which reads the context cache).
CUcontext primary_context(int device) {
  static std::mutex lock;
  static std::map<int, CUcontext> contexts;
  std::lock_guard<std::mutex> hold(lock);
  auto it = contexts.find(device);
  if (it != contexts.end()) return it->second;
  Driver& d = ready();
  CUdevice dev;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet(" + std::to_string(device) + ")");
  CUcontext ctx;
  check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  contexts[device] = ctx;
  return ctx;
}

// Makes the device's primary context current for the lifetime of the guard.
struct ContextGuard {
  CUcontext previous = nullptr;
  bool switched = false;
  explicit ContextGuard(int device) {
    Driver& d = ready();
    CUcontext want = primary_context(device);
    if (CUresult r = d.cuCtxGetCurrent(&previous); r != 0) fail(r, "cuCtxGetCurrent");
    if (previous != want) {
      if (CUresult r = d.cuCtxSetCurrent(want); r != 0) fail(r, "cuCtxSetCurrent");
      switched = true;
    }
  }
  ~ContextGuard() {
    if (switched) drv().cuCtxSetCurrent(previous);
  }
};

// The embedded cubin of `op` that runs on `arch`: the same arch, or else the newest one of the same
// major version not newer than the device (SASS of sm_XY runs on sm_XZ, Z >= Y: sm_86/89 use sm_80).
const TrCubin* pick_cubin(const std::string& op, int arch) {
  const TrCubin* best = nullptr;
  for (size_t i = 0; i < tr_num_cubins; ++i) {
    const TrCubin& c = tr_cubins[i];
    if (op != c.op || c.arch / 10 != arch / 10 || c.arch > arch) continue;
    if (!best || c.arch > best->arch) best = &c;
  }
  return best;
}

}  // namespace

std::string driver_status() {
  Driver& d = drv();
  if (!d.error.empty()) return d.error;
  int count = 0;
  CUresult r = d.cuDeviceGetCount(&count);
  if (r != 0) {
    const char* msg = nullptr;
    d.cuGetErrorString(r, &msg);
    return std::string("cuDeviceGetCount failed: ") + (msg ? msg : "unknown error");
  }
  if (count == 0) return "no CUDA device";
  return "";
}

int device_arch(int device) {
  Driver& d = ready();
  CUdevice dev;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet(" + std::to_string(device) + ")");
  int major = 0, minor = 0;
  check(d.cuDeviceGetAttribute(&major, kAttrCcMajor, dev), "cuDeviceGetAttribute");
  check(d.cuDeviceGetAttribute(&minor, kAttrCcMinor, dev), "cuDeviceGetAttribute");
  return major * 10 + minor;
}

int device_sm_count(int device, int fallback) {
  if (!driver_status().empty()) return fallback;
  Driver& d = ready();
  CUdevice dev;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet(" + std::to_string(device) + ")");
  int sms = 0;
  check(d.cuDeviceGetAttribute(&sms, kAttrSmCount, dev), "cuDeviceGetAttribute");
  return sms > 0 ? sms : fallback;
}

std::uint64_t alloc_async(int device, std::size_t bytes, std::uintptr_t stream) {
  Driver& d = ready();
  ContextGuard guard(device);
  unsigned long long p = 0;
  CUresult r = d.cuMemAllocAsync(&p, bytes, reinterpret_cast<CUstream>(stream));
  if (r != 0) fail(r, "cuMemAllocAsync(" + std::to_string(bytes) + " bytes)");
  return p;
}

void free_async(int device, std::uint64_t ptr, std::uintptr_t stream) {
  Driver& d = ready();
  ContextGuard guard(device);
  CUresult r = d.cuMemFreeAsync(ptr, reinterpret_cast<CUstream>(stream));
  if (r != 0) fail(r, "cuMemFreeAsync");
}

CUfunction get_function(int device, const std::string& op, const std::string& name) {
  static std::map<std::pair<int, std::string>, CUmodule> modules;
  static std::map<std::pair<int, std::string>, CUfunction> functions;
  static std::mutex lock;
  std::lock_guard<std::mutex> hold(lock);
  auto fkey = std::make_pair(device, name);
  if (auto it = functions.find(fkey); it != functions.end()) return it->second;
  Driver& d = ready();
  auto mkey = std::make_pair(device, op);
  CUmodule mod;
  if (auto it = modules.find(mkey); it != modules.end()) {
    mod = it->second;
  } else {
    int arch = device_arch(device);
    const TrCubin* cubin = pick_cubin(op, arch);
    if (!cubin) {
      std::string have;
      for (size_t i = 0; i < tr_num_cubins; ++i)
        if (op == tr_cubins[i].op) have += (have.empty() ? "sm_" : ", sm_") + std::to_string(tr_cubins[i].arch);
      throw std::runtime_error("no embedded cubin of " + op + " runs on device " + std::to_string(device) +
                               " (sm_" + std::to_string(arch) + "); the module holds " +
                               (have.empty() ? "none" : have) + ": rebuild with that arch");
    }
    ContextGuard guard(device);
    check(d.cuModuleLoadData(&mod, cubin->begin),
          "cuModuleLoadData(" + op + ", sm_" + std::to_string(cubin->arch) + ")");
    modules[mkey] = mod;
  }
  CUfunction f;
  check(d.cuModuleGetFunction(&f, mod, name.c_str()), "cuModuleGetFunction(" + name + ")");
  functions[fkey] = f;
  return f;
}

void launch(int device, CUfunction f, const unsigned grid[3], void** args, std::uintptr_t stream,
            const std::string& what) {
  Driver& d = ready();
  ContextGuard guard(device);
  // The message is built only on failure (this runs on every launch).
  CUresult r = d.cuLaunchKernel(f, grid[0], grid[1], grid[2], 1, 1, 1, 0, reinterpret_cast<CUstream>(stream), args,
                                nullptr);
  if (r != 0) fail(r, "cuLaunchKernel(" + what + ")");
}

}  // namespace tr
