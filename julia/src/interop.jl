# The bridge from torch (through juliacall): wrap device pointers as CuArrays without copying and
# launch on the CUDA stream torch is using.

"Julia element type for the names the Python adapter sends."
const ELTYPES = Dict{String,DataType}("Float32" => Float32, "Float16" => Float16,
                                      "BFloat16" => BFloat16)

"""
    wrap_tensor(T, ptr, dims) -> CuArray{T}

Alias the device memory at `ptr` (a torch tensor's data_ptr) as a CuArray with `dims` (the torch
shape reversed). `own=false`: Julia never frees it; the caller keeps the torch tensor alive.
"""
function wrap_tensor(::Type{T}, ptr::Integer, dims::Tuple) where {T}
    ptr == 0 && throw(ArgumentError("null data pointer"))
    shape = map(Int, dims)
    return unsafe_wrap(CuArray, CuPtr{T}(UInt(ptr)), shape; own=false)
end

"""
    foreign_stream(handle) -> CuStream

A CuStream object for a stream created elsewhere (torch's). It is built with the plain field
constructor, so no finalizer is attached and Julia never destroys torch's stream. The adapter
already maps torch's default stream (handle 0) to CU_STREAM_LEGACY (1), so the meaning does not
depend on whether CUDA.jl uses the per-thread-default-stream driver entry points.
"""
function foreign_stream(handle::Integer)
    H = fieldtype(CuStream, :handle)
    return CuStream(H(UInt(handle)), context())
end

"""
    torch_call(op, eltype, device, stream, tensors...; params...)

Entry point for the Python adapter. `tensors` are `(data_ptr, reversed_dims)` tuples in the
spec's order (inputs then outputs). Selects `device` (torch's ordinal; both use the primary
context), wraps every tensor, and runs the op with `stream` as the task's stream, so the launch is
ordered after torch's earlier work and before its later work. No host synchronisation.
"""
function torch_call(op::AbstractString, eltype::AbstractString, device::Integer, stream::Integer,
                    tensors::Tuple...; params...)
    f = get(OPS, String(op)) do
        throw(ArgumentError("TileRosetta: unknown op '$op'; expected one of $(sort!(collect(keys(OPS))))"))
    end
    T = get(ELTYPES, String(eltype)) do
        throw(ArgumentError("TileRosetta.$op: element type '$eltype' not supported"))
    end
    CUDA.device!(Int(device))
    arrays = map(t -> wrap_tensor(T, t[1], Tuple(t[2])), tensors)
    CUDA.stream!(foreign_stream(stream)) do
        f(arrays...; params...)
    end
    return nothing
end

"""
    probe() -> Dict

What the adapter's availability check needs, as plain values: versions, whether CUDA is
functional, and the device's compute capability next to the Tile IR bytecode version cuTile will
emit (Hopper needs bytecode >= 13.3).
"""
function probe()
    info = Dict{String,Any}("julia" => string(VERSION), "functional" => CUDA.functional())
    info["cutile_bytecode"] = string(ct.bytecode_version())
    if info["functional"]
        cap = CUDA.capability(CUDA.device())
        info["capability"] = string(cap.major, ".", cap.minor)
        info["device"] = CUDA.name(CUDA.device())
    end
    return info
end
