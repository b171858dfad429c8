//! The ten ops: one file each (kernel module, argument plan, launch), and the dispatch by name/dtype.

use std::sync::Arc;

use cutile::cuda_core::{Context, Stream};

use crate::args::{ArgError, DType, Request};
use crate::config::Config;

pub mod attention;
pub mod bmm;
pub mod layer_norm;
pub mod matmul;
pub mod rms_norm;
pub mod rope;
pub mod silu_and_mul;
pub mod softmax;
pub mod transpose;
pub mod vector_add;

/// Every op this crate implements, in TileRosetta's order.
pub const OPS: &[&str] =
    &["vector_add", "transpose", "softmax", "rms_norm", "layer_norm", "silu_and_mul", "rope", "matmul", "bmm", "attention"];

/// What validation derived from a request: the op's bound extents and its tile configuration.
#[derive(Clone, Debug)]
pub struct Plan {
    pub dims: Vec<i32>,
    pub cfg: Config,
}

/// One kernel specialisation exactly as a launch compiles it: used by the compile-only tests and by
/// the warm-up helper, so they check what will actually run.
pub struct KernelSpec {
    pub ast: fn() -> cutile::cutile_compiler::ast::Module,
    pub module: &'static str,
    pub function: &'static str,
    pub generics: Vec<String>,
    /// Per tensor argument: which strides are 1 (1) or unknown (-1), as the JIT specialises.
    pub strides: Vec<(&'static str, Vec<i32>)>,
}

/// The borrowed CUDA objects of one call.
pub struct Rt {
    pub ctx: Arc<Context>,
    pub stream: Arc<Stream>,
}

/// Errors of a launch: bad arguments (Python ValueError) or a failure of cuTile-rs / CUDA (RuntimeError).
#[derive(Debug)]
pub enum LaunchError {
    Arg(ArgError),
    Runtime(String),
}

impl From<ArgError> for LaunchError {
    fn from(e: ArgError) -> Self {
        LaunchError::Arg(e)
    }
}

/// Validates a request without touching the GPU.
pub fn plan(req: &Request) -> Result<Plan, ArgError> {
    req.check_device()?;
    match req.op.as_str() {
        "vector_add" => vector_add::plan(req),
        "transpose" => transpose::plan(req),
        "softmax" => softmax::plan(req),
        "rms_norm" => rms_norm::plan(req),
        "layer_norm" => layer_norm::plan(req),
        "silu_and_mul" => silu_and_mul::plan(req),
        "rope" => rope::plan(req),
        "matmul" => matmul::plan(req),
        "bmm" => bmm::plan(req),
        "attention" => attention::plan(req),
        other => Err(ArgError::new(other, "op", format!("not implemented by cutile_rs (implemented: {OPS:?})"))),
    }
}

/// The kernel specialisations a call of `op` with this dtype and configuration compiles. `dims` are
/// the plan's dims (row ops need N, rope D, attention D; attention takes causal as a 5th entry and
/// gives both variants without it).
pub fn specs(op: &str, dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    match op {
        "vector_add" => vector_add::specs(dtype, cfg),
        "transpose" => transpose::specs(dtype, cfg),
        "softmax" => softmax::specs(dtype, cfg, dims),
        "rms_norm" => rms_norm::specs(dtype, cfg, dims),
        "layer_norm" => layer_norm::specs(dtype, cfg, dims),
        "silu_and_mul" => silu_and_mul::specs(dtype, cfg),
        "rope" => rope::specs(dtype, cfg, dims),
        "matmul" => matmul::specs(dtype, cfg),
        "bmm" => bmm::specs(dtype, cfg),
        "attention" => match dims.get(4) {
            Some(&c) => attention::specs(dtype, cfg, dims[3], c != 0),
            None => [false, true].iter().flat_map(|&c| attention::specs(dtype, cfg, dims[3], c)).collect(),
        },
        _ => vec![],
    }
}

macro_rules! by_dtype {
    ($dtype:expr, $f:ident, $($arg:expr),*) => {
        match $dtype {
            DType::F32 => $f::<f32>($($arg),*),
            DType::F16 => $f::<cutile::half::f16>($($arg),*),
            DType::BF16 => $f::<cutile::half::bf16>($($arg),*),
        }
    };
}

fn launch_typed<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    match req.op.as_str() {
        "vector_add" => vector_add::launch::<T>(req, plan, rt),
        "transpose" => transpose::launch::<T>(req, plan, rt),
        "softmax" => softmax::launch::<T>(req, plan, rt),
        "rms_norm" => rms_norm::launch::<T>(req, plan, rt),
        "layer_norm" => layer_norm::launch::<T>(req, plan, rt),
        "silu_and_mul" => silu_and_mul::launch::<T>(req, plan, rt),
        "rope" => rope::launch::<T>(req, plan, rt),
        "matmul" => matmul::launch::<T>(req, plan, rt),
        "bmm" => bmm::launch::<T>(req, plan, rt),
        "attention" => attention::launch::<T>(req, plan, rt),
        other => Err(format!("no launcher for {other}")),
    }
}

/// Validates, then launches on the borrowed stream; returns without waiting for the GPU.
pub fn launch(req: &Request) -> Result<(), LaunchError> {
    let plan = plan(req)?;
    let rt = Rt {
        ctx: crate::runtime::context(req.device).map_err(LaunchError::Runtime)?,
        stream: crate::runtime::stream(req.device, req.stream).map_err(LaunchError::Runtime)?,
    };
    // cuTile-rs reports some launch-time checks by panicking; never let a panic cross into Python.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| by_dtype!(req.dtype, launch_typed, req, &plan, &rt)));
    match result {
        Ok(r) => r.map_err(|e| LaunchError::Runtime(format!("cutile_rs.{}: {e}", req.op))),
        Err(p) => {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            Err(LaunchError::Runtime(format!("cutile_rs.{}: cuTile-rs panicked: {}", req.op, msg.unwrap_or_default())))
        }
    }
}
