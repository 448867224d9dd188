"""Experiment files: keys are run's options, lists make the grid, errors name the file, line and key."""

import json

import pytest

from sstq_fl.experiments.spec import load_experiment, parse_experiment, single_values

GRID = b"""# a grid
task = "lsq"
clients = 10
rounds = 2
sampling_rate = 1.0
encoder = ["sstq-flat:b=4", "clean"]
epsilon = [1, 3]
seed = [0, 1, 2]

[experiment]
title = "tiny"
"""


def test_the_grid_is_the_product_of_the_list_valued_keys_in_file_order() -> None:
    exp = parse_experiment(GRID, "tiny.toml")
    cells = exp.cells()
    assert len(cells) == 2 * 2 * 3 and exp.title == "tiny"
    assert [c.values for c in cells[:3]] == [{"encoder": "sstq-flat:b=4", "epsilon": 1.0, "seed": s} for s in range(3)]
    assert cells[0].cfg.task == "lsq" and cells[0].cfg.clients == 10 and cells[0].cfg.epsilon == 1.0
    assert len({c.name for c in cells}) == 12 and cells[0].name == "encoder-sstq-flat_b-4__epsilon-1__seed-0"


def test_overrides_replace_axes_and_fixed_values() -> None:
    cells = parse_experiment(GRID, "tiny.toml").cells(seed=7, rounds=5)
    assert len(cells) == 4 and {c.cfg.seed for c in cells} == {7} and {c.cfg.rounds for c in cells} == {5}
    cells = parse_experiment(GRID, "tiny.toml").cells(clients=[4, 8], seed=0)
    assert len(cells) == 8 and [c.cfg.clients for c in cells[:2]] == [4, 8] and cells[-1].values["clients"] == 8


def test_provenance_is_the_file_its_sha256_and_title(tmp_path) -> None:
    f = tmp_path / "e.toml"
    f.write_bytes(GRID)
    import hashlib

    exp = load_experiment(f)
    assert exp.provenance() == {"file": str(f), "sha256": hashlib.sha256(GRID).hexdigest(), "title": "tiny"}


@pytest.mark.parametrize("text, message", [
    (b'task = "lsq"\nepsilonn = 3\n', r"^e\.toml:2: unknown key 'epsilonn'"),
    (b'task = "lsq"\n\nclients = "ten"\n', r"^e\.toml:3: clients must be an integer, got 'ten'"),
    (b'clients = [10, 0]\n', r"^e\.toml:1: clients must be a positive integer, got 0"),
    (b'partition = "nope"\n', r"^e\.toml:1: partition must be one of"),
    (b'seed = []\n', r"^e\.toml:1: seed is an empty list"),
    (b'task = \n', r"^e\.toml: not valid TOML"),
    (b'[experiment]\nname = "x"\n', r"^e\.toml:2: unknown key 'name' in \[experiment\]"),
    (b'randomness = "secure"\ndiagnostics = true\n', r"^e\.toml: the cell its values: diagnostics"),
])
def test_bad_files_are_one_line_errors_naming_file_line_and_key(text: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        parse_experiment(text, "e.toml").cells()
    assert "\n" not in str(err.value)


def test_a_missing_file_is_a_one_line_error(tmp_path) -> None:
    with pytest.raises(ValueError, match="cannot read experiment file"):
        load_experiment(tmp_path / "none.toml")


def test_single_values_refuse_lists_except_where_allowed() -> None:
    exp = parse_experiment(GRID, "tiny.toml")
    with pytest.raises(ValueError, match="tiny.toml: encoder is a list: one run takes one value per key"):
        single_values(exp)
    with pytest.raises(ValueError, match="epsilon is a list"):
        single_values(exp, allow_lists=("encoder",))


def test_task_params_table_becomes_canonical_json() -> None:
    exp = parse_experiment(b'task = "lsq"\n[task_params]\nwidth = 8\nact = "relu"\n', "e.toml")
    assert exp.task_params == {"width": 8, "act": "relu"}
    assert single_values(exp)["task_params"] == json.dumps({"act": "relu", "width": 8})


def test_a_bad_encoder_spec_or_a_toml_date_is_refused_before_any_cell_runs() -> None:
    with pytest.raises(ValueError, match=r"^e\.toml: encoder 'sstq-flat:q=2': .*no parameter"):
        parse_experiment(b'encoder = ["clean", "sstq-flat:q=2"]\n', "e.toml").cells()
    with pytest.raises(ValueError, match=r"^e\.toml: encoder 'nope'"):
        parse_experiment(b'encoder = "nope"\n', "e.toml").cells()
    with pytest.raises(ValueError, match=r"^e\.toml: \[task_params\] holds a value"):
        parse_experiment(b'task = "lsq"\n[task_params]\nwhen = 2026-12-01\n', "e.toml").cells()


def test_command_line_task_params_override_the_table_and_unset_markers_read_as_none() -> None:
    exp = parse_experiment(b'task = "lsq"\nbudget-epsilon = 0.0\n[task_params]\nwidth = 8\n', "e.toml")
    assert exp.fixed["budget_epsilon"] is None
    assert json.loads(exp.cells(task_params='{"width": 4}')[0].cfg.task_params) == {"width": 4}
