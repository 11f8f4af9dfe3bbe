"""CPU tests of the device result containers' conversion to the oracle (device/_results.py).

The buffers are the oracle's own grouped bytes (``oracle.group_quantize``), laid out as a device writes them (SPEC 9.2
offsets, worst-case capacity with zero tail, SPEC 9.3) in CPU torch tensors; ``to_oracle()`` and ``group_plane()``
must give back the oracle's planes byte for byte. No GPU needed.
"""

from __future__ import annotations

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

import oracle  # noqa: E402
from device._results import DeviceGroupedNVFP4Tensor  # noqa: E402

SPLITS = [3, 0, 130, 17]
K = 48


def _with_tail(a: np.ndarray, extra: int) -> torch.Tensor:
    """The flat buffer followed by ``extra`` zero bytes (a capacity larger than the groups use, SPEC 9.3)."""
    return torch.from_numpy(np.concatenate([a, np.zeros(extra, np.uint8)]))


def _device_like(og, swizzled: bool) -> DeviceGroupedNVFP4Tensor:
    tiles = np.concatenate([[0], np.cumsum((np.asarray(SPLITS) + 127) // 128)]).astype(np.int64)
    offsets = np.stack([og.row_offsets, tiles, og.row_data_offsets, og.row_scale_offsets, og.col_data_offsets,
                        og.col_scale_offsets]).astype(np.int64)
    rs = og.row_scales if swizzled else og.row_scales_compact
    cs = og.col_scales if swizzled else og.col_scales_compact
    return DeviceGroupedNVFP4Tensor(
        shape=og.shape, splits=torch.tensor(SPLITS), row_data=_with_tail(og.row_data, 40),
        row_scales=_with_tail(rs, 512), col_data=_with_tail(og.col_data, 24), col_scales=_with_tail(cs, 512),
        row_amax=torch.from_numpy(og.row_amax), col_amax=torch.from_numpy(og.col_amax),
        offsets=torch.from_numpy(offsets), swizzled=swizzled, options=dict(og.options))


def _same_plane(got, want, where):
    assert got.shape == want.shape, where
    assert np.array_equal(got.data, want.data), f"{where}: data"
    assert np.array_equal(got.scales, want.scales), f"{where}: scales"
    assert np.float32(got.amax).view(np.uint32) == np.float32(want.amax).view(np.uint32), f"{where}: amax"
    assert (got.rht, got.valid_cols, tuple(got.block)) == (want.rht, want.valid_cols, tuple(want.block)), where
    assert got.rht_signs == want.rht_signs, f"{where}: rht_signs {got.rht_signs} vs {want.rht_signs}"


@pytest.mark.parametrize("swizzled", [True, False])
@pytest.mark.parametrize("block,rht", [((1, 16), True), ((16, 16), False)])
def test_group_plane_and_to_oracle_give_the_oracle_planes(swizzled, block, rht):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((sum(SPLITS), K)) * np.exp2(rng.integers(-4, 5, (sum(SPLITS), 1)))).astype(
        ml_dtypes.bfloat16)
    og = oracle.group_quantize(x, SPLITS, rowwise=True, columnwise=True, block=block, rht=rht)
    dev = _device_like(og, swizzled)
    back = dev.to_oracle()
    for g, m in enumerate(SPLITS):
        for name, planes in (("row", og.row_planes), ("col", og.col_planes)):
            _same_plane(dev.group_plane(g, name), planes[g], f"group_plane g={g} {name}")
            _same_plane(getattr(back, f"{name}_planes")[g], planes[g], f"to_oracle g={g} {name}")
        assert dev.group_plane(g, "row").shape == (m, K)
    # the flat buffers come back cut at the last offset, both scale layouts rebuilt from the planes
    for name in ("row_data", "row_scales", "row_scales_compact", "col_data", "col_scales", "col_scales_compact"):
        assert np.array_equal(getattr(back, name), getattr(og, name)), name


def test_group_plane_refuses_bad_arguments_and_absent_planes():
    x = np.ones((20, 32), np.float32)
    og = oracle.group_quantize(x, [20], rowwise=True, columnwise=False)
    offsets = np.stack([og.row_offsets, [0, 1], og.row_data_offsets, og.row_scale_offsets, [0, 0], [0, 0]])
    dev = DeviceGroupedNVFP4Tensor(
        shape=og.shape, splits=torch.tensor([20]), row_data=torch.from_numpy(og.row_data),
        row_scales=torch.from_numpy(og.row_scales), col_data=None, col_scales=None,
        row_amax=torch.from_numpy(og.row_amax), col_amax=torch.zeros(1), offsets=torch.from_numpy(offsets))
    assert dev.group_plane(0, "col") is None
    _same_plane(dev.group_plane(0), og.row_planes[0], "row")
    with pytest.raises(ValueError, match="plane must be"):
        dev.group_plane(0, "rows")
    with pytest.raises(IndexError, match="out of range"):
        dev.group_plane(1)
    with pytest.raises(IndexError, match="out of range"):
        dev.group_plane(-1)


def test_a_columnwise_only_result_keeps_its_amax():
    """A group_quantize result with the columnwise plane only: to_oracle() gives the oracle's col_amax (the written
    one) and a zero row_amax for the absent plane, as oracle.group_quantize does (not the reverse). The result's
    row_amax buffer holds 5.0 here, so a to_oracle() that passed it on would fail."""
    x = (np.arange(20 * 32, dtype=np.float32).reshape(20, 32) - 300) / 64
    og = oracle.group_quantize(x, [20], rowwise=False, columnwise=True)
    offs = np.stack([og.row_offsets, [0, 1], [0, 0], [0, 0], og.col_data_offsets, og.col_scale_offsets])
    dev = DeviceGroupedNVFP4Tensor(
        shape=og.shape, splits=torch.tensor([20]), row_data=None, row_scales=None,
        col_data=torch.from_numpy(og.col_data), col_scales=torch.from_numpy(og.col_scales),
        row_amax=torch.tensor([5.0]),
        col_amax=torch.from_numpy(og.col_amax), offsets=torch.from_numpy(offs), options=dict(og.options))
    back = dev.to_oracle()
    assert og.col_amax[0] == np.float32(339 / 64)  # max |x| = (639 - 300) / 64, the plane's own amax (SPEC 4.1)
    assert back.col_amax.tolist() == og.col_amax.tolist() and back.row_amax.tolist() == [0.0]
