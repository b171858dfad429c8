// The GEMM body shared by matmul.cu and bmm.cu: out[z] (M, N) = a[z] (M, K) @ b[z] (K, N), with z the
// grid's y dimension (always 0 for matmul). The grid's x is the flat output-tile index, swizzled into
// (pm, pn) in GROUP_M-tall column-major groups so that blocks running at the same time share rows of A
// and columns of B in L2. Each block accumulates its TM x TN output tile in fp32 over K in TK chunks
// with the tensor-core mma (HGMMA on sm_90); K tails load as zeros, which add nothing. fp32 inputs are
// rounded to tf32 before the mma (the spec's fp32 tolerance is tf32's): fp32 x fp32 mma would not run
// on the tensor cores.
//
// A (see common.cuh): with A = true the module has checked that a, b, out are 16-byte aligned and K, N
// are multiples of 16 bytes of T, so each batch entry stays aligned and the loads become TMA.
#pragma once
#include "common.cuh"

constexpr int TR_GEMM_GROUP_M = 8;

template <bool A, typename T, int TM, int TN, int TK>
__tile__ void gemm_tile(T* a, T* b, T* out, int M, int N, int K) {
  K = tr::dv<A, T>(K);
  N = tr::dv<A, T>(N);
  long long z = ct::bid().y;
  T* az = tr::al<A>(a + z * M * K);
  T* bz = tr::al<A>(b + z * K * N);
  T* oz = tr::al<A>(out + z * M * N);
  ct::partition_view pa{ct::tensor_span{az, ct::extents{M, K}}, ct::shape<TM, TK>{}};
  ct::partition_view pb{ct::tensor_span{bz, ct::extents{K, N}}, ct::shape<TK, TN>{}};
  ct::partition_view po{ct::tensor_span{oz, ct::extents{M, N}}, ct::shape<TM, TN>{}};

  int tiles_m = tr::ceil_div(M, TM), tiles_n = tr::ceil_div(N, TN);
  int pid = ct::bid().x;
  int per_group = TR_GEMM_GROUP_M * tiles_n;
  int first_m = (pid / per_group) * TR_GEMM_GROUP_M;
  int rows = tiles_m - first_m < TR_GEMM_GROUP_M ? tiles_m - first_m : TR_GEMM_GROUP_M;
  int pm = first_m + (pid % per_group) % rows;
  int pn = (pid % per_group) / rows;

  using Acc = tr::ftile<TM, TN>;
  Acc acc = ct::zeros<Acc>();
  int nk = tr::ceil_div(K, TK);
  for (int k = 0; k < nk; ++k) {
    auto x = pa.load_masked(pm, k);
    auto y = pb.load_masked(k, pn);
    if constexpr (sizeof(T) == 4) {
      acc = ct::mma(ct::element_cast<__nv_tf32>(x), ct::element_cast<__nv_tf32>(y), acc);
    } else {
      acc = ct::mma(x, y, acc);
    }
  }
  po.store_masked(ct::element_cast<T>(acc), pm, pn);
}

// W: the num_worker_warps_per_cta hint (common.cuh); 128x256 tiles need 8 or the accumulator spills.
#define TR_GEMM_ENTRY(op, dt, CT, TM, TN, TK, W)                                                   \
  extern "C" TR_HINT_W_##W __tile_global__ void op##_##dt##_##TM##_##TN##_##TK##_##W(              \
      CT* a, CT* b, CT* out, int M, int N, int K) {                                                \
    gemm_tile<false, CT, TM, TN, TK>(a, b, out, M, N, K);                                          \
  }                                                                                                \
  extern "C" TR_HINT_W_##W __tile_global__ void op##_##dt##_##TM##_##TN##_##TK##_##W##_a16(        \
      CT* a, CT* b, CT* out, int M, int N, int K) {                                                \
    gemm_tile<true, CT, TM, TN, TK>(a, b, out, M, N, K);                                           \
  }
