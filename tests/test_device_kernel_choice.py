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
    (E64_FPROP, False, False),       # 256 rows per group: the fused kernels (exact over copies: 0.43x vs 0.49x)
    (E64_WGRAD, False, True),        # stop 33: exact over copies with TMA 0.49x vs fused 0.44x
    (E8_T512_WGRAD, False, False),   # 64 rows per group: not measured over copies, the fused kernel stays
])
def test_copies_choice(shape, fast, exact):
    assert gemm._reuse_pays(*shape) is fast
    assert gemm._exact_dequant_pays(*shape) is exact
