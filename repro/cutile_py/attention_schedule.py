"""cuTile / tileiras on sm_90: a flash-attention forward loop compiles to warp-specialised code (a TMA producer
warpgroup, consumer warpgroups with setmaxnreg) but every wgmma is waited to completion (WARPGROUP.DEPBAR.LE
gsb0, 0x0 only) and no named barrier is chosen per warpgroup: the exp2 of one key tile never overlaps an MMA,
and the consumer warpgroups never take turns on the tensor cores (FA3's intra-warpgroup overlap and ping-pong;
FlashAttention 4's sm_90 kernel, same 384 threads and 168 registers at D 128, has both). q, k, v, out are
(B*H*S, D) bf16 rows; block i owns BM query rows of head i // (S / BM) and streams that head's keys in BN rows.

    python3 repro/cutile_py/attention_schedule.py [--arch sm_90] [--out DIR]   # CPU: SASS facts per D
    python3 repro/cutile_py/attention_schedule.py --time                     # GPU: one line per D
"""
import cuda.tile as ct

from harness import main

BH, S, BM, BN = 4 * 32, 4096, 128, 128  # the bench's B4 H32 S4096 prefill
LOG2E = 1.4426950408889634


@ct.kernel(occupancy=1, num_worker_warps=8)  # two consumer warpgroups of 64 rows each, as FA4's D 128 tile
def attention(q, k, v, out, D: ct.Constant[int]):
    i = ct.bid(0)
    kv0 = (i // (S // BM)) * (S // BN)  # the head's first key tile
    qt = ct.load(q, (i, 0), (BM, D), check_bounds=False)
    m = ct.full((BM, 1), float("-inf"), ct.float32)
    l_i = ct.zeros((BM, 1), ct.float32)
    acc = ct.zeros((BM, D), ct.float32)
    c = LOG2E / D ** 0.5
    for j in range(S // BN):
        kt = ct.load(k, (0, kv0 + j), (D, BN), order=(1, 0), check_bounds=False)  # K^T: a permuted load
        s = ct.mma(qt, kt, ct.zeros((BM, BN), ct.float32))
        m_new = ct.maximum(m, ct.max(s, axis=1, keepdims=True) * c)
        p = ct.exp2(s * c - m_new, flush_to_zero=True)
        alpha = ct.exp2(m - m_new, flush_to_zero=True)
        l_i = l_i * alpha + ct.sum(p, axis=1, keepdims=True)
        vt = ct.load(v, (kv0 + j, 0), (BN, D), check_bounds=False)
        acc = ct.mma(ct.astype(p, ct.bfloat16), vt, acc * alpha)
        m = m_new
    ct.store(out, (i, 0), ct.astype(acc * (1.0 / l_i), out.dtype), check_bounds=False)


def gpu_case(label):
    import torch

    d = int(label.split("=")[1])
    q, k, v, out = (torch.randn(BH * S, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    heads = lambda t: t.view(BH, S, d)  # noqa: E731
    ref = lambda: torch.nn.functional.scaled_dot_product_attention(heads(q), heads(k), heads(v)).view(-1, d)  # noqa: E731
    return (BH * S // BM, 1, 1), [q, k, v, out], 4 * BH * S * d * 2, ref


if __name__ == "__main__":
    main(attention, 4, {f"D={d}": (d,) for d in (128, 64)}, gpu_case)
