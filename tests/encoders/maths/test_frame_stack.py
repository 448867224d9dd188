"""The stacked randomized Hadamard frames (``hadamard2``/``hadamard3``, ``hd2``/``hd3``): the whole Frame interface."""

import math

import pytest
import torch

from sstq_fl.encoders.maths.frames import (
    FRAME_KINDS,
    HadamardStack3Frame,
    HadamardStackFrame,
    HD3StackFrame,
    HDStackFrame,
    make_frame,
)

KINDS = ["hadamard2", "hadamard3", "hd2", "hd3"]


def _explicit(fr):
    """``Q`` (``[N, d]``, float64) from the analysis of the identity."""
    return (fr.coef(torch.eye(fr.d, dtype=torch.float64)) / math.sqrt(fr.N)).T


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("d", [1, 6, 37, 100])
def test_orthonormal_columns(kind, d):
    q = _explicit(make_frame(kind, d, seed=3))
    assert torch.allclose(q.T @ q, torch.eye(d, dtype=torch.float64), atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
def test_coef_and_synth_are_adjoint(kind):
    fr = make_frame(kind, 37, seed=1)
    gen = torch.Generator().manual_seed(0)
    r = torch.randn(3, fr.d, dtype=torch.float64, generator=gen)
    s = torch.randn(3, fr.N, dtype=torch.float64, generator=gen)
    # <√N Q r, s> = <r, √N Qᵀ s> = N <r, synth_(s)>
    lhs = (fr.coef(r) * s).sum(1)
    rhs = fr.N * (r * fr.synth_(s.clone())).sum(1)
    assert torch.allclose(lhs, rhs, atol=1e-9)
    q = _explicit(fr)
    assert torch.allclose(fr.synth_(s.clone()), s @ q / math.sqrt(fr.N), atol=1e-12)
    # synthesis inverts analysis (Qᵀ Q = I), also through the out= workspaces, in float32 too
    out_c, out_r = torch.empty(3, fr.N, dtype=torch.float64), torch.empty(3, fr.d, dtype=torch.float64)
    assert torch.allclose(fr.synth_(fr.coef(r, out_c), out_r), r, atol=1e-12)
    assert torch.allclose(fr.synth_(fr.coef(r.float())).double(), r, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("d", [6, 100])
def test_rows_and_row_norms_match_the_matrix(kind, d):
    fr = make_frame(kind, d, seed=5)
    q = _explicit(fr)
    j = torch.arange(fr.N)
    assert torch.allclose(fr.rows(j), q, atol=1e-12)
    idx = torch.tensor([[3, 0], [3, fr.N - 1]])
    assert fr.rows(idx).shape == (2, 2, d) and torch.allclose(fr.rows(idx), q[idx], atol=1e-12)
    norms = fr.row_sq_norms()
    assert norms.dtype == torch.float64 and torch.allclose(norms, (q**2).sum(1), atol=1e-12)
    assert math.isclose(float(norms.sum()), d, rel_tol=1e-12)
    assert math.isclose(fr.max_row_norm(), float((q**2).sum(1).max().sqrt()), rel_tol=1e-12)
    norms[0] = -1.0  # the cached norms are not exposed
    assert float(fr.row_sq_norms()[0]) >= 0


def test_public_rebuild_and_kinds():
    assert FRAME_KINDS["hadamard2"] is HadamardStackFrame and FRAME_KINDS["hadamard3"] is HadamardStack3Frame
    a, b = make_frame("hadamard2", 50, seed=9), make_frame("hadamard2", 50, seed=9)
    x = torch.randn(2, 50, dtype=torch.float64)
    assert torch.equal(a.coef(x), b.coef(x)) and torch.equal(a.cols, b.cols)
    assert not torch.allclose(a.coef(x), make_frame("hadamard2", 50, seed=10).coef(x))
    assert not torch.allclose(a.coef(x), make_frame("hadamard3", 50, seed=9).coef(x))
    assert a.describe()["kind"] == "hadamard2"
    assert FRAME_KINDS["hd2"] is HDStackFrame and FRAME_KINDS["hd3"] is HD3StackFrame
    hd = make_frame("hd3", 50, seed=9)
    assert not hd.perms and not torch.allclose(hd.coef(x), make_frame("hadamard3", 50, seed=9).coef(x))


def test_hd3_is_the_product_of_its_stages():
    """``hd3``'s ``Q`` is ``(H D_3)(H D_2)(H D_1)/N^{3/2}`` restricted to its columns, built here densely."""
    from sstq_fl.encoders.maths.fwht import hadamard_matrix

    fr = make_frame("hd3", 20, seed=4)
    h = hadamard_matrix(fr.N, torch.float64)
    signs = [torch.from_numpy(sg.astype("float64")) for sg in fr._signs_np]
    m = torch.eye(fr.N, dtype=torch.float64)
    for sg in signs:
        m = h @ torch.diag(sg) @ m / math.sqrt(fr.N)
    q = _explicit(fr)
    assert torch.allclose(q, m[:, fr.cols], atol=1e-12)


def test_invalid():
    with pytest.raises(ValueError, match="power of two"):
        HadamardStackFrame(10, 24)
    with pytest.raises(ValueError, match="N > d"):
        HadamardStackFrame(8, 8)
