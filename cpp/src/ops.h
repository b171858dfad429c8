// Argument checking and launch plans, per op. Everything here runs before the driver is touched, so a
// bad call is refused (with the op and the argument named) on any machine, GPU or not.
#pragma once
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tr {

// One instantiated kernel (an entry of cpp/include/tr_kernels.h).
struct KernelInfo {
  std::string name;   // extern "C" symbol in the op's cubin
  std::string op;
  std::string dtype;  // "fp32", "fp16", "bf16"
  std::vector<std::pair<std::string, int>> config;  // template arguments by name, in order
  int get(const std::string& key) const;
};

// A refused argument: becomes ValueError (TypeError when the object is not tensor-like at all).
struct ArgError {
  std::string op, arg, message;
  bool type_error = false;
  std::string what() const { return "tile_cpp." + op + ": argument '" + arg + "': " + message; }
};

// A checked call, ready to launch: the grid, the device, and the kernel's parameter values.
struct Plan {
  int device = 0;
  unsigned grid[3] = {1, 1, 1};
  std::map<std::string, std::int64_t> dims;
  std::vector<std::uint64_t> pointers;  // device pointers, in the kernel's parameter order
  std::vector<std::vector<std::int64_t>> shapes;  // each tensor's shape (contiguous), in the same order
  std::vector<std::int32_t> ints;       // then these int parameters
  std::vector<float> floats;            // then these float parameters (order per op, see ops.cpp)
  std::vector<char> kinds;              // 'p', 'i', 'f' per kernel parameter, in order
  // Every pointer 16-byte aligned and every row stride (and column offset) a multiple of 16 bytes: the
  // call may use the kernel's `_a16` twin, which tells the compiler so (TMA / 128-bit loads). Each
  // kernel source says which extents its A = true body assumes divisible; aligned_dims() in ops.cpp
  // lists the same per op.
  bool aligned = false;
  // The kernel's entry point for this call without the `_a16` suffix: the kernel's name, or for a
  // "rows" family op whose row does not fit one TN tile (N > TN) its multi-chunk entry `<name>_loop`
  // (row_entry below; cpp/kernels/common.cuh, TR_ROW_ENTRIES).
  std::string entry;
  std::string function;                 // the symbol to launch: entry, + "_a16" if aligned (or "_exact")
  // Split-KV attention (cpp/kernels/attention.cu): `workspace` fp32 bytes of scratch, allocated on the
  // launch's stream; the kernel's pointer parameters after the tensors' are at these byte offsets in it.
  // Then `combine` (the entry's `_combine` kernel) runs on `combine_grid` with the workspace pointers, the
  // last tensor (the output) and `combine_ints`, and the scratch is freed on the stream.
  std::size_t workspace = 0;
  std::vector<std::size_t> workspace_offsets;
  std::string combine;
  unsigned combine_grid[3] = {1, 1, 1};
  std::vector<std::int32_t> combine_ints;
};

// The entry point of kernel `k` for rows `n` wide, for an op of the "rows" family: `<name>` (the row in
// one TN tile, no chunk loop) when n <= TN, else `<name>_loop` (multi-chunk; ArgError when TN is over
// TR_ROW_LOOP_MAX_TN, which has no loop). Any other op: `<name>`.
std::string row_entry(const KernelInfo& k, std::int64_t n);

// The attention schedule (python/tilerosetta/kernels/attention_split.py, the same arithmetic): whether the
// G = H / Hkv heads of a group are one query tile (G > 1 and G * S <= tq), and the split-KV plan
// (n_split, chunk in keys) of `tiles` row tiles over `sk` keys in `block_n`-key tiles on `sms` SMs, chunks of
// at least `min_blocks` key tiles (a call's SPLIT_MIN_BLOCKS; attention_split.py MIN_SPLIT_BLOCKS by default).
constexpr std::int64_t kMinSplitBlocks = 4;
bool packed_rows(std::int64_t h, std::int64_t hkv, std::int64_t s, std::int64_t tq);
std::pair<std::int64_t, std::int64_t> split_plan(std::int64_t tiles, std::int64_t sk, std::int64_t block_n,
                                                 std::int64_t sms, std::int64_t min_blocks = kMinSplitBlocks);

// The argument names of an op (inputs then outputs), for error messages and the Python side.
std::vector<std::string> op_arguments(const std::string& op);

// Checks tensors (duck typed: data_ptr(), shape, stride(), dtype, device) and params against the op's
// signature and the kernel's dtype/config, and computes the launch plan. `host`: the config keys that size
// the launch but compile nothing (attention's SPLIT_MIN_BLOCKS, split_plan's min_blocks; EXACT of the row ops,
// silu_and_mul and rope, whether whole tiles take the `_exact` twin); any other key is refused. Throws ArgError.
Plan make_plan(const KernelInfo& k, const pybind11::sequence& tensors, const pybind11::dict& params,
               const pybind11::dict& host = pybind11::dict());

// New data pointers for a kept plan (Prepared in module.cpp): the checks of make_plan that depend on the
// pointers alone. Each non-null and element-aligned (16-byte aligned when the plan launches an `_a16`
// twin), and no output overlapping another tensor beyond what the op declares in place. Throws ArgError.
void check_pointers(const KernelInfo& k, const Plan& plan, const std::vector<std::uint64_t>& pointers);

}  // namespace tr
