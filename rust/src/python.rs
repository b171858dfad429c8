//! The PyO3 module `tilerosetta_cutile_rs` (built by maturin with feature "python").
//!
//! Python passes plain integers and strings (see python/tilerosetta/backends/cutile_rs.py); bad
//! arguments raise ValueError naming op and argument, cuTile-rs / CUDA failures raise RuntimeError.

use std::collections::HashMap;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::args::{ArgError, DType, Request, TensorArg};
use crate::ops::{self, LaunchError};
use crate::{compile, config};

/// (name, data_ptr, shape, strides, dtype name, device string) of one tensor, as the adapter sends it.
type PyTensor = (String, u64, Vec<i64>, Vec<i64>, String, String);

fn value_error(e: ArgError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn request(
    op: &str,
    dtype: &str,
    device: i32,
    stream: u64,
    tensors: Vec<PyTensor>,
    scalars: HashMap<String, f64>,
    config: HashMap<String, i64>,
) -> PyResult<Request> {
    let mut scalars: Vec<(String, f64)> = scalars.into_iter().collect();
    scalars.sort_by(|a, b| a.0.cmp(&b.0));
    let mut config: Vec<(String, i64)> = config.into_iter().collect();
    config.sort();
    Ok(Request {
        op: op.to_string(),
        dtype: DType::parse(op, dtype).map_err(value_error)?,
        device,
        stream,
        tensors: tensors.into_iter().map(|(n, p, s, st, dt, dev)| TensorArg::new(&n, p, &s, &st).on(&dt, &dev)).collect(),
        scalars,
        config,
    })
}

/// Validates and launches one op on `stream` (torch's current stream handle); does not synchronise.
#[pyfunction]
#[pyo3(signature = (op, dtype, device, stream, tensors, scalars, config))]
fn launch(
    op: &str,
    dtype: &str,
    device: i32,
    stream: u64,
    tensors: Vec<PyTensor>,
    scalars: HashMap<String, f64>,
    config: HashMap<String, i64>,
) -> PyResult<()> {
    let req = request(op, dtype, device, stream, tensors, scalars, config)?;
    ops::launch(&req).map_err(launch_error)
}

fn launch_error(e: LaunchError) -> PyErr {
    match e {
        LaunchError::Arg(a) => value_error(a),
        LaunchError::Runtime(m) => PyRuntimeError::new_err(m),
    }
}

/// A request validated once for the launches of one call signature (`ops::Prepared`): `prepare` takes
/// `launch`'s arguments and refuses what it refuses; `Prepared.launch(pointers, stream)` then takes only
/// each tensor's data pointer (in the request's order) and torch's current raw stream handle, and checks
/// again only what depends on the pointers (count, non-null, alignment, outputs not overlapping inputs).
///
/// The caller reuses a handle only for tensors of the signature it was prepared with (dtype, shape,
/// strides, device: the adapter's `Backend.signature_memo` key), alive for the stream's work: shapes,
/// strides, dtypes and devices are not checked again, and that reuse rule is what keeps a launch inside
/// the memory it was given.
#[pyclass(name = "Prepared", module = "tilerosetta_cutile_rs")]
struct PyPrepared(ops::Prepared);

#[pymethods]
impl PyPrepared {
    /// Launches on `stream` with these data pointers (a sequence of ints, one per tensor); no host sync.
    fn launch(&mut self, pointers: Vec<u64>, stream: u64) -> PyResult<()> {
        self.0.launch(&pointers, stream).map_err(launch_error)
    }

    #[getter]
    fn op(&self) -> &str {
        &self.0.request().op
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        self.0.request().dtype.name()
    }

    #[getter]
    fn device(&self) -> i32 {
        self.0.request().device
    }

    /// The tensors' names, in the order `launch` takes their pointers.
    #[getter]
    fn tensor_names(&self) -> Vec<String> {
        self.0.request().tensors.iter().map(|t| t.name.clone()).collect()
    }

    #[getter]
    fn num_tensors(&self) -> usize {
        self.0.request().tensors.len()
    }

    /// The resolved tile configuration (what `validate` returns for this request).
    #[getter]
    fn config(&self) -> HashMap<String, i64> {
        self.0.plan().cfg.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// The plan's extents (`ops::dim_names` order).
    #[getter]
    fn dims(&self) -> Vec<i32> {
        self.0.plan().dims.clone()
    }

    fn __repr__(&self) -> String {
        let r = self.0.request();
        format!("<tilerosetta_cutile_rs.Prepared {} {} cuda:{} dims {:?}>", r.op, r.dtype.name(), r.device, self.0.plan().dims)
    }
}

/// Validates like `launch` (same arguments, same errors) and returns the handle later calls of this
/// signature launch through (`Prepared.launch`); no CUDA call.
#[pyfunction]
#[pyo3(signature = (op, dtype, device, stream, tensors, scalars, config))]
fn prepare(
    op: &str,
    dtype: &str,
    device: i32,
    stream: u64,
    tensors: Vec<PyTensor>,
    scalars: HashMap<String, f64>,
    config: HashMap<String, i64>,
) -> PyResult<PyPrepared> {
    let req = request(op, dtype, device, stream, tensors, scalars, config)?;
    ops::Prepared::new(req).map(PyPrepared).map_err(value_error)
}

/// Validation only (no CUDA call): returns the resolved tile configuration. Lets CPU-only tests check
/// the argument checks of the real extension.
#[pyfunction]
#[pyo3(signature = (op, dtype, device, stream, tensors, scalars, config))]
fn validate(
    op: &str,
    dtype: &str,
    device: i32,
    stream: u64,
    tensors: Vec<PyTensor>,
    scalars: HashMap<String, f64>,
    config: HashMap<String, i64>,
) -> PyResult<HashMap<String, i64>> {
    let req = request(op, dtype, device, stream, tensors, scalars, config)?;
    let plan = ops::plan(&req).map_err(value_error)?;
    Ok(plan.cfg.iter().map(|(k, v)| (k.to_string(), *v)).collect())
}

#[pyfunction]
fn ops_implemented() -> Vec<&'static str> {
    ops::OPS.to_vec()
}

#[pyfunction]
fn default_config(op: &str, dtype: &str, dims: HashMap<String, i64>) -> PyResult<HashMap<String, i64>> {
    let dtype = DType::parse(op, dtype).map_err(value_error)?;
    let dims: Vec<(&str, i64)> = dims.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    Ok(config::default_config(op, dtype, &dims).into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

#[pyfunction]
fn config_space(op: &str, dtype: &str) -> PyResult<Vec<HashMap<String, i64>>> {
    let dtype = DType::parse(op, dtype).map_err(value_error)?;
    Ok(config::config_space(op, dtype).into_iter().map(|c| c.into_iter().map(|(k, v)| (k.to_string(), v)).collect()).collect())
}

/// Compiles an op's kernels without a GPU: Tile IR bytecode for `arch`, assembled by tileiras when
/// `assemble` is true. Returns the byte sizes (bytecode or cubin) per kernel. `dims` are the plan's
/// dims (ops::dim_names: e.g. [M, N] for row ops, [B, H, S, D, causal] for attention); the default
/// configuration is resolved from them exactly as a launch does, and the kernels carry the same
/// compile options and specialisation bits as a launch on aligned contiguous tensors.
#[pyfunction]
#[pyo3(signature = (op, dtype, dims, config=HashMap::new(), arch="sm_90", assemble=true))]
fn compile_only(
    op: &str,
    dtype: &str,
    dims: Vec<i32>,
    config: HashMap<String, i64>,
    arch: &str,
    assemble: bool,
) -> PyResult<Vec<usize>> {
    let dt = DType::parse(op, dtype).map_err(value_error)?;
    let given: Vec<(String, i64)> = config.into_iter().collect();
    let named: Vec<(&str, i64)> = ops::dim_names(op).iter().zip(&dims).map(|(k, v)| (*k, *v as i64)).collect();
    let cfg = config::resolve(op, dt, &named, &given).map_err(value_error)?;
    let specs = ops::specs(op, dt, &cfg, &dims).map_err(value_error)?;
    let arch = arch.to_string();
    let op = op.to_string();
    // The cuTile-rs compiler recurses deeply: run it on a thread with a large stack.
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || {
            specs
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let bc = compile::bytecode(s, dt, &arch)?;
                    if assemble { compile::assemble(&bc, &arch, &format!("{op}_{i}")) } else { Ok(bc.len()) }
                })
                .collect::<Result<Vec<usize>, String>>()
        })
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?
        .join()
        .map_err(|_| PyRuntimeError::new_err("compile thread panicked"))?
        .map_err(PyRuntimeError::new_err)
}

#[pyfunction]
fn versions() -> HashMap<&'static str, &'static str> {
    HashMap::from([("tilerosetta_cutile_rs", env!("CARGO_PKG_VERSION")), ("cutile", "0.5.0"), ("pyo3", "0.30")])
}

/// How many fields each tensor tuple has (PyTensor). The adapter checks it, so a wheel built from older
/// sources (4 fields: no dtype/device per tensor) is reported unavailable instead of refusing every call.
const TENSOR_FIELDS: usize = 6;

/// The version of `prepare` / `Prepared.launch(pointers, stream)` this module has: the adapter reports a
/// wheel without it (built from older sources) unavailable, naming the rebuild.
const PREPARED: usize = 1;

#[pymodule]
fn tilerosetta_cutile_rs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("TENSOR_FIELDS", TENSOR_FIELDS)?;
    m.add("PREPARED", PREPARED)?;
    m.add_class::<PyPrepared>()?;
    m.add_function(wrap_pyfunction!(launch, m)?)?;
    m.add_function(wrap_pyfunction!(prepare, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add_function(wrap_pyfunction!(ops_implemented, m)?)?;
    m.add_function(wrap_pyfunction!(default_config, m)?)?;
    m.add_function(wrap_pyfunction!(config_space, m)?)?;
    m.add_function(wrap_pyfunction!(compile_only, m)?)?;
    m.add_function(wrap_pyfunction!(versions, m)?)?;
    Ok(())
}
