// The GEMM body shared by matmul.cu and bmm.cu: out[z] (M, N) = a[z] (M, K) @ b[z] (K, N), with z the
// grid's y dimension (always 0 for matmul). The grid's x is the flat output-tile index, swizzled into
// (pm, pn) in GROUP_M-tall column-major groups so that blocks running at the same time share rows of A
// and columns of B in L2. Each block accumulates its TM x TN output tile in fp32 over K in TK chunks
// with the tensor-core mma (HGMMA on sm_90); K tails load as zeros, which add nothing. fp32 inputs are
// rounded to tf32 before the mma (the spec's fp32 tolerance is tf32's): fp32 x fp32 mma would not run
// on the tensor cores.
//
// __restrict__ on a, b, out: without it nvcc must assume out may alias a or b, so it orders the final
// store after every load by carrying the loads' memory tokens through the K loop; tileiras then makes
// the TMA producer wait for each of its own loads to land (a private mbarrier, re-initialised every
// step) before it signals the consumers, i.e. no two K steps' loads are in flight. A GEMM's output must
// not overlap its inputs anyway (tiles of a/b would be read after other blocks wrote out).
//
// A (see common.cuh): with A = true the module has checked that a, b, out are 16-byte aligned and K, N
// are multiples of 16 bytes of T, so the loads and the store become TMA (UTMALDG/UTMASTG).
//
// Why 3-D views of the kernel's own pointer arguments, and no `a + z * M * K`: tileiras encodes a TMA
// descriptor on the host side (as extra kernel parameters, like cuTile Python) only for a view whose
// base is a kernel parameter. For a base computed in the kernel it builds the descriptor on the device,
// in a global workspace the kernel takes from a driver constant (c[0x0][0x1c0]) or, when that is null,
// from a hidden 8-byte parameter after the declared ones (EIATTR_CBANK_PARAM_SIZE 0x30 for 0x24 of
// declared parameters). cuLaunchKernel never fills that hidden parameter, so such a kernel reads a
// garbage workspace address: an illegal memory access on the H200, or by luck of what lies in the
// parameter bank none. The batch is therefore the leading dimension of the view (1 for
// matmul) and each tile is (1, TM, TK), reshaped to 2-D for the mma. shared_tests/test_tile_cpp_module.py
// checks every _a16 kernel in the sm_90 cubins for the device-side descriptor path.
#pragma once
#include "common.cuh"

constexpr int TR_GEMM_GROUP_M = 8;

// Output tile t of the flat (batch entry, tile) order: t / (tiles_m tiles_n) is the entry, the rest the tile.
// t unsigned, as ct::bid().x is: the one-tile kernel's index math stays the unsigned division it was.
template <typename T, int TM, int TN, int TK, typename PA, typename PB, typename PO>
__tile__ void gemm_one(PA& pa, PB& pb, PO& po, unsigned t, int tiles_m, int tiles_n, int K) {
  int z = t / (tiles_m * tiles_n);
  int pid = t % (tiles_m * tiles_n);
  int per_group = TR_GEMM_GROUP_M * tiles_n;
  int first_m = (pid / per_group) * TR_GEMM_GROUP_M;
  int rows = tiles_m - first_m < TR_GEMM_GROUP_M ? tiles_m - first_m : TR_GEMM_GROUP_M;
  int pm = first_m + (pid % per_group) % rows;
  int pn = (pid % per_group) / rows;

  using Acc = tr::ftile<TM, TN>;
  Acc acc = ct::zeros<Acc>();
  int nk = tr::ceil_div(K, TK);
  // ct::irange, not `for (int k = 0; k < nk; ++k)`: nvcc lowers the plain C++ loop to a Tile IR `loop`
  // (while form, if/continue/break), which tileiras does not software-pipeline: one smem stage, a
  // wgmma wait to 0 every step and the accumulator shuffled through shared memory (LDS/STS + 28
  // BAR.SYNC per K step on sm_90). irange lowers to a counted `for`: 3 TMA stages and one wgmma group
  // left in flight, as cuTile Python's `for kk in range(...)` gets.
  for (int k : ct::irange(0, nk)) {
    auto x = ct::reshape(pa.load_masked(z, pm, k), ct::shape<TM, TK>{});
    auto y = ct::reshape(pb.load_masked(z, k, pn), ct::shape<TK, TN>{});
    if constexpr (sizeof(T) == 4) {
      acc = ct::mma(ct::element_cast<__nv_tf32>(x), ct::element_cast<__nv_tf32>(y), acc);
    } else {
      acc = ct::mma(x, y, acc);
    }
  }
  po.store_masked(ct::reshape(ct::element_cast<T>(acc), ct::shape<1, TM, TN>{}), z, pm, pn);
}

// P 0: one block per output tile. P > 0 (the launch gives min(tiles, P x SMs) blocks, cpp/src/ops.cpp): each
// block walks tiles bid, bid + blocks, ... in the same order. The _a16 walk keeps the one-tile kernel's
// warp-specialised resources (sm_90: 384 threads, 168 registers); that its TMA producer runs ahead into the
// next tile's K steps during the epilogue, as in cuTile Python's PERSIST SASS (kernels/cutile/matmul.py), is
// the hypothesis the sweep times.
template <bool A, typename T, int TM, int TN, int TK, int P>
__tile__ void gemm_tile(T* __restrict__ a, T* __restrict__ b, T* __restrict__ out, int Bt, int M, int N,
                        int K) {
  a = tr::al<A>(a), b = tr::al<A>(b), out = tr::al<A>(out);
  K = tr::dv<A, T>(K);
  N = tr::dv<A, T>(N);
  ct::partition_view pa{ct::tensor_span{a, ct::extents{Bt, M, K}}, ct::shape<1, TM, TK>{}};
  ct::partition_view pb{ct::tensor_span{b, ct::extents{Bt, K, N}}, ct::shape<1, TK, TN>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{Bt, M, N}}, ct::shape<1, TM, TN>{}};
  // One flat grid axis (cpp/src/ops.cpp), output tiles fastest: Bt may exceed grid y's 65535.
  int tiles_m = tr::ceil_div(M, TM), tiles_n = tr::ceil_div(N, TN);
  if constexpr (P == 0) {
    gemm_one<T, TM, TN, TK>(pa, pb, po, ct::bid().x, tiles_m, tiles_n, K);
  } else {
    int blocks = static_cast<int>(ct::num_blocks().x);
    for (int t : ct::irange(static_cast<int>(ct::bid().x), Bt * tiles_m * tiles_n, blocks))
      gemm_one<T, TM, TN, TK>(pa, pb, po, static_cast<unsigned>(t), tiles_m, tiles_n, K);
  }
}

// W: the num_worker_warps_per_cta hint (common.cuh); 128x256 tiles need 8 or the accumulator spills.
#define TR_GEMM_ENTRY(op, dt, CT, TM, TN, TK, W, P)                                                \
  extern "C" TR_HINT_W_##W __tile_global__ void op##_##dt##_##TM##_##TN##_##TK##_##W##_##P(        \
      CT* __restrict__ a, CT* __restrict__ b, CT* __restrict__ out, int Bt, int M, int N, int K) {   \
    gemm_tile<false, CT, TM, TN, TK, P>(a, b, out, Bt, M, N, K);                                   \
  }                                                                                                \
  extern "C" TR_HINT_W_##W __tile_global__ void op##_##dt##_##TM##_##TN##_##TK##_##W##_##P##_a16(  \
      CT* __restrict__ a, CT* __restrict__ b, CT* __restrict__ out, int Bt, int M, int N, int K) {   \
    gemm_tile<true, CT, TM, TN, TK, P>(a, b, out, Bt, M, N, K);                                    \
  }
