"""ad.load of headers whose empty tensors have sizes beyond int64 (found by
review of pyautodiff/io.py): parse_header checked only the byte count, which
is 0 for any shape with a 0 in it, so [0, 2**64] reached the native call and
escaped as a plain OverflowError (F16: a numpy ValueError) instead of
ad.InvalidArgumentError."""
import json

import pytest

import pyautodiff as ad
from pyautodiff import io as adio


def write(path, header):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text)


@pytest.mark.parametrize("dtype", ["F32", "F64", "U8", "F16", "BF16"])
@pytest.mark.parametrize("shape", [[0, 2 ** 64], [0, 2 ** 63], [2 ** 62, 0, 2 ** 62],
                                   [2 ** 40, 0, 2 ** 40]])
def test_huge_sizes_in_an_empty_tensor_are_invalid(tmp_path, dtype, shape):
    p = tmp_path / "x.safetensors"
    write(p, {"x": {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]}})
    with pytest.raises(ad.InvalidArgumentError, match="'x'.*too many elements"):
        ad.load(p)
    with pytest.raises(ad.InvalidArgumentError, match="too many elements"):
        adio.parse_header(p.read_bytes())


@pytest.mark.parametrize("dtype", ["F32", "F16"])
def test_large_but_valid_empty_shapes_still_load(tmp_path, dtype):
    p = tmp_path / "x.safetensors"
    write(p, {"x": {"dtype": dtype, "shape": [0, 2 ** 20, 2 ** 20], "data_offsets": [0, 0]}})
    t = ad.load(p)["x"]
    assert t.shape == (0, 2 ** 20, 2 ** 20) and t.dtype == ad.float32
