import math

import pytest
import torch

from sstq_fl.encoders.maths.frames import HadamardFrame, frame_size, make_frame


@pytest.mark.parametrize("kind", ["hadamard", "haar"])
@pytest.mark.parametrize("d", [1, 6, 37, 100])
def test_orthonormal_columns_and_rows(kind, d):
    fr = make_frame(kind, d, seed=3)
    eye = torch.eye(d, dtype=torch.float64)
    q = fr.coef(eye) / math.sqrt(fr.N)  # columns of Q as rows: [d, N]
    assert torch.allclose(q @ q.T, eye, atol=1e-10)
    j = torch.arange(fr.N)
    assert torch.allclose(fr.rows(j), q.T, atol=1e-12)
    assert torch.allclose(fr.row_sq_norms(), (q.T**2).sum(1), atol=1e-12)
    s = torch.randn(2, fr.N, dtype=torch.float64)
    assert torch.allclose(fr.synth_(s.clone()), s @ q.T / math.sqrt(fr.N), atol=1e-10)


def test_frame_size_rule_and_public_rebuild():
    assert frame_size(25450) == 65536 and frame_size(98666) == 262144
    a, b = HadamardFrame(50, 128, seed=9), HadamardFrame(50, 128, seed=9)
    assert torch.equal(a.cols, b.cols) and torch.equal(a.col_signs, b.col_signs)
    assert not torch.equal(a.cols, HadamardFrame(50, 128, seed=10).cols)


def test_invalid_frames():
    with pytest.raises(ValueError, match="N > d"):
        HadamardFrame(8, 8)
    with pytest.raises(ValueError, match="rho"):
        frame_size(10, 1.0)
    with pytest.raises(ValueError, match="unknown frame kind"):
        make_frame("dct", 10)


def test_kashin_rows_are_chunked_for_the_cpu_cache_only():
    """On the CPU a chunk's ``[rows, N]`` buffer is 16 MiB (cache-sized); on any other device 1 GiB, so a 1,000-client
    cohort runs in one batch (a ``meta`` frame stands in for a GPU one: the chunk depends only on the device type)."""
    from sstq_fl.encoders.maths.frames import CHUNK_BYTES, GPU_CHUNK_BYTES

    cpu, gpu = HadamardFrame(25450, 65536, 0), HadamardFrame(25450, 65536, 0, device="meta")
    assert cpu.row_chunk(torch.float32) == CHUNK_BYTES // (65536 * 4) == 64
    assert cpu.row_chunk(torch.float64) == 32
    assert gpu.row_chunk(torch.float32) == GPU_CHUNK_BYTES // (65536 * 4) == 4096
