//! Borrowing torch's CUDA objects for cuTile-rs, without copies and without taking ownership.
//!
//! * Context: the device's primary context (the one torch uses), retained once per device and kept
//!   for the life of the process.
//! * Stream: torch's current stream, borrowed by handle (`Stream::borrow_raw` never destroys it).
//! * Tensors: torch's data pointers, borrowed (`Tensor::borrow_raw_parts` never frees them). torch's
//!   caching allocator keeps the memory alive for work queued on the stream it was used on, which is
//!   the stream we launch on, so the liveness obligation of the borrow is met without a host sync.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use cutile::cuda_core::{Context, Stream};
use cutile::tensor::Tensor;
use cutile::DType as CuDType;

fn contexts() -> &'static Mutex<HashMap<i32, Arc<Context>>> {
    static C: OnceLock<Mutex<HashMap<i32, Arc<Context>>>> = OnceLock::new();
    C.get_or_init(Default::default)
}

fn streams() -> &'static Mutex<HashMap<(i32, u64), Arc<Stream>>> {
    static S: OnceLock<Mutex<HashMap<(i32, u64), Arc<Stream>>>> = OnceLock::new();
    S.get_or_init(Default::default)
}

/// The primary context of `device` (retained on first use, then cached).
pub fn context(device: i32) -> Result<Arc<Context>, String> {
    let mut map = contexts().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(ctx) = map.get(&device) {
        ctx.bind_to_thread().map_err(|e| format!("binding CUDA context of device {device}: {e:?}"))?;
        return Ok(ctx.clone());
    }
    let ctx = Context::new(device as usize).map_err(|e| format!("retaining CUDA primary context of device {device}: {e:?}"))?;
    map.insert(device, ctx.clone());
    Ok(ctx)
}

/// torch's stream `handle` on `device`, borrowed (cached per handle: borrowing is cheap, but dropping a
/// borrowed stream queries it, which a hot launch path does not need).
pub fn stream(device: i32, handle: u64) -> Result<Arc<Stream>, String> {
    let ctx = context(device)?;
    let mut map = streams().lock().unwrap_or_else(|p| p.into_inner());
    Ok(map
        .entry((device, handle))
        // SAFETY: the handle is torch's current stream on this device (0 = legacy default stream);
        // torch keeps its pooled streams for the life of the process and we never destroy it.
        .or_insert_with(|| unsafe { Stream::borrow_raw(handle as *mut c_void, &ctx) })
        .clone())
}

/// A torch tensor as a cuTile-rs tensor. `shape`/`strides` are in elements; they may describe a strided
/// view (silu_and_mul and rope read halves of the last dimension this way).
///
/// # Safety
/// `ptr` must be device memory of `ctx`'s device holding valid `T`s for every element the view
/// addresses, alive until the work queued on the launch stream completes.
pub unsafe fn borrow<T: CuDType>(ctx: &Arc<Context>, ptr: u64, shape: &[i32], strides: &[i32]) -> Tensor<T> {
    unsafe { Tensor::<T>::borrow_raw_parts(ptr, ctx.clone(), shape.to_vec(), strides.to_vec()) }
}
