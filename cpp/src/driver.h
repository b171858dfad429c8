// The CUDA driver, opened at first use with dlopen("libcuda.so.1"): the module is built on machines
// without a driver and must import there, so it never links libcuda. Only the few entry points needed
// to load a cubin and launch a kernel are resolved.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tr {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;

// "" when the driver is usable; otherwise why not ("CUDA driver not found: ...", "no CUDA device").
std::string driver_status();

// Compute capability of a device as 80, 90, 100, 120, ...; throws std::runtime_error.
int device_arch(int device);

// The kernel `name` of op `op` on `device` (cubin for the device's arch loaded once per device and
// op, in the device's primary context, which is the context torch uses). Throws std::runtime_error
// with the driver's message, or when no embedded cubin fits the device's arch.
CUfunction get_function(int device, const std::string& op, const std::string& name);

// The device's SM count (cuDeviceGetAttribute); `fallback` when the driver is unusable (a CPU machine plans
// calls for the H200, as the Python side does).
int device_sm_count(int device, int fallback);

// Stream-ordered device memory (cuMemAllocAsync / cuMemFreeAsync, the device's default pool), for a launch's
// scratch: freed on `stream` after the kernels that use it, so concurrent streams never share it and a CUDA
// graph capture records it as allocation nodes.
std::uint64_t alloc_async(int device, std::size_t bytes, std::uintptr_t stream);
void free_async(int device, std::uint64_t ptr, std::uintptr_t stream);

// cuLaunchKernel with a 1x1x1 block (a tile kernel's threads are chosen by the compiler) on `stream`,
// with the device's primary context made current for the call and the previous one restored.
void launch(int device, CUfunction f, const unsigned grid[3], void** args, std::uintptr_t stream,
            const std::string& what);

}  // namespace tr
