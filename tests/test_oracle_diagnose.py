"""oracle.diagnose (SPEC 14.10, 14.11) and `python -m oracle diagnose`.

The bytes diagnosed come from implementations other than the oracle: TE's rules from ``conformance.te_torch``
(torch, written from SPEC alone), torchao's from torchao 0.18 itself, and the SPEC 14.11 variants from those two
with the variant's one change made in torch. Planted bugs are made by hand from those bytes.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

import oracle  # noqa: E402
from conformance import te_torch as tt  # noqa: E402
from oracle.diagnose import DIAGNOSE_RULES, diagnose  # noqa: E402
from oracle.fp4_numpy import pack_fp4  # noqa: E402

pytestmark = pytest.mark.torch
BASIC = [r.name for r in DIAGNOSE_RULES if "4over6" not in r.name]  # fast enough for many calls


def _x(m=64, k=64, seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)) * scale * np.exp2(rng.integers(-3, 4, (m, 1)))).astype(ml_dtypes.bfloat16)


def _ao():
    from conformance.independent import import_torchao

    mods = import_torchao()
    if mods is None:
        pytest.skip("torchao is not installed")
    return mods[0]


def _te_bytes(x, **kw):
    o = tt.quantize(x, **kw)
    return o["row_data"], o["row_scales"], o["row_amax"]


def _te_variant(x, variant):
    """The rowwise plane of rule te with one SPEC 14.11 change, in torch (te_torch's building blocks)."""
    src, _ = tt.to_f32(x)
    r, c = src.shape
    b = tt.block_amax(src, (1, 16))
    a = tt.amax_of_blocks(b)
    if variant == "nan_propagating":
        a = src.abs().max()  # torch.max: NaN-propagating
        b = src.abs().reshape(r, c // 16, 16).amax(dim=2)  # torch.amax: NaN-propagating
    s_enc, s_dec = tt.encode_scale(a, "te_fused_rht" if variant == "nan_blocks" else "te")
    if variant == "nan_blocks":  # SPEC 14.11: NaN-propagating block maxima, no caps that drop a NaN
        b = src.abs().reshape(r, c // 16, 16).amax(dim=2)
        byte = tt.e4m3_encode(b * (s_enc * tt.SIXTH))
        m = torch.minimum(tt.ONE / (tt.E4M3_VALUES[byte.to(torch.int64)] * s_dec), tt.FLT_MAX)
        codes = tt.e2m1_encode((src.reshape(r, c // 16, 16) * m.unsqueeze(2)).reshape(r, c))
        return tt.pack(codes).numpy(), byte.numpy().astype(np.uint8)
    if variant == "inverted":
        s_enc = tt.ONE / s_enc
        s_dec = tt.ONE / s_enc
    sf = torch.fmin(b * (s_enc * tt.SIXTH), tt.FLT_MAX)
    byte = tt.e4m3_encode(sf)
    dec = tt.E4M3_VALUES[byte.to(torch.int64)]
    m = torch.fmin(tt.ONE / (dec * s_dec), tt.FLT_MAX)
    y3 = src.reshape(r, c // 16, 16)
    if variant == "division":
        d = (dec * s_dec).unsqueeze(2)
        y = torch.where(d == 0, y3 * m.unsqueeze(2), y3 / d)
    else:
        y = y3 * m.unsqueeze(2)
    y = y.reshape(r, c)
    codes = tt.e2m1_encode(y)
    if variant == "negzero_positive":
        codes = torch.where((y == 0) & torch.signbit(y), torch.zeros_like(codes), codes)
    if variant == "unsigned_zero":
        codes = torch.where(codes == 8, torch.zeros_like(codes), codes)
    return tt.pack(codes).numpy(), byte.numpy().astype(np.uint8)


def _ties_input(seed=1, rule="te"):
    """Blocks whose elements are E2M1 decision points times the block's decode scale d (made with te_torch's
    arithmetic for rule te, torch's for torchao: d = S_dec * E4M3 or P * E4M3), so that ``x * m`` and ``x / d`` land
    on different sides of them in some blocks; and -0.0 and tiny negatives, where the zero variants differ."""
    rng = np.random.default_rng(seed)
    m, k = 64, 64
    a = np.float32(1000.3)
    x = np.zeros((m, k), np.float32)
    x[0, 0] = a
    ties = np.float32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    at = torch.tensor(a)
    s_enc, s_dec = tt.encode_scale(at, "te")
    p = at / 2688.0
    for r in range(m):
        for blk in range(1 if r == 0 else 0, k // 16):
            b = torch.tensor(np.float32(rng.uniform(1, 900)))
            if rule == "te":
                byte = tt.e4m3_encode(torch.fmin(b * (s_enc * tt.SIXTH), tt.FLT_MAX))
                d = tt.E4M3_VALUES[byte.to(torch.int64)] * s_dec
            else:
                sf = torch.clamp(b / 6.0 / p, 2.0**-6, 448.0).to(torch.float8_e4m3fn).to(torch.float32)
                d = p * sf
            vals = torch.from_numpy(rng.choice(ties, 16)) * d * torch.from_numpy(rng.choice(np.float32([-1, 1]), 16))
            vals[0] = b
            x[r, 16 * blk:16 * blk + 16] = vals.numpy()
    x[1:, 5] = -0.0
    x[1::3, 9] = np.float32(-1e-6)
    return x


# ---- the bytes of each rule are diagnosed as that rule ---------------------------------------------------------


@pytest.mark.parametrize("rule", ["te", "te_fused_rht"])
def test_te_bytes_are_diagnosed_as_te(rule):
    x = _x()
    if rule == "te_fused_rht":  # the rules differ only at amax = +Inf (SPEC 5.3)
        x = x.astype(np.float32)
        x[3, 7] = np.inf
    d, s, a = _te_bytes(x, rule=rule)
    r = diagnose(x, d, s, amax=a, rules=BASIC)
    assert rule in r.matches and r.plane == "row"
    if rule == "te_fused_rht":
        assert "te" not in r.matches


@pytest.mark.parametrize("rule", ["torchao", "torchao_noscale"])
def test_torchao_bytes_are_diagnosed_as_torchao(rule):
    nv = _ao()
    x = (np.random.default_rng(0).standard_normal((64, 128)) * 3).astype(ml_dtypes.bfloat16)  # 3 blocks: te differs
    xt = torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    pts = nv.per_tensor_amax_to_scale(xt.abs().max().float()) if rule == "torchao" else None
    t = nv.NVFP4Tensor.to_nvfp4(xt, per_tensor_scale=pts, is_swizzled_scales=True)
    r = diagnose(x, t.qdata, t.scale, layout="torchao", rules=BASIC)
    assert r.matches and r.matches[0] == rule and r.reading == "swizzled", str(r)
    assert "te" not in r.matches


@pytest.mark.parametrize("variant,name", [("division", "te_div"), ("inverted", "te_inverted_global"),
                                          ("negzero_positive", "te_negzero_positive"),
                                          ("unsigned_zero", "te_unsigned_zero")])
def test_te_variant_bytes_are_diagnosed_as_the_variant(variant, name):
    x = _ties_input()
    d, s = _te_variant(x, variant)
    r = diagnose(x, d, s, rules=BASIC)
    assert r.matches and r.matches[0] == name, str(r)
    assert "te" not in r.matches  # the input tells the variant from its base rule


def test_torch_scalar_over_tensor_global_scale():
    """SPEC 14.11's te_reciprocal_global is what torch computes for ``2688 / amax`` with a tensor amax
    (Tensor.__rtruediv__: ``amax.reciprocal() * 2688``): TE's rule run in torch with that expression for S_enc. The
    input: amax 10.375 (where the two S_enc differ by an ulp) and one block per bf16 value b in (0, A], so that
    some block maxima sit where the ulp moves the scale byte (and a tiny block, which tells te from torchao)."""
    a = torch.tensor(10.375)
    s_true = torch.tensor(2688.0) / a
    s_torch = 2688 / a  # the expression under test: torch's scalar-over-tensor division
    assert s_torch.item() != s_true.item() and s_torch.item() == (a.reciprocal() * 2688).item()
    b = torch.arange(0x3C00, 0x4126 + 1, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()  # 2^-7 .. A
    b = b[(b > 0) & (b <= a)]
    x = torch.zeros((b.numel(), 16))
    x[:, 0] = b
    x[:, 1] = -b * 0.37
    x[0, 5] = a
    x[-1] = 0.0
    x[-1, :3] = torch.tensor([1e-4, -3e-5, 2e-5])  # a block torchao's clamp to 2^-6 (SPEC 5.4) scales otherwise
    src = x.to(torch.bfloat16).float()
    s_enc = torch.fmin(2688 / src.abs().max(), tt.FLT_MAX)
    s_dec = tt.ONE / s_enc
    sf = torch.fmin(tt.block_amax(src, (1, 16)) * (s_enc * tt.SIXTH), tt.FLT_MAX)
    byte = tt.e4m3_encode(sf)
    m = torch.fmin(tt.ONE / (tt.E4M3_VALUES[byte.to(torch.int64)] * s_dec), tt.FLT_MAX)
    data = tt.pack(tt.e2m1_encode(src * m)).numpy()
    scales = byte.numpy().astype(np.uint8)
    xb = src.to(torch.bfloat16).view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    assert not np.array_equal(tt.quantize(xb)["row_scales"], scales)  # the ulp moves some bytes
    r = diagnose(xb, data, scales, rules=BASIC)
    assert r.matches == ["te_reciprocal_global"], str(r)


def test_nan_amax_variant():
    x = _x(seed=4).astype(np.float32)
    x[2, 3] = np.nan
    d, s = _te_variant(x, "nan_propagating")
    r = diagnose(x, d, s, rules=BASIC)
    assert r.matches[0] == "te_nan_propagating" and "te" not in r.matches, str(r)
    # without a NaN in the input the NaN variants are their base rules, and the report says so
    d, s, _ = _te_bytes(_x(seed=4))
    r = diagnose(_x(seed=4), d, s, rules=BASIC)
    assert {"te", "te_nan_propagating"} <= set(r.matches)
    assert "these rules agree on this input" in str(r)


# SPEC 14.9 / 14.11's worked block: the elements of a 16-block, and the rowwise bytes of TE's fused RHT cast kernels
# with A = 10 given: S_enc = 268.8, S_enc * fp32(1/6) = 44.8, b = 8 -> sf = 358.4 -> E4M3 352 (0x7B), m = 268.8 / 352;
# codes (element 2i in the low nibble): 1 -> 1.0 (0x2), -2 -> -1.5 (0xB), 3 -> 2 (0x4), 0.5 -> 0.5 (0x1), -0.25 -> -0
# (0x8), 0 (0x0), -0 (0x8), 4 -> 3 (0x5), -1.5 -> -1 (0xA), 2.5 -> 2 (0x4), 7 -> 6 (0x7), -8 -> -6 (0xF), 0.125 -> 0
# (0x0), 6 -> 4 (0x6), -3 -> -2 (0xC), 1 -> 1 (0x2)
def _rule_names(r) -> set:
    """The rules of a diagnosis' matches, without their labels' block / RHT / amax notes."""
    return {m.split(" (")[0] for m in r.matches}


_WORKED_BLOCK = [1, -2, 3, 0.5, -0.25, 0, -0.0, 4, -1.5, 2.5, 7, -8, 0.125, 6, -3, 1]
_WORKED_DATA = [0xB2, 0x14, 0x08, 0x58, 0x4A, 0xF7, 0x60, 0x2C]


def test_te_fused_rht_kernels_on_a_nan_block_with_a_given_amax():
    """SPEC 14.11's te_fused_rht_kernels, hand-worked: the worked block keeps its 5.2 bytes; the same block with a NaN
    in place of 0.5 gets byte 0x7F and sixteen codes 0x7 (b = NaN, no cap: E4M3(NaN); m = NaN). 5.3's rule gives that
    block 5.2's bytes of b = 8 instead, so it does not reproduce them."""
    blk = np.float32(_WORKED_BLOCK)
    nan_blk = blk.copy()
    nan_blk[3] = np.nan
    x = np.concatenate([blk, nan_blk]).reshape(1, 32)
    data = np.uint8(_WORKED_DATA + [0x77] * 8).reshape(1, 16)
    scales = np.uint8([[0x7B, 0x7F]])
    r = diagnose(x, data, scales, amax=np.float32(10.0), layout="compact", plane="row",
                 rules=["te", "te_fused_rht", "te_fused_rht_kernels"])
    assert _rule_names(r) == {"te_fused_rht_kernels"}, str(r)


def test_te_fused_rht_kernels_with_an_infinite_amax():
    """SPEC 14.11's A = +Inf case, hand-worked on both planes: one +Inf at X[3, 7] makes the NaN-ignoring amax +Inf
    (S_enc = 0, S_dec = +Inf). The block holding it gets byte 0x7F (Inf * 0 = NaN); every other block byte 0x00
    (b * 0) and the multiplier 1 / (0 * Inf) = NaN: every code is 0x7, every data byte 0x77. Rowwise that is block
    (3, 0); columnwise (X^T's row 7, RHT or not: the RHT spreads the Inf over its own 16-block only) block (7, 0)."""
    x = _x(seed=5).astype(np.float32)
    x[3, 7] = np.inf
    x = x.astype(ml_dtypes.bfloat16)
    data = np.full((64, 32), 0x77, np.uint8)
    for plane, at in (("row", (3, 0)), ("col", (7, 0))):
        scales = np.zeros((64, 4), np.uint8)
        scales[at] = 0x7F
        r = diagnose(x, data, scales, layout="compact", plane=plane,
                     rules=["te", "te_fused_rht", "te_fused_rht_kernels"])
        assert _rule_names(r) == {"te_fused_rht_kernels"}, (plane, str(r))


@pytest.mark.parametrize("inf", [False, True])
def test_te_fused_rht_kernels_from_torch(inf):
    """Random blocks with NaN (and +-Inf: A = +Inf) against the variant built in torch from SPEC 14.11's text
    (``_te_variant``): diagnose names te_fused_rht_kernels and not its base rule."""
    x = _x(seed=7).astype(np.float32)
    rng = np.random.default_rng(8)
    x[rng.integers(0, 64, 6), rng.integers(0, 64, 6)] = np.nan
    if inf:
        x[10, 3], x[20, 40] = np.inf, -np.inf
    d, s = _te_variant(x, "nan_blocks")
    r = diagnose(x, d, s, layout="compact", plane="row", rules=["te", "te_fused_rht", "te_fused_rht_kernels"])
    assert _rule_names(r) == {"te_fused_rht_kernels"}, str(r)


def test_te_fused_rht_kernels_elsewhere_are_rule_te_fused_rht():
    """On a computed amax with a NaN in the input (A finite: NaN-ignoring), every block without the NaN has 5.3's
    bytes (here te_torch's, torch written from SPEC) and the NaN block 0x7F with codes 0x7; without a NaN both rules
    give the same bytes and the report says they agree."""
    x = _x(seed=6).astype(np.float32)
    x[5, 20] = np.nan  # block (5, 1)
    d, s, _ = _te_bytes(x, rule="te_fused_rht")
    d, s = d.copy(), s.copy()
    s[5, 1] = 0x7F
    d[5, 8:16] = 0x77
    r = diagnose(x, d, s, layout="compact", plane="row", rules=["te_fused_rht", "te_fused_rht_kernels"])
    assert _rule_names(r) == {"te_fused_rht_kernels"}, str(r)
    x[5, 20] = 0.0
    d, s, _ = _te_bytes(x, rule="te_fused_rht")
    r = diagnose(x, d, s, layout="compact", plane="row", rules=["te_fused_rht", "te_fused_rht_kernels"])
    assert _rule_names(r) == {"te_fused_rht", "te_fused_rht_kernels"}, str(r)


def test_torchao_variants_from_torchaos_own_functions():
    """torchao given 1/P (its own quantizer with the other per-tensor scale) and torchao dividing by P * sf
    (torchao's E2M1 conversion of the quotient)."""
    nv = _ao()
    from torchao.prototype.mx_formats.kernels import f32_to_f4_unpacked, pack_uint4

    x = _ties_input(2, "torchao")
    xt = torch.from_numpy(x)
    p = nv.per_tensor_amax_to_scale(xt.abs().max())
    s_inv, d_inv = nv.nvfp4_quantize(xt, 16, 1.0 / p)
    assert "torchao_inverted_global" in diagnose(x, d_inv, s_inv, rules=BASIC).matches
    sc, _ = nv.nvfp4_quantize(xt, 16, p)
    div = xt.reshape(64, 4, 16) / (p * sc.to(torch.float32)).unsqueeze(-1)
    codes = f32_to_f4_unpacked(torch.clamp(div, -6.0, 6.0).reshape(64, 64))
    r = diagnose(x, pack_uint4(codes), sc, rules=BASIC)
    assert "torchao_div" in r.matches and "torchao" not in r.matches, str(r)


def test_torchao_division_of_a_nan_block_from_torchaos_own_functions():
    """A NaN block under the division variants: torch decodes its scale byte 0x7F to 0x7FF00000 (SPEC 3.5), so a
    finite element divided by it gets that payload's code 4, the NaN element keeps its own payload (a / b carries
    a's). Bytes from torchao's own quantizer and E2M1 conversion of x / (P * sf) and of x / sf."""
    nv = _ao()
    from torchao.prototype.mx_formats.kernels import f32_to_f4_unpacked, pack_uint4

    x = np.ones((2, 32), np.float32)
    x[0, 0], x[0, 1], x[1, 20] = np.nan, 2.0, -3.0
    xt = torch.from_numpy(x)
    for rule, p in (("torchao_div", nv.per_tensor_amax_to_scale(torch.tensor(3.0))), ("torchao_noscale_div", None)):
        sc, _ = nv.nvfp4_quantize(xt, 16, p)
        d = sc.to(torch.float32) if p is None else p * sc.to(torch.float32)
        codes = f32_to_f4_unpacked(torch.clamp(xt.reshape(2, 2, 16) / d.unsqueeze(-1), -6.0, 6.0).reshape(2, 32))
        assert int(codes[0, 1]) == 4 and int(sc[0, 0].view(torch.uint8)) == 0x7F  # the case the test is about
        r = diagnose(x, pack_uint4(codes), sc, amax=None if p is None else 3.0, rules=BASIC)
        assert rule in [m.split(" (")[0] for m in r.matches], str(r)


def test_planted_nan_payloads_are_named():
    """SPEC 3.5: a NaN product's code is index 2-4 by its payload. From torchao's own bytes (no per-tensor scale) of
    a NaN block (scale byte 0x7F, decoded 0x7FF00000: index 4 for every product) beside finite blocks: (1) its NaN
    element planted with x's payload (0x7FC00000: index 3), which a product keeping x's payload gives: the division
    variant reproduces it and the line says the bytes differ from torchao_noscale's at one NaN product; (2) a finite
    element of it planted with index 2 (no rule makes it): the closest rule is torchao_noscale and the line names the
    NaN product; (3) an element of a finite block planted instead, or (4) a scale byte off as well: no NaN line."""
    nv = _ao()
    x = np.full((2, 32), 0.75, np.float32)
    x[0, 3] = np.nan  # block (0, 0): NaN-propagating block max, so a NaN scale; element 3 is NaN x NaN
    sc, d = nv.nvfp4_quantize(torch.from_numpy(x), 16, None)
    sc, d = sc.view(torch.uint8).numpy(), d.numpy()
    assert sc[0, 0] == 0x7F and (sc.reshape(-1)[1:] != 0x7F).all()
    assert d[0, 1] >> 4 == 4 and d[0, 2] & 0xF == 4  # elements 3 and 4: the NaN byte's payload, index 4

    def planted(byte, value):
        out = d.copy()
        out.reshape(-1)[byte] = value
        return out

    r = diagnose(x, planted(1, (d[0, 1] & 0x0F) | 0x30), sc, rules=BASIC)  # element 3 -> index 3
    assert r.matches[0] == "torchao_noscale_div", str(r)
    assert r.hypotheses[0].startswith("torchao_noscale_div reproduces these bytes; they differ from "
                                      "torchao_noscale's only at NaN products (1 code). SPEC 3.5"), str(r)
    r = diagnose(x, planted(2, (d[0, 2] & 0xF0) | 0x2), sc, rules=BASIC)  # element 4 -> index 2
    assert not r.matches and r.closest == "torchao_noscale" and r.n_diff == 1, str(r)
    assert r.hypotheses[0].startswith("NaN payloads: every differing code (1 code) is a NaN product"), str(r)
    r = diagnose(x, planted(16 + 10, d[1, 10] ^ 0x01), sc, rules=BASIC)  # element (1, 20) of a finite block
    assert r.n_diff == 1 and not any("NaN product" in h for h in r.hypotheses), str(r)
    sc_off = sc.copy()
    sc_off[1, 1] += 1  # (4) as (2), with a finite block's scale byte one step off: the codes alone do not fit
    r = diagnose(x, planted(2, (d[0, 2] & 0xF0) | 0x2), sc_off, rules=BASIC)
    assert r.n_diff == 2 and not any("NaN product" in h for h in r.hypotheses), str(r)


def test_torchao_on_a_cuda_tensor():
    """torchao's own quantizer given the per-tensor scale it forms on a CUDA tensor, A * fp32(1/2688) (one ulp off
    A / 2688 at A = 4.21875; the product formed here with torch on the host), on blocks of E2M1 decision points
    times that P's decode scales: diagnose names torchao_cuda and not torchao (SPEC 14.11)."""
    nv = _ao()
    rng = np.random.default_rng(3)
    a = torch.tensor(np.float32(4.21875))
    p_cuda = a * torch.tensor(np.float32(1.0) / np.float32(2688.0))
    assert p_cuda.item() != nv.per_tensor_amax_to_scale(a).item()
    ties = np.float32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    x = np.zeros((64, 64), np.float32)
    x[0, 0] = a.item()
    for r in range(64):
        for blk in range(1 if r == 0 else 0, 4):
            b = torch.tensor(np.float32(rng.uniform(0.01, 4.2)))
            sf = torch.clamp(b / 6.0 / p_cuda, 2.0**-6, 448.0).to(torch.float8_e4m3fn).to(torch.float32)
            vals = torch.from_numpy(rng.choice(ties, 16)) * (p_cuda * sf)
            vals *= torch.from_numpy(rng.choice(np.float32([-1, 1]), 16))
            vals[0] = b
            x[r, 16 * blk:16 * blk + 16] = vals.numpy()
    sc, data = nv.nvfp4_quantize(torch.from_numpy(x), 16, p_cuda)
    r = diagnose(x, data, sc, rules=BASIC)
    assert "torchao_cuda" in r.matches and "torchao" not in r.matches, str(r)


def test_4over6_and_row_scaled_bytes_are_diagnosed_as_such():
    """TE's variants (SPEC 5.6, 5.7) made by conformance.te_torch (torch, written from SPEC): diagnose names them
    among all rules, G = 256 and row scaling with 4over6 included; a row-scaled plane is tried with its computed
    per-row amaxes and again with the ones given."""
    x = (np.random.default_rng(9).standard_normal((32, 64)) * np.exp2(np.arange(32) % 7)[:, None]).astype(
        ml_dtypes.bfloat16)
    o = tt.quantize(x, four_over_six="mse")
    r = diagnose(x, o["row_data"], o["row_scales"])
    assert r.matches[0] == "te_4over6_mse" and "te" not in r.matches, str(r)
    o = tt.quantize(x, four_over_six="mae", global_scale_max=256)
    r = diagnose(x, o["row_data"], o["row_scales"])
    assert "te_4over6_mae_g256" in r.matches, str(r)
    assert all(n.endswith(("_g256", "_g256_reciprocal_global")) for n in r.matches), str(r)
    # one rule by name (a string), and the per-tensor value given as S_enc = 1536 / amax (6G with G = 256)
    s_enc = np.float32(np.float32(1536.0) / o["row_amax"][0])
    r = diagnose(x, o["row_data"], o["row_scales"], amax=s_enc, rules="te_4over6_mae_g256")
    assert r.matches == ["te_4over6_mae_g256"], str(r)
    assert any(h.startswith(f"the amax given ({float(s_enc):.6g}) is S_enc = 1536 / amax") for h in r.hypotheses), str(r)
    o = tt.quantize(x, row_scaled=True)
    r = diagnose(x, o["row_data"], o["row_scales"], amax=o["row_amax"])
    assert r.matches == ["te_row_scaled"], str(r)  # the amax given is the computed one
    # bytes made with other per-row amaxes: only the given ones reproduce them ...
    other = (o["row_amax"] * np.float32(2.0)).astype(np.float32)
    o2 = tt.quantize(x, row_scaled=True, amax=other)
    r = diagnose(x, o2["row_data"], o2["row_scales"], amax=other)
    assert r.matches == ["te_row_scaled (amax given)"], str(r)
    # ... and the computed ones still run when a wrong amax is given
    r = diagnose(x, o["row_data"], o["row_scales"], amax=other)
    assert r.matches == ["te_row_scaled"], str(r)
    # row scaling with 4over6 (SPEC 5.6 on each row's S_enc, 5.7), G = 256 and the fast-math error included
    o4 = tt.quantize(x, row_scaled=True, four_over_six="mse")
    r = diagnose(x, o4["row_data"], o4["row_scales"])
    assert r.matches[0] == "te_row_scaled_4over6_mse" and "te_row_scaled" not in r.matches, str(r)
    o4 = tt.quantize(x, row_scaled=True, four_over_six="mae", four_over_six_fast_math=True, global_scale_max=256)
    r = diagnose(x, o4["row_data"], o4["row_scales"], amax=o4["row_amax"])
    assert "te_row_scaled_4over6_mae_fast_g256" in r.matches and all("_g256" in n for n in r.matches), str(r)
    f = oracle.to_te_fields(oracle.quantize(x, row_scaled=True))  # TE's row-scaled fields: amax_rowwise [M]
    assert f["row_scaled_nvfp4"] and f["amax_rowwise"].shape == (32,)
    back = oracle.from_te_fields(**f).row
    assert back.row_scaled and np.array_equal(back.amax, o["row_amax"]) and np.array_equal(back.scales,
                                                                                           o["row_scales"])


def test_row_scaled_columnwise_bytes_are_named():
    """The columnwise plane row-scaled (SPEC 5.7: one amax per column of X), bytes from the torch TE-rule quantizer
    (written from SPEC, conformance/te_torch.py): named te_row_scaled with the computed amaxes and with the K given
    ones (M = 40: the plane is padded to 48 tokens); under 4over6 MSE with G = 256, that variant; a plane quantized
    with one amax is not row-scaled."""
    x = _x(40, 64, seed=5) * np.geomspace(1e-3, 1e3, 64, dtype=np.float32)
    o = tt.quantize(x, row_scaled=True, columnwise=True)
    assert o["col_amax"].shape == (64,)
    for given in (None, o["col_amax"]):
        r = diagnose(x, o["col_data"], o["col_scales"], amax=given, plane="col")
        assert r.matches == ["te_row_scaled"], str(r)
    o4 = tt.quantize(x, rowwise=False, columnwise=True, row_scaled=True, four_over_six="mse", global_scale_max=256)
    r = diagnose(x, o4["col_data"], o4["col_scales"], plane="col")
    assert r.matches[0] == "te_row_scaled_4over6_mse_g256", str(r)
    plain = tt.quantize(x, columnwise=True)
    assert "te_row_scaled" not in diagnose(x, plain["col_data"], plain["col_scales"], plane="col").matches
    with pytest.raises(ValueError, match=r"one per plane row for a row-scaled plane \(64\)"):
        diagnose(x, o["col_data"], o["col_scales"], amax=o["row_amax"], plane="col")


# blocks of bf16 values (tensor amax 1000) on which SPEC 5.6's input-domain errors and 14.11's flashinfer decode-scale
# errors choose different candidates (found by a search over random blocks with conformance.te_torch_variants)
_FLASHINFER_MSE_BLOCKS = [
    [1.6484375, -2.625, -1.0078125, 0.1298828125, 0.6484375, -2.046875, 0.79296875, 1.0703125, -0.00531005859375, -3.53125, 0.53515625, -1.734375, 0.1240234375, 2.484375, 0.84765625, -3.875],
    [-6.53125, 3.8125, -0.6484375, 7.75, -10.0, -1.03125, -4.46875, 9.6875, -5.3125, -7.75, 19.5, -0.193359375, -2.0625, 1.4375, -5.59375, -7.875],
    [-0.07568359375, 0.0203857421875, -0.0262451171875, -0.00151824951171875, -0.005096435546875, 0.04052734375, 0.06689453125, 0.1904296875, -0.0126953125, 0.052978515625, -0.0166015625, -0.0010833740234375, -0.061767578125, 0.057373046875, 0.08251953125, 0.07421875],
]
_FLASHINFER_MAE_BLOCKS = [
    [0.049072265625, 0.05126953125, 0.008056640625, -0.01385498046875, 0.10302734375, -0.051025390625, 0.005218505859375, -0.08544921875, 0.006439208984375, -0.052978515625, -0.10595703125, -0.0096435546875, -0.0014495849609375, -0.045166015625, -0.0302734375, 0.0228271484375],
    [0.12451171875, 0.1103515625, -0.0693359375, 0.06005859375, 0.06787109375, 0.058349609375, 0.1318359375, 0.078125, -0.0005645751953125, -0.10791015625, 0.294921875, 0.05908203125, 0.1826171875, 0.03125, -0.21484375, 0.10693359375],
    [2.046875, 4.0625, 11.9375, 7.375, -4.0, -6.78125, 17.25, 9.8125, -8.1875, 1.90625, -5.96875, 10.5625, 2.796875, 19.125, 12.5625, 18.125],
]


def _flashinfer_4over6(x, mode, g=448, fast=False, torch_scale=False):
    """SPEC 14.11's flashinfer 4over6 in torch, on conformance.te_torch_variants' building blocks (written from SPEC
    5.6): the candidates of 5.6, each error in the decode-scale domain ``(p * S_dec) - x`` (``fast``: 5.6's product
    domain), map-to-4 iff its error is smaller, and a block of amax 0 written as codes 0x0; ``torch_scale``: S_enc
    as flashinfer's helper computes it, ``6G / amax`` with a tensor amax. Returns (data, scales)."""
    from conformance import te_torch_variants as tv

    src, _ = tt.to_f32(x)
    r, c = src.shape
    b = tt.block_amax(src, (1, 16))
    a = tt.amax_of_blocks(b)
    s_enc, s_dec = tv.encode_scale_g(a, g)
    if torch_scale:
        s_enc = torch.fmin((6.0 * g) / a, tt.FLT_MAX)  # a Python number over a tensor (Tensor.__rtruediv__)
        s_dec = tt.ONE / s_enc
    src3 = src.reshape(r, c // 16, 16)
    base = (b / tv.SIX) * s_enc
    out = []
    for map4 in (False, True):
        byte, d, codes, q = tv.candidate(src3, base, s_dec, map4=map4)
        if fast:
            err = tv.row_errors(src3, q, d, a, s_enc, mode=mode, fast_math=True, global_scale_max=g)
        else:
            err = torch.zeros(d.shape, dtype=torch.float32)
            for i in range(16):
                diff = (q[:, :, i] * d) * s_dec - src3[:, :, i]
                err = err + (diff.abs() if mode == "mae" else diff * diff)
        out.append((byte, codes, err))
    (byte6, codes6, err6), (byte4, codes4, err4) = out
    take4 = err4 < err6
    codes = torch.where(take4.unsqueeze(2), codes4, codes6)
    codes = torch.where((b == 0).unsqueeze(2), torch.zeros_like(codes), codes)
    return tt.pack(codes.reshape(r, c)).numpy(), torch.where(take4, byte4, byte6).numpy().astype(np.uint8)


def _flashinfer_input():
    """The blocks above, one per row, a row holding the amax 1000 and an all-zero row with -0.0 elements."""
    rows = _FLASHINFER_MSE_BLOCKS + _FLASHINFER_MAE_BLOCKS + [[1000.0] + [0.5] * 15, [-0.0, 0.0] * 8]
    return np.array(rows, np.float32).astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("mode", ["mae", "mse"])
def test_flashinfer_4over6_bytes_are_diagnosed_as_such(mode):
    """SPEC 14.11: bytes of flashinfer's strict 4over6 error (made in torch) are flashinfer_4over6_<mode>'s, and no TE
    rule's: TE's 4over6 (5.6) picks the other candidate on some of the searched blocks, and writes the -0.0 elements
    of the all-zero block as 0x8."""
    x = _flashinfer_input()
    data, scales = _flashinfer_4over6(x, mode)
    te = tt.quantize(x, four_over_six=mode)
    assert not np.array_equal(te["row_scales"][:-1], scales[:-1])  # a choice differs (the blocks are near ties)
    assert te["row_data"][-1].tolist() == [0x08] * 8 and data[-1].tolist() == [0x00] * 8
    r = diagnose(x, data, scales)
    # (on 8 blocks other flashinfer forms may agree; no TE rule does)
    assert r.matches[0] == f"flashinfer_4over6_{mode}" and r.closest is None and r.plane == "row", str(r)
    assert not any(n.startswith("te") for n in r.matches), str(r)


def test_reciprocal_global_scale_is_torchs_expression_on_edge_amaxes():
    """SPEC 14.11's reciprocal S_enc against torch's own ``6G / amax`` (then 5.1's A == 0 / S_enc == 0 rule) on the
    amaxes where the two roundings, the FLT_MAX cap or the rule decide: 0, subnormals, huge values, +Inf, NaN."""
    from oracle.diagnose import _reciprocal_global_scale

    amaxes = np.float32([0.0, 1e-45, 1e-40, 2**-126, 1e-10, 10.375, 1000.0, 3e38, np.finfo(np.float32).max, np.inf,
                         np.nan])
    for six_g in (2688, 1536):
        for a in amaxes:
            t = torch.tensor(a)
            s = torch.fmin(float(six_g) / t, tt.FLT_MAX)
            s = torch.where((t == 0) | (s == 0), tt.ONE, s)
            assert _reciprocal_global_scale(a, six_g).tobytes() == s.numpy().tobytes(), (six_g, a)


def test_flashinfer_4over6_with_torchs_global_scale():
    """flashinfer's global-scale helper computes ``6G / amax`` on a tensor amax, torch's reciprocal form: bytes made so
    in torch (amax 10.375, where the two S_enc differ by an ulp, and one block per bf16 block max up to it, so that the
    ulp moves some scale bytes) are a reciprocal-form rule's, not 5.6's S_enc's."""
    b = torch.arange(0x3C00, 0x4126 + 1, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    x = torch.zeros((b.numel(), 16))
    x[:, 0] = b
    x[:, 1] = -b * 0.37
    x[:, 2] = b * 0.61
    xb = x.to(torch.bfloat16).view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    assert float(np.abs(xb.astype(np.float32)).max()) == 10.375
    assert (2688.0 / torch.tensor(10.375)).item() != (torch.tensor(2688.0) / torch.tensor(10.375)).item()
    data, scales = _flashinfer_4over6(xb, "mae", torch_scale=True)
    assert not np.array_equal(_flashinfer_4over6(xb, "mae")[1], scales)  # the ulp moves some bytes
    r = diagnose(xb, data, scales, rules=[n.name for n in DIAGNOSE_RULES if n.name.startswith("flashinfer")])
    # (these blocks do not tell the strict error from the fast-math one: both forms with torch's S_enc match)
    assert r.matches[0] == "flashinfer_4over6_mae_reciprocal_global", str(r)
    assert all(n.endswith("_reciprocal_global") for n in r.matches), str(r)


@pytest.mark.parametrize("mode", ["mae", "mse"])
@pytest.mark.parametrize("g", [448, 256])
@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("torch_scale", [False, True])
def test_flashinfer_4over6_rules_reproduce_torchs_bytes_on_random_planes(mode, g, fast, torch_scale):
    """Each flashinfer rule against the torch form of SPEC 14.11 (:func:`_flashinfer_4over6`) on random bf16 planes
    (rows scaled by 2^-12 .. 2^12, all-zero and -0.0 blocks, a subnormal): the rule reproduces every byte."""
    name = (f"flashinfer_4over6_{mode}" + ("_fast" if fast else "") + ("_g256" if g == 256 else "")
            + ("_reciprocal_global" if torch_scale else ""))
    rng = np.random.default_rng([g, int(fast), int(torch_scale), ["mae", "mse"].index(mode)])
    for _ in range(4):
        m, k = int(rng.integers(1, 24)), 16 * int(rng.integers(1, 5))
        x = rng.standard_normal((m, k)) * np.exp2(rng.integers(-12, 13, (m, 1)))
        x[rng.random(m) < 0.2, :16] = -0.0
        x.flat[rng.integers(x.size)] = 1e-40
        xb = x.astype(np.float32).astype(ml_dtypes.bfloat16)
        data, scales = _flashinfer_4over6(xb, mode, g=g, fast=fast, torch_scale=torch_scale)
        r = diagnose(xb, data, scales, rules=name)
        assert r.matches == [name], str(r)


def test_flashinfer_4over6_g256_and_fast_math_forms():
    """SPEC 14.11's other flashinfer forms made in torch: G = 256 in S_enc, and the fast-math error, which is 5.6's
    product domain and differs from TE's fast-math 4over6 only on the all-zero block's -0.0 elements."""
    x = _flashinfer_input()
    data, scales = _flashinfer_4over6(x, "mae", g=256)
    r = diagnose(x, data, scales)
    assert "flashinfer_4over6_mae_g256" in r.matches and "te_4over6_mae_g256" not in r.matches, str(r)
    data, scales = _flashinfer_4over6(x, "mse", fast=True)
    te = tt.quantize(x, four_over_six="mse", four_over_six_fast_math=True)
    assert np.array_equal(te["row_data"][:-1], data[:-1]) and not np.array_equal(te["row_data"], data)
    r = diagnose(x, data, scales)
    assert "flashinfer_4over6_mse_fast" in r.matches and "te_4over6_mse_fast" not in r.matches, str(r)


# ---- planted bugs are named -------------------------------------------------------------------------------------


def test_planted_swizzled_read_as_linear():
    x = _x(256, 128)
    o = tt.quantize(x)
    r = diagnose(x, o["row_data"], o["row_scales_swizzled"], layout="compact", rules=["te", "torchao"])
    assert any(h.startswith("swizzled scales read as linear") for h in r.hypotheses), str(r)
    r = diagnose(x, o["row_data"], o["row_scales"].copy().reshape(-1), layout="swizzled", rules=["te"])
    assert any(h.startswith("linear scales read as swizzled") for h in r.hypotheses), str(r)


def _layout_8x4(compact: np.ndarray) -> np.ndarray:
    """flashinfer's 8x4 scale layout (SPEC 8.3) placed byte by byte from the offset formula."""
    rows, c = compact.shape
    rp, cp = -(-rows // 8) * 8, -(-c // 4) * 4
    buf = np.zeros(rp * cp, np.uint8)
    for r in range(rows):
        for j in range(c):
            buf[(r // 8 * (cp // 4) + j // 4) * 32 + (r % 8) * 4 + j % 4] = compact[r, j]
    return buf


def test_flashinfer_8x4_layout_is_read():
    """Scales in flashinfer's 8x4 layout (SPEC 8.3) are read under layout "flashinfer" (beside its linear and 128x4
    ones) and "swizzled_8x4", and not by "auto" (whose readings are compact, padded and 128x4)."""
    x = _x(40, 80, seed=7)  # 40 rows, 5 scale columns: 8x4 needs 40 * 8 bytes, compact 200, 128x4 1024
    o = tt.quantize(x)
    buf = _layout_8x4(o["row_scales"])
    for layout in ("flashinfer", "swizzled_8x4"):
        r = diagnose(x, o["row_data"], buf, layout=layout, rules=["te"])
        assert r.matches == ["te"] and r.reading == "swizzled_8x4", str(r)
        assert "8x4 swizzled (SPEC 8.3)" in str(r)
    r = diagnose(x, o["row_data"], o["row_scales_swizzled"], layout="flashinfer", rules=["te"])
    assert r.matches == ["te"] and r.reading == "swizzled", str(r)
    with pytest.raises(ValueError, match=r"fit no auto layout.*8x4 320: --layout swizzled_8x4 or flashinfer"):
        diagnose(x, o["row_data"], buf, rules=["te"])  # 320 bytes: not compact (200), padded or 128x4 (1024)
    with pytest.raises(ValueError, match="fit no"):
        diagnose(x, o["row_data"], np.zeros(7, np.uint8), layout="swizzled_8x4", rules=["te"])


def test_flashinfer_8x4_buffer_in_its_returned_2d_shape():
    """flashinfer returns the 8x4 buffer as [roundup(M, 8), roundup(K/16, 4)]; with M % 8 == 0 and K/16 % 4 == 0
    that is also the compact shape, so the shape alone names no layout: te matches and no layout line is made."""
    x = _x(16, 128, seed=9)  # 16 rows, 8 scale columns: the 8x4 buffer is [16, 8]
    o = tt.quantize(x)
    buf = _layout_8x4(o["row_scales"]).reshape(16, 8)
    assert not np.array_equal(buf, o["row_scales"])  # (the layouts differ on this shape)
    r = diagnose(x, o["row_data"], buf, layout="flashinfer", rules=["te"])
    assert r.matches == ["te"] and r.reading == "swizzled_8x4", str(r)
    assert not any("read as" in h for h in r.hypotheses), str(r)


def test_planted_8x4_scales_read_as_128x4():
    """256 rows: the 8x4 and the 128x4 layouts have the same size, so a reader may take one for the other."""
    x = _x(256, 64, seed=8)
    o = tt.quantize(x)
    r = diagnose(x, o["row_data"], _layout_8x4(o["row_scales"]), layout="swizzled", rules=["te"])
    assert not r.matches, str(r)
    assert any(h.startswith("8x4 swizzled scales read as 128x4 swizzled") for h in r.hypotheses), str(r)
    r = diagnose(x, o["row_data"], o["row_scales_swizzled"], layout="swizzled_8x4", rules=["te"])
    assert any(h.startswith("128x4 swizzled scales read as 8x4 swizzled") for h in r.hypotheses), str(r)


def test_planted_swizzled_scales_in_a_compact_sized_buffer():
    # 200 rows: the 128x4 layout needs 1024 bytes, the compact one 800; a writer that swizzles into the compact-sized
    # buffer leaves its first 800 bytes
    x = _x(200, 64, seed=3)
    o = tt.quantize(x)
    r = diagnose(x, o["row_data"], o["row_scales_swizzled"][:800].copy(), rules=["te"])
    assert not r.matches and r.n_diff > 0
    h = [h for h in r.hypotheses if h.startswith("swizzled scales cut to the compact size")]
    assert h and "first 800 of te's 128x4 swizzled buffer" in h[0] and "1024 bytes" in h[0], str(r)
    r = diagnose(x, o["row_data"], o["row_scales"].copy(), rules=["te"])  # the compact bytes themselves: no such line
    assert r.matches == ["te"] and not any(h.startswith("swizzled scales cut") for h in r.hypotheses), str(r)


def test_planted_transposed_scales():
    x = _x(64, 128)
    o = tt.quantize(x)
    r = diagnose(x, o["row_data"], np.ascontiguousarray(o["row_scales"].T), rules=["te"])
    assert not r.matches and any(h.startswith("transposed scales") for h in r.hypotheses), str(r)


def test_planted_scales_of_the_wrong_plane():
    x = _x(128, 128, seed=5)
    o = tt.quantize(x, columnwise=True)
    r = diagnose(x, o["row_data"], o["col_scales_swizzled"], layout="swizzled", plane="row", rules=["te"])
    assert any(h.startswith("scales of the wrong plane") for h in r.hypotheses), str(r)


def test_closest_rule_among_equal_block_counts_has_the_fewest_differing_bytes():
    """Rules that differ in as many blocks are ranked by differing bytes. x = 3.0 with x[0, 0] = -0: the bytes of
    te_negzero_positive (-0 as 0x0; torch, tests/te_torch.py) with the code of element 4 one step down (0x7 -> 0x6, byte
    2). te differs from them in the same one block but in two bytes (byte 0 holds its -0 as 0x8), so
    te_negzero_positive is the closest rule."""
    x = np.full((1, 32), 3.0, np.float32)
    x[0, 0] = -0.0
    d, s = _te_variant(x, "negzero_positive")
    assert d[0, 0] == 0x70 and d[0, 2] == 0x77
    d = d.copy()
    d[0, 2] = 0x76
    r = diagnose(x, d, s, rules=BASIC)
    assert not r.matches and r.closest == "te_negzero_positive" and r.n_diff == 1, str(r)


def test_planted_one_ulp_scale():
    x = _x(seed=6)
    d, s, a = _te_bytes(x)
    s = s.copy()
    s[5, 1] += 1
    s[9, 2] -= 1
    r = diagnose(x, d, s, rules=BASIC)
    assert not r.matches and r.closest == "te" and r.n_diff == 2 and r.first_diff == (5, 1)
    h = [h for h in r.hypotheses if h.startswith("one ulp off in the scale")]
    assert h and "1 up, 1 down" in h[0], str(r)
    assert "ours: scale=0x" in str(r) and "theirs dequant" in str(r)  # the side-by-side view of block (5, 1)


def _tie_input(values, seed):
    """x [32, 64] (float32): every 16-block holds +-6 first and then values drawn from ``values`` with random signs.
    With the amax 2688 given, S_enc = 1 and every block's scale is 1.0 (SPEC 5.1, 5.2: 6 * 1 / 6), so m = 1 and the
    products x * m are the values themselves."""
    rng = np.random.default_rng(seed)
    x = rng.choice(np.asarray(values, np.float32), size=(32, 64)) * rng.choice([-1.0, 1.0], size=(32, 64))
    x[:, ::16] = 6.0
    return x.astype(np.float32)


def _codes_with(ours: np.ndarray, x: np.ndarray, at, step: int) -> np.ndarray:
    """Packed codes: ours (unpacked [32, 64]) with the magnitude moved by ``step`` where |x| is one of ``at``."""
    move = np.isin(np.abs(x), np.asarray(at, np.float32))
    mag = (ours & 7).astype(np.int16) + step * move
    return pack_fp4(((ours & 8) | mag).astype(np.uint8))


def test_planted_e2m1_rounding_modes():
    amax = np.float32(2688.0)
    # ties: |x| = 0.25, 1.25, 2.5 and 5 round to the even codes 0, 1.0, 2 and 4 (SPEC 3.1); away from zero they
    # round one step up (0.75, 1.75 and 3.5 round up to an even code either way)
    x = _tie_input([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 3.0], seed=1)
    t = oracle.quantize(x, amax=amax).row
    assert np.array_equal(t.scales, np.full((32, 4), 0x38, np.uint8))  # scale 1.0 everywhere: m = 1
    ours = t.codes()
    away = _codes_with(ours, x, [0.25, 1.25, 2.5, 5.0], +1)
    r = diagnose(x, away, t.scales, amax=amax, rules=["te"])
    n = int(np.isin(np.abs(x), [0.25, 1.25, 2.5, 5.0]).sum())
    h = [h for h in r.hypotheses if h.startswith("E2M1 ties rounded away from zero")]
    assert h and f"the {n} differing codes (all at exact ties of y)" in h[0], str(r)
    assert r.closest == "te (amax given)" and not any(h.startswith("transposed") for h in r.hypotheses), str(r)
    # toward zero: 0.875, 1.375, 2.875 and 5.5 lie strictly between two E2M1 values and round up to nearest
    x = _tie_input([0.875, 1.375, 2.875, 5.5, 0.5, 3.0, 0.625], seed=2)
    t = oracle.quantize(x, amax=amax).row
    trunc = _codes_with(t.codes(), x, [0.875, 1.375, 2.875, 5.5], -1)
    r = diagnose(x, trunc, t.scales, amax=amax, rules=["te"])
    h = [h for h in r.hypotheses if h.startswith("E2M1 rounded toward zero")]
    assert h and "(0 of them at exact ties of y)" in h[0], str(r)
    assert not any(h.startswith("E2M1 ties") for h in r.hypotheses), str(r)
    # not a rounding mode: a code two steps off, only some of the codes truncated, a scale one step off
    for bad in (_codes_with(t.codes(), x, [0.875], -2), _codes_with(t.codes(), x, [0.875], -1)):
        r = diagnose(x, bad, t.scales, amax=amax, rules=["te"])
        assert r.n_diff and not any(h.startswith("E2M1") for h in r.hypotheses), str(r)
    s = t.scales.copy()
    s[3, 1] += 1
    r = diagnose(x, t.data, s, amax=amax, rules=["te"])
    assert not any(h.startswith("E2M1") for h in r.hypotheses), str(r)
    # nor codes one step from values no mode moves: an exact 6 read as 4, a zero as 0.5, 0.75 (a tie between 0.5
    # and 1.0, not 1.0 and 1.5) as 1.5
    x = _tie_input([0.0, 0.75, 0.5, 3.0], seed=3)
    t = oracle.quantize(x, amax=amax).row
    for at, step in (([6.0], -1), ([0.0], +1), ([0.75], +1)):
        r = diagnose(x, _codes_with(t.codes(), x, at, step), t.scales, amax=amax, rules=["te"])
        assert r.n_diff and not any(h.startswith("E2M1") for h in r.hypotheses), (at, str(r))


def test_planted_e4m3_scales_truncated():
    # amax 2688 given: S_enc = 1, so SPEC 5.2's sf is b * fp32(1/6); E4M3's values by SPEC 2.2's formula, the largest
    # one <= sf taken for every block (a scale conversion that truncates)
    x = _x(64, 64, seed=12)
    amax = np.float32(2688.0)
    t = oracle.quantize(x, amax=amax).row
    e4m3 = np.array([(b & 7) * 2.0**-9 if b >> 3 == 0 else (1 + (b & 7) / 8) * 2.0 ** ((b >> 3) - 7)
                     for b in range(0x7F)])
    bmax = np.abs(x.astype(np.float32)).reshape(64, 4, 16).max(axis=2)
    sf = (bmax * np.float32(1.0 / 6.0)).astype(np.float32).astype(np.float64)
    trunc = (np.searchsorted(e4m3, sf, side="right") - 1).astype(np.uint8)
    assert (trunc != t.scales).sum() > 10  # most blocks' sf lie between two E4M3 values
    r = diagnose(x, t.data, trunc, amax=amax, rules=["te"])
    h = [h for h in r.hypotheses if h.startswith("E4M3 scale rounded toward zero")]
    assert h and f"the {int((trunc != t.scales).sum())} differing scale bytes and every other" in h[0], str(r)
    # the reference's own bytes with two planted one-step scale errors fit no mode
    s = t.scales.copy()
    s[5, 1] += 1
    s[9, 2] -= 1
    r = diagnose(x, t.data, s, amax=amax, rules=["te"])
    assert not any(h.startswith("E4M3") for h in r.hypotheses), str(r)


def test_planted_rht_plane_with_the_inputs_amax():
    # SPEC 4.2: with the RHT the columnwise amax is the RHT outputs'; a kernel that keeps X's amax for that plane makes
    # bytes only the "X's amax" candidate reproduces (conformance.te_torch's planes, its amax supplied as a pair)
    x = _x(64, 64, seed=9)
    row_amax = tt.quantize(x)["row_amax"]
    a = np.float32(np.asarray(row_amax).reshape(-1)[0])
    planted = tt.quantize(x, columnwise=True, rht=True, amax=(a, a))
    honest = tt.quantize(x, columnwise=True, rht=True)
    assert np.float32(np.asarray(honest["col_amax"]).reshape(-1)[0]) != a  # the two amaxes differ on this input
    r = diagnose(x, planted["col_data"], planted["col_scales"], plane="col", rules=["te"])
    assert r.matches == ["te (rht, X's amax)"], str(r)
    assert any(h.startswith("the RHT plane quantized with X's amax") for h in r.hypotheses), str(r)
    r = diagnose(x, honest["col_data"], honest["col_scales"], plane="col", rules=["te"])
    assert r.matches == ["te (rht)"] and not any("X's amax" in h for h in r.hypotheses), str(r)
    # the same bytes with that amax supplied (SPEC 4.3 allows it for both planes): the supplied amax explains them
    r = diagnose(x, planted["col_data"], planted["col_scales"], amax=a, plane="col", rules=["te"])
    assert r.matches == ["te (rht, amax given)"] and not any("X's amax" in h for h in r.hypotheses), str(r)
    # garbage codes: X's amax is no nearer than the plane's own, so it is not named
    junk = (planted["col_data"] ^ 0x5A).astype(np.uint8)
    r = diagnose(x, junk, honest["col_scales"], plane="col", rules=["te"])
    assert not any("X's amax" in h for h in r.hypotheses), str(r)


def test_planted_garbage_in_the_padding():
    x = _x(200, 64)  # 200 rows: 56 padding rows in the 128x4 layout
    o = tt.quantize(x, columnwise=True)
    sw = o["row_scales_swizzled"].copy()
    sw[-1] = 0x3C
    r = diagnose(x, o["row_data"], sw, rules=["te"])
    assert not r.matches and r.n_diff == 0
    assert any(h.startswith("garbage in the padding: 1 padding byte of the") for h in r.hypotheses), str(r)
    xc = _x(40, 64)  # columnwise plane: tokens 40..47 are SPEC 6.2's zero padding
    o = tt.quantize(xc, columnwise=True)
    cd = o["col_data"].copy()
    cd[:, 21] = 0x77  # tokens 42, 43
    r = diagnose(xc, cd, o["col_scales"], plane="col", rules=["te"])
    assert any("zero-padded tokens 40..47" in h for h in r.hypotheses), str(r)


def test_planted_nibble_order_and_the_per_tensor_value():
    x = _x(seed=7)
    d, s, a = _te_bytes(x)
    r = diagnose(x, ((d >> 4) | (d << 4)).astype(np.uint8), s, rules=["te"])
    assert any(h.startswith("nibble order") for h in r.hypotheses), str(r)
    r = diagnose(x, d, s, amax=np.float32(2688) / a[0], rules=["te"])  # flashinfer's global_scale stored
    assert r.matches == ["te"] and any("S_enc = 2688 / amax" in h for h in r.hypotheses), str(r)
    r = diagnose(x, d, s, amax=a[0] / np.float32(2688), rules=["te"])  # torchao's P stored
    assert any("amax / 2688" in h for h in r.hypotheses), str(r)


def test_planted_unsigned_zero_codes_under_4over6():
    """TE 4over6 bytes (conformance.te_torch) with the code of a -0.0 element set to 0x0, as TE's pure-torch reference
    writes it (SPEC 14.1), are named by the signed-zero line; with every 0x8 code cleared (negative values that round
    to zero too) the other form of the line counts both kinds."""
    x = _x(m=32, k=64, seed=3).astype(np.float32)
    x[3, 5] = -0.0
    d, s, _ = _te_bytes(x, four_over_six="mae")
    lo, hi = d & 0x0F, d >> 4
    assert hi[3, 2] == 0x8  # element 5: the high nibble of byte 2 (SPEC 2.3), -0.0's code under SPEC 3.1
    ref = d.copy()
    ref[3, 2] &= 0x0F  # element 5 -> 0x0
    r = diagnose(x, ref, s, rules="te_4over6_mae")
    assert any(h.startswith("-0.0 written as +0: every differing code (1)") for h in r.hypotheses), str(r)
    n_neg = int((lo == 0x8).sum() + (hi == 0x8).sum())
    cleared = (np.where(lo == 0x8, 0, lo) | (np.where(hi == 0x8, 0, hi) << 4)).astype(np.uint8)
    r = diagnose(x, cleared, s, rules="te_4over6_mae")
    assert any(h.startswith(f"zero codes without their sign: every differing code ({n_neg})") and
               h.endswith("-0.0: 1); SPEC 3.1 keeps the sign") for h in r.hypotheses), str(r)


def test_rules_that_do_not_define_the_plane_are_named():
    """Columnwise bytes with only rowwise rules chosen (flashinfer's 4over6): a ValueError that says why no rule
    applies, not a report."""
    x = _x(32, 32)
    q = oracle.quantize(x, columnwise=True).col
    with pytest.raises(ValueError, match=r"no rule tried applies to this input read as the col plane \(16 rule\(s\) "
                                         r"tried; flashinfer_4over6_mae, .* define the rowwise plane only"):
        diagnose(x, q.data, q.scales, plane="col", rules="flashinfer_*")


def test_plain_te_4over6_rules_are_reported_in_table_order():
    """Rules that agree on an input are listed in the table's order: TE's plain 4over6 rules with G = 448 first, then
    without fast math first, MAE before MSE. Sixteen ones (amax 1, S_enc = 6G): with G = 448 map-to-6 gives scale 448
    (0x7E) and code 6 (0x7), and map-to-4's 1.5 * 448 is capped to the same scale, so both candidates are the same and
    every G = 448 rule writes 0x7E and 0x77 bytes; the G = 256 rules write scale 256 (0x78)."""
    names = [r.name for r in DIAGNOSE_RULES if r.name.startswith("te_4over6_")]
    assert names == ["te_4over6_mae", "te_4over6_mse", "te_4over6_mae_fast", "te_4over6_mse_fast",
                     "te_4over6_mae_g256", "te_4over6_mse_g256", "te_4over6_mae_fast_g256", "te_4over6_mse_fast_g256"]
    x = np.ones((1, 16), np.float32)
    r = diagnose(x, np.full((1, 8), 0x77, np.uint8), np.uint8([[0x7E]]), plane="row", rules="te_4over6_*")
    assert [m for m in r.matches if " (block 16x16)" not in m] == names[:4], str(r)  # (one block: 16x16 agrees)


DIAGNOSE_BY_NAME = {r.name: r for r in DIAGNOSE_RULES}


def test_any_bytes_of_a_plane_get_a_report():
    """diagnose reads whatever bytes fit a plane: planes of random shapes, dtypes (NaN / Inf / -0.0 / subnormal inputs
    included), rules, variants, blocks and scale layouts, with a byte of data flipped or the nibbles swapped, and
    sometimes the amax given, each setting drawn on its own; every call returns a report (none raises), and the bytes
    left intact are matched to the rule of exactly the options that made them. The bytes come from oracle.quantize,
    which diagnose also runs, so this checks diagnose's search (the rule table's keywords, the layouts read, the
    plane and block found), not the rules' arithmetic: the tests above take that from conformance.te_torch, torchao
    and hand-made bytes."""
    rng = np.random.default_rng(11)
    options = [{}, {"rule": "torchao"}, {"rule": "te_fused_rht"}, {"four_over_six": "mse"},
               {"four_over_six": "mae", "global_scale_max": 256}, {"row_scaled": True}]
    for i in range(60):
        m, k = int(rng.integers(1, 40)), 16 * int(rng.integers(1, 6))
        x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-30, 30, (m, 1)))).astype(np.float32)
        if rng.random() < 0.3:
            x.flat[rng.integers(x.size, size=3)] = rng.choice([np.nan, np.inf, -np.inf, -0.0, 1e-40], 3)
        x = x.astype(ml_dtypes.bfloat16) if rng.random() < 0.5 else x
        kw = options[int(rng.integers(len(options)))]
        col = rng.random() < 0.25 and not kw.get("row_scaled")
        rht = col and x.dtype.name == "bfloat16" and rng.random() < 0.5 and not kw.get("four_over_six")
        block = (16, 16) if rng.random() < 0.2 and not kw.get("row_scaled") else (1, 16)
        t = oracle.quantize(x, rowwise=not col, columnwise=col, rht=rht, block=block, **kw)
        p = t.col if col else t.row
        data = p.data.copy()
        scales = p.swizzled_scales() if rng.random() < 0.3 else p.scales.copy()
        corrupt = int(rng.integers(3))  # 0: intact, 1: a data byte flipped, 2: nibbles swapped
        if corrupt == 1:
            data.flat[rng.integers(data.size)] ^= np.uint8(rng.integers(1, 256))
        elif corrupt == 2:
            data = ((data >> 4) | (data << 4)).astype(np.uint8)
        r = diagnose(x, data, scales, amax=p.amax if rng.random() < 0.3 else None)
        assert str(r), i
        if corrupt == 0:
            want = {"rule": "te", **kw}
            assert any(DIAGNOSE_BY_NAME[n.split(" ")[0]].quantize == want
                       and DIAGNOSE_BY_NAME[n.split(" ")[0]].variant is None for n in r.matches), (i, want, str(r))


def test_bad_input_is_refused():
    x = _x()
    d, s, _ = _te_bytes(x)
    with pytest.raises(ValueError, match="neither the rowwise plane"):
        diagnose(x, d[:10], s)
    with pytest.raises(ValueError, match="fit no"):
        diagnose(x, d, s[:3])
    with pytest.raises(ValueError, match="layout must be"):
        diagnose(x, d, s, layout="8x4")
    with pytest.raises(ValueError, match="unknown rule"):
        diagnose(x, d, s, rules=["te", "nvidia"])
    with pytest.raises(ValueError, match="names no rule"):
        diagnose(x, d, s, rules=[])
    with pytest.raises(ValueError, match=r"unknown rule\(s\) \['flashinfer_\*_g512'\]"):
        diagnose(x, d, s, rules=["te", "flashinfer_*_g512"])
    with pytest.raises(TypeError, match="rule names"):
        diagnose(x, d, s, rules=["te", 3])
    with pytest.raises(TypeError, match="bytes"):
        diagnose(x, d.astype(np.float32), s)


def test_rules_by_shell_pattern():
    """rules takes shell patterns beside names: "te_4over6_m?e" is the two plain TE 4over6 rules, so plain te bytes
    are tried against those alone (the closest of them, no match); "te*" with "torchao" tries those names only."""
    x = _x()
    d, s, _ = _te_bytes(x)
    r = diagnose(x, d, s, rules="te_4over6_m?e")
    assert not r.matches and {name.split(" ")[0] for name, _ in r.tried} == {"te_4over6_mae", "te_4over6_mse"}, str(r)
    r = diagnose(x, d, s, rules=["te*", "torchao"])
    tried = {name.split(" ")[0] for name, _ in r.tried}
    assert "te" in r.matches and "torchao" in tried and not any(n.startswith("flashinfer") for n in tried), str(r)
    assert all(n.startswith("te") or n == "torchao" for n in tried), tried


# ---- the command line --------------------------------------------------------------------------------------------


def _run(*args):
    return subprocess.run([sys.executable, "-m", "oracle", *args], capture_output=True, text=True)


def test_cli_diagnose_end_to_end(tmp_path):
    nv = _ao()
    x = _x(48, 64, seed=8)
    np.save(tmp_path / "x.npy", x)
    o = tt.quantize(x, columnwise=True)
    # TE's fields (padded scale_inv), both planes: the rowwise one by default, --plane col for the other
    pad = lambda s: np.pad(s, ((0, -s.shape[0] % 128), (0, -s.shape[1] % 4)))  # noqa: E731
    np.savez(tmp_path / "te.npz", rowwise_data=o["row_data"], rowwise_scale_inv=pad(o["row_scales"]),
             amax_rowwise=o["row_amax"], columnwise_data=o["col_data"], columnwise_scale_inv=pad(o["col_scales"]),
             amax_columnwise=o["col_amax"])
    r = _run("diagnose", str(tmp_path / "x.npy"), str(tmp_path / "te.npz"), "--rules", "te,torchao")
    assert r.returncode == 0 and "reproduced exactly by: te" in r.stdout, r.stdout + r.stderr
    assert "padded compact" in r.stdout
    r = _run("diagnose", str(tmp_path / "x.npy"), str(tmp_path / "te.npz"), "--plane", "col", "--layout", "te",
             "--rules", "te")
    assert r.returncode == 0 and "compared as the col plane" in r.stdout, r.stdout + r.stderr
    # torchao's fields, its per_tensor_scale turned into the amax
    xt = torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    t = nv.NVFP4Tensor.to_nvfp4(xt, per_tensor_scale=nv.per_tensor_amax_to_scale(xt.abs().max().float()))
    np.savez(tmp_path / "ao.npz", qdata=t.qdata.numpy(), scale=t.scale.view(torch.uint8).numpy(),
             per_tensor_scale=t.per_tensor_scale.numpy())
    r = _run("diagnose", str(tmp_path / "x.npy"), str(tmp_path / "ao.npz"), "--rules", "te,torchao")
    assert r.returncode == 0 and "reproduced exactly by: torchao" in r.stdout, r.stdout + r.stderr
    # a planted bug: exit 1 and the hypothesis
    s = o["row_scales"].copy()
    s[0, 0] += 1
    np.savez(tmp_path / "bad.npz", data=o["row_data"], scales=s)
    r = _run("diagnose", str(tmp_path / "x.npy"), str(tmp_path / "bad.npz"), "--rules", "te")
    assert r.returncode == 1 and "one ulp off in the scale" in r.stdout and "first differing block" in r.stdout
    # bad input: exit 2 and one line
    np.savez(tmp_path / "none.npz", foo=np.zeros(3))
    r = _run("diagnose", str(tmp_path / "x.npy"), str(tmp_path / "none.npz"))
    assert r.returncode == 2 and r.stderr.startswith("error:") and "data and a scales" in r.stderr
    r = _run("diagnose", "--help")
    assert r.returncode == 0 and "rowwise_data, rowwise_scale_inv" in r.stdout and "qdata, scale" in r.stdout


def test_hypotheses_that_do_not_apply_are_not_named():
    """Three bug classes that once fired on bytes they do not explain: "scales of the wrong plane" on scales that are
    right (an all-zero input's two planes have equal scales), "nibble order" where every differing byte has equal
    nibbles (swapping changes nothing; the scale byte is what differs), and "one ulp off" for 0x7E read as 0x7F,
    which is E4M3's NaN, not a step (SPEC 2.2)."""
    x = np.zeros((16, 16), np.float32)
    p = oracle.quantize(x).row
    d = p.data.copy()
    d[0, 0] = 0x01
    assert not any(h.startswith("scales of the wrong plane") for h in diagnose(x, d, p.scales, rules=BASIC).hypotheses)
    x = np.full((32, 64), 2.5, np.float32)
    p = oracle.quantize(x).row
    assert (p.data >> 4 == p.data & 15).all()  # the premise: every byte's nibbles are equal
    s = p.scales.copy()
    s[3, 1] = 0x30
    assert not any(h.startswith("nibble order") for h in diagnose(x, p.data, s, rules=BASIC).hypotheses)
    x = np.full((1, 16), 1.5, np.float32)
    x[0, 0] = np.nan
    p = oracle.quantize(x, rule="te", amax=1.5).row
    s = p.scales.copy()
    assert int(s[0, 0]) != 0x7F
    s[0, 0] = 0x7F  # E4M3's NaN byte in place of a finite scale
    r = diagnose(x, p.data, s, amax=1.5, rules=BASIC)
    assert not any(h.startswith("one ulp off") for h in r.hypotheses), r.hypotheses


def test_one_ulp_and_nibble_order_lines_name_their_other_causes():
    """Bytes made with a 1% larger amax read as one-ulp scales, every step one way, with more blocks off in codes only:
    the line names a different per-tensor scale too. An RHT plane made with the sign mask ^ 0xAAAA is the expected
    plane with each pair of outputs swapped (H16[j][i] (-1)^i = H16[j ^ 1][i], SPEC 7.1): the nibble-order line names
    the mask too."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 64)) * 3).astype(np.float32)
    p = oracle.quantize(x, amax=np.float32(np.abs(x).max() * 1.01)).row
    (ulp,) = [h for h in diagnose(x, p.data, p.scales, rules=BASIC).hypotheses if h.startswith("one ulp off")]
    assert "per-tensor scale" in ulp, ulp
    x = np.random.default_rng(0).standard_normal((32, 64)).astype(ml_dtypes.bfloat16)
    p = oracle.quantize(x, rowwise=False, columnwise=True, rht=True, rht_signs=0xD7E8 ^ 0xAAAA).col
    (nib,) = [h for h in diagnose(x, p.data, p.scales, rules=BASIC).hypotheses if h.startswith("nibble order")]
    assert "0xAAAA" in nib, nib


# --- hypotheses and readings no other test reached (a mutation audit: each test fails on its mutant) ---

def _hand_ones_col(m=20, k=32):
    """x = ones [m, k] fp32, te rule (SPEC 5.1/5.2): S_enc = 2688, byte 0x7E, m = 6, code 0x7; col plane [k, 32]."""
    data = np.zeros((k, 16), np.uint8)
    data[:, : m // 2] = 0x77
    return np.ones((m, k), np.float32), data, np.full((k, 2), 0x7E, np.uint8)

def test_te_div_zero_block():
    x = np.zeros((16, 32), np.float32)  # A = 0: S_enc = 1, every byte 0x00, d = 0: keeps 5.2's m, codes 0
    d = diagnose(x, np.zeros((16, 16), np.uint8), np.zeros((16, 2), np.uint8), rules="te_div", plane="row")
    assert "te_div" in d.matches

def test_padding_garbage_named_under_variant():
    x, data, sc = _hand_ones_col()
    data[0, 12] = 0x01  # token 24 (padding) gets code 1
    d = diagnose(x, data, sc, rules="te_div", plane="col")
    assert any("zero-padded tokens 20..31" in h for h in d.hypotheses)

def test_padding_line_only_when_real_tokens_match():
    x, data, sc = _hand_ones_col()
    data[0, 12] = 0x01
    data[1, 0] = 0x67  # a real token differs too
    d = diagnose(x, data, sc, plane="col")
    assert not any("zero-padded tokens" in h for h in d.hypotheses)

def test_no_rht_candidates_for_fp32():
    x, data, sc = _hand_ones_col()
    d = diagnose(x, data, sc, plane="col")
    assert not any("rht" in lab.partition(" (")[2] for lab, _ in d.tried)

def _ties_row():
    # A = 2688: S_enc = 1, S_dec = 1 (SPEC 5.1). block 0: b = 2688 -> byte 0x7E, m = 1/448, code 0x7 for 2688.
    # block 1: b = 6 -> sf = 6 * fp32(1/6) = 1.0 -> byte 0x38, m = 1: y = x exactly.
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = 2688
    x[0, 16:24] = [6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5]
    return x

def test_ties_to_odd_named():
    x = _ties_row()
    codes = np.zeros((1, 32), np.uint8)
    codes[0, 0] = 7
    codes[0, 16:24] = [7, 1, 1, 3, 3, 5, 5, 7]  # ties to the odd code (RNE would be 7,0,2,2,4,4,6,6)
    d = diagnose(x, pack_fp4(codes), np.uint8([[0x7E, 0x38]]), plane="row")
    assert any(h.startswith("E2M1 ties rounded to odd codes") for h in d.hypotheses), d.hypotheses

def test_sign_flip_is_not_a_rounding_mode():
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = 2688
    x[0, 16:20] = [6, 1, 2, 3]  # no ties
    codes = np.zeros((1, 32), np.uint8)
    codes[0, 0] = 7
    codes[0, 16:20] = [7, 0xA, 4, 5]  # 1.0 written as -1.0 (0xA)
    d = diagnose(x, pack_fp4(codes), np.uint8([[0x7E, 0x38]]), plane="row")
    assert not any(h.startswith("E2M1") for h in d.hypotheses), d.hypotheses

def test_e4m3_away_with_a_saturated_block():
    # x [1, 32]: block 0 holds +Inf (A = +Inf -> S_enc = 1; sf = FLT_MAX -> 0x7E), block 1 b = 1.25:
    # sf = 1.25 * fp32(1/6) = 0.20833334 -> RNE 0x25 (0.203125), away from zero 0x26 (0.21875)
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = np.inf
    x[0, 16] = 1.25
    codes = np.zeros((1, 32), np.uint8)
    codes[0, 0] = 7
    codes[0, 16] = 7
    d = diagnose(x, pack_fp4(codes), np.uint8([[0x7E, 0x26]]), plane="row")
    assert any(h.startswith("E4M3 scale rounded away from zero") for h in d.hypotheses), d.hypotheses

def test_nan_byte_is_no_ulp_step():
    # te_fused_rht_kernels (SPEC 14.11): block 0 holds a NaN -> byte 0x7F, 16 codes 0x7; theirs 0x7E there
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = np.nan
    x[0, 1] = 1
    x[0, 16] = 2688
    codes = np.zeros((1, 32), np.uint8)
    codes[0, :16] = 7
    codes[0, 16] = 7
    d = diagnose(x, pack_fp4(codes), np.uint8([[0x7E, 0x7E]]), plane="row", rules="te_fused_rht_kernels")
    assert d.n_diff == 1
    assert not any(h.startswith("one ulp off") for h in d.hypotheses), d.hypotheses

def test_near_miss_per_tensor_value_not_named():
    x = _ties_row()
    codes = np.zeros((1, 32), np.uint8)
    codes[0, 0] = 7
    codes[0, 16:24] = [7, 0, 2, 2, 4, 4, 6, 6]
    d = diagnose(x, pack_fp4(codes), np.uint8([[0x7E, 0x38]]), amax=np.float32(1.001), plane="row")
    # S_enc = 2688 / 2688 = 1; 1.001 is not S_enc (nor 1/S_enc) to 2^-22
    assert not any("is S_enc" in h or "is 1 / S_enc" in h for h in d.hypotheses), d.hypotheses

def test_no_te_rounding_hypothesis_against_a_4over6_rule():
    # SPEC 5.6 by hand (A = 2688, G = 448: S_enc = 1): block 1 [6, .25, .75, 1.25, 1.75, 2.5, 3.5, 5] has MAE 3.0 at
    # map-to-6 (byte 0x38) and 2.0 at map-to-4 (byte 0x3C): 4over6 picks 0x3C. Theirs: plain te bytes (0x38, RNE codes)
    x = _ties_row()
    codes = np.zeros((1, 32), np.uint8)
    codes[0, 0] = 7
    codes[0, 16:24] = [7, 0, 2, 2, 4, 4, 6, 6]
    d = diagnose(x, pack_fp4(codes), np.uint8([[0x7E, 0x38]]), plane="row", rules="te_4over6_mae")
    assert d.n_diff == 1
    assert not any(h.startswith(("E4M3", "E2M1")) for h in d.hypotheses), d.hypotheses

def test_garbage_free_reading_ranks_first_on_a_tie():
    # x = 0: every te byte 0x00 (SPEC 5.2). A 512-byte buffer: index 8 is padded-compact (row 2, block 0) but
    # 128x4-swizzled padding (row 64, SPEC 8.2); row 2's first data byte differs in both readings -> 1 block each
    x = np.zeros((16, 32), np.float32)
    data = np.zeros((16, 16), np.uint8)
    data[2, 0] = 0x11
    buf = np.zeros(512, np.uint8)
    buf[8] = 0x38
    d = diagnose(x, data, buf, plane="row", rules="te")
    assert d.n_diff == 1 and d.reading == "padded"


def test_square_padded_shape_is_not_declared_compact():
    # x [128, 64]: compact [128, 4] == padded shape (SPEC 8.1), so the buffer's shape says nothing about its layout.
    # scales: block j of row r gets b = 2**(r % 4 + j) (A = 2688 -> S_enc = 1, sf = b * fp32(1/6) -> distinct bytes)
    x = np.zeros((128, 64), np.float32)
    x[0, 0] = 2688
    for r in range(128):
        for j in range(1 if r == 0 else 0, 4):
            x[r, 16 * j] = 6 * 2.0 ** ((r + j) % 5 - 2)
    q = oracle.quantize(x)  # the bytes diagnosed (plain te); only their layout is under test
    swz = q.row.swizzled_scales().reshape(128, 4)
    d = diagnose(x, q.row.data, swz, plane="row")
    assert d.matches and d.reading == "swizzled"
    assert not any("layout" in h for h in d.hypotheses), d.hypotheses


def test_torchao_division_of_a_tensor_holding_a_nan_keeps_the_per_tensor_nan():
    """SPEC 14.11 (division under torchao) on ones with one NaN: the amax is the NaN 0x7FC00000 (4.1), so P is NaN and
    both block bytes are 0x7F; d = P * decode(0x7F) keeps P's payload 0x7FC00000, and every quotient y / d (the NaN
    element's own payload is 0x7FC00000 too) has index ((0x7FC00000 - 0x3EE00001 + 1) >> 22) & 0xFF = 3 (3.5): codes
    0x3, data bytes 0x33. diagnose reads these bytes as torchao_div (and as torchao, whose multiplier gives the same
    codes here)."""
    x = np.ones((1, 32), np.float32)
    x[0, 0] = np.nan
    assert ((0x7FC00000 - 0x3EE00001 + 1) >> 22) & 0xFF == 3
    data = np.full((1, 16), 0x33, np.uint8)
    scales = np.full((1, 2), 0x7F, np.uint8)
    d = diagnose(x, data, scales, layout="compact", plane="row", rules=["torchao_div", "torchao"])
    # (one row: the 16x16 blocks of each rule give the same bytes)
    assert {m.split(" (")[0] for m in d.matches} == {"torchao_div", "torchao"}, (d.matches, d.closest, d.n_diff)


def test_a_library_layout_whose_sizes_the_scales_do_not_fit_is_named():
    """TE stores scales padded or 128x4 swizzled (SPEC 8.1, 8.2); compact bytes (64 rows: 256 bytes against 512)
    given with layout="te" are read as compact, and the report says so."""
    x = _x(64, 64, seed=4)
    o = tt.quantize(x)
    r = diagnose(x, o["row_data"], o["row_scales"], layout="te", rules=["te"])
    assert r.matches == ["te"] and r.reading == "compact", str(r)
    assert any(h.startswith("scales of another layout: the te layout stores them padded") and "256 bytes" in h
               for h in r.hypotheses), str(r)
    r = diagnose(x, o["row_data"], o["row_scales_swizzled"], layout="te", rules=["te"])  # TE's own: no such line
    assert r.matches == ["te"] and not any(h.startswith("scales of another layout") for h in r.hypotheses), str(r)


def test_drawn_te_cases_are_diagnosed_as_their_rule():
    """The fuzzer's quantize cases within conformance.te_torch's reach (rules te / te_fused_rht, every value kind and
    special, both planes, 1x16 and 16x16 blocks, TE's 4over6 and row-scaled variants; round to nearest, no RHT, a
    computed amax): te_torch's compact bytes of each plane are diagnosed as the case's rule (a variant by its
    DIAGNOSE_RULES name), whatever else agrees on the input."""
    from conformance.backends import TorchTEBackend
    from conformance.generators import generate
    from conformance.ops import quantize_kwargs
    from conformance.runner import case_space

    be = TorchTEBackend()
    space = dict(case_space(be, "quantize"), rounding=["rn"], rht=[False], amax=["computed"], swizzled=[False])
    checked, variants = 0, set()
    for i in range(400):
        c = generate("quantize", 77, i, "quantize", space)
        kw = quantize_kwargs(c)
        if c.arrays["x"].shape[0] == 0 or "amax" in kw or kw["rounding"] != "rn" or kw["rht"]:
            continue
        out = be.run("quantize", c)
        want = kw["rule"] + ("_row_scaled" if kw.get("row_scaled") else "")
        if kw.get("four_over_six"):
            want += f"_4over6_{kw['four_over_six']}" + ("_fast" if kw.get("four_over_six_fast_math") else "")
        if kw.get("global_scale_max", 448) != 448:
            want += "_g256"
        for p in ("row", "col"):
            if f"{p}_data" not in out:
                continue
            r = diagnose(c.arrays["x"], out[f"{p}_data"], out[f"{p}_scales"], amax=out[f"{p}_amax"],
                         layout="compact", plane=p)
            assert want in {m.split(" (")[0] for m in r.matches}, (c.key(), p, kw, str(r)[:600])
            checked += 1
        variants.add(want)
        if checked >= 40:
            break
    assert checked >= 40 and {"te", "te_fused_rht"} <= variants and any("4over6" in v for v in variants), variants
