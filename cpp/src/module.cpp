// pybind11 module `tilerosetta_tile_cpp`: the CUDA Tile C++ kernels of cpp/kernels, embedded as cubins
// for sm_80/90/100/120, listed, checked and launched on a given CUDA stream.
//
// Tensors are duck typed (anything with data_ptr(), shape, stride(), dtype, device), so the module
// has no dependency on torch's C++ ABI. Every call is checked before the driver is touched; driver
// errors become RuntimeError with the driver's own message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

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

// a16: None = the aligned twin when the call allows it (the default), False = always the generic body,
// True = the aligned twin or a ValueError. The probe (tools/probe_tile_cpp.py) uses it to time and check
// each twin on its own.
tr::Plan checked_plan(const tr::KernelInfo& k, const py::sequence& tensors, const py::dict& params,
                      const py::object& a16 = py::none()) {
  tr::Plan plan;
  try {
    plan = tr::make_plan(k, tensors, params);
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
    }
  }
  return plan;
}

void launch(const std::string& kernel, const py::sequence& tensors, const py::dict& params,
            std::uintptr_t stream, const py::object& a16) {
  const tr::KernelInfo& k = find_kernel(kernel);
  tr::Plan plan = checked_plan(k, tensors, params, a16);  // refuse before touching the driver
  if (!has_cubin(k.op)) throw std::runtime_error("tile_cpp." + k.op + ": no cubin of this op was built");
  try {
    tr::CUfunction f = tr::get_function(plan.device, k.op, plan.function);
    std::vector<void*> args;
    size_t p = 0, i = 0, fl = 0;
    for (char kind : plan.kinds) {
      if (kind == 'p') args.push_back(&plan.pointers[p++]);
      else if (kind == 'i') args.push_back(&plan.ints[i++]);
      else args.push_back(&plan.floats[fl++]);
    }
    tr::launch(plan.device, f, plan.grid, args.data(), stream, plan.function);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("tile_cpp." + k.op + ": " + e.what());
  }
}

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
                   const py::object& a16) {
    tr::Plan p = checked_plan(find_kernel(kernel), tensors, params, a16);
    py::dict d;
    d["grid"] = py::make_tuple(p.grid[0], p.grid[1], p.grid[2]);
    d["device"] = p.device;
    d["dims"] = p.dims;
    d["ints"] = p.ints;
    d["floats"] = p.floats;
    d["aligned"] = p.aligned;
    d["entry"] = p.entry;
    d["function"] = p.function;
    return d;
  }, py::arg("kernel"), py::arg("tensors"), py::arg("params") = py::dict(), py::arg("a16") = py::none(),
     "Check a call and return its launch plan without launching (no GPU needed). a16: None picks the "
     "aligned twin when the call allows it, False forces the generic body, True requires the twin.");

  m.def("launch", &launch, py::arg("kernel"), py::arg("tensors"), py::arg("params"), py::arg("stream"),
        py::arg("a16") = py::none(),
        "Check and launch `kernel` on the CUDA stream handle `stream` (an int, e.g. "
        "torch.cuda.current_stream().cuda_stream). Asynchronous: no host synchronisation.");

  m.attr("NVCC_VERSION") = TR_STR(TR_NVCC_VERSION);
  m.attr("ARCHS") = [] {
    std::set<int> archs;
    for (size_t i = 0; i < tr_num_cubins; ++i) archs.insert(tr_cubins[i].arch);
    py::list l;
    for (int a : archs) l.append("sm_" + std::to_string(a));
    return l;
  }();
}
