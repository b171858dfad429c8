//! Plain-integer arguments from Python and their validation.
//!
//! Python hands over what torch knows about each tensor (data pointer, shape, strides), the dtype by
//! name, the device index and the current stream handle. Everything is checked here, before any CUDA
//! call, so a bad argument becomes an error naming op and argument instead of an out-of-bounds launch.
//! Nothing in this file touches the GPU: `cargo test` covers it on a machine without one.

use std::fmt;

/// Element types the backend launches (fp32 compute and accumulation inside every kernel).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
}

impl DType {
    /// Names as Python passes them (TileRosetta's spec names).
    pub fn parse(op: &str, name: &str) -> Result<Self, ArgError> {
        match name {
            "fp32" => Ok(DType::F32),
            "fp16" => Ok(DType::F16),
            "bf16" => Ok(DType::BF16),
            other => Err(ArgError::new(op, "dtype", format!("unsupported dtype '{other}': expected fp32, fp16 or bf16"))),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "fp32",
            DType::F16 => "fp16",
            DType::BF16 => "bf16",
        }
    }
    /// The element type's name in cuTile-rs kernels (the `T` generic of every entry).
    pub fn cutile_name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }
}

/// A validation failure: which op, which argument, what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgError {
    pub op: String,
    pub arg: String,
    pub message: String,
}

impl ArgError {
    pub fn new(op: &str, arg: &str, message: impl Into<String>) -> Self {
        ArgError { op: op.to_string(), arg: arg.to_string(), message: message.into() }
    }
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cutile_rs.{}: argument '{}': {}", self.op, self.arg, self.message)
    }
}

impl std::error::Error for ArgError {}

/// One torch tensor as raw parts. Python passes strides, dtype and device of every tensor, so a
/// non-contiguous view, a tensor of another dtype (read or written with the wrong element size: out of
/// bounds) or a tensor on another device (an illegal address that poisons the CUDA context) is refused
/// here even if a caller bypasses the spine's validation (`implementations()`, the raw path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorArg {
    pub name: String,
    pub ptr: u64,
    pub shape: Vec<i64>,
    pub strides: Vec<i64>,
    /// The tensor's dtype as Python names it ("fp32", "fp16", "bf16", or e.g. "float64"); empty when
    /// unknown, which `Request::check_placement` refuses.
    pub dtype: String,
    /// torch's device string ("cuda:0", "cpu"); empty when unknown (refused too).
    pub device: String,
}

impl TensorArg {
    /// A tensor whose dtype and device are not stated yet: refused until `on` states them.
    pub fn new(name: &str, ptr: u64, shape: &[i64], strides: &[i64]) -> Self {
        TensorArg {
            name: name.to_string(),
            ptr,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            dtype: String::new(),
            device: String::new(),
        }
    }
    /// The same tensor with its dtype name and device string.
    pub fn on(mut self, dtype: &str, device: &str) -> Self {
        self.dtype = dtype.to_string();
        self.device = device.to_string();
        self
    }
    pub fn numel(&self) -> i64 {
        self.shape.iter().product()
    }
}

/// Row-major strides of a shape (in elements).
pub fn contiguous_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1].max(1);
    }
    strides
}

/// Whether strides describe a row-major contiguous layout of shape, as torch decides it: the stride of
/// an extent-1 dim is never used to address an element, so any value is contiguous there
/// (torch.randn(5, 1).t() has strides (1, 1)).
pub fn is_contiguous(shape: &[i64], strides: &[i64]) -> bool {
    let mut expect = 1i64;
    for (&extent, &stride) in shape.iter().zip(strides).rev() {
        if extent != 1 && stride != expect {
            return false;
        }
        expect = expect.saturating_mul(extent);
    }
    shape.len() == strides.len()
}

/// Checks one tensor: rank, extents (positive, within cuTile's i32 indexing), contiguity, pointer
/// (non-null, aligned to the element size). Returns the shape as i32 for the kernels.
pub fn check_tensor(op: &str, t: &TensorArg, rank: usize, dtype: DType) -> Result<Vec<i32>, ArgError> {
    let fail = |msg: String| Err(ArgError::new(op, &t.name, msg));
    if t.shape.len() != rank {
        return fail(format!("expected rank {rank}, got shape {:?}", t.shape));
    }
    if t.strides.len() != rank {
        return fail(format!("strides {:?} do not match shape {:?}", t.strides, t.shape));
    }
    if let Some(d) = t.shape.iter().find(|&&d| d <= 0) {
        return fail(format!("every extent must be positive, got {d} in shape {:?}", t.shape));
    }
    // cuTile-rs describes tensors with i32 shapes and strides; refuse what would wrap.
    let numel = t.shape.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d));
    match numel {
        Some(n) if n <= i32::MAX as i64 => {}
        _ => return fail(format!("shape {:?} has more than 2^31-1 elements (cuTile-rs indexes with i32)", t.shape)),
    }
    if !is_contiguous(&t.shape, &t.strides) {
        return fail(format!("must be contiguous row-major: strides {:?} for shape {:?}", t.strides, t.shape));
    }
    check_pointer(op, t, dtype)?;
    Ok(t.shape.iter().map(|&d| d as i32).collect())
}

/// The part of `check_tensor` that depends on the data pointer alone (non-null, aligned to the element
/// size): what `ops::Prepared::launch` checks again on every call, with the same messages.
pub fn check_pointer(op: &str, t: &TensorArg, dtype: DType) -> Result<(), ArgError> {
    if t.ptr == 0 {
        return Err(ArgError::new(op, &t.name, "null data pointer"));
    }
    if t.ptr % dtype.size() as u64 != 0 {
        return Err(ArgError::new(op, &t.name, format!("data pointer {:#x} is not aligned to its {}-byte elements", t.ptr, dtype.size())));
    }
    Ok(())
}

/// Checks that an extent equals the one bound earlier (symbolic dims such as M, N).
pub fn expect_dim(op: &str, arg: &str, what: &str, got: i32, want: i32) -> Result<(), ArgError> {
    if got != want {
        return Err(ArgError::new(op, arg, format!("{what} is {got}, expected {want}")));
    }
    Ok(())
}

/// A launch request as Python sends it.
#[derive(Clone, Debug)]
pub struct Request {
    pub op: String,
    pub dtype: DType,
    pub device: i32,
    /// `torch.cuda.current_stream().cuda_stream`: 0 is the legacy default stream.
    pub stream: u64,
    pub tensors: Vec<TensorArg>,
    /// Scalar params by name (eps, scale, causal as 0/1).
    pub scalars: Vec<(String, f64)>,
    /// Tile configuration by name; empty means the default table.
    pub config: Vec<(String, i64)>,
}

impl Request {
    pub fn scalar(&self, name: &str) -> Result<f64, ArgError> {
        self.scalars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| ArgError::new(&self.op, name, "missing scalar parameter"))
    }

    /// The tensors in spec order, checked for count and names.
    pub fn tensors_named(&self, names: &[&str]) -> Result<&[TensorArg], ArgError> {
        if self.tensors.len() != names.len() {
            return Err(ArgError::new(
                &self.op,
                "tensors",
                format!("expected {} tensors ({}), got {}", names.len(), names.join(", "), self.tensors.len()),
            ));
        }
        for (t, want) in self.tensors.iter().zip(names) {
            if t.name != *want {
                return Err(ArgError::new(&self.op, &t.name, format!("expected argument '{want}' here")));
            }
        }
        Ok(&self.tensors)
    }

    pub fn check_device(&self) -> Result<(), ArgError> {
        if self.device < 0 {
            return Err(ArgError::new(&self.op, "device", format!("invalid CUDA device index {}", self.device)));
        }
        Ok(())
    }

    /// Every tensor has the launch's dtype and lives on the launch's CUDA device. The kernels are
    /// specialised for one element type and launched on one device: anything else reads or writes out
    /// of bounds or dereferences a host pointer on the GPU.
    pub fn check_placement(&self) -> Result<(), ArgError> {
        let device = format!("cuda:{}", self.device);
        for t in &self.tensors {
            if t.dtype != self.dtype.name() {
                let got = if t.dtype.is_empty() { "not given" } else { t.dtype.as_str() };
                return Err(ArgError::new(&self.op, &t.name, format!("dtype {got} differs from the launch dtype {}", self.dtype.name())));
            }
            if t.device != device {
                let got = if t.device.is_empty() { "not given" } else { t.device.as_str() };
                return Err(ArgError::new(&self.op, &t.name, format!("tensor is on {got}, the launch is on {device} (cutile_rs needs cuda tensors on one device)")));
            }
        }
        Ok(())
    }
}

/// Refuses writes into a buffer that also feeds the kernel (torch users may pass out=x by mistake;
/// most kernels here read other tiles of x after writing one of out). `same_ok`: the inputs `out` may be
/// the very same tensor as (same span and shape), the generated table's `inplace_ok` (OpSpec.inplace_ok:
/// a kernel shown safe in place); partial overlap with them stays refused.
pub fn check_no_alias(op: &str, dtype: DType, out: &TensorArg, inputs: &[&TensorArg], same_ok: &[&str]) -> Result<(), ArgError> {
    let span = |t: &TensorArg| (t.ptr, t.ptr + t.numel() as u64 * dtype.size() as u64);
    let (o0, o1) = span(out);
    for t in inputs {
        let (i0, i1) = span(t);
        if o0 < i1 && i0 < o1 {
            let same = (o0, o1) == (i0, i1) && out.shape == t.shape;
            if same && same_ok.contains(&t.name.as_str()) {
                continue;
            }
            let how = if same { "is the same memory as" } else { "overlaps" };
            let allowed = if same_ok.is_empty() { "in-place is not supported".to_string() } else {
                format!("only the very same tensor as '{}' is supported in place", same_ok.join("', '"))
            };
            return Err(ArgError::new(op, &out.name, format!("output {how} input '{}' ({allowed})", t.name)));
        }
    }
    Ok(())
}

/// The symbolic extents of one request (M, N, H, ...), bound from its tensors by `check_signature`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dims(pub Vec<(&'static str, i32)>);

impl Dims {
    pub fn get(&self, name: &str) -> Option<i32> {
        self.0.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
    }
    /// The extent `name`; every symbol of the op's table is bound once `check_signature` returned.
    pub fn of(&self, name: &str) -> i32 {
        self.get(name).unwrap_or_else(|| panic!("dim {name} is not bound (not in the op's generated table)"))
    }
    /// The extents `names`, in that order, for `config::resolve`.
    pub fn named(&self, names: &[&str]) -> Vec<(&'static str, i64)> {
        names.iter().map(|n| self.0.iter().find(|(k, _)| k == n).map(|&(k, v)| (k, v as i64)).unwrap_or_else(|| panic!("dim {n} is not bound"))).collect()
    }
    fn eval(&self, expr: &str) -> Option<i64> {
        if expr.is_empty() {
            return Some(1);
        }
        expr.split('*').map(str::trim).try_fold(1i64, |acc, f| {
            f.parse::<i64>().ok().or_else(|| self.get(f).map(i64::from)).map(|v| acc * v)
        })
    }
}

/// Checks a request against its op's generated table (`crate::generated`, from the specs): tensor count
/// and names, each tensor (`check_tensor`: rank, positive extents, i32 range, contiguity, pointer), and
/// one value per symbolic extent across all tensors (products such as `2*H` included), so every kernel
/// view built from the returned dims lies inside the tensors it borrows. Also the launch dtype is one
/// the op declares, and no output overlaps another tensor. What else the spec rules (parameter ranges,
/// per-op constraints) the shared Python validation enforces before any call reaches this crate.
pub fn check_signature(req: &Request) -> Result<Dims, ArgError> {
    let op = req.op.as_str();
    let decl = crate::generated::op(op).ok_or_else(|| ArgError::new(op, "op", "not an op of the specs (crate::generated)"))?;
    if !decl.dtypes.contains(&req.dtype.name()) {
        return Err(ArgError::new(op, "dtype", format!("{op} is {} only, got {}", decl.dtypes.join("/"), req.dtype.name())));
    }
    let names: Vec<&str> = decl.tensors.iter().map(|t| t.name).collect();
    let tensors = req.tensors_named(&names)?;
    // Bind each symbol where it first appears, in call order (as the Python validator): a plain name
    // takes the extent, a product with one unbound factor ("2*H") that factor if it divides evenly.
    let mut dims = Dims::default();
    let mut shapes = Vec::with_capacity(tensors.len());
    for (t, d) in tensors.iter().zip(decl.tensors) {
        let shape = check_tensor(op, t, d.shape.len(), req.dtype)?;
        for (&extent, &sym) in shape.iter().zip(d.shape) {
            let factors: Vec<&'static str> = sym.split('*').map(str::trim).collect();
            let free: Vec<&'static str> = factors.iter().copied().filter(|f| f.parse::<i64>().is_err() && dims.get(f).is_none()).collect();
            if free.len() != 1 {
                continue;
            }
            let rest = dims.eval(&factors.iter().copied().filter(|f| *f != free[0]).collect::<Vec<_>>().join("*"));
            match rest {
                Some(r) if r > 0 && extent as i64 % r == 0 => dims.0.push((free[0], (extent as i64 / r) as i32)),
                _ => {}
            }
        }
        shapes.push(shape);
    }
    for ((shape, d), t) in shapes.iter().zip(decl.tensors).zip(tensors) {
        let want: Vec<Option<i64>> = d.shape.iter().map(|s| dims.eval(s)).collect();
        if shape.iter().zip(&want).any(|(&got, w)| *w != Some(got as i64)) {
            let show: Vec<String> = d.shape.iter().zip(&want).map(|(s, w)| w.map_or(s.to_string(), |v| v.to_string())).collect();
            return Err(ArgError::new(op, &t.name, format!("shape {:?} does not match ({}) = {:?}", t.shape, show.join(", "), d.shape)));
        }
    }
    check_outputs_alias(req, decl)?;
    Ok(dims)
}

/// No output of `decl` overlaps another tensor of the request (`check_no_alias`, the declared in-place
/// pairs excepted). The tensors are `decl`'s, in its order (`check_signature` checked that).
pub fn check_outputs_alias(req: &Request, decl: &crate::generated::OpDecl) -> Result<(), ArgError> {
    let tensors = &req.tensors;
    for i in (0..tensors.len()).filter(|&i| decl.tensors[i].output) {
        let others: Vec<&TensorArg> = tensors.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, t)| t).collect();
        check_no_alias(&req.op, req.dtype, &tensors[i], &others, decl.tensors[i].inplace_ok)?;
    }
    Ok(())
}

/// What of `check_signature` depends on the data pointers: each pointer (`check_pointer`) in request order,
/// then the outputs' overlap (`check_outputs_alias`). For a request `check_signature` accepted with other
/// pointers, this refuses exactly what `check_signature` would refuse with these (same errors).
pub fn check_pointers(req: &Request, decl: &crate::generated::OpDecl) -> Result<(), ArgError> {
    for t in &req.tensors {
        check_pointer(&req.op, t, req.dtype)?;
    }
    check_outputs_alias(req, decl)
}
