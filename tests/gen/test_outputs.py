"""The held-out evaluation of a pipeline's samples: what metrics.json may depend on, the references and their
cache, the probe options and the private diagnostics kept apart."""

import json

import numpy as np
import pytest
import torch

from sstq_fl.config.generative import PROBE_NAMES, PipelineConfig
from sstq_fl.data.mnist import PrivateSplit
from sstq_fl.data.workload import WorkloadData, synthetic_records
from sstq_fl.gen import evaluation as ev
from sstq_fl.gen import heldout
from sstq_fl.gen.heldout import ProbeProtocol, filled_indices, heldout_split
from sstq_fl.gen.outputs import PRIVATE_FILE, RUN_FILES, SampleGrid, common_metrics, evaluate_samples

from .test_evaluation import blobs


def _cfg(tmp_path, name: str = "cache", **kw) -> PipelineConfig:
    base = dict(eval_samples=100, probe_epochs=1, evaluator_epochs=1, cache_dir=str(tmp_path / name))
    return PipelineConfig(**{**base, **kw})


def _split() -> PrivateSplit:
    tx, ty = synthetic_records(200, 7)
    x, y = synthetic_records(300, 5)
    return PrivateSplit(x, y, tx, ty)


def _evaluate(tmp_path, data: WorkloadData, split: PrivateSplit, cfg: PipelineConfig, out: str) -> dict:
    sx, sy = synthetic_records(100, 11)  # drawn like the members and priv_test: the audit is not saturated
    folder = tmp_path / out
    folder.mkdir()
    return evaluate_samples(torch.as_tensor(sx), torch.as_tensor(sy), data, split, folder, SampleGrid("t", 1.0, ""), cfg)


def test_heldout_split_halves_priv_test_by_class_deterministically():
    x, y = blobs(205, 3)
    a, b = heldout_split(x, y), heldout_split(x, y)
    assert np.array_equal(a.fit_x, b.fit_x) and a.digest == b.digest
    assert len(a.fit_y) + len(a.score_y) == 205
    counts, fit = np.bincount(y, minlength=10), np.bincount(a.fit_y, minlength=10)
    assert fit.tolist() == (counts // 2).tolist()
    both = np.concatenate([a.fit_x, a.score_x]).reshape(205, -1)
    assert len(np.unique(both, axis=0)) == 205  # disjoint halves covering priv_test


def test_filled_indices_take_exactly_n_as_balanced_as_the_classes_allow():
    y = np.repeat(np.arange(10), [100, 113, 99, 103, 98, 86, 101, 107, 94, 98])
    counts = np.bincount(y)
    idx = filled_indices(y, 990, seed=0)
    per = np.bincount(y[idx], minlength=10)
    short = per < counts
    assert len(np.unique(idx)) == 990 and per[short].max() - per[short].min() <= 1
    assert (counts[~short] <= per[short].min()).all() and per[5] == 86
    assert np.array_equal(idx, filled_indices(y, 990, seed=0)) and len(filled_indices(y, 5000)) == len(y)
    assert np.bincount(y[filled_indices(y, 500)], minlength=10).tolist() == [50] * 10


def test_metrics_do_not_depend_on_private_training_records(tmp_path):
    """Neighbouring private data sets (one record added to the released records, one priv_train record
    replaced) with the same mechanism output give byte-identical evaluations for metrics.json, even with
    separate caches; the old protocol (evaluator trained on priv_train, membership AUC on the members) moved."""
    split_a, split_b = _split(), _split()
    split_b.train_x[0] = 1 - split_b.train_x[0]
    data_a = WorkloadData(dataset="synthetic", clients=2, records=300, seed=0)
    data_b = WorkloadData(dataset="synthetic", clients=2, records=301, seed=0)
    a = _evaluate(tmp_path, data_a, split_a, _cfg(tmp_path, "ca"), "a")
    b = _evaluate(tmp_path, data_b, split_b, _cfg(tmp_path, "cb"), "b")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert "membership_audit" not in json.dumps(a)
    diag_a, diag_b = (json.loads((tmp_path / d / PRIVATE_FILE).read_text()) for d in "ab")
    assert diag_a["membership_audit"]["auc"] != diag_b["membership_audit"]["auc"]
    assert "must not be published" in diag_a["note"]
    old = [ev.train_evaluator(s.train_x, s.train_y, epochs=1, seed=0).sha256 for s in (split_a, split_b)]
    assert old[0] != old[1]


def test_evaluation_records_references_probe_and_seeds(tmp_path):
    data = WorkloadData(dataset="synthetic", clients=2, records=300, seed=0)
    cfg = _cfg(tmp_path, probe="logreg", probe_seeds=2, seed=4)
    m = _evaluate(tmp_path, data, _split(), cfg, "run")
    assert m["probe"] == {"probe": "logreg", "protocol": "cpu", "epochs": 1, "seeds": [4, 5], "train_samples": 100}
    assert len(m["downstream_accuracy_seeds"]) == 2 == len(m["probe_ceiling_seeds"])
    assert m["downstream_accuracy"] == pytest.approx(np.mean(m["downstream_accuracy_seeds"]))
    assert m["probe_ceiling"] > 0.3 and m["fd_floor"] >= 0 and 0 <= m["evaluator_accuracy"] <= 1
    assert m["probe_ceiling_train_samples"] == 100 and m["heldout"]["eval_score"] == 100
    top = common_metrics(cfg, data, {}, m, [], top=("downstream_accuracy", "domain_fd"))
    assert {"probe_ceiling", "fd_floor", "evaluator_accuracy", "downstream_accuracy_seeds"} <= set(top)
    assert "probe_ceiling" not in top["evaluation"] and PRIVATE_FILE in RUN_FILES


def test_references_are_cached_per_protocol(tmp_path, monkeypatch):
    data = WorkloadData(dataset="synthetic", clients=2, records=300, seed=0)
    first = _evaluate(tmp_path, data, _split(), _cfg(tmp_path), "a")
    calls = []
    real = heldout.domain_fd
    monkeypatch.setattr(heldout, "domain_fd", lambda *a: calls.append(1) or real(*a))
    again = _evaluate(tmp_path, data, _split(), _cfg(tmp_path), "b")
    assert calls == [] and again["probe_ceiling"] == first["probe_ceiling"]
    papers = _evaluate(tmp_path, data, _split(), _cfg(tmp_path, probe_protocol="papers"), "c")
    assert calls == [1] and papers["probe"]["epochs"] == heldout.PAPERS_EPOCHS
    assert len(list((tmp_path / "cache" / "references").iterdir())) == 2


def test_the_private_ceiling_goes_to_the_private_file_only(tmp_path):
    data = WorkloadData(dataset="synthetic", clients=2, records=300, seed=0)
    m = _evaluate(tmp_path, data, _split(), _cfg(tmp_path, private_ceiling=True, probe="logreg"), "run")
    diag = json.loads((tmp_path / "run" / PRIVATE_FILE).read_text())
    ceiling = diag["priv_train_ceiling"]
    assert ceiling["train_records"] == 300 and ceiling["probe"]["epochs"] == 10 and ceiling["accuracy"] > 0.8
    assert "priv_train" not in json.dumps(m)


def test_probe_options_are_checked():
    assert sorted(PROBE_NAMES) == sorted(ev.PROBES)
    with pytest.raises(ValueError, match="probe"):
        PipelineConfig(probe="resnet")
    with pytest.raises(ValueError, match="probe-seeds"):
        PipelineConfig(probe_seeds=0)
    with pytest.raises(ValueError, match="probe-protocol|probe_protocol"):
        PipelineConfig(probe_protocol="paper")
    assert ProbeProtocol.of(PipelineConfig(probe_epochs=3, seed=2, probe_seeds=3)).seeds == (2, 3, 4)
