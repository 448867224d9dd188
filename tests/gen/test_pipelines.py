"""A pipeline is one registration: the ``gen`` command, the Flower workload and its run-config keys follow."""

from dataclasses import dataclass

import pytest

from sstq_fl.config.catalog import PIPELINE_CONFIGS
from sstq_fl.config.declare import option
from sstq_fl.config.generative import PipelineConfig
from sstq_fl.gen.pipelines import BUILTINS, PIPELINES, Pipeline, register_pipeline, workloads


@dataclass(frozen=True)
class ToyConfig(PipelineConfig):
    rounds: int | None = option(None, help="toy rounds (default: the profile's)", low=1, unset=0)

    WORKLOAD = "toy"
    TITLE = "Toy"
    PREFIX = "toy-"
    CACHE_NAME = "toy"
    PROFILE_DEFAULTS = {"cpu": {"records": 100, "rounds": 2}, "full": {"records": 0, "rounds": 20}}


def _run(cfg, out, force=False):
    return {"cfg": cfg, "out": out, "force": force}


TOY = Pipeline(ToyConfig, _run, lambda m: "toy ran", help="a toy")


@pytest.fixture
def toy():
    state = PIPELINES.snapshot()
    register_pipeline(TOY)
    yield TOY
    PIPELINES.restore(state)


def test_the_builtins_register_themselves():
    assert PIPELINES.names() == ["dp-mepf", "dp-vqg", "straightdp"] and len(BUILTINS) == 3
    assert {p.prefix for _, p in PIPELINES.items()} == {"mepf-", "vqg-", "sdp-"}
    assert [p.config for _, p in PIPELINES.items()] == list(PIPELINE_CONFIGS)  # the catalog lists every built-in


def test_a_registered_pipeline_gets_a_command_and_a_workload(toy, capsys):
    from sstq_fl.cli import build_parser, main
    from sstq_fl.config.flower import workload_from_run_config

    ns = build_parser().parse_args(["gen", "toy", "--epsilon", "2", "--rounds", "3", "--out", "x"])
    assert ns.rounds == 3 and ns.clients == 4
    assert main(["gen", "toy", "--epsilon", "2", "--out", "x"]) == 0 and "toy ran" in capsys.readouterr().out
    assert "toy" in workloads()
    rc = {"workload": "toy", "epsilon": 9.0, "toy-epsilon": 2.0, "toy-rounds": 0, "toy-records": -1}
    cfg = workload_from_run_config(rc, PIPELINES["toy"].config)
    assert cfg.rounds is None and cfg.records == 0 and cfg.engine == "flower" and cfg.epsilon == 2.0
    assert cfg.resolved("rounds") == 2 and cfg.cache_dir.endswith("toy")
    with pytest.raises(ValueError, match="unknown key 'toy-nope'"):
        workload_from_run_config({"workload": "toy", "toy-nope": 1}, ToyConfig)


def test_a_taken_name_is_refused(toy):
    with pytest.raises(ValueError, match="already registered"):
        register_pipeline(Pipeline(ToyConfig, _run, str, help="again"))
    with pytest.raises(ValueError, match="PipelineConfig declares no WORKLOAD name or run-config PREFIX"):
        register_pipeline(Pipeline(PipelineConfig, _run, str, help="nameless"))
