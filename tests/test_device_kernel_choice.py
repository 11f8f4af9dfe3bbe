"""The device GEMM's automatic kernel choice (device/gemm.py), on the host: no GPU needed. The expected choices are the
measured decisions of docs/gemm.md (stops 29, 30 and 33) on the benchmark shapes, not values read off the functions."""
import pytest

pytest.importorskip("torch")
from device import gemm  # noqa: E402

# (kind, E, T, contraction kc, output columns, a_rows, b_rows) as grouped_gemm passes them: fprop / dgrad rows are the
# tokens; wgrad's a_rows / b_rows are dW's N and K
E8_FPROP = ("fprop", 8, 16384, 4096, 14336, 16384, 14336)
E8_WGRAD = ("wgrad", 8, 16384, 16384, 4096, 14336, 4096)
E64_FPROP = ("fprop", 64, 16384, 2048, 1408, 16384, 1408)
E64_WGRAD = ("wgrad", 64, 16384, 16384, 2048, 1408, 2048)
E8_T512_WGRAD = ("wgrad", 8, 512, 512, 4096, 14336, 4096)


@pytest.mark.parametrize("shape,fast,exact", [
    (E8_FPROP, True, True),          # stops 29 / 30: 2048 rows per group, the copies pay in both modes
    (E8_WGRAD, True, True),
    (E64_FPROP, False, False),       # 256 rows per group: no copies of both (exact over copies: 0.43x vs 0.49x
                                     # fused; since stop 46 exact mode runs the hybrid kernel there, A copied only)
    (E64_WGRAD, False, True),        # stop 33: exact over copies with TMA 0.49x vs fused 0.44x
    (E8_T512_WGRAD, False, False),   # 64 rows per group: exact mode keeps the fused kernel (fast wgrad: below)
])
def test_copies_choice(shape, fast, exact):
    assert gemm._reuse_pays(*shape) is fast
    assert gemm._exact_dequant_pays(*shape) is exact


class _ExtWithCutlass:
    """The extension as _fast_kernel_choice sees it when built with CUTLASS's headers."""

    @staticmethod
    def has_dequant_path() -> bool:
        return True


# Fast-mode wgrad over fp16 copies or fused (docs/gemm.md, stops 37 and 65): (E, T, N, K, output, accumulate, copies
# chosen), each the faster of the two in benchmarks/ab_fast_kernel.py on the H100 (x of grouped_mm: copies / fused;
# bf16 rows: stop 65's, with the fused kernels' bf16 output by TMA boxes; a tie goes to the fused kernel, which needs
# no scratch).
@pytest.mark.parametrize("e,t,n,k,dtype,acc,copies", [
    (64, 16384, 1408, 2048, "f32", False, False),   # 0.51 / 0.59
    (64, 16384, 1408, 2048, "bf16", False, False),  # 0.765 / 0.760 (stop 37, staged epilogue: 0.77 / 0.64)
    (64, 8192, 1408, 2048, "bf16", False, False),   # 0.819 / 0.833
    (64, 16384, 1408, 2048, "f32", True, True),     # 0.36 / 0.25
    (64, 4096, 1408, 2048, "f32", True, True),      # 64 rows per group: 0.30 / 0.19
    (64, 4096, 1408, 2048, "bf16", False, False),   # 0.860 / 0.895 (stop 37: 0.86 / 0.68)
    (8, 2048, 2048, 2048, "bf16", False, False),    # 0.584 / 0.694 (N K / (N + K) = 1024)
    (32, 8192, 4096, 2048, "bf16", False, True),    # 0.823 / 0.679 (1365)
    (64, 16384, 2048, 7168, "bf16", False, True),   # 0.886 / 0.679 (1593)
    (16, 4096, 4096, 4096, "bf16", False, True),    # 0.864 / 0.670 (2048)
    (8, 512, 14336, 4096, "bf16", False, True),     # 0.942 / 0.850 (3186; stop 37: 0.94 / 0.64)
    (8, 1024, 14336, 4096, "f32", False, False),    # 0.47 / 0.55
    (8, 2048, 14336, 4096, "f32", False, False),    # 0.53 / 0.55
    (8, 4096, 14336, 4096, "f32", False, True),     # 0.66 / 0.55
    (8, 4096, 14336, 4096, "f32", True, True),      # 0.42 / 0.28
    (32, 16384, 1408, 2048, "f32", False, True),    # 0.63 / 0.60
    (1, 4096, 4096, 4096, "f32", False, True),      # 0.81 / 0.73
    (8, 16384, 14336, 4096, "f32", False, True),    # stop 29
    (8, 4096, 512, 4096, "bf16", False, False),     # N below 1024: not measured, the fused kernel stays
    (64, 2048, 1408, 2048, "bf16", False, False),   # 32 rows per group: not measured
])
def test_wgrad_fast_choice(e, t, n, k, dtype, acc, copies):
    import torch

    dt = torch.float32 if dtype == "f32" else torch.bfloat16
    got = gemm._fast_kernel_choice(_ExtWithCutlass, 0, "wgrad", e, t, t, k, n, k, dt, False, acc)
    assert got == (gemm._FAST_KERNELS["dequant"] if copies else 0)


def test_swapped_kernel_only_below_its_contraction_limit():
    """The swapped kernel's cp.async loader steps its copies by 32-bit offsets of up to 96 x the contraction K
    (gemm_swapped.cuh: 2 token rows of 32 K elements, or 4 weight pieces 64 rows x K/2 bytes apart), which pass 2^31
    from K = 22.4M: at or past the limit the automatic choice runs another kernel and forcing it raises."""
    import torch

    lim = gemm._SWAPPED_MAX_CONTRACTION
    assert 96 * lim < 2**31
    swapped = gemm._FAST_KERNELS["swapped"]
    for kind in ("fprop", "dgrad"):
        # E8 T512: 64 rows per group, the swapped kernel's range
        below = gemm._fast_kernel_choice(_ExtWithCutlass, 0, kind, 8, 512, lim - 16, 4096, 512, 4096,
                                         torch.bfloat16, False)
        at = gemm._fast_kernel_choice(_ExtWithCutlass, 0, kind, 8, 512, lim, 4096, 512, 4096, torch.bfloat16, False)
        assert below == swapped and at != swapped
        assert gemm._fast_kernel_choice(_ExtWithCutlass, swapped, kind, 8, 512, lim - 16, 4096, 512, 4096,
                                        torch.bfloat16, False) == swapped
        with pytest.raises(ValueError, match="contractions below"):
            gemm._fast_kernel_choice(_ExtWithCutlass, swapped, kind, 8, 512, lim, 4096, 512, 4096, torch.bfloat16,
                                     False)


# The hybrid exact kernel (docs/gemm.md, stop 46): fprop / dgrad whose contraction is a multiple of 32, with 16-byte
# aligned B buffers (its TMA boxes of packed rows); every other call keeps the fused kernel, and forcing it raises.
@pytest.mark.parametrize("kind,kc,offset,runs,why", [
    ("fprop", 2048, 0, True, None),             # E64 fprop: the shape it was measured on
    ("dgrad", 1408, 0, True, None),             # E64 dgrad (contraction N = 1408 = 44 x 32)
    ("fprop", 48, 0, False, "multiple of 32"),  # packed rows of 24 bytes
    ("dgrad", 144, 0, False, "multiple of 32"),
    ("wgrad", 2048, 0, False, "fprop and dgrad only"),
    ("fprop", 2048, 8, False, "16-byte aligned"),  # b's data 8 bytes into its storage
])
def test_hybrid_eligibility(kind, kc, offset, runs, why):
    import torch

    buf = torch.zeros(4096 + 64, dtype=torch.uint8)
    base = (-buf.data_ptr()) % 16  # the first 16-byte aligned element
    b_data = buf[base + offset:base + offset + 2048]
    b_scales = buf[base + 2048 + 16:base + 4096]
    assert gemm._hybrid_runs(kind, kc, b_data, b_scales) is runs
    if why is None:
        gemm._check_hybrid(kind, kc, b_data, b_scales)
    else:
        with pytest.raises(ValueError, match=why):
            gemm._check_hybrid(kind, kc, b_data, b_scales)
