"""The golden vectors (``python -m oracle vectors``) through the device API, byte for byte against the stored outputs.

Every quantize, group_quantize and swizzle case: data, scales in both layouts (padding included), amax bits, offsets;
the grouped buffers are sized for the worst case on the device, so the bytes past the stored ones must be zeros (SPEC
9.3). The device refuses row-scaled quantization (SPEC 5.7 is modelled by the oracle only): that case checks the
refusal. GPU tests are marked ``cuda`` and skip without a CUDA device.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import oracle.vectors  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
#: cases the device refuses, with a word of the refusal's message
REFUSED = {"quantize_row_scaled_4over6": "row_scaled"}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    out = tmp_path_factory.mktemp("vectors")
    return {name.split("_", 1)[1]: oracle.vectors.read_case(out / name) for name in oracle.vectors.write_vectors(out)}


def _cuda(a: np.ndarray):
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(a).view(np.uint16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def _bytes(t) -> bytes:
    return t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()


def _quantize_options(meta: dict) -> dict:
    o = dict(meta["options"])
    o["block"] = tuple(o["block"])
    return o


def _assert_flat(name: str, got, want: np.ndarray) -> None:
    """A worst-case device buffer: the stored bytes first, zeros after them."""
    g = _bytes(got)
    w = np.ascontiguousarray(want).tobytes()
    assert len(g) >= len(w), (name, len(g), len(w))
    assert g[:len(w)] == w, name
    assert g[len(w):] == bytes(len(g) - len(w)), f"{name}: nonzero bytes past the stored ones"


@pytest.mark.cuda
@needs_cuda
def test_quantize_cases(cases):
    import device

    checked = []
    for name, (meta, ins, outs) in cases.items():
        if meta["op"] != "quantize":
            continue
        x, kw = _cuda(ins["x"]), _quantize_options(meta)
        if name in REFUSED:
            with pytest.raises(ValueError, match=REFUSED[name]):
                device.quantize(x, **kw)
            checked.append(name)
            continue
        for swizzled in (True, False):
            r = device.quantize(x, swizzled=swizzled, **kw)
            for p in ("row", "col"):
                where = f"{name} {p} swizzled={swizzled}"
                if f"{p}_data" not in outs:
                    assert getattr(r, f"{p}_data") is None, where
                    continue
                assert _bytes(getattr(r, f"{p}_data")) == outs[f"{p}_data"].tobytes(), f"{where} data"
                want = outs[f"{p}_scales_swizzled" if swizzled else f"{p}_scales"]
                assert _bytes(getattr(r, f"{p}_scales")) == want.tobytes(), f"{where} scales"
                assert _bytes(getattr(r, f"{p}_amax")) == outs[f"{p}_amax"].tobytes(), f"{where} amax"
        checked.append(name)
    assert len(checked) == 12 and "quantize_4over6_16x16_tree_order" in checked, checked


@pytest.mark.cuda
@needs_cuda
def test_group_quantize_case(cases):
    import device

    meta, ins, outs = cases["group_quantize_moe"]
    x, splits, kw = _cuda(ins["x"]), _cuda(ins["splits"]), _quantize_options(meta)
    for swizzled in (True, False):
        r = device.group_quantize(x, splits, swizzled=swizzled, **kw)
        e = ins["splits"].size
        offsets = r.offsets.cpu().numpy()
        assert offsets.shape == (6, e + 1)
        for row, key in ((0, "row_offsets"), (2, "row_data_offsets"), (3, "row_scale_offsets"),
                         (4, "col_data_offsets"), (5, "col_scale_offsets")):
            assert offsets[row].tobytes() == outs[key].tobytes(), key
        for p in ("row", "col"):
            _assert_flat(f"{p}_data", getattr(r, f"{p}_data"), outs[f"{p}_data"])
            scales = outs[f"{p}_scales" if swizzled else f"{p}_scales_compact"]
            _assert_flat(f"{p}_scales swizzled={swizzled}", getattr(r, f"{p}_scales"), scales)
            assert _bytes(getattr(r, f"{p}_amax")) == outs[f"{p}_amax"].tobytes(), f"{p}_amax"


@pytest.mark.cuda
@needs_cuda
def test_swizzle_case(cases):
    import device

    _, ins, outs = cases["swizzle_130x7"]
    assert _bytes(device.swizzle_scales(_cuda(ins["compact"]))) == outs["swizzled"].tobytes()
