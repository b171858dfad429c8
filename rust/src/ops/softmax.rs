//! softmax over rows of x (M, N). One tile block owns BR rows and streams them in BN-column chunks:
//! pass 1 keeps a running max and a rescaled running sum (online softmax, so exp never overflows
//! and any N works with a fixed tile), pass 2 writes exp(x - max) / sum. Columns past N are masked
//! to -inf (loads pad with 0, which would otherwise count). All math in fp32.

use crate::args::{check_no_alias, check_tensor, expect_dim, ArgError, DType, Request};
use crate::config::{self, Config};
use crate::ops::{KernelSpec, Plan, Rt};
use crate::runtime::borrow;
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    /// `out` is the block's BR x N slab (N exact, a generic: the chunk loop needs its bound).
    #[cutile::entry()]
    pub fn softmax<T: ElementType, const BR: i32, const BN: i32, const N: i32>(
        out: &mut Tensor<T, { [BR, N] }>,
        x: &Tensor<T, { [-1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let row = pid.0;
        let chunks: i32 = (N + BN - 1) / BN;
        let cols: Tile<i32, { [BN] }> = iota(shape![BN]);
        let cols: Tile<i32, { [BR, BN] }> = cols.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
        let n_tile: Tile<i32, { [BR, BN] }> = broadcast_scalar(N, shape![BR, BN]);
        let neg_inf: Tile<f32, { [BR, BN] }> = constant(f32::NEG_INFINITY, shape![BR, BN]);

        let mut m: Tile<f32, { [BR, 1] }> = constant(f32::NEG_INFINITY, shape![BR, 1]);
        let mut l: Tile<f32, { [BR, 1] }> = constant(0.0f32, shape![BR, 1]);
        for j in 0i32..chunks {
            let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [row, j]);
            let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
            let c: Tile<i32, { [BR, BN] }> = cols + broadcast_scalar(j * BN, shape![BR, BN]);
            let xf: Tile<f32, { [BR, BN] }> = select(lt_tile(c, n_tile), xf, neg_inf);
            let cmax: Tile<f32, { [BR] }> = reduce_max(xf, 1);
            let m_new: Tile<f32, { [BR, 1] }> = max_tile(m, cmax.reshape(shape![BR, 1]));
            // Every chunk holds at least one real column, so m_new is finite and masked p are 0.
            let p: Tile<f32, { [BR, BN] }> = exp(xf - m_new.broadcast(shape![BR, BN]));
            let s: Tile<f32, { [BR] }> = reduce_sum(p, 1);
            l = l * exp(m - m_new) + s.reshape(shape![BR, 1]);
            m = m_new;
        }

        let one: Tile<f32, { [BR, 1] }> = constant(1.0f32, shape![BR, 1]);
        let inv: Tile<f32, { [BR, BN] }> = true_div(one, l).broadcast(shape![BR, BN]);
        let mb: Tile<f32, { [BR, BN] }> = m.broadcast(shape![BR, BN]);
        let mut out_part: PartitionMut<T, { [BR, BN] }> = out.partition_mut(shape![BR, BN]);
        for j in 0i32..chunks {
            let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [row, j]);
            let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
            let y: Tile<f32, { [BR, BN] }> = exp(xf - mb) * inv;
            let yt: Tile<T, { [BR, BN] }> = convert_tile(y);
            out_part.store(yt, [0i32, j]);
        }
    }
}

pub fn plan(req: &Request) -> Result<Plan, ArgError> {
    let op = req.op.as_str();
    let t = req.tensors_named(&["x", "out"])?;
    let x = check_tensor(op, &t[0], 2, req.dtype)?;
    let o = check_tensor(op, &t[1], 2, req.dtype)?;
    expect_dim(op, "out", "dim 0", o[0], x[0])?;
    expect_dim(op, "out", "dim 1", o[1], x[1])?;
    check_no_alias(op, req.dtype, &t[1], &[&t[0]])?;
    let cfg = config::resolve(op, req.dtype, &[("M", x[0] as i64), ("N", x[1] as i64)], &req.config)?;
    Ok(Plan { dims: x, cfg })
}

pub fn specs(dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    let g = |k: &str| config::get(cfg, k).to_string();
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function: "softmax",
        generics: vec![dtype.cutile_name().into(), g("BR"), g("BN"), dims[1].to_string()],
        strides: vec![("out", vec![-1, 1]), ("x", vec![-1, 1])],
    }]
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let t = &req.tensors;
    let (m, n) = (plan.dims[0], plan.dims[1]);
    let br = config::get(&plan.cfg, "BR");
    // SAFETY: validated contiguous torch tensors of dtype T on rt's device (see runtime::borrow).
    let (x, mut out) = unsafe { (borrow::<T>(&rt.ctx, t[0].ptr, &[m, n], &[n, 1]), borrow::<T>(&rt.ctx, t[1].ptr, &[m, n], &[n, 1])) };
    let g = specs(req.dtype, &plan.cfg, &plan.dims).remove(0).generics;
    let op = kernel::softmax((&mut out).partition([br as usize, n as usize]), &x).generics(g);
    unsafe { op.async_on(&rt.stream) }.map(|_| ()).map_err(|e| format!("{e}"))
}
