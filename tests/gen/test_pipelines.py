"""A pipeline is one registration: the ``gen`` command, the Flower workload and its run-config keys follow."""

from dataclasses import dataclass

import pytest

from sstq_fl.gen.config import SHARED_KEYS, PipelineConfig
from sstq_fl.gen.pipelines import BUILTINS, PIPELINES, Pipeline, register_pipeline
from sstq_fl.options import option


@dataclass(frozen=True)
class ToyConfig(PipelineConfig):
    rounds: int | None = option(None, help="toy rounds (default: the profile's)", low=1, unset=0)

    CACHE_NAME = "toy"
    PROFILE_DEFAULTS = {"cpu": {"records": 100, "rounds": 2}, "full": {"records": 0, "rounds": 20}}


def _run(cfg, out, force=False):
    return {"cfg": cfg, "out": out, "force": force}


TOY = Pipeline("toy", "toy-", ToyConfig, _run, lambda m: "toy ran", title="Toy", shared=SHARED_KEYS, help="a toy")


@pytest.fixture
def toy():
    state = PIPELINES.snapshot()
    register_pipeline(TOY)
    yield TOY
    PIPELINES.restore(state)


def test_the_builtins_register_themselves():
    assert PIPELINES.names() == ["dp-mepf", "dp-vqg", "straightdp"] and len(BUILTINS) == 3
    assert {p.prefix for _, p in PIPELINES.items()} == {"mepf-", "vqg-", "sdp-"}


def test_a_registered_pipeline_gets_a_command_and_a_workload(toy, capsys):
    from sstq_fl.cli import build_parser, main
    from sstq_fl.flower.run_config import workload_from_run_config, workloads

    ns = build_parser().parse_args(["gen", "toy", "--epsilon", "2", "--rounds", "3", "--out", "x"])
    assert ns.rounds == 3 and ns.clients == 4
    assert main(["gen", "toy", "--epsilon", "2", "--out", "x"]) == 0 and "toy ran" in capsys.readouterr().out
    assert "toy" in workloads()
    cfg, run = workload_from_run_config({"workload": "toy", "epsilon": 2.0, "toy-rounds": 0, "toy-records": -1})
    assert run is _run and cfg.rounds is None and cfg.records == 0 and cfg.engine == "flower" and cfg.epsilon == 2.0
    assert cfg.resolved("rounds") == 2 and cfg.cache_dir.endswith("toy")
    with pytest.raises(ValueError, match="unknown key 'toy-nope'"):
        workload_from_run_config({"workload": "toy", "toy-nope": 1})


def test_a_taken_name_is_refused(toy):
    with pytest.raises(ValueError, match="already registered"):
        register_pipeline(Pipeline("toy", "t2-", ToyConfig, _run, str, title="T", shared=(), help="again"))
