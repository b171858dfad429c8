//! The ops: one file each (kernel module, plan, launch), and the dispatch by name/dtype.

use std::sync::Arc;

use cutile::cuda_core::{Context, Stream};
use cutile::tensor::Tensor;
use cutile::tile_kernel::CompileOptions;

use crate::args::{check_signature, ArgError, DType, Dims, Request};
use crate::config::{self, Config};

/// The ops with a kernel file here, by name (the specs' order): `ops!` declares each module and the
/// dispatch by name. Every module `<op>.rs` has `DIMS` (the names of `Plan::dims`),
/// `specs(dtype, cfg, dims)` and `launch::<T>(req, plan, rt)`; attention (plan, specs with the causal
/// variant) is dispatched by hand. A new op: its file; the `ops!` line is generated (below).
macro_rules! ops {
    ($($op:ident),* $(,)?) => {
        $(pub mod $op;)*
        pub mod attention;

        /// Every op this crate implements (tests check it is the set of `crate::generated`).
        pub const OPS: &[&str] = &[$(stringify!($op),)* "attention"];

        fn plan_uniform(req: &Request, dims: &Dims) -> Option<Result<Plan, ArgError>> {
            match req.op.as_str() {
                $(stringify!($op) => Some(plan_with(req, dims, $op::DIMS)),)*
                _ => None,
            }
        }

        fn dims_uniform(op: &str) -> Option<&'static [&'static str]> {
            match op {
                $(stringify!($op) => Some($op::DIMS),)*
                _ => None,
            }
        }

        fn specs_uniform(op: &str, dtype: DType, cfg: &Config, dims: &[i32]) -> Option<Vec<KernelSpec>> {
            match op {
                $(stringify!($op) => Some($op::specs(dtype, cfg, dims)),)*
                _ => None,
            }
        }

        fn launch_typed<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
            match req.op.as_str() {
                $(stringify!($op) => $op::launch::<T>(req, plan, rt),)*
                "attention" => attention::launch::<T>(req, plan, rt),
                other => Err(format!("no launcher for {other}")),
            }
        }
    };
}

// `ops!(...)` with every spec op whose `<op>.rs` here declares `DIMS`, generated from the specs and the
// files of this directory (`python -m tilerosetta.codegen`; the build checks it is current).
include!("generated_ops.rs");

/// What validation derived from a request: the op's bound extents and its tile configuration.
#[derive(Clone, Debug)]
pub struct Plan {
    pub dims: Vec<i32>,
    pub cfg: Config,
}

/// One kernel specialisation exactly as a launch compiles it: used by the compile-only tests and by
/// the warm-up helper, and by `launch` itself (generics, tensor views and compile options all come
/// from here), so the compile-only cubins are the kernels that run.
pub struct KernelSpec {
    pub ast: fn() -> cutile::cutile_compiler::ast::Module,
    pub module: &'static str,
    pub function: &'static str,
    pub generics: Vec<String>,
    /// The kernel's tensor arguments, in the kernel's order, as the launch borrows them.
    pub args: Vec<ArgView>,
    /// Compiler hints (occupancy, worker warps) from the configuration's OCC / W keys.
    pub options: CompileOptions,
}

/// One tensor argument of a kernel: which request tensor it views (some ops pass strided half-views
/// of one torch tensor), at which element offset, with which shape and strides (in elements). The
/// launch borrows exactly this view; the compile-only path derives from it the stride hints and the
/// specialisation bits (divisibility, alignment) that cuTile-rs computes from the borrowed tensor at
/// launch (`Tensor::spec()` = `compute_spec(ptr, shape, strides)`).
#[derive(Clone, Debug)]
pub struct ArgView {
    pub name: &'static str,
    pub tensor: usize,
    pub offset: i64,
    pub shape: Vec<i32>,
    pub strides: Vec<i32>,
    /// A view of the launch's own fp32 scratch memory (`runtime::with_scratch`; attention's split-KV
    /// workspaces) rather than of a request tensor: `tensor` is unused, `offset` counts f32 elements from
    /// the scratch base, and the launch borrows it with `borrow_at`.
    pub workspace: bool,
}

impl ArgView {
    /// The whole (contiguous) request tensor `tensor`, seen with `shape` (a reshape of its elements).
    pub fn contiguous(name: &'static str, tensor: usize, shape: &[i32]) -> Self {
        ArgView { name, tensor, offset: 0, shape: shape.to_vec(), strides: contiguous_strides(shape), workspace: false }
    }

    /// A strided view of request tensor `tensor` starting `offset` elements in.
    pub fn strided(name: &'static str, tensor: usize, offset: i64, shape: &[i32], strides: &[i32]) -> Self {
        ArgView { name, tensor, offset, shape: shape.to_vec(), strides: strides.to_vec(), workspace: false }
    }

    /// A contiguous fp32 workspace of `shape`, `offset` f32 elements into the launch's scratch block.
    pub fn workspace(name: &'static str, offset: i64, shape: &[i32]) -> Self {
        ArgView { name, tensor: usize::MAX, offset, shape: shape.to_vec(), strides: contiguous_strides(shape), workspace: true }
    }

    /// Bytes per element of the viewed memory: fp32 for a workspace, the request's dtype otherwise.
    pub fn elem_size(&self, dtype: DType) -> usize {
        if self.workspace { std::mem::size_of::<f32>() } else { dtype.size() }
    }

    /// The JIT's stride hint: 1 where the stride is 1, -1 (unknown) elsewhere (cuTile-rs derives it
    /// from `spec().stride_one` of the borrowed tensor).
    pub fn stride_hint(&self) -> Vec<i32> {
        self.strides.iter().map(|&s| if s == 1 { 1 } else { -1 }).collect()
    }

    /// Borrows the view from the request's tensor.
    ///
    /// # Safety
    /// As `runtime::borrow`: the request was validated by `plan` (so the view lies inside the tensor)
    /// and the memory stays alive for the work queued on the launch stream.
    pub unsafe fn borrow<T: cutile::DType>(&self, rt: &Rt, req: &Request) -> Tensor<T> {
        assert!(!self.workspace, "{}: a workspace view is borrowed with borrow_at", self.name);
        let ptr = req.tensors[self.tensor].ptr + (self.offset as u64) * req.dtype.size() as u64;
        unsafe { crate::runtime::borrow::<T>(&rt.ctx, ptr, &self.shape, &self.strides) }
    }

    /// Borrows a workspace view from the scratch block at `base`.
    ///
    /// # Safety
    /// `base` is device memory of `rt`'s context holding the whole view (offset + extent, in `T`s), alive
    /// and not used by other work until what is queued on the launch stream completes.
    pub unsafe fn borrow_at<T: cutile::DType>(&self, rt: &Rt, base: u64) -> Tensor<T> {
        assert!(self.workspace, "{}: not a workspace view", self.name);
        let ptr = base + (self.offset as u64) * std::mem::size_of::<T>() as u64;
        unsafe { crate::runtime::borrow::<T>(&rt.ctx, ptr, &self.shape, &self.strides) }
    }
}

/// Row-major strides (in elements) of `shape`.
fn contiguous_strides(shape: &[i32]) -> Vec<i32> {
    let mut strides = vec![1i32; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1].max(1);
    }
    strides
}

/// The borrowed CUDA objects of one call.
#[derive(Clone)]
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

/// Validates a request without touching the GPU: the generated table's memory checks
/// (`args::check_signature`), then the op's own plan (dims, tile configuration) and the grid limits.
pub fn plan(req: &Request) -> Result<Plan, ArgError> {
    req.check_device()?;
    if OPS.contains(&req.op.as_str()) {
        req.check_placement()?;
    }
    let plan = plan_op(req)?;
    check_grid(req, &plan)?;
    Ok(plan)
}

/// CUDA caps grid axis x at 2^31 - 1 blocks and axes y and z at 65535. A cuTile-rs grid is the output
/// partition's tile counts (each op's launch: `out.partition([...])`), the first on x. Every op whose
/// partition has counts on y or z (`foldable_grid`) folds its tile grid into grid x when one would pass
/// 65535 (its `<op>_folded` kernel); what is refused here, before any launch, is a folded grid past grid
/// x's limit (only reachable beyond the element limit, as each tile holds at least one element).
pub fn check_grid(req: &Request, plan: &Plan) -> Result<(), ArgError> {
    if let Some((arg, what, grid)) = foldable_grid(&req.op, plan) {
        let blocks: i64 = grid.iter().product();
        if folds(&grid) && blocks > GRID_X_MAX {
            return Err(ArgError::new(&req.op, arg, format!("{what} = {blocks} tile blocks on grid axis x (folded), whose limit is {GRID_X_MAX}")));
        }
    }
    Ok(())
}

/// CUDA's limits on grid axis x and on axes y and z (blocks).
pub const GRID_X_MAX: i64 = (1 << 31) - 1;
pub const GRID_YZ_MAX: i64 = 65535;

/// The partition map of a folded launch: linear over the logical tile grid (row-major, no grouping).
pub const LINEAR_MAP_2D: [usize; 2] = [1, 1];
pub const LINEAR_MAP_3D: [usize; 3] = [1, 1, 1];

/// Tiles of `tile` elements covering `extent`.
pub fn tiles(extent: i32, tile: i32) -> i64 {
    (extent as i64 + tile as i64 - 1) / tile as i64
}

/// Whether a tile grid (x, y[, z]) must be folded into grid x: a count past 65535 on y or z.
pub fn folds(grid: &[i64]) -> bool {
    grid.iter().skip(1).any(|&n| n > GRID_YZ_MAX)
}

/// The blocks of a folded launch: one per tile (check_grid refused more than grid x holds).
pub fn folded_blocks(grid: &[i64]) -> u32 {
    grid.iter().product::<i64>() as u32
}

/// (argument to name, what the count is, out's tile grid) of the ops whose output partition has tile
/// counts on grid y or z: their launch folds the tile grid into grid x when it must (their `tile_grid`).
/// An op not listed here launches a 1-D grid.
fn foldable_grid(op: &str, plan: &Plan) -> Option<(&'static str, &'static str, Vec<i64>)> {
    match op {
        "transpose" => Some(("x", "ceil(N / BN) * ceil(M / BM)", transpose::tile_grid(&plan.dims, &plan.cfg))),
        "silu_and_mul" => Some(("x", "ceil(M / BR) * ceil(H / BH)", silu_and_mul::tile_grid(&plan.dims, &plan.cfg))),
        "rope" => Some(("q", "B * H * ceil(S / BS)", rope::tile_grid(&plan.dims, &plan.cfg))),
        "matmul" => Some(("a", "ceil(M / BM) * ceil(N / BN)", matmul::tile_grid(&plan.dims, &plan.cfg))),
        "bmm" => Some(("a", "Bt * ceil(M / BM) * ceil(N / BN)", bmm::tile_grid(&plan.dims, &plan.cfg))),
        "attention" => Some(("q", "B * H * ceil(S / BM)", attention::tile_grid(&plan.dims, &plan.cfg))),
        _ => None,
    }
}

/// The plan of an op whose `Plan::dims` are `names`: those extents (bound and checked by
/// `check_signature`) and the tile configuration resolved from them.
pub fn plan_with(req: &Request, dims: &Dims, names: &[&str]) -> Result<Plan, ArgError> {
    let named = dims.named(names);
    let cfg = config::resolve(&req.op, req.dtype, &named, &req.config)?;
    Ok(Plan { dims: named.iter().map(|&(_, v)| v as i32).collect(), cfg })
}

fn plan_op(req: &Request) -> Result<Plan, ArgError> {
    if !OPS.contains(&req.op.as_str()) {
        return Err(ArgError::new(&req.op, "op", format!("not implemented by cutile_rs (implemented: {OPS:?})")));
    }
    let dims = check_signature(req)?;
    match plan_uniform(req, &dims) {
        Some(plan) => plan,
        None => attention::plan(req),
    }
}

/// The names of `Plan::dims` per op (the layout `specs` and `compile_only` take dims in).
pub fn dim_names(op: &str) -> &'static [&'static str] {
    match op {
        "attention" => &["B", "H", "S", "D"],
        _ => dims_uniform(op).unwrap_or(&[]),
    }
}

/// The kernel specialisations a call of `op` with this dtype and configuration compiles. `dims` are
/// the plan's dims (`dim_names`); attention takes causal (0/1) as a 5th entry and gives both variants
/// without it. Wrong-length dims are refused (an error naming op and argument), not guessed.
pub fn specs(op: &str, dtype: DType, cfg: &Config, dims: &[i32]) -> Result<Vec<KernelSpec>, ArgError> {
    let want = dim_names(op).len();
    let ok = dims.len() == want || (op == "attention" && dims.len() == want + 1);
    if want == 0 {
        return Err(ArgError::new(op, "op", format!("not implemented by cutile_rs (implemented: {OPS:?})")));
    }
    if !ok || dims.iter().any(|&d| d < 0) {
        return Err(ArgError::new(op, "dims", format!("expected {:?}, got {dims:?}", dim_names(op))));
    }
    Ok(match specs_uniform(op, dtype, cfg, dims) {
        Some(specs) => specs,
        None => match dims.get(4) {
            Some(&c) => attention::specs(dtype, cfg, dims, c != 0),
            None => [false, true].iter().flat_map(|&c| attention::specs(dtype, cfg, dims, c)).collect(),
        },
    })
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

/// Validates, then launches on the borrowed stream; returns without waiting for the GPU.
pub fn launch(req: &Request) -> Result<(), LaunchError> {
    let plan = plan(req)?;
    launch_planned(req, &plan)
}

/// A request validated once (`plan`) for launches of one call signature: op, dtype, device, each tensor's
/// name, shape, strides, dtype and device, the scalars and the configuration. Each launch brings only its
/// data pointers and stream; what depends on the pointers (non-null, aligned, outputs not overlapping
/// inputs: `args::check_pointers`) is checked again, the rest is not.
///
/// Memory safety rests on the caller: a launch reads and writes the extents validated here, so the
/// pointers must be those of tensors of exactly this signature (dtype, shape, strides, device), alive for
/// the work queued on the stream. The Python adapter keeps one handle per such signature
/// (`Backend.signature_memo`) and hands it only its own call's `data_ptr()`s.
#[derive(Clone)]
pub struct Prepared {
    req: Request,
    plan: Plan,
    decl: &'static crate::generated::OpDecl,
    /// (stream handle, the context and that stream) of the last launch.
    rt: Option<(u64, Rt)>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").field("req", &self.req).field("plan", &self.plan).finish()
    }
}

impl Prepared {
    /// Validates `req` exactly as `launch` does (same errors); its pointers and stream are replaced by each
    /// launch's.
    pub fn new(req: Request) -> Result<Self, ArgError> {
        let plan = plan(&req)?;
        // plan() refused an op without a declaration (check_signature).
        let decl = crate::generated::op(&req.op).ok_or_else(|| ArgError::new(&req.op, "op", "not an op of the specs (crate::generated)"))?;
        Ok(Prepared { req, plan, decl, rt: None })
    }

    /// The validated request (its pointers are the last launch's, or the ones it was prepared with).
    pub fn request(&self) -> &Request {
        &self.req
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Launches with these data pointers (one per tensor, in the request's order) on torch's stream `stream`.
    /// Refuses, before any CUDA call, a wrong pointer count (argument 'pointers') and whatever
    /// `args::check_pointers` refuses (argument: the tensor's name), with validation's messages.
    pub fn launch(&mut self, pointers: &[u64], stream: u64) -> Result<(), LaunchError> {
        if pointers.len() != self.req.tensors.len() {
            let names: Vec<&str> = self.req.tensors.iter().map(|t| t.name.as_str()).collect();
            return Err(ArgError::new(
                &self.req.op,
                "pointers",
                format!("expected {} data pointers ({}), got {}", names.len(), names.join(", "), pointers.len()),
            )
            .into());
        }
        for (t, &p) in self.req.tensors.iter_mut().zip(pointers) {
            t.ptr = p;
        }
        self.req.stream = stream;
        crate::args::check_pointers(&self.req, self.decl)?;
        // The device is the handle's: keep its context and the last stream borrowed (runtime's caches
        // behind a lock each, and the context looked up twice, otherwise); the context is bound to this
        // thread on every launch, as runtime::context does.
        match &self.rt {
            Some((handle, rt)) if *handle == stream => {
                let device = self.req.device;
                rt.ctx.bind_to_thread().map_err(|e| LaunchError::Runtime(format!("binding CUDA context of device {device}: {e:?}")))?;
            }
            _ => self.rt = Some((stream, runtime_of(&self.req)?)),
        }
        let rt = &self.rt.as_ref().expect("set above").1;
        launch_on(&self.req, &self.plan, rt)
    }
}

/// The borrowed context and stream of `req` (runtime's per-process caches).
fn runtime_of(req: &Request) -> Result<Rt, LaunchError> {
    Ok(Rt {
        ctx: crate::runtime::context(req.device).map_err(LaunchError::Runtime)?,
        stream: crate::runtime::stream(req.device, req.stream).map_err(LaunchError::Runtime)?,
    })
}

/// Launches a request `plan` accepted on the borrowed stream; returns without waiting for the GPU.
fn launch_planned(req: &Request, plan: &Plan) -> Result<(), LaunchError> {
    launch_on(req, plan, &runtime_of(req)?)
}

/// Launches a request `plan` accepted on `rt`, `req`'s device context and its stream.
fn launch_on(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), LaunchError> {
    // cuTile-rs reports some launch-time checks by panicking; never let a panic cross into Python.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| by_dtype!(req.dtype, launch_typed, req, plan, rt)));
    match result {
        Ok(r) => r.map_err(|e| LaunchError::Runtime(format!("cutile_rs.{}: {e}", req.op))),
        Err(p) => {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            Err(LaunchError::Runtime(format!("cutile_rs.{}: cuTile-rs panicked: {}", req.op, msg.unwrap_or_default())))
        }
    }
}
