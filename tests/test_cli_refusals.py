"""Each input that once gave a traceback, was accepted silently, mixed two kinds of results or hung: now a one-line
error on stderr (exit 2), with nothing written."""

import json
import socket
import time

import numpy as np
import pytest

from sstq_fl.cli import main

from .test_cli_inputs import LSQ, run_args


def refused(capsys, argv, *words):
    """Run ``argv`` in-process; assert exit 2 and one ``sstq-fl`` error line holding ``words``; return it."""
    try:
        rc = main(argv)
    except SystemExit as exc:  # an argument error
        rc = exc.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("sstq-fl") and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ------------------------------------------------------------------ tracebacks once
def test_a_huge_frame_is_refused_against_the_memory_limit(tmp_path, capsys):
    out = tmp_path / "r"
    refused(capsys, run_args(out, encoder="sstq-flat:rho=1e9"), "rho = 1e+09", "64 GiB", "limit")
    assert not out.exists()


def test_a_huge_dimension_is_refused_against_the_memory_limit(tmp_path, capsys):
    out = tmp_path / "r"
    refused(capsys, ["run", "--task", "lsq", "--dim", "100000000000", "--out", str(out)], "lsq data", "limit")
    assert not out.exists()


def test_the_memory_limit_is_stated_and_can_be_set(monkeypatch):
    from sstq_fl.checks import check_array

    check_array("a vector", 1 << 20)
    monkeypatch.setenv("SSTQ_FL_MAX_ARRAY_BYTES", "1000")
    with pytest.raises(ValueError, match=r"a vector would need 8 MiB, beyond the 1e\+03 B limit"):
        check_array("a vector", 1 << 20)


def _fmnist_folder(path, bad_label):
    """A tiny Fashion-MNIST folder (20 train, 10 test images) whose train labels hold ``bad_label``."""
    from sstq_fl.data.idx import FMNIST_FILES, write_idx

    path.mkdir()
    labels = np.arange(20) % 10
    labels[7] = bad_label
    write_idx(path / FMNIST_FILES["train_images"], np.zeros((20, 28, 28)))
    write_idx(path / FMNIST_FILES["train_labels"], labels)
    write_idx(path / FMNIST_FILES["test_images"], np.zeros((10, 28, 28)))
    write_idx(path / FMNIST_FILES["test_labels"], np.arange(10))
    return path


def test_a_label_out_of_range_is_refused_naming_the_file(tmp_path, capsys):
    data, out = _fmnist_folder(tmp_path / "fm", 200), tmp_path / "r"
    refused(capsys, ["run", "--data-dir", str(data), "--clients", "2", "--rounds", "1", "--out", str(out)],
            "train-labels-idx1-ubyte.gz", "label 200 at record 7", "0..9")
    assert not out.exists()


def test_a_malformed_device_is_refused(tmp_path, capsys):
    out = tmp_path / "g"
    refused(capsys, ["gen", "dp-mepf", "--epsilon", "1", "--device", "cuda:abc", "--out", str(out)], "cuda:abc")
    assert not out.exists()


def test_a_huge_plan_epsilon_is_refused_as_the_help_says(capsys):
    refused(capsys, ["privacy", "plan", "--ldp-epsilon", "1e308", "--rounds", "10"], "--ldp-epsilon", "1e300")
    assert main(["privacy", "plan", "--ldp-epsilon", "1e300", "--rounds", "10", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["basic"] == pytest.approx(1e301) and rep["advanced"] is None  # inf, written as null


@pytest.mark.parametrize("cmd", [["bench", "encode-speed"], ["bench", "fwht"]])
def test_cuda_without_cuda_is_refused(cmd, tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    refused(capsys, [*cmd, "--device", "cuda", "--out", str(tmp_path / "b.json")], "cuda", "not available")
    assert not (tmp_path / "b.json").exists()


def test_a_huge_transform_is_refused(tmp_path, capsys):
    refused(capsys, ["bench", "fwht", "--sizes", "1099511627776", "--out", str(tmp_path / "f.json")], "limit")
    refused(capsys, ["bench", "fwht", "--sizes", "1000", "--out", str(tmp_path / "f.json")], "powers of two")
    assert not (tmp_path / "f.json").exists()


# ------------------------------------------------------------------ accepted silently once
@pytest.mark.parametrize("value", ["inf", "nan", "0", "-1"])
def test_the_learning_rate_must_be_finite_and_positive(value, tmp_path, capsys):
    out = tmp_path / "r"
    refused(capsys, run_args(out, "--lr", value), "lr must be a finite positive number")
    assert not out.exists()


def _mnist_idx(path, n=50):
    """A tiny MNIST IDX folder of ``n`` records (5 of each digit)."""
    from sstq_fl.data.idx import write_idx

    path.mkdir()
    write_idx(path / "train-images-idx3-ubyte", np.zeros((n, 28, 28)))
    write_idx(path / "train-labels-idx1-ubyte", np.arange(n) % 10)
    return path


def test_more_records_than_exist_are_refused_naming_the_number(tmp_path, capsys):
    from sstq_fl.data.workload import WorkloadData

    data = _mnist_idx(tmp_path / "mnist")
    wd = WorkloadData("mnist-subset", 2, records=100_000_000, data_path=str(data))
    with pytest.raises(ValueError, match=r"records 100000000 is more than the 40 private records .*at most 40"):
        _ = wd.n_decl
    assert WorkloadData("mnist-subset", 2, records=40, data_path=str(data)).n_decl == 40


@pytest.mark.parametrize("value", ["", ";;", " "])
def test_an_empty_encoder_list_is_refused(value, tmp_path, capsys):
    out = tmp_path / "c"
    refused(capsys, ["compare", *LSQ, "--rounds", "1", "--encoders", value, "--out", str(out)], "--encoders")
    assert not out.exists()


# ------------------------------------------------------------------ a folder knows its kind
def test_a_run_folder_and_a_comparison_folder_do_not_mix(tmp_path, capsys):
    run, cmp = tmp_path / "r", tmp_path / "c"
    assert main(run_args(run, rounds=1)) == 0
    assert main(["compare", *LSQ, "--rounds", "1", "--encoders", "clean sqkr", "--out", str(cmp)]) == 0
    capsys.readouterr()
    before = {p: sorted(x.name for x in p.rglob("*")) for p in (run, cmp)}
    refused(capsys, ["compare", *LSQ, "--rounds", "1", "--encoders", "clean", "--out", str(run)],
            "holds a training run (sstq-fl run)", "not a comparison")
    refused(capsys, run_args(cmp, rounds=1), "holds a comparison (sstq-fl compare)", "not a training run")
    refused(capsys, run_args(cmp, "--force", rounds=1), "holds a comparison")
    assert before == {p: sorted(x.name for x in p.rglob("*")) for p in (run, cmp)}


def test_a_sweep_refuses_a_run_folder_and_a_run_a_sweep_folder(tmp_path, capsys):
    run, exp = tmp_path / "r", tmp_path / "e.toml"
    assert main(run_args(run, rounds=1)) == 0
    capsys.readouterr()
    exp.write_text('task = "lsq"\ndim = 8\nn = 100\nclients = 5\nbatch = 10\nrounds = 1\nencoder = ["clean"]\n')
    refused(capsys, ["sweep", str(exp), "--executor", "local", "--out", str(run)], "holds a training run",
            "not a sweep")
    sweep = tmp_path / "s"
    (sweep / "cells").mkdir(parents=True)
    refused(capsys, run_args(sweep), "holds a sweep")


def test_an_interrupted_comparison_is_known_by_its_marker(tmp_path):
    from sstq_fl.io import KIND_FILE, folder_kind

    (tmp_path / "c" / "clean").mkdir(parents=True)
    (tmp_path / "c" / KIND_FILE).write_text('{"kind": "comparison"}')
    assert folder_kind(tmp_path / "c") == "comparison" and folder_kind(tmp_path / "c" / "clean") is None


# ------------------------------------------------------------------ coin=public
@pytest.mark.parametrize("spec", ["privunit-mrc:coin=public", "sqkr:coin=public"])
def test_a_public_coin_encoder_is_refused_before_anything_is_written(spec, tmp_path, capsys):
    out = tmp_path / "r"
    refused(capsys, run_args(out, encoder=spec), "coin=public", "training does not supply")
    assert not out.exists()
    assert main(run_args(out, encoder=spec)) == 2 and not out.exists()  # the same command: the same refusal


# ------------------------------------------------------------------ a Ray address that does not answer
def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_ray_address_that_does_not_answer_is_refused_quickly(tmp_path, capsys):
    out, t0 = tmp_path / "r", time.perf_counter()
    refused(capsys, run_args(out, "--engine", "flower", "--ray-address", f"127.0.0.1:{_closed_port()}"),
            "--ray-address", "nothing answers")
    assert time.perf_counter() - t0 < 30 and not out.exists()
    refused(capsys, run_args(out, "--engine", "flower", "--ray-address", "nowhere"), "host:port")


def test_the_ray_probe_waits_at_most_its_timeout(monkeypatch):
    from sstq_fl import checks

    def silent(address, timeout):
        time.sleep(min(timeout, 0.05))
        raise TimeoutError("timed out")

    monkeypatch.setattr(checks.socket, "create_connection", silent)
    with pytest.raises(ValueError, match="within 5 s"):
        checks.probe_ray("10.255.255.1:6379")
    checks.probe_ray("auto")  # Ray resolves it
