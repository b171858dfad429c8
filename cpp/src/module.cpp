// pybind11 module `tilerosetta_tile_cpp`: the CUDA Tile C++ kernels of cpp/kernels, embedded as cubins
// for sm_80/90/100/120, listed, checked and launched on a given CUDA stream.
//
// Tensors are duck typed (anything with data_ptr(), shape, stride(), dtype, device), so the module
// has no dependency on torch's C++ ABI. Every call is checked before the driver is touched; driver
// errors become RuntimeError with the driver's own message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "driver.h"
#include "embedded.h"
#include "ops.h"
#include "tr_kernels.h"
#include "tr_ops.h"

namespace py = pybind11;

namespace {

#define TR_STR2(x) #x
#define TR_STR(x) TR_STR2(x)

// Config key names per op (TR_CONFIG_KEYS in tr_kernels.h).
const std::map<std::string, std::vector<std::string>>& config_keys() {
  static const std::map<std::string, std::vector<std::string>> keys = {
#define Y(op, ...) {#op, {__VA_ARGS__}},
      TR_CONFIG_KEYS(Y)
#undef Y
  };
  return keys;
}

tr::KernelInfo make_info(const char* op, const char* dtype, std::vector<int> values) {
  tr::KernelInfo k{std::string(op) + "_" + dtype, op, dtype, {}};
  const auto& keys = config_keys().at(op);
  if (keys.size() != values.size()) throw std::logic_error(std::string("config arity mismatch for ") + op);
  for (size_t i = 0; i < values.size(); ++i) {
    k.name += "_" + std::to_string(values[i]);
    k.config.emplace_back(keys[i], values[i]);
  }
  return k;
}

// Every instantiated kernel, from the same table the kernel sources instantiate.
const std::vector<tr::KernelInfo>& kernel_table() {
  static const std::vector<tr::KernelInfo> table = [] {
    std::vector<tr::KernelInfo> t;
#define X(op, dt, CT, ...) t.push_back(make_info(#op, #dt, {__VA_ARGS__}));
    TR_ALL_KERNELS(X)  // cpp/generated/tr_ops.h: every op of the specs
#undef X
    return t;
  }();
  return table;
}

// Every launch names its kernel: a hash lookup (the table has ~120 entries, searched by string before).
const tr::KernelInfo& find_kernel(const std::string& name) {
  static const std::unordered_map<std::string, const tr::KernelInfo*> by_name = [] {
    std::unordered_map<std::string, const tr::KernelInfo*> m;
    for (auto& k : kernel_table()) m.emplace(k.name, &k);
    return m;
  }();
  if (auto it = by_name.find(name); it != by_name.end()) return *it->second;
  throw py::value_error("tile_cpp: unknown kernel '" + name + "'; kernels() lists the instantiated ones");
}

bool has_cubin(const std::string& op) {
  static const std::set<std::string> ops = [] {
    std::set<std::string> s;
    for (size_t i = 0; i < tr_num_cubins; ++i) s.insert(tr_cubins[i].op);
    return s;
  }();
  return ops.count(op) != 0;
}

py::dict kernel_dict(const tr::KernelInfo& k) {
  py::dict config;
  for (auto& [key, v] : k.config) config[py::str(key)] = v;
  py::dict d;
  d["name"] = k.name, d["op"] = k.op, d["dtype"] = k.dtype, d["config"] = config;
  return d;
}

// a16: None = the best twin the call allows (the default: `_exact` for a row op's, silu_and_mul's or rope's call whose
// tiles are all whole, unless host EXACT is 0, else `_a16` when aligned), False = always the generic body, True = the `_a16` twin or a ValueError. The probe
// (tools/probe_tile_cpp.py) uses it to time and check each twin on its own.
tr::Plan checked_plan(const tr::KernelInfo& k, const py::sequence& tensors, const py::dict& params,
                      const py::object& a16 = py::none(), const py::dict& host = py::dict()) {
  tr::Plan plan;
  try {
    plan = tr::make_plan(k, tensors, params, host);
  } catch (const tr::ArgError& e) {
    if (e.type_error) throw py::type_error(e.what());
    throw py::value_error(e.what());
  }
  if (!a16.is_none()) {
    if (!a16.cast<bool>()) {
      plan.function = plan.entry;  // the generic body of the same entry point (one-tile or loop)
    } else if (!plan.aligned) {
      throw py::value_error("tile_cpp." + k.op + ": argument 'a16': the call is not 16-byte aligned (pointers "
                            "and row strides), so " + plan.entry + "_a16 cannot run it");
    } else {
      plan.function = plan.entry + "_a16";
    }
  }
  return plan;
}

// The driver call of a checked plan, with these data pointers (the tensors', in the plan's order). A split-KV
// attention plan also gets its workspace (stream-ordered scratch) and the combine launch.
void launch_plan(const tr::KernelInfo& k, const tr::Plan& plan, tr::CUfunction& f, const std::uint64_t* pointers,
                 std::uintptr_t stream) {
  if (!has_cubin(k.op)) throw std::runtime_error("tile_cpp." + k.op + ": no cubin of this op was built");
  const size_t n_tensors = plan.pointers.size();
  std::uint64_t all[16];  // the tensors' pointers, then the workspace's
  if (n_tensors + plan.workspace_offsets.size() > 16) throw std::logic_error("more than 16 pointer parameters");
  std::copy(pointers, pointers + n_tensors, all);
  try {
    if (!f) f = tr::get_function(plan.device, k.op, plan.function);
    tr::CUfunction combine = plan.combine.empty() ? nullptr : tr::get_function(plan.device, k.op, plan.combine);
    const std::uint64_t ws = plan.workspace ? tr::alloc_async(plan.device, plan.workspace, stream) : 0;
    for (size_t w = 0; w < plan.workspace_offsets.size(); ++w)
      all[n_tensors + w] = ws ? ws + plan.workspace_offsets[w] : 0;
    void* args[32];
    size_t n = 0, p = 0, i = 0, fl = 0;
    if (plan.kinds.size() > 32) throw std::logic_error("more than 32 kernel parameters");
    for (char kind : plan.kinds) {
      if (kind == 'p') args[n++] = &all[p++];
      else if (kind == 'i') args[n++] = const_cast<std::int32_t*>(&plan.ints[i++]);
      else args[n++] = const_cast<float*>(&plan.floats[fl++]);
    }
    try {
      tr::launch(plan.device, f, plan.grid, args, stream, plan.function);
      if (combine) {
        // (m_ws, l_ws, acc_ws, out, R, n_split): attention.cu's `_combine` entry.
        void* cargs[] = {&all[n_tensors], &all[n_tensors + 1], &all[n_tensors + 2], &all[n_tensors - 1],
                         const_cast<std::int32_t*>(&plan.combine_ints[0]),
                         const_cast<std::int32_t*>(&plan.combine_ints[1])};
        tr::launch(plan.device, combine, plan.combine_grid, cargs, stream, plan.combine);
      }
    } catch (...) {
      if (ws) tr::free_async(plan.device, ws, stream);
      throw;
    }
    if (ws) tr::free_async(plan.device, ws, stream);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("tile_cpp." + k.op + ": " + e.what());
  }
}

void launch(const std::string& kernel, const py::sequence& tensors, const py::dict& params,
            std::uintptr_t stream, const py::object& a16, const py::dict& host) {
  const tr::KernelInfo& k = find_kernel(kernel);
  tr::Plan plan = checked_plan(k, tensors, params, a16, host);  // refuse before touching the driver
  tr::CUfunction f = nullptr;
  launch_plan(k, plan, f, plan.pointers.data(), stream);
}

// A checked call kept for the later calls of its signature (issue 14 item 7): what make_plan derived from
// the tensors' shapes, strides, dtypes and devices and from the params (grid, ints, floats, kernel) is
// fixed; a launch brings only its data pointers and stream. The adapter keeps one per call signature
// (Backend.signature_memo: each tensor's dtype, shape, strides, device and pointer alignment, each param),
// so a handle only ever sees tensors of the extents it checked; per launch it re-checks what depends on
// the pointers alone (tr::check_pointers: null, alignment, overlap), never trusting them blindly.
struct Prepared {
  const tr::KernelInfo* k;
  tr::Plan plan;
  tr::CUfunction f = nullptr;  // resolved on the first launch: preparing needs no GPU

  void launch(const py::tuple& pointers, std::uintptr_t stream) {
    const size_t n = PyTuple_GET_SIZE(pointers.ptr());
    std::vector<std::uint64_t> given(n);  // their count is check_pointers' first check
    for (size_t i = 0; i < n; ++i) {
      given[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pointers.ptr(), i));
      if (given[i] == static_cast<std::uint64_t>(-1) && PyErr_Occurred()) throw py::error_already_set();
    }
    try {
      tr::check_pointers(*k, plan, given);
    } catch (const tr::ArgError& e) {
      throw py::value_error(e.what());
    }
    launch_plan(*k, plan, f, given.data(), stream);
  }
};

}  // namespace

PYBIND11_MODULE(tilerosetta_tile_cpp, m) {
  m.doc() = "CUDA Tile C++ kernels (cpp/kernels) embedded as cubins; launched through the CUDA driver API";

  m.def("kernels", [] {
    py::list out;
    for (auto& k : kernel_table()) out.append(kernel_dict(k));
    return out;
  }, "Every instantiated kernel: dicts with name, op, dtype, config (template arguments by name).");

  m.def("cubins", [] {
    py::list out;
    for (size_t i = 0; i < tr_num_cubins; ++i) {
      const TrCubin& c = tr_cubins[i];
      std::set<std::string> dtypes;
      for (auto& k : kernel_table())
        if (k.op == c.op) dtypes.insert(k.dtype);
      for (auto& dt : dtypes) out.append(py::make_tuple(c.op, dt, "sm_" + std::to_string(c.arch), c.size()));
    }
    return out;
  }, "(op, dtype, arch, size in bytes) for every embedded cubin (one cubin per op and arch holds all of "
     "the op's dtypes and configs).");

  m.def("cubin", [](const std::string& op, const std::string& arch) {
    for (size_t i = 0; i < tr_num_cubins; ++i) {
      const TrCubin& c = tr_cubins[i];
      if (op == c.op && arch == "sm_" + std::to_string(c.arch))
        return py::bytes(reinterpret_cast<const char*>(c.begin), c.size());
    }
    throw py::key_error("no embedded cubin for " + op + " " + arch);
  }, py::arg("op"), py::arg("arch"), "The bytes of one embedded cubin.");

  m.def("arguments", &tr::op_arguments, py::arg("op"), "The op's tensor argument names, in call order.");

  m.def("driver_status", [] {
    std::string why = tr::driver_status();
    return py::make_tuple(why.empty(), why.empty() ? std::string("CUDA driver loaded") : why);
  }, "(ok, reason): whether libcuda.so.1 loads and sees a device.");

  m.def("device_arch", [](int device) { return "sm_" + std::to_string(tr::device_arch(device)); },
        py::arg("device") = 0);

  m.def("plan", [](const std::string& kernel, const py::sequence& tensors, const py::dict& params,
                   const py::object& a16, const py::dict& host) {
    tr::Plan p = checked_plan(find_kernel(kernel), tensors, params, a16, host);
    py::dict d;
    d["grid"] = py::make_tuple(p.grid[0], p.grid[1], p.grid[2]);
    d["device"] = p.device;
    d["dims"] = p.dims;
    d["ints"] = p.ints;
    d["floats"] = p.floats;
    d["aligned"] = p.aligned;
    d["entry"] = p.entry;
    d["function"] = p.function;
    d["workspace"] = p.workspace;  // split-KV attention: scratch bytes, and the combine kernel and grid
    d["combine"] = p.combine;
    d["combine_grid"] = py::make_tuple(p.combine_grid[0], p.combine_grid[1], p.combine_grid[2]);
    return d;
  }, py::arg("kernel"), py::arg("tensors"), py::arg("params") = py::dict(), py::arg("a16") = py::none(),
     py::arg("host") = py::dict(),
     "Check a call and return its launch plan without launching (no GPU needed). a16: None picks the "
     "best twin the call allows (`_exact` for a row op, silu_and_mul or rope when every block's tile is whole, else "
     "`_a16` when aligned), False forces the generic body, True requires the `_a16` twin. host: as prepare().");

  py::class_<Prepared>(m, "Prepared",
                       "A checked call of one signature; launch(pointers, stream) runs it on other tensors of "
                       "the same dtypes, shapes, strides, device and alignment (prepare()).")
      .def("launch", &Prepared::launch, py::arg("pointers"), py::arg("stream"),
           "Launch on these data pointers (a tuple of ints, in the op's argument order) and CUDA stream "
           "handle; refuses null, misaligned or overlapping pointers. Asynchronous.")
      .def_property_readonly("kernel", [](const Prepared& p) { return p.k->name; })
      .def_property_readonly("function", [](const Prepared& p) { return p.plan.function; })
      .def_property_readonly("device", [](const Prepared& p) { return p.plan.device; })
      .def_property_readonly("grid", [](const Prepared& p) {
        return py::make_tuple(p.plan.grid[0], p.plan.grid[1], p.plan.grid[2]);
      });

  m.def("prepare", [](const std::string& kernel, const py::sequence& tensors, const py::dict& params,
                      const py::object& a16, const py::dict& host) {
    const tr::KernelInfo& k = find_kernel(kernel);
    return Prepared{&k, checked_plan(k, tensors, params, a16, host)};
  }, py::arg("kernel"), py::arg("tensors"), py::arg("params") = py::dict(), py::arg("a16") = py::none(),
     py::arg("host") = py::dict(),
     "Check a call as launch() does (no GPU needed) and keep its plan: a Prepared to launch later calls of the "
     "same signature with their own data pointers. host: config keys that size the launch without a kernel of "
     "their own (attention: SPLIT_MIN_BLOCKS, default 4; the row ops, silu_and_mul and rope: EXACT 0 or 1, default 1).");

  m.def("launch", &launch, py::arg("kernel"), py::arg("tensors"), py::arg("params"), py::arg("stream"),
        py::arg("a16") = py::none(), py::arg("host") = py::dict(),
        "Check and launch `kernel` on the CUDA stream handle `stream` (an int, e.g. "
        "torch.cuda.current_stream().cuda_stream). Asynchronous: no host synchronisation.");

  m.attr("NVCC_VERSION") = TR_STR(TR_NVCC_VERSION);
  m.attr("ROW_LOOP_MAX_TN") = TR_ROW_LOOP_MAX_TN;  // a "rows" config wider than this has no `_loop` entry
  m.attr("ARCHS") = [] {
    std::set<int> archs;
    for (size_t i = 0; i < tr_num_cubins; ++i) archs.insert(tr_cubins[i].arch);
    py::list l;
    for (int a : archs) l.append("sm_" + std::to_string(a));
    return l;
  }();
}
