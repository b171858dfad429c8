"""attention: flash-attention forward, softmax(q k^T * scale [+ causal mask]) v, with grouped-query heads
and a key length of its own.

q and out are (B, H, S, D); k and v are (B, Hkv, Sk, D), D in {64, 128}; scale defaults to 1/sqrt(D).

Grouped-query attention (GQA): Hkv divides H, and query head h reads key/value head h // (H / Hkv) (the
grouping of torch SDPA's enable_gqa, i.e. k.repeat_interleave(H // Hkv, dim=1), and of FlashAttention's
flash_attn_func when K/V have fewer heads). H == Hkv is ordinary multi-head attention, Hkv == 1 multi-query.

Key length: S (queries) and Sk (keys) may differ: decode (S = 1 new token against a cache of Sk) and a
prefill continuing a cache (S < Sk). The causal mask is aligned to the END of the keys (bottom-right): query
i sees keys j <= i + Sk - S, i.e. the queries are the last S positions of the Sk-long sequence. This is
FlashAttention's convention (flash_attn_func: "the causal mask is aligned to the bottom right corner") and
torch's torch.nn.attention.bias.causal_lower_right; torch SDPA's plain is_causal=True is top-left
(tril(diagonal=0)) and differs when S != Sk. For S == Sk both are the usual top-left triangle. Causal with
S > Sk is refused: the first S - Sk queries would see no key at all.

The symbols keep their pre-GQA names so that cases without Hkv/Sk (H == Hkv, S == Sk, every case and result
before this extension) are unchanged: `dim_defaults` fills Hkv = H and Sk = S when a case omits them.
"""

import math

import torch
import torch.nn.functional as F

from tilerosetta.specs.base import HALF_DTYPES, Case, OpSpec, Scaling, flag, positive

HEAD_DIMS = (64, 128)


def _case(b, h, s, d, hkv=None, sk=None, **params):
    """A case; Hkv and Sk only when they differ from H and S (so MHA self-attention names stay as before)."""
    dims = {"B": b, "H": h}
    if hkv is not None and hkv != h:
        dims["Hkv"] = hkv
    dims["S"] = s
    if sk is not None and sk != s:
        dims["Sk"] = sk
    dims["D"] = d
    return Case(dims, params)


# Queries per head up to which a call is decode for the tuned table (size_class_suffix): the backends' decode
# tiles are 16 rows, and no bench or model prefill has so few queries.
DECODE_MAX_S = 16


class Attention(OpSpec):
    name = "attention"
    order = 100
    summary = "out = softmax(q k^T * scale, causal?) v; GQA (Hkv | H), Sk >= S keys, end-aligned causal mask"
    inputs = {"q": ("B", "H", "S", "D"), "k": ("B", "Hkv", "Sk", "D"), "v": ("B", "Hkv", "Sk", "D")}
    outputs = {"out": ("B", "H", "S", "D")}
    params = {"causal": flag(False, "causal mask aligned to the end of the keys (bottom-right)"),
              "scale": positive(None, "score scale; None means 1/sqrt(D)", optional=True)}
    dim_defaults = {"Hkv": "H", "Sk": "S"}
    dtypes = HALF_DTYPES
    dim_choices = {"D": HEAD_DIMS, "S": (1, 2, 17, 64, 65, 127, 128, 200, 257),
                   "Sk": (1, 2, 17, 64, 65, 127, 128, 200, 257, 1000)}
    bound = "compute"
    cases = tuple(_case(b, h, s, d, causal=c) for b, h, s, d in
                  ((1, 1, 1, 64), (1, 2, 17, 64), (2, 3, 128, 64), (1, 2, 129, 128), (1, 1, 300, 128),
                   (2, 2, 64, 128)) for c in (False, True)) + (
        _case(1, 2, 77, 64, causal=True, scale=0.3),) + tuple(
        # GQA ratios 4 and 8, decode (S = 1), prefill continuing a cache (S < Sk), odd lengths, both D.
        _case(b, h, s, d, hkv, sk, causal=c) for b, h, hkv, s, sk, d in
        ((1, 8, 2, 65, 65, 64),      # GQA 4, self-attention, odd length
         (2, 8, 1, 33, 33, 128),     # GQA 8 (multi-query), odd length
         (2, 8, 2, 1, 300, 128),     # decode, GQA 4
         (1, 16, 2, 1, 1000, 64),    # decode, GQA 8, long enough for a split-KV schedule
         (1, 32, 8, 1, 4099, 128),   # decode, Llama 3.1 8B heads, split-KV with a ragged last split
         (3, 4, 4, 1, 77, 64),       # decode, GQA 1
         (1, 4, 1, 17, 200, 128),    # prefill continuing a cache, GQA 4
         (2, 2, 2, 5, 129, 64),      # prefill continuing a cache, GQA 1
         (1, 8, 1, 130, 257, 64),    # prefill continuing a cache, GQA 8, two query blocks
         (1, 4, 1, 40, 1500, 64),    # prefill continuing a long cache: split-KV on the GPU tables
         (1, 2, 2, 300, 1200, 128))  # split-KV where the causal limit leaves chunks without a visible key
        for c in (False, True)) + (
        _case(1, 4, 100, 64, 2, 33, causal=False),)  # more queries than keys (allowed when not causal)
    bench_cases = tuple(_case(4, 32, 4096, d, causal=c) for d in HEAD_DIMS for c in (False, True)) + tuple(
        # Llama 3.1 8B attention: GQA prefill (32 query heads, 8 KV heads) and decode at context 4096.
        _case(1, 32, s, 128, 8, causal=True) for s in (2048, 4096)) + tuple(
        _case(b, 32, 1, 128, 8, 4096, causal=True) for b in (1, 16, 64))
    # bench --scaling: S = Sk from 128 to 32768 at a fixed B*H*S (B derived), D=128, not causal. 65536 keeps
    # the float64 reference's S x S scores at S=32768 to ~17 GB per head pair.
    scaling = (Scaling(("S",), (128, 512, 2048, 8192, 32768), {"H": 2, "D": 128}, {"causal": False},
                       solve="B", product_of=("B", "H", "S"), product=65536),)

    def check_extra(self, dims, params):
        if dims["D"] not in HEAD_DIMS:
            return "q", f"head dim D={dims['D']} not supported; expected one of {HEAD_DIMS}"
        if dims["H"] % dims["Hkv"]:
            return "k", (f"k/v have Hkv={dims['Hkv']} heads, which does not divide q's H={dims['H']} heads "
                         f"(grouped-query attention needs H % Hkv == 0)")
        if params.get("causal") and dims["S"] > dims["Sk"]:
            return "q", (f"causal with S={dims['S']} queries > Sk={dims['Sk']} keys: the end-aligned mask would "
                         f"leave the first {dims['S'] - dims['Sk']} queries without any key")
        return None

    def random_dims(self, dims, params):
        """A drawn case made valid: Hkv a divisor of H, Sk >= S when causal."""
        dims = dict(dims)
        dims["Hkv"] = math.gcd(dims["H"], dims.get("Hkv", dims["H"]))
        if params.get("causal"):
            dims["Sk"] = max(dims.get("Sk", dims["S"]), dims["S"])
        return dims

    def reference(self, params, q, k, v):
        b, h, s, d = q.shape
        hkv, sk = k.shape[1], k.shape[2]
        scale = params["scale"] if params["scale"] is not None else 1.0 / math.sqrt(d)
        # Query heads h = kv * G + g share kv head kv: (B, Hkv, G*S, D) against (B, Hkv, Sk, D), so k and v
        # are never repeated (the decode bench case would otherwise hold 64*32*4096*128 float64 twice).
        g = h // hkv
        scores = (q.reshape(b, hkv, g * s, d) @ k.transpose(-1, -2)) * scale
        if params["causal"]:
            i = torch.arange(s, device=q.device).repeat(g)[:, None]  # query index of each of the G*S rows
            j = torch.arange(sk, device=q.device)[None, :]
            scores = scores.masked_fill(j > i + (sk - s), float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return {"out": out.reshape(b, h, s, d)}

    def baseline(self, q, k, v, causal, scale):
        """As torch users call SDPA for GQA and a KV cache: enable_gqa when k/v have fewer heads (SDPA's own
        grouping, k.repeat_interleave(H // Hkv, 1)); the spec's end-aligned causal mask is is_causal only for
        S == Sk (SDPA's is_causal is top-left), nothing for S == 1 (one query sees every key; HF Llama passes
        is_causal=q_len > 1 likewise) and torch's causal_lower_right bias for 1 < S < Sk. That bias is dispatched
        by torch itself (nn/attention/bias.py: flash, memory-efficient or a materialised mask), without
        enable_gqa on its fused paths, so k/v are repeated to H heads there, as HF's repeat_kv does."""
        s, sk = q.shape[-2], k.shape[-2]
        gqa = q.shape[1] != k.shape[1]
        if causal and s != sk and s > 1:
            if gqa:
                g = q.shape[1] // k.shape[1]
                k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
            # Imported here: torch.nn.attention.bias imports triton, which must not load before the Triton
            # adapter has chosen the interpreter on a machine without a GPU (backends/triton_lang.py).
            from torch.nn.attention.bias import causal_lower_right

            return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(s, sk), scale=scale)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal and s == sk, scale=scale, enable_gqa=gqa)

    def size_class_suffix(self, dims):
        # Decode (S <= DECODE_MAX_S queries against a long cache) shares the largest dim with prefill (Sk or S
        # 4096) but not its best tiles or split-KV chunks: classes of its own, by query count and batch (B1
        # splits the keys over the SMs, B64's row tiles fill them unsplit). Prefill keeps the plain class.
        s = int(dims.get("S", 1 << 20))
        if s > DECODE_MAX_S:
            return ""
        return f"_S{1 << (s - 1).bit_length()}_B{1 << (int(dims.get('B', 1)) - 1).bit_length()}"

    def case_bound(self, case):
        # Decode (S = 1, or a few queries per k/v row with GQA) does ~G*S flops per byte of the KV cache it
        # streams, far below the H200's ridge (~200 flops/byte): judged against copy bandwidth, like
        # decode matmuls. 64 flops/byte is the same line the matmul spec draws (M <= 64).
        return "memory" if self.flops(case) < 64 * self.bytes_moved(case, torch.bfloat16) else self.bound

    def flops(self, case):
        d = self.case_dims(case)
        s, sk = d["S"], d["Sk"]
        if case.params.get("causal"):
            # Query i sees i + 1 + Sk - S keys: S * (Sk - S) full rows plus the S x S triangle, counted as
            # S^2 / 2 as FlashAttention's benchmarks count causal work (so S == Sk gives half the dense
            # count, as every result before GQA did; the exact triangle has S / 2 more pairs per head).
            twice_pairs = 2 * s * (sk - s) + s * s
        else:
            twice_pairs = 2 * s * sk
        return 2 * d["B"] * d["H"] * twice_pairs * d["D"]
