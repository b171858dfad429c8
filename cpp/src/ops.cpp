#include "ops.h"

#include "driver.h"

#include "tr_kernels.h"
#include "tr_ops.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace py = pybind11;

namespace tr {
namespace {

struct Sig {
  std::vector<std::pair<std::string, std::vector<std::string>>> tensors;  // name, symbolic shape
};

// The ops' signatures (inputs then outputs), from the generated table of the specs (tr_ops.h).
const std::map<std::string, Sig>& signatures() {
  static const std::map<std::string, Sig> sigs = [] {
    std::map<std::string, Sig> m;
    for (const auto& op : gen::kOps) {
      Sig& sig = m[op.name];
      for (int i = 0; i < op.n_tensors; ++i) {
        const auto& t = op.tensors[i];
        sig.tensors.emplace_back(t.name, std::vector<std::string>(t.shape, t.shape + t.rank));
      }
    }
    return m;
  }();
  return sigs;
}

const gen::OpDecl& decl(const std::string& op) {
  for (const auto& o : gen::kOps)
    if (op == o.name) return o;
  throw std::logic_error("op " + op + " is not in the generated table (tr_ops.h)");
}

constexpr std::int64_t kMaxInt = std::numeric_limits<std::int32_t>::max();

// What the module needs of one tensor-like argument.
struct TensorArg {
  std::uint64_t ptr;
  std::vector<std::int64_t> shape, stride;
  std::string dtype;  // fp32/fp16/bf16 or the object's own spelling
  std::string device_type;
  int device_index;
};

std::string dtype_short(const std::string& s) {
  std::string t = s.rfind("torch.", 0) == 0 ? s.substr(6) : s;
  if (t == "float32" || t == "float") return "fp32";
  if (t == "float16" || t == "half") return "fp16";
  if (t == "bfloat16") return "bf16";
  return t;
}

int element_size(const std::string& dtype) { return dtype == "fp32" ? 4 : 2; }

// The dtype's short name. torch's dtypes are immutable singletons, so the name of each one seen is kept
// (with a reference, so the object and its address stay valid): str(dtype) and its parsing ran per tensor
// and call before. Any other object (a duck-typed stand-in) is read afresh every time.
std::string dtype_of(py::handle dtype) {
  static std::vector<std::pair<PyObject*, std::string>> seen;  // the GIL is held: no lock needed
  const bool torch_dtype = std::strcmp(Py_TYPE(dtype.ptr())->tp_name, "torch.dtype") == 0;
  if (torch_dtype)
    for (const auto& [obj, name] : seen)
      if (obj == dtype.ptr()) return name;
  std::string name = dtype_short(py::str(dtype));
  if (torch_dtype && seen.size() < 64) seen.emplace_back(py::reinterpret_borrow<py::object>(dtype).release().ptr(), name);
  return name;
}

// A shape or stride sequence as int64s: a tuple (torch.Size, stride()) item by item without an iterator
// object; an int item without pybind11's caster; anything else as before (pybind11 casts, which refuse a
// float).
void read_ints(py::handle seq, std::vector<std::int64_t>& out) {
  PyObject* p = seq.ptr();
  if (!PyTuple_Check(p)) {
    for (auto e : seq) out.push_back(e.cast<std::int64_t>());
    return;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(p);
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* e = PyTuple_GET_ITEM(p, i);
    if (!PyLong_Check(e)) {
      out.push_back(py::handle(e).cast<std::int64_t>());
      continue;
    }
    long long v = PyLong_AsLongLong(e);
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();  // past int64: OverflowError
    out.push_back(v);
  }
}

TensorArg read_tensor(const std::string& op, const std::string& name, py::handle obj) {
  auto fail_type = [&](const std::string& what) {
    throw ArgError{op, name,
                   "expected a tensor-like object (data_ptr(), shape, stride(), dtype, device), got " +
                       std::string(py::str(py::type::of(obj).attr("__name__"))) + what,
                   true};
  };
  // Each attribute is looked up once (no hasattr first: that doubled the lookups of every call), all five
  // before any is used, so a missing one is named as before.
  static const char* const kAttrs[] = {"data_ptr", "shape", "stride", "dtype", "device"};
  py::object attrs[5];
  for (int a = 0; a < 5; ++a) {
    PyObject* v = PyObject_GetAttrString(obj.ptr(), kAttrs[a]);
    if (!v) {
      if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
        py::error_already_set e;
        fail_type(std::string(" (") + e.what() + ")");
      }
      PyErr_Clear();
      fail_type(std::string(" (no '") + kAttrs[a] + "')");
    }
    attrs[a] = py::reinterpret_steal<py::object>(v);
  }
  TensorArg t;
  try {
    t.ptr = attrs[0]().cast<std::uint64_t>();
    read_ints(attrs[1], t.shape);
    read_ints(attrs[2](), t.stride);
    t.dtype = dtype_of(attrs[3]);
    // device.type and device.index (torch.device); an object without them is read as its str, index 0.
    py::handle dev = attrs[4];
    PyObject* type = PyObject_GetAttrString(dev.ptr(), "type");
    if (type) {
      py::object owned = py::reinterpret_steal<py::object>(type);
      t.device_type = PyUnicode_Check(type) ? owned.cast<std::string>() : std::string(py::str(owned));
    } else if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
      PyErr_Clear();
      t.device_type = py::str(dev);
    } else {
      throw py::error_already_set();
    }
    t.device_index = 0;
    PyObject* idx = PyObject_GetAttrString(dev.ptr(), "index");
    if (idx) {
      py::object owned = py::reinterpret_steal<py::object>(idx);
      if (!owned.is_none()) t.device_index = owned.cast<int>();
    } else if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
      PyErr_Clear();
    } else {
      throw py::error_already_set();
    }
  } catch (const py::error_already_set& e) {
    fail_type(std::string(" (") + e.what() + ")");
  } catch (const py::cast_error& e) {
    fail_type(std::string(" (") + e.what() + ")");
  }
  return t;
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// A symbolic extent ("N", "2*H", "Hkv*G") evaluated against the bound dims: a product of names and ints.
std::int64_t eval_dim(const std::string& expr, const std::map<std::string, std::int64_t>& dims) {
  std::int64_t value = 1;
  for (size_t start = 0; start <= expr.size();) {
    size_t star = expr.find('*', start);
    std::string f = expr.substr(start, star == std::string::npos ? std::string::npos : star - start);
    value *= std::isdigit(static_cast<unsigned char>(f[0])) ? std::stoll(f) : dims.at(f);
    if (star == std::string::npos) break;
    start = star + 1;
  }
  return value;
}

// A finite float > 0 (eps, scale), as the spec's Param declares it. Checked here too because the raw
// path (backend.implementations()) reaches the module without the shared validation: a str is refused,
// not converted, and a bool is not a number (True would otherwise be 1.0).
double param_number(const std::string& op, const py::dict& params, const char* key) {
  if (!params.contains(key)) throw ArgError{op, key, "missing parameter"};
  py::object v = params[key];
  if (py::isinstance<py::bool_>(v) || !(py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v)))
    throw ArgError{op, key, "expected a finite float > 0, got " + std::string(py::repr(v)), true};
  double x = v.cast<double>();
  if (!std::isfinite(x) || x <= 0) throw ArgError{op, key, "expected a finite value > 0, got " + std::string(py::repr(v))};
  return x;
}

// A Python bool only (causal): "false" and 0/1 are refused instead of being taken by truthiness.
bool param_flag(const std::string& op, const py::dict& params, const char* key, bool fallback) {
  if (!params.contains(key)) return fallback;
  py::object v = params[key];
  if (!py::isinstance<py::bool_>(v))
    throw ArgError{op, key, "expected a bool (True or False), got " + std::string(py::repr(v)), true};
  return v.cast<bool>();
}

// Without a usable driver (a CPU machine) attention plans are made for the H200, as the Python side does.
constexpr int kH200Sms = 132;

unsigned blocks(std::int64_t n, int tile) { return static_cast<unsigned>((n + tile - 1) / tile); }

// The extents each op's `_a16` body assumes to be multiples of 16 bytes of the element type (row
// strides, and the column offset of a second half): must match the tr::dv<A, T>(...) calls in
// cpp/kernels/<op>.cu. rope's entry is D/2 (the halves' offset); D then follows.
std::vector<std::int64_t> aligned_dims(const std::string& op, std::map<std::string, std::int64_t>& dm) {
  if (op == "vector_add") return {dm["N"]};
  if (op == "transpose") return {dm["M"], dm["N"]};
  if (std::string(decl(op).family) == "rows") return {dm["N"]};
  if (op == "silu_and_mul") return {dm["H"]};
  if (op == "rope") return {dm["D"] % 2 ? 1 : dm["D"] / 2};
  if (op == "matmul" || op == "bmm") return {dm["K"], dm["N"]};
  if (op == "attention") return {dm["D"]};
  throw std::logic_error("no alignment rule for op " + op);
}

// Whether `input` is one of the space-separated names of an output's generated `inplace_ok`.
bool declared_inplace(const char* names, const std::string& input) {
  std::string all = std::string(" ") + names + " ";
  return all.find(" " + input + " ") != std::string::npos;
}

// A data pointer is non-null and aligned to its elements, and to 16 bytes when the launch is an `_a16` twin
// (a16_function: that symbol, for the message): make_plan checks each tensor's, check_pointers each new
// pointer of a kept plan.
void check_data_ptr(const std::string& op, const std::string& name, std::uint64_t p, const std::string& dtype,
                    const std::string& a16_function = "") {
  if (p == 0 || p % element_size(dtype) || (!a16_function.empty() && p % 16))
    throw ArgError{op, name, "data_ptr " + std::to_string(p) + " is null or misaligned" +
                                 (a16_function.empty() ? "" : " (this plan launches " + a16_function + ")")};
}

// An output that shares bytes with any other argument is refused: the kernels read other tiles of an
// input after writing a tile of the output (transpose, matmul, attention, the row ops), so an aliased or
// partly overlapping output gives silently wrong numbers. The same rule as the shared validation
// (OpSpec.overlap in specs/base.py) and the Rust layer (args::check_no_alias), checked here too because
// the raw path (backend.implementations()) reaches the module without the shared validation. Only the
// pairs a spec declares in OpSpec.inplace_ok (the generated table's `inplace_ok`: rope's out and q) may
// be the very same tensor (same span and shape); every other overlap is refused, each pair once, named by
// its first output. `args` are contiguous (checked above): a tensor spans numel * element size bytes.
void check_no_overlap(const std::string& op, const std::string& dtype, const std::vector<TensorArg>& args) {
  const gen::OpDecl& d = decl(op);
  auto span = [&](const TensorArg& t) {
    std::uint64_t n = 1;
    for (auto e : t.shape) n *= static_cast<std::uint64_t>(e);
    return std::make_pair(t.ptr, t.ptr + n * element_size(dtype));
  };
  auto hex = [](std::uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%#llx", static_cast<unsigned long long>(v));
    return std::string(buf);
  };
  for (size_t o = 0; o < args.size(); ++o) {
    if (!d.tensors[o].output) continue;
    for (size_t n = 0; n < args.size(); ++n) {
      if (n == o || (d.tensors[n].output && n < o)) continue;
      auto [s0, s1] = span(args[o]);
      auto [t0, t1] = span(args[n]);
      if (!(s0 < t1 && t0 < s1)) continue;
      bool same = s0 == t0 && s1 == t1 && args[o].shape == args[n].shape;
      if (same && !d.tensors[n].output && declared_inplace(d.tensors[o].inplace_ok, d.tensors[n].name)) continue;
      throw ArgError{op, d.tensors[o].name,
                     std::string("output ") + (same ? "is the same memory as" : "partly overlaps") + " '" +
                         d.tensors[n].name + "' (bytes [" + hex(s0) + ", " + hex(s1) + ") and [" + hex(t0) + ", " +
                         hex(t1) + ")); " + op + " does not run in place: pass a separate output tensor"};
    }
  }
}

}  // namespace

int KernelInfo::get(const std::string& key) const {
  for (auto& [k, v] : config)
    if (k == key) return v;
  throw std::logic_error("kernel " + name + " has no config key " + key);
}

bool packed_rows(std::int64_t h, std::int64_t hkv, std::int64_t s, std::int64_t tq) {
  const std::int64_t g = h / hkv;
  return g > 1 && g * s <= tq;
}

std::pair<std::int64_t, std::int64_t> split_plan(std::int64_t tiles, std::int64_t sk, std::int64_t block_n,
                                                 std::int64_t sms, std::int64_t min_blocks) {
  auto cdiv = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  const std::int64_t min_chunk = min_blocks * block_n;
  if (tiles >= sms || sk < 2 * min_chunk) return {1, sk};
  const std::int64_t n_split = std::min(cdiv(sk, min_chunk), 2 * sms / tiles);  // at most 2 per SM
  const std::int64_t chunk = cdiv(cdiv(sk, n_split), block_n) * block_n;
  return {cdiv(sk, chunk), chunk};
}

std::string row_entry(const KernelInfo& k, std::int64_t n) {
  if (std::string(decl(k.op).family) != "rows") return k.name;
  // The one-tile entry computes only the first TN columns of a row: wider rows must take the loop, which
  // only chunks of up to TR_ROW_LOOP_MAX_TN columns have (tr_kernels.h).
  const int tn = k.get("TN");
  if (n <= tn) return k.name;
  if (tn > TR_ROW_LOOP_MAX_TN)
    throw ArgError{k.op, "x", "rows of N=" + std::to_string(n) + " columns are wider than kernel " + k.name +
                                  "'s tile (TN=" + std::to_string(tn) + "), and the multi-chunk loop is compiled only for "
                                  "TN <= " + std::to_string(TR_ROW_LOOP_MAX_TN) +
                                  " (cpp/include/tr_kernels.h): choose a config with TN >= N or TN <= " +
                                  std::to_string(TR_ROW_LOOP_MAX_TN)};
  return k.name + "_loop";
}

std::vector<std::string> op_arguments(const std::string& op) {
  std::vector<std::string> names;
  for (auto& [n, s] : signatures().at(op).tensors) names.push_back(n);
  return names;
}

void check_pointers(const KernelInfo& k, const Plan& plan, const std::vector<std::uint64_t>& pointers) {
  const std::string& op = k.op;
  const gen::OpDecl& d = decl(op);
  if (pointers.size() != plan.pointers.size())
    throw ArgError{op, "pointers", "expected " + std::to_string(plan.pointers.size()) + " data pointers, got " +
                                       std::to_string(pointers.size())};
  const bool a16 = plan.function != plan.entry;  // `_a16` / `_exact`: TMA / 128-bit accesses need 16 bytes
  std::vector<TensorArg> args(pointers.size());
  for (size_t i = 0; i < pointers.size(); ++i) {
    const std::uint64_t p = pointers[i];
    check_data_ptr(op, d.tensors[i].name, p, k.dtype, a16 ? plan.function : "");
    args[i].ptr = p;
    args[i].shape = plan.shapes[i];
  }
  check_no_overlap(op, k.dtype, args);
}

// Whether op's kernels have an `_exact` twin (the "rows" family's one-tile entries, silu_and_mul, rope).
static bool has_exact(const std::string& op) {
  return std::string(decl(op).family) == "rows" || op == "silu_and_mul" || op == "rope";
}

// make_plan's `host` keys: the ones an op takes (the adapter's HOST_KEYS, backends/tile_cpp.py), each an int in
// its range: attention's SPLIT_MIN_BLOCKS >= 1, EXACT 0 or 1 for an op with `_exact` twins (has_exact). Any
// other key is refused by name.
static void check_host_keys(const std::string& op, const py::dict& host) {
  const bool exact_ops = has_exact(op);
  const char* takes = op == "attention" ? "SPLIT_MIN_BLOCKS" : exact_ops ? "EXACT" : nullptr;
  for (auto item : host) {
    std::string name = py::str(item.first);
    if (!takes || name != takes)
      throw ArgError{op, "config", "unknown host-side config key '" + name + "'" +
                                       (takes ? std::string(": expected ") + takes : std::string(": this op takes none"))};
    py::handle v = item.second;
    const bool is_int = py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v);
    if (exact_ops && !(is_int && (v.cast<std::int64_t>() == 0 || v.cast<std::int64_t>() == 1)))
      throw ArgError{op, "config", name + " must be 0 or 1, got " + std::string(py::repr(v))};
    if (!exact_ops && !(is_int && v.cast<std::int64_t>() >= 1))
      throw ArgError{op, "config", name + " must be an int >= 1, got " + std::string(py::repr(v))};
  }
}

Plan make_plan(const KernelInfo& k, const py::sequence& tensors, const py::dict& params, const py::dict& host) {
  const std::string& op = k.op;
  check_host_keys(op, host);
  const std::int64_t split_min_blocks =
      host.contains("SPLIT_MIN_BLOCKS") ? host["SPLIT_MIN_BLOCKS"].cast<std::int64_t>() : kMinSplitBlocks;
  const bool exact_allowed = !host.contains("EXACT") || host["EXACT"].cast<std::int64_t>() == 1;
  const Sig& sig = signatures().at(op);
  if (py::len(tensors) != sig.tensors.size()) {
    std::string names;
    for (auto& [n, s] : sig.tensors) names += (names.empty() ? "" : ", ") + n;
    throw ArgError{op, "tensors", "expected " + std::to_string(sig.tensors.size()) + " tensors (" + names +
                                      "), got " + std::to_string(py::len(tensors))};
  }
  Plan plan;
  std::vector<TensorArg> args;
  std::map<std::string, std::string> bound_by;
  for (size_t i = 0; i < sig.tensors.size(); ++i) {
    const auto& [name, want] = sig.tensors[i];
    TensorArg t = read_tensor(op, name, tensors[i]);
    if (t.dtype != k.dtype)
      throw ArgError{op, name, "dtype " + t.dtype + " does not match kernel " + k.name + " (" + k.dtype + ")"};
    if (t.device_type != "cuda")
      throw ArgError{op, name, "tensor is on " + t.device_type + ", tile_cpp needs a cuda tensor"};
    if (i == 0) plan.device = t.device_index;
    else if (t.device_index != plan.device)
      throw ArgError{op, name, "tensor is on cuda:" + std::to_string(t.device_index) + ", '" +
                                   sig.tensors[0].first + "' is on cuda:" + std::to_string(plan.device)};
    if (t.shape.size() != want.size() || t.stride.size() != want.size())
      throw ArgError{op, name, "expected " + std::to_string(want.size()) + "-D, got shape " + shape_str(t.shape)};
    std::int64_t numel = 1;
    for (size_t d = 0; d < want.size(); ++d) {  // bind plain symbols (derived ones like 2*H below)
      numel *= t.shape[d];
      if (want[d].find('*') != std::string::npos) continue;
      auto [it, fresh] = plan.dims.emplace(want[d], t.shape[d]);
      if (fresh) bound_by[want[d]] = name;
      else if (it->second != t.shape[d])
        throw ArgError{op, name, "shape " + shape_str(t.shape) + " has " + want[d] + "=" +
                                     std::to_string(t.shape[d]) + " but '" + bound_by[want[d]] + "' has " +
                                     want[d] + "=" + std::to_string(it->second)};
    }
    if (numel == 0) throw ArgError{op, name, "empty tensor (shape " + shape_str(t.shape) + ")"};
    if (numel > kMaxInt)
      throw ArgError{op, name, "has " + std::to_string(numel) + " elements; these kernels index with 32-bit ints"};
    std::int64_t expect = 1;  // row-major contiguity (a stride of an extent-1 dim does not matter)
    for (size_t d = want.size(); d-- > 0;) {
      if (t.shape[d] != 1 && t.stride[d] != expect)
        throw ArgError{op, name, "tensor is not contiguous (strides " + shape_str(t.stride) +
                                     "); call .contiguous() first"};
      expect *= t.shape[d];
    }
    check_data_ptr(op, name, t.ptr, k.dtype);
    args.push_back(std::move(t));
  }
  for (size_t i = 0; i < sig.tensors.size(); ++i) {  // derived extents
    const auto& [name, want] = sig.tensors[i];
    for (size_t d = 0; d < want.size(); ++d)
      if (args[i].shape[d] != eval_dim(want[d], plan.dims)) {
        std::vector<std::int64_t> e;
        for (auto& w : want) e.push_back(eval_dim(w, plan.dims));
        throw ArgError{op, name, "expected shape " + shape_str(e) + ", got " + shape_str(args[i].shape)};
      }
    plan.pointers.push_back(args[i].ptr);
    plan.shapes.push_back(args[i].shape);
  }
  check_no_overlap(op, k.dtype, args);

  auto& dm = plan.dims;
  auto ints = [&](std::initializer_list<std::int64_t> v) {
    for (auto x : v) plan.ints.push_back(static_cast<std::int32_t>(x));
  };
  // A flat grid x of the product of these block counts (the kernels unflatten it, first count fastest):
  // grid y/z stop at 65535, x at 2^31-1, which no valid call reaches (each block covers >= 1 element).
  auto flat = [&](std::initializer_list<std::int64_t> counts) {
    std::int64_t n = 1;
    for (auto c : counts) n *= c;
    if (n > kMaxInt)
      throw ArgError{op, sig.tensors[0].first, std::to_string(n) + " blocks exceed grid x's limit of 2^31-1"};
    return static_cast<unsigned>(n);
  };
  // Kernel parameter order: all pointers, then ints and floats as each kernel declares them.
  std::string kinds(plan.pointers.size(), 'p');
  if (op == "vector_add") {
    ints({dm["N"]}), kinds += "i";
    plan.grid[0] = blocks(dm["N"], k.get("TILE"));
  } else if (op == "transpose") {
    ints({dm["M"], dm["N"]}), kinds += "ii";
    plan.grid[0] = flat({blocks(dm["M"], k.get("TM")), blocks(dm["N"], k.get("TN"))});
  } else if (std::string(decl(op).family) == "rows") {
    // The "rows" family (OpSpec.family): (M, N) rows, TM per block; float params (eps) in the spec's order.
    ints({dm["M"], dm["N"]}), kinds += "ii";
    const gen::OpDecl& d = decl(op);
    for (int i = 0; i < d.n_params; ++i) {
      plan.floats.push_back(static_cast<float>(param_number(op, params, d.params[i].name)));
      kinds += "f";
    }
    plan.grid[0] = blocks(dm["M"], k.get("TM"));
    plan.entry = row_entry(k, dm["N"]);
  } else if (op == "silu_and_mul") {
    ints({dm["M"], dm["H"]}), kinds += "ii";
    plan.grid[0] = flat({blocks(dm["M"], k.get("TM")), blocks(dm["H"], k.get("TN"))});
  } else if (op == "rope") {
    if (dm["D"] % 2) throw ArgError{op, "q", "head dim D=" + std::to_string(dm["D"]) + " must be even for half rotation"};
    ints({dm["S"], dm["D"]}), kinds += "ii";
    plan.grid[0] = flat({blocks(dm["S"], k.get("TS")), dm["B"] * dm["H"]});
  } else if (op == "matmul" || op == "bmm") {
    // Bt first: the kernel views a, b, out as (Bt, M, K) etc. (Bt = 1 for matmul), see gemm.cuh.
    ints({op == "bmm" ? dm["Bt"] : 1, dm["M"], dm["N"], dm["K"]}), kinds += "iiii";
    // x: batch entry * tiles + the output-tile index (the kernel swizzles the latter for L2 reuse).
    plan.grid[0] = flat({blocks(dm["M"], k.get("TM")), blocks(dm["N"], k.get("TN")), op == "bmm" ? dm["Bt"] : 1});
    // P > 0: that many blocks per SM walk the tiles (gemm.cuh), where there are more tiles than blocks
    if (k.get("P") > 0)
      plan.grid[0] = std::min(plan.grid[0], static_cast<unsigned>(k.get("P") * device_sm_count(plan.device, kH200Sms)));
  } else if (op == "attention") {
    if (dm["D"] != k.get("D"))
      throw ArgError{op, "q", "head dim D=" + std::to_string(dm["D"]) + " does not match kernel " + k.name +
                                  " (D=" + std::to_string(k.get("D")) + ")"};
    double scale = 1.0 / std::sqrt(static_cast<double>(dm["D"]));
    if (params.contains("scale") && !py::object(params["scale"]).is_none()) scale = param_number(op, params, "scale");
    bool causal = param_flag(op, params, "causal", false);
    // Memory: query head h reads K/V head h / (H / Hkv), inside k/v only when Hkv divides H.
    if (dm["H"] % dm["Hkv"])
      throw ArgError{op, "k", "k/v have Hkv=" + std::to_string(dm["Hkv"]) + " heads, which does not divide q's H=" +
                                  std::to_string(dm["H"]) + " heads"};
    if (causal && dm["S"] > dm["Sk"])
      throw ArgError{op, "q", "causal with S=" + std::to_string(dm["S"]) + " queries > Sk=" + std::to_string(dm["Sk"]) +
                                  " keys: the end-aligned mask leaves queries without any key"};
    // Rows: NR row sets of R rows against K/V row set n / GQ: (B*H, S, D) with GQ = G, or a group's G heads
    // packed into one (G*S)-row set (decode), see attention.cu.
    const std::int64_t tq = k.get("TQ"), tk = k.get("TK"), g = dm["H"] / dm["Hkv"];
    const bool packed = packed_rows(dm["H"], dm["Hkv"], dm["S"], tq);
    const std::int64_t nr = packed ? dm["B"] * dm["Hkv"] : dm["B"] * dm["H"], r = packed ? g * dm["S"] : dm["S"];
    const std::int64_t nq = blocks(r, static_cast<int>(tq));
    if (nr * nq > kMaxInt)
      throw ArgError{op, "q", std::to_string(nr * nq) + " query tiles exceed grid x's limit of 2^31-1"};
    auto [n_split, chunk] = split_plan(nr * nq, dm["Sk"], tk, device_sm_count(plan.device, kH200Sms), split_min_blocks);
    // Key tiles per split: one split's chunk is all Sk keys, which need not be a multiple of TK.
    for (auto v : {nr, r, dm["S"], dm["Sk"], packed ? std::int64_t{1} : g, n_split, (chunk + tk - 1) / tk})
      plan.ints.push_back(static_cast<std::int32_t>(v));
    plan.floats.push_back(static_cast<float>(scale * 1.4426950408889634));  // log2(e): kernel uses exp2
    plan.ints.push_back(causal ? 1 : 0);
    kinds += "pppiiiiiiifi";  // the three fp32 workspaces (m, l, acc) after the tensors
    plan.grid[0] = flat({n_split, nq, nr});  // split fastest, then the row block, then the row set
    const std::size_t ws_rows = static_cast<std::size_t>(nr * n_split * nq * tq);  // Rp = nq * TQ per split
    if (n_split > 1) {
      plan.workspace_offsets = {0, ws_rows * 4, ws_rows * 8};
      plan.workspace = ws_rows * 4 * (2 + static_cast<std::size_t>(dm["D"]));
      plan.combine = k.name + "_combine";
      plan.combine_grid[0] = flat({r, nr});  // one block per output row (attention.cu)
      plan.combine_ints = {static_cast<std::int32_t>(r), static_cast<std::int32_t>(n_split)};
    } else {
      plan.workspace_offsets = {0, 0, 0};  // unused by the kernel with one split: null pointers
    }
  } else {
    throw std::logic_error("no launch plan for op " + op);
  }
  plan.kinds.assign(kinds.begin(), kinds.end());
  const std::int64_t vec = 16 / element_size(k.dtype);
  plan.aligned = true;
  for (auto p : plan.pointers) plan.aligned = plan.aligned && p % 16 == 0;
  for (auto d : aligned_dims(op, dm)) plan.aligned = plan.aligned && d % vec == 0;
  if (plan.entry.empty()) plan.entry = k.name;
  plan.function = plan.entry + (plan.aligned ? "_a16" : "");
  // A call whose every block's tile is whole takes the `_exact` twin: the `_a16` body on views with
  // compile-time extents, no bounds branches (cpp/kernels/common.cuh, row_tiles / tile_at), and no TMA; host
  // EXACT=0 keeps the `_a16` twin (a config choice: add_rms_norm's `_a16` loads by TMA). Whole: a row op's
  // one-tile entry on rows of exactly TN, or silu_and_mul, with TM dividing M (and TN dividing H); rope with
  // TS dividing S and TD dividing D/2.
  bool whole = false;
  if (std::string(decl(op).family) == "rows")
    whole = plan.entry == k.name && dm["N"] == k.get("TN") && dm["M"] % k.get("TM") == 0;
  else if (op == "silu_and_mul")
    whole = dm["M"] % k.get("TM") == 0 && dm["H"] % k.get("TN") == 0;
  else if (op == "rope")
    whole = dm["S"] % k.get("TS") == 0 && (dm["D"] / 2) % k.get("TD") == 0;
  if (exact_allowed && plan.aligned && whole) plan.function = plan.entry + "_exact";
  if (plan.grid[1] > 65535 || plan.grid[2] > 65535)
    throw ArgError{op, sig.tensors[0].first, "grid (" + std::to_string(plan.grid[0]) + ", " +
                                                 std::to_string(plan.grid[1]) + ", " + std::to_string(plan.grid[2]) +
                                                 ") exceeds the 65535 limit of grid y/z"};
  return plan;
}

}  // namespace tr
