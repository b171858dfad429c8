// The CUDA driver, opened at first use with dlopen("libcuda.so.1"): the module is built on machines
// without a driver and must import there, so it never links libcuda. Only the few entry points needed
// to load a cubin and launch a kernel are resolved.
#pragma once
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

// cuLaunchKernel with a 1x1x1 block (a tile kernel's threads are chosen by the compiler) on `stream`,
// with the device's primary context made current for the call and the previous one restored.
void launch(int device, CUfunction f, const unsigned grid[3], void** args, std::uintptr_t stream,
            const std::string& what);

}  // namespace tr
