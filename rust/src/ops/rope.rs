//! rope: out = q * cos + rotate_half(q) * sin, q (B, H, S, D), cos/sin (S, D).
//!
//! With q = [q1 | q2] (halves of the head dim) the result is
//!   out[..., :D/2] = q1 * cos[:, :D/2] - q2 * sin[:, :D/2]
//!   out[..., D/2:] = q2 * cos[:, D/2:] + q1 * sin[:, D/2:]
//! Each half is one launch of the same kernel over strided half-views (no gather, no concatenation):
//! `a * c + sign * b * s`. q is seen as (B*H, S, D/2) views; a tile is BS positions x DH = next
//! power of two >= D/2 columns, clipped to the view, so any even D works.

use crate::args::{check_no_alias, check_tensor, expect_dim, ArgError, DType, Request};
use crate::config::{self, next_pow2, Config};
use crate::ops::{KernelSpec, Plan, Rt};
use crate::runtime::borrow;
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    #[cutile::entry()]
    pub fn rope_half<T: ElementType, const BS: i32, const DH: i32>(
        out: &mut Tensor<T, { [1, BS, DH] }>,
        a: &Tensor<T, { [-1, -1, -1] }>,
        b: &Tensor<T, { [-1, -1, -1] }>,
        c: &Tensor<T, { [-1, -1] }>,
        s: &Tensor<T, { [-1, -1] }>,
        sign: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let at: Tile<T, { [1, BS, DH] }> = a.load_tile(shape![1, BS, DH], [pid.0, pid.1, 0i32]);
        let bt: Tile<T, { [1, BS, DH] }> = b.load_tile(shape![1, BS, DH], [pid.0, pid.1, 0i32]);
        let ct: Tile<T, { [BS, DH] }> = c.load_tile(shape![BS, DH], [pid.1, 0i32]);
        let st: Tile<T, { [BS, DH] }> = s.load_tile(shape![BS, DH], [pid.1, 0i32]);
        let af: Tile<f32, { [1, BS, DH] }> = convert_tile(at);
        let bf: Tile<f32, { [1, BS, DH] }> = convert_tile(bt);
        let cf: Tile<f32, { [BS, DH] }> = convert_tile(ct);
        let sf: Tile<f32, { [BS, DH] }> = convert_tile(st);
        let cf: Tile<f32, { [1, BS, DH] }> = cf.reshape(shape![1, BS, DH]);
        let sf: Tile<f32, { [1, BS, DH] }> = sf.reshape(shape![1, BS, DH]);
        let sg: Tile<f32, { [1, BS, DH] }> = broadcast_scalar(sign, shape![1, BS, DH]);
        let y: Tile<T, { [1, BS, DH] }> = convert_tile(af * cf + sg * bf * sf);
        out.store(y);
    }
}

pub fn plan(req: &Request) -> Result<Plan, ArgError> {
    let op = req.op.as_str();
    let t = req.tensors_named(&["q", "cos", "sin", "out"])?;
    let q = check_tensor(op, &t[0], 4, req.dtype)?;
    let (s, d) = (q[2], q[3]);
    if d % 2 != 0 {
        return Err(ArgError::new(op, "q", format!("head dim D={d} must be even for half rotation")));
    }
    for (i, name) in [(1, "cos"), (2, "sin")] {
        let c = check_tensor(op, &t[i], 2, req.dtype)?;
        expect_dim(op, name, "dim 0 (S)", c[0], s)?;
        expect_dim(op, name, "dim 1 (D)", c[1], d)?;
    }
    let o = check_tensor(op, &t[3], 4, req.dtype)?;
    for (k, name) in ["B", "H", "S", "D"].iter().enumerate() {
        expect_dim(op, "out", &format!("dim {k} ({name})"), o[k], q[k])?;
    }
    check_no_alias(op, req.dtype, &t[3], &[&t[0], &t[1], &t[2]])?;
    let cfg = config::resolve(op, req.dtype, &[("S", s as i64), ("D", d as i64)], &req.config)?;
    Ok(Plan { dims: q, cfg })
}

fn dh(d: i32) -> i32 {
    next_pow2((d / 2) as i64) as i32
}

pub fn specs(dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    // dims = (B, H, S, D); only D shapes the kernel (through DH).
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function: "rope_half",
        generics: vec![dtype.cutile_name().into(), config::get(cfg, "BS").to_string(), dh(dims[3]).to_string()],
        strides: vec![("out", vec![-1, -1, 1]), ("a", vec![-1, -1, 1]), ("b", vec![-1, -1, 1]), ("c", vec![-1, 1]), ("s", vec![-1, 1])],
    }]
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let t = &req.tensors;
    let (bh, s, d) = (plan.dims[0] * plan.dims[1], plan.dims[2], plan.dims[3]);
    let half = d / 2;
    let bs = config::get(&plan.cfg, "BS");
    let off = half as u64 * req.dtype.size() as u64; // byte offset of the second half of a row
    let view3 = [bh, s, half];
    let st3 = [s * d, d, 1];
    let g = specs(req.dtype, &plan.cfg, &plan.dims).remove(0).generics;
    // (out half, a, b, cos/sin half, sign): first half a=q1, b=q2, sign -1; second a=q2, b=q1, sign +1.
    for (o_off, a_off, b_off, sign) in [(0, 0, off, -1.0f32), (off, off, 0, 1.0f32)] {
        // SAFETY: half-views inside the validated q, cos, sin and out (row strides D); see runtime::borrow.
        let (a, b, c, sn, mut out) = unsafe {
            (
                borrow::<T>(&rt.ctx, t[0].ptr + a_off, &view3, &st3),
                borrow::<T>(&rt.ctx, t[0].ptr + b_off, &view3, &st3),
                borrow::<T>(&rt.ctx, t[1].ptr + o_off, &[s, half], &[d, 1]),
                borrow::<T>(&rt.ctx, t[2].ptr + o_off, &[s, half], &[d, 1]),
                borrow::<T>(&rt.ctx, t[3].ptr + o_off, &view3, &st3),
            )
        };
        let op = kernel::rope_half((&mut out).partition([1, bs as usize, dh(d) as usize]), &a, &b, &c, &sn, sign).generics(g.clone());
        unsafe { op.async_on(&rt.stream) }.map(|_| ()).map_err(|e| format!("{e}"))?;
    }
    Ok(())
}
