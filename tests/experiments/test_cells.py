"""Explicit cells and exclusions in experiment files: ``[[cell]]`` tables merged over the file's values (a list
inside a cell: a product within it), ``[[exclude]]`` tables dropping what they match, one-line errors naming
the table, stable folder names; and the trust table and figure built from small synthetic run folders."""

import csv
import json
import re
from dataclasses import asdict
from pathlib import Path

import pytest

from sstq_fl.experiments.spec import parse_experiment, single_values

BASE = 'task = "lsq"\ndim = 4\nn = 20\nclients = 2\nrounds = 2\nbatch = 4\n'

MIXED = (BASE + '''encoder = ["clean", "sqkr"]
trust = ["server", "curator"]
seed = [0, 1]

[[cell]]
trust = "server"

[[cell]]
name = "central DP"
trust = "curator"
central-epsilon = [2.0, 8.0]

[[exclude]]
trust = "curator"
encoder = "sqkr"
''').encode()
"""The issue's grid: encoder × trust, a curator cell with its central ε, and the combination no run takes excluded."""


def _cells(text: str | bytes, **overrides):
    raw = text.encode() if isinstance(text, str) else text
    return parse_experiment(raw, "e.toml").cells(**overrides)


def _refused(text: str, match: str) -> str:
    with pytest.raises(ValueError, match=match) as err:
        _cells(text)
    assert "\n" not in str(err.value)
    return str(err.value)


# ----------------------------------------------------------------------------- parsing
def test_cells_merge_over_the_files_values_and_their_lists_expand_within_the_cell() -> None:
    cells = _cells(BASE + 'lr = 0.5\nseed = [0, 1]\n[[cell]]\nencoder = "sqkr"\nepsilon = [1, 3]\n'
                          '[[cell]]\nencoder = "clean"\nlr = 0.1\n')
    got = [(c.cfg.encoder, c.cfg.epsilon, c.cfg.lr, c.cfg.seed) for c in cells]
    assert got == [("sqkr", 1.0, 0.5, 0), ("sqkr", 1.0, 0.5, 1), ("sqkr", 3.0, 0.5, 0), ("sqkr", 3.0, 0.5, 1),
                   ("clean", 3.0, 0.1, 0), ("clean", 3.0, 0.1, 1)]
    assert {c.cfg.rounds for c in cells} == {2} and cells[0].values == {"encoder": "sqkr", "epsilon": 1.0, "seed": 0}
    assert cells[-1].name == "encoder-clean__lr-0.1__seed-1"  # the cell's own values, then the file's lists


def test_without_cells_the_grid_is_the_product_and_an_empty_cell_is_that_product() -> None:
    plain = BASE + 'encoder = ["clean", "sqkr"]\nseed = [0, 1]\n'
    a, b = _cells(plain), _cells(plain + "[[cell]]\n")
    assert [(c.name, asdict(c.cfg)) for c in a] == [(c.name, asdict(c.cfg)) for c in b] and len(a) == 4


def test_a_cells_name_labels_it_and_cells_stay_identified_by_their_values() -> None:
    cells = _cells(MIXED)
    assert [c.label for c in cells] == [""] * 4 + ["central DP"] * 4
    swapped = MIXED.decode().replace('name = "central DP"', 'name = "renamed"')
    head, first, second = re.split(r"(?=\[\[cell\]\])", swapped.split("[[exclude]]")[0])
    reordered = head + second + first + "[[exclude]]" + swapped.split("[[exclude]]")[1]
    again = _cells(reordered)
    assert {c.name: asdict(c.cfg) for c in again} == {c.name: asdict(c.cfg) for c in cells}  # resume finds each folder


def test_exclusions_drop_matching_cells_from_the_product_and_from_cells() -> None:
    text = BASE + ('encoder = ["clean", "sqkr", "sstq-flat:b=4"]\nepsilon = [1, 3]\n'
                   '[[exclude]]\nencoder = ["clean", "sstq-flat"]\nepsilon = 1\n'  # a list: any of its values
                   '[[exclude]]\ntrust = "server"\nencoder = "sqkr"\nepsilon = 3\n')  # trust: the run's default
    got = [(c.cfg.encoder, c.cfg.epsilon) for c in _cells(text)]
    assert got == [("clean", 3.0), ("sqkr", 1.0), ("sstq-flat:b=4", 3.0)]  # sstq-flat is sstq-flat:b=4 (its default)
    cells = _cells(text + '[[cell]]\n[[cell]]\nencoder = "sqkr"\nepsilon = [3, 5]\n')
    assert [(c.cfg.encoder, c.cfg.epsilon) for c in cells] == got + [("sqkr", 5.0)]


def test_an_exclusion_that_matches_nothing_is_a_one_line_error_naming_it() -> None:
    msg = _refused(BASE + 'encoder = ["clean", "sqkr"]\n\n[[exclude]]\nencoder = "sqrk"\n',
                   r"^e\.toml:9: \[\[exclude\]\] 1 \(encoder=sqrk\) matches no cell")
    assert "drops nothing" in msg


def test_the_same_run_twice_is_a_one_line_error() -> None:
    _refused(BASE + 'lr = 0.2\n[[cell]]\nencoder = "sqkr"\n[[cell]]\nencoder = "sqkr"\nlr = 0.2\n',
             r"^e\.toml:10: the \[\[cell\]\] 2's cell encoder=sqkr, lr=0.2 is the same run as the \[\[cell\]\] 1's cell "
             r"encoder=sqkr: give each run once")


@pytest.mark.parametrize("text, message", [
    (BASE + '[[cell]]\nencoder = "sqkr"\nepsilonn = 3\n', r"^e\.toml:9: \[\[cell\]\] 1: unknown key 'epsilonn'"),
    (BASE + '[[cell]]\n[[cell]]\nclients = 0\n', r"^e\.toml:9: \[\[cell\]\] 2: clients must be a positive integer"),
    (BASE + '[[cell]]\nseed = [1, 1]\n', r"^e\.toml:8: \[\[cell\]\] 1: seed lists 1 twice"),
    (BASE + '[[cell]]\nname = 3\n', r"^e\.toml:8: \[\[cell\]\] 1: name must be a non-empty string"),
    (BASE + '[[cell]]\n[cell.task_params]\nx = 1\n', r"^e\.toml:7: \[\[cell\]\] 1: task_params is a table"),
    (BASE + '[[exclude]]\nname = "x"\n', r"^e\.toml:8: \[\[exclude\]\] 1: unknown key 'name'"),
    (BASE + '[[exclude]]\n', r"^e\.toml:7: \[\[exclude\]\] 1 is empty"),
    (BASE + 'cell = 3\n', r"^e\.toml:7: cell must be an array of tables"),
    (BASE + '[[cell]]\nrandomness = "secure"\ndiagnostics = true\n',
     r"^e\.toml:7: \[\[cell\]\] 1: the cell randomness=secure, diagnostics=True: diagnostics"),
])
def test_a_bad_table_is_a_one_line_error_naming_the_file_line_and_table(text: str, message: str) -> None:
    _refused(text, message)


def test_a_single_run_and_set_refuse_the_tables() -> None:
    from sstq_fl.experiments.cli import parse_overrides

    with pytest.raises(ValueError, match=r"\[\[cell\]\] or \[\[exclude\]\] tables make a grid"):
        single_values(parse_experiment(BASE.encode() + b'[[cell]]\nencoder = "sqkr"\n', "e.toml"))
    with pytest.raises(ValueError, match="not settable"):
        parse_overrides(['cell=[{encoder="sqkr"}]'], "e.toml")


# ----------------------------------------------------------------------------- the mixed trust grid
def test_the_mixed_trust_grid_resolves_to_its_cells() -> None:
    cells = _cells(MIXED)
    got = [(c.cfg.encoder, c.cfg.trust, c.cfg.central_epsilon, c.cfg.seed) for c in cells]
    assert got == [("clean", "server", 0.0, 0), ("clean", "server", 0.0, 1), ("sqkr", "server", 0.0, 0),
                   ("sqkr", "server", 0.0, 1), ("clean", "curator", 2.0, 0), ("clean", "curator", 2.0, 1),
                   ("clean", "curator", 8.0, 0), ("clean", "curator", 8.0, 1)]
    assert cells[4].name == "trust-curator__central-epsilon-2__encoder-clean__seed-0" and len({c.name for c in cells}) == 8
    exp = parse_experiment(MIXED, "e.toml")
    assert exp.grid_size() == 12 and exp.grid_record() == {
        "cell_tables": [{"trust": "server"}, {"name": "central DP", "trust": "curator", "central-epsilon": [2.0, 8.0]}],
        "exclude": [{"trust": "curator", "encoder": "sqkr"}]}


def test_without_the_exclusion_the_cell_that_cannot_run_is_named() -> None:
    text = MIXED.decode().split("[[exclude]]")[0]
    _refused(text, r"^e\.toml:14: \[\[cell\]\] 2 \('central DP'\): the cell trust=curator, central_epsilon=2.0, "
                   r"encoder=sqkr, seed=0: trust=curator: .*not 'sqkr'")


def test_overrides_apply_to_every_cell_and_what_only_they_repeat_runs_once() -> None:
    text = BASE + 'seed = [0, 1]\n[[cell]]\nencoder = "sqkr"\n[[cell]]\nencoder = "sqkr"\nseed = 5\n' \
                  '[[exclude]]\nseed = 1\nencoder = "sqkr"\n'
    assert [c.cfg.seed for c in _cells(text)] == [0, 5]
    assert [c.cfg.seed for c in _cells(text, seed=5)] == [5]  # the exclusion matches nothing only because of --set
    assert [(c.cfg.seed, c.cfg.rounds) for c in _cells(text, rounds=3)] == [(0, 3), (5, 3)]


def test_the_grid_limit_counts_every_cell() -> None:
    from sstq_fl.experiments.sweep_limits import check_grid

    exp = parse_experiment(MIXED, "e.toml")
    with pytest.raises(ValueError, match=r"12 cells before its exclusions \(2 × 2 \+ 2 × 2 × 2\), more than 10"):
        check_grid(exp.path, [a for _, a in exp.shapes()], 10, bool(exp.exclusions))
    check_grid(exp.path, [a for _, a in exp.shapes()], 12)


def test_the_docs_example_is_a_valid_file() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "experiments.md").read_text()
    example = next(b for b in re.findall(r"```toml\n(.*?)```", page, flags=re.S) if "[[exclude]]" in b)
    cells = parse_experiment(example.encode(), "docs.toml").cells()
    assert {c.cfg.trust for c in cells} == {"server", "shuffler", "curator"}


# ----------------------------------------------------------------------------- tables and figures
def _fake_runs(out: Path, text: bytes, seeds_acc=lambda c: 0.0):
    """Each cell's folder with a completed ``metrics.json`` of its config (two rounds): test accuracy set by
    its trust and central ε, a trusted stage's central ε where it has one."""
    exp = parse_experiment(text, "mixed.toml")
    cells, folders = exp.cells(), []
    for c in cells:
        f = out / "cells" / c.name
        f.mkdir(parents=True)
        folders.append(f)
        cfg = c.cfg
        private = cfg.encoder != "clean"
        local = 2 * cfg.epsilon if private else None
        central = {"shuffler": 0.5 * cfg.epsilon, "curator": cfg.central_epsilon}.get(cfg.trust)
        acc = 0.5 + 0.01 * (central or local or 20) + {"server": 0.1, "shuffler": 0.05}.get(cfg.trust, 0) \
            + seeds_acc(c)
        rounds = [{"round": t, "bits_per_client": 24 if private else 128, "test_accuracy": acc - 0.1 * (2 - t),
                   "train_loss": 1.0, "epsilon_spent": local, **({"epsilon_central": central} if central else {})}
                  for t in (1, 2)]
        final = {"test_accuracy": acc, "bits_per_client": rounds[-1]["bits_per_client"], "epsilon_total": local,
                 "epsilon_threat_model": "identified: the server sees each client's messages"}
        if central:
            final["epsilon_central"] = {"epsilon": central, "delta": 1e-5,
                                        "threat_model": f"central, {cfg.trust} trusted: whom it hides"}
        (f / "metrics.json").write_text(json.dumps({"config": asdict(cfg), "rounds": rounds, "final": final}))
    return exp, cells, folders


TRUSTS = MIXED.replace(b"[[exclude]]", b'[[cell]]\ntrust = "shuffler"\nencoder = "sqkr"\nepsilon = [1.0, 4.0]\n\n'
                                       b"[[exclude]]")


def test_the_trust_table_puts_trust_models_side_by_side(tmp_path: Path) -> None:
    from sstq_fl.experiments.results import LOCAL_CENTRAL, write_tables

    exp, cells, folders = _fake_runs(tmp_path, TRUSTS, lambda c: 0.01 * c.cfg.seed)
    doc = write_tables(tmp_path, cells, folders, {"experiment": exp.provenance(), **exp.grid_record()})
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert {r["trust"] for r in rows} == {"server", "shuffler", "curator"}
    assert {r["threat_model"] for r in rows} == {"identified", "central, shuffler trusted", "central, curator trusted"}
    assert {r["name"] for r in rows} == {"", "central DP"} and len({tuple(r) for r in rows}) == 1  # same columns
    table = list(csv.DictReader((tmp_path / "trust.csv").open()))
    assert [(r["trust"], r["encoder_spec"], r["central_epsilon"]) for r in table] == [
        ("server", "clean", "inf"), ("server", "sqkr", "6.0"), ("curator", "clean", "2.0"), ("curator", "clean", "8.0"),
        ("shuffler", "sqkr", "0.5"), ("shuffler", "sqkr", "2.0")]
    assert table[1]["central_epsilon_is"] == LOCAL_CENTRAL and table[2]["central_epsilon_is"] != LOCAL_CENTRAL
    assert [r["name"] for r in table] == ["clean (server)", "sqkr (server)", "central DP", "central DP",
                                          "sqkr (shuffler)", "sqkr (shuffler)"]
    assert table[1]["bits_per_client"] == "24.0" and table[4]["seeds"] == "2"
    md = (tmp_path / "trust.md").read_text()
    assert md.startswith("mixed.toml: final test accuracy by trust model") and "| 6 † |" in md
    assert "† no trusted stage (trust = server" in md and "– (non-private; set 3)" in md
    assert doc["cell_tables"][1]["name"] == "central DP"


def test_the_trust_figure_draws_one_line_per_trust_and_encoder(tmp_path: Path) -> None:
    from matplotlib.container import ErrorbarContainer

    from sstq_fl.experiments.figures import plot_all, plot_trust
    from sstq_fl.experiments.results import write_tables

    exp, cells, folders = _fake_runs(tmp_path, TRUSTS, lambda c: 0.01 * c.cfg.seed)
    doc = write_tables(tmp_path, cells, folders, {"experiment": exp.provenance()})
    files = plot_all(doc, tmp_path)
    assert tmp_path / "trust.png" in files and (tmp_path / "trust.pdf").read_bytes()[:4] == b"%PDF"
    fig = plot_trust(doc, tmp_path / "t")
    ax_eps, ax_bits = fig.get_axes()
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["server: clean — non-private (ε = ∞: dotted level)", "server: sqkr (ε: local, composed †)",
                      "curator: central DP", "shuffler: sqkr"]
    bars = [c for c in ax_eps.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 3 and all(c.has_yerr for c in bars)  # 2 seeds: t-intervals
    assert sorted(bars[1].lines[0].get_xdata()) == [2.0, 8.0]  # the curator's line across its central ε
    title = fig._suptitle.get_text()
    assert "mixed.toml" in title and "task lsq" in title and "2 seeds" in title and "† trust = server" in title
    assert ax_eps.get_xscale() == ax_bits.get_xscale() == "log"


def test_with_one_seed_the_trust_figure_draws_plain_points_and_says_so(tmp_path: Path) -> None:
    from matplotlib.container import ErrorbarContainer

    from sstq_fl.experiments.figures import plot_trust
    from sstq_fl.experiments.results import write_tables

    exp, cells, folders = _fake_runs(tmp_path, TRUSTS.replace(b"seed = [0, 1]", b"seed = 0"))
    doc = write_tables(tmp_path, cells, folders, {"experiment": exp.provenance()})
    fig = plot_trust(doc, tmp_path / "t")
    bars = [c for c in fig.get_axes()[0].containers if isinstance(c, ErrorbarContainer)]
    assert bars and not any(c.has_yerr for c in bars) and "1 seed (plain points, no interval)" in fig._suptitle.get_text()
    assert "A row of 1 seed has no interval" in (tmp_path / "trust.md").read_text()


def test_no_trust_figure_without_a_trusted_stage(tmp_path: Path) -> None:
    from sstq_fl.experiments.figures import plot_all
    from sstq_fl.experiments.results import write_tables

    exp, cells, folders = _fake_runs(tmp_path, (BASE + 'encoder = ["clean", "sqkr"]\nepsilon = [1, 3]\n').encode())
    doc = write_tables(tmp_path, cells, folders, {"experiment": exp.provenance()})
    assert [p.stem for p in plot_all(doc, tmp_path)][::2] == ["rounds", "bits", "epsilon"]
    assert "name" not in doc["rows"][0] and doc["rows"][0]["trust"] == "server"
    assert (tmp_path / "trust.md").read_text().count("† |") == 4  # the server rows' ε is the local one, marked


def test_compare_rows_carry_trust_threat_model_and_central_epsilon() -> None:
    from sstq_fl.experiments.compare import _row, _trust_line

    final = {"test_accuracy": 0.5, "bits_per_client": 24, "epsilon_total": 6.0, "wall_s": 1.0,
             "epsilon_threat_model": "identified: the server sees each client's messages"}
    m = {"config": {"trust": "server"}, "rounds": [{"round": 1, "test_accuracy": 0.5}], "final": final}
    row = _row("sqkr", m)
    assert (row["trust"], row["threat_model"], row["epsilon_central"]) == ("server", "identified", 6.0)
    assert "local ε composed" in _trust_line([row])
    shuffled = {**m, "config": {"trust": "shuffler"},
                "final": {**final, "epsilon_central": {"epsilon": 1.5, "threat_model": "central, shuffler trusted: x"}}}
    row = _row("sqkr", shuffled)
    assert (row["trust"], row["threat_model"], row["epsilon_central"]) == ("shuffler", "central, shuffler trusted", 1.5)
    assert _trust_line([row]) == ""


# ----------------------------------------------------------------------------- a sweep of cells
def test_a_sweep_of_cells_records_them_and_a_resume_reruns_none(tmp_path: Path) -> None:
    from sstq_fl.experiments.sweep import SweepOptions, sweep

    text = (BASE + 'encoder = ["clean", "sqkr"]\n[[cell]]\n[[cell]]\nname = "curator"\ntrust = "curator"\n'
                   'encoder = "clean"\ncentral-epsilon = 5.0\n').encode()
    exp = parse_experiment(text, "cells.toml")
    s = sweep(exp, tmp_path, SweepOptions(executor="local"))
    assert s["counts"] == {"done": 3, "skipped": 0, "failed": 0}
    assert s["cell_tables"] == [{}, {"name": "curator", "trust": "curator", "encoder": "clean", "central-epsilon": 5.0}]
    assert [c.get("label") for c in s["cells"]] == [None, None, "curator"]
    rec = json.loads((tmp_path / "cells" / s["cells"][2]["name"] / "experiment.json").read_text())
    assert rec["label"] == "curator" and rec["config"]["trust"] == "curator"
    table = list(csv.DictReader((tmp_path / "trust.csv").open()))
    assert [(r["trust"], r["encoder_spec"]) for r in table] == [("server", "clean"), ("server", "sqkr"),
                                                                 ("curator", "clean")]
    assert abs(float(table[2]["central_epsilon"]) - 5.0) < 1e-2 and table[2]["name"] == "curator"
    assert (tmp_path / "trust.png").is_file() and (tmp_path / "trust.md").is_file()
    again = sweep(exp, tmp_path, SweepOptions(executor="local", resume=True))
    assert again["counts"] == {"done": 0, "skipped": 3, "failed": 0}


def test_trust_figure_tick_labels_are_thinned_on_a_log_axis() -> None:
    from sstq_fl.experiments.figures import spread

    assert spread([1.0, 3.0, 8.0]) == [1.0, 3.0, 8.0]
    assert spread([0.9976, 0.9997, 3.0]) == [0.9976, 3.0]  # 0.2 % apart: one label
    assert spread([18.0, 524288.0, 655360.0, 814400.0]) == [18.0, 524288.0]  # three labels within 1.6x of 4.7 decades
