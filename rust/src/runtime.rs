//! Borrowing torch's CUDA objects for cuTile-rs, without copies and without taking ownership.
//!
//! * Context: the device's primary context (the one torch uses), retained once per device and kept
//!   for the life of the process.
//! * Stream: torch's current stream, borrowed by handle (`Stream::borrow_raw` never destroys it).
//! * Tensors: torch's data pointers, borrowed (`Tensor::borrow_raw_parts` never frees them). torch's
//!   caching allocator keeps the memory alive for work queued on the stream it was used on, which is
//!   the stream we launch on, so the liveness obligation of the borrow is met without a host sync.
//! * Scratch: device memory a launch needs for itself and Python never sees (attention's split-KV
//!   workspaces): `with_scratch`, one growing block per (device, stream), or a stream-ordered block of
//!   the graph's own while the stream is being captured.

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

fn sm_counts() -> &'static Mutex<HashMap<i32, i64>> {
    static N: OnceLock<Mutex<HashMap<i32, i64>>> = OnceLock::new();
    N.get_or_init(Default::default)
}

/// The streaming multiprocessors of `device` (one driver query per device, then cached): what
/// attention's split-KV plan weighs its row tiles against.
pub fn sm_count(device: i32) -> Result<i64, String> {
    if let Some(&n) = sm_counts().lock().unwrap_or_else(|p| p.into_inner()).get(&device) {
        return Ok(n);
    }
    let n = context(device)?
        .multiprocessor_count()
        .map_err(|e| format!("querying the SM count of device {device}: {e:?}"))? as i64;
    sm_counts().lock().unwrap_or_else(|p| p.into_inner()).insert(device, n);
    Ok(n)
}

/// One scratch block: `bytes` at `ptr` (cuMemAllocAsync on its stream).
struct Scratch {
    ptr: u64,
    bytes: usize,
}

fn scratches() -> &'static Mutex<HashMap<(i32, u64), Scratch>> {
    static S: OnceLock<Mutex<HashMap<(i32, u64), Scratch>>> = OnceLock::new();
    S.get_or_init(Default::default)
}

/// Whether `stream` is being captured into a CUDA graph.
fn capturing(stream: &Arc<Stream>) -> Result<bool, String> {
    use cutile::cuda_core::sys;
    let mut status: sys::CUstreamCaptureStatus = sys::CUstreamCaptureStatus_enum_CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the stream is torch's live stream (`stream` above); the call only writes `status`.
    let rc = unsafe { sys::cuStreamIsCapturing(stream.cu_stream(), &mut status) };
    if rc != sys::cudaError_enum_CUDA_SUCCESS {
        return Err(format!("cuStreamIsCapturing failed (CUresult {rc})"));
    }
    Ok(status != sys::CUstreamCaptureStatus_enum_CU_STREAM_CAPTURE_STATUS_NONE)
}

/// Runs `queue(ptr)` with `bytes` of device scratch memory at `ptr` that only the work `queue` puts on
/// `stream` (torch's stream `handle` on `device`) uses. The caller's queued work must stay on `stream`.
///
/// * Normally the block is the (device, stream) one, kept for the life of the process and grown (to a
///   power of two of at least 1 MiB) when a call needs more: the old block is freed stream-ordered on the
///   same stream, after every use of it, which was all on that stream. The lock is held while `queue`
///   runs, so two host threads launching on one stream cannot interleave their uses of the block (each
///   call's launches are queued together); separate streams have separate blocks, so concurrent streams
///   never share one.
/// * While the stream is captured into a CUDA graph, the block is allocated and freed around `queue` on
///   the stream (cuMemAllocAsync / cuMemFreeAsync: graph memory nodes, owned by the graph, valid on each
///   replay). The cached block is never used by a graph: a later growth may free it while the graph lives.
pub fn with_scratch<R>(
    device: i32,
    handle: u64,
    stream: &Arc<Stream>,
    bytes: usize,
    queue: impl FnOnce(u64) -> Result<R, String>,
) -> Result<R, String> {
    use cutile::cuda_core::{free_async, malloc_async};
    let bytes = bytes.max(1);
    if capturing(stream)? {
        // SAFETY: a live stream of the bound context; the block is freed after `queue`'s work, on the
        // same stream.
        let ptr = unsafe { malloc_async(bytes, stream) }.map_err(|e| format!("allocating {bytes} B of scratch in a graph capture: {e:?}"))?;
        let result = queue(ptr);
        unsafe { free_async(ptr, stream) }.map_err(|e| format!("freeing scratch in a graph capture: {e:?}"))?;
        return result;
    }
    let mut map = scratches().lock().unwrap_or_else(|p| p.into_inner());
    let block = map.entry((device, handle)).or_insert(Scratch { ptr: 0, bytes: 0 });
    if block.bytes < bytes {
        if block.ptr != 0 {
            // SAFETY: allocated by malloc_async below on this same stream; every use of it was queued on
            // this stream before now, and the entry forgets it before anything else can.
            let old = std::mem::replace(block, Scratch { ptr: 0, bytes: 0 });
            unsafe { free_async(old.ptr, stream) }.map_err(|e| format!("freeing {} B of scratch: {e:?}", old.bytes))?;
        }
        let want = bytes.next_power_of_two().max(1 << 20);
        // SAFETY: a live stream of the bound context (`stream` binds it).
        let ptr = unsafe { malloc_async(want, stream) }.map_err(|e| format!("allocating {want} B of scratch: {e:?}"))?;
        *block = Scratch { ptr, bytes: want };
    }
    queue(block.ptr)
}
