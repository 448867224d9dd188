"""More bad inputs for :mod:`bad_input_campaign`: ``gen``, ``privacy replay``/``plan``, ``bench``, ``plot``,
``encoders``, ``options``, ``demo`` and ``run --resume`` against corrupt run folders.  Each must be refused in
one line, exit 2, with nothing written.

:func:`cases` lists ``(surface, name, argv, files)`` as the campaign's other surfaces do.  The replay, plot and
resume cases start from real material made once per process (:func:`material`): a tiny completed ``lsq`` run, a
``compare`` and a secure-mode run stopped after round 1 of 3 (its checkpoint kept), each read into memory (binary
files as ``surrogateescape`` text, which the campaign writes back byte for byte) and edited per case.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

Case = tuple[str, str, list[str], dict[str, str]]
REPO = Path(__file__).resolve().parents[1]
TINY = ["--task", "lsq", "--dim", "4", "--n", "20", "--clients", "2", "--batch", "4"]
RESUME = ["run", *TINY, "--rounds", "3", "--randomness", "secure", "--out", "r", "--resume"]

_MAKE = r'''
import io, json, sys
from pathlib import Path
import numpy as np
from sstq_fl.cli import main
from sstq_fl.fl import engine

root = Path(sys.argv[1])
tiny = sys.argv[2:]
assert main(["run", *tiny, "--rounds", "2", "--out", str(root / "done")]) == 0
assert main(["compare", *tiny, "--rounds", "1", "--encoders", "sstq-flat:b=4 clean", "--out", str(root / "cmp")]) == 0
orig = engine.Trainer.complete_round
def stop_after_one(self, out, st, rec, seconds, progress):
    orig(self, out, st, rec, seconds, progress)
    if st.round >= 1:
        raise KeyboardInterrupt
engine.Trainer.complete_round = stop_after_one
assert main(["run", *tiny, "--rounds", "3", "--randomness", "secure", "--out", str(root / "mid")]) == 130
theta = np.load(root / "mid" / "checkpoint_theta-000001.npy")
other = np.float32 if theta.dtype == np.float64 else np.float64
variants = {"shape": np.zeros(theta.size + 1, theta.dtype), "dtype": theta.astype(other),
            "nan": np.full_like(theta, np.nan), "inf": np.full_like(theta, np.inf),
            "scalar": np.array(1.0, theta.dtype), "2d": theta.reshape(1, -1), "int": theta.astype(np.int32),
            "huge": np.zeros(1 << 16, theta.dtype)}
(root / "npy").mkdir()
for k, a in variants.items():
    np.save(root / "npy" / f"{k}.npy", a, allow_pickle=False)
np.save(root / "npy" / "object.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
'''


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "surrogateescape")


@functools.lru_cache(maxsize=1)
def material() -> dict[str, dict[str, str]]:
    """``{"done", "cmp", "mid", "npy"}``: each folder's files (relative path → text), made once."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        p = subprocess.run([sys.executable, "-c", _MAKE, tmp, *TINY], env=env, capture_output=True, text=True,
                           timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"making the starting material failed: {p.stderr[-2000:]}")
        out: dict[str, dict[str, str]] = {}
        for name in ("done", "cmp", "mid", "npy"):
            folder = Path(tmp) / name
            out[name] = {str(f.relative_to(folder)): _text(f) for f in sorted(folder.rglob("*"))
                         if f.is_file() and f.suffix not in (".png", ".pdf")}
        return out


# ----------------------------------------------------------------------------------------------- helpers
def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(t) for t in text.splitlines()]


def rechain(objs: list[Any], raw: dict[int, str] | None = None) -> str:
    """Lines as the library writes them, each line's ``prev`` the sha256 of the line before (what a hostile
    editor who rewrites the whole file produces); ``raw`` replaces line ``i`` by its text (then chained on)."""
    texts: list[str] = []
    for i, obj in enumerate(objs):
        if i and isinstance(obj, dict):
            obj = {**obj, "prev": hashlib.sha256(texts[-1].encode()).hexdigest()}
        text = (raw or {}).get(i)
        if text is None:
            text = json.dumps(obj, sort_keys=True)
        elif i:
            text = text.replace("PREV", hashlib.sha256(texts[-1].encode()).hexdigest())
        texts.append(text)
    return "\n".join(texts) + "\n"


def _garbage(n: int, seed: int = 7) -> str:
    """``n`` pseudo-random bytes as surrogateescape text."""
    out, x = bytearray(), seed
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out.append((x >> 16) & 0xFF)
    return bytes(out).decode("utf-8", "surrogateescape")


def _deep(n: int) -> str:
    return "[" * n + "]" * n


# ----------------------------------------------------------------------------------------------- gen
GEN_BASE = {"dp-mepf": ["--records", "200", "--public-records", "200", "--eval-samples", "100", "--generator-steps",
                        "2", "--probe-epochs", "1"],
            "dp-vqg": ["--records", "200", "--public-records", "200", "--eval-samples", "100", "--steps", "2",
                       "--prior-epochs", "1", "--probe-epochs", "1"],
            "straightdp": ["--records", "200", "--public-records", "200", "--eval-samples", "100", "--probe-epochs",
                           "1", "--pretrain-steps", "2", "--distill-steps", "2", "--sgd-steps", "2"]}


def _gen(pipe: str, *extra: str, eps: str | None = "1") -> list[str]:
    base = ["gen", pipe, *GEN_BASE[pipe], "--dataset-ledger", "ledger.jsonl", "--out", "OUT"]
    return [*base, *(["--epsilon", eps] if eps is not None else []), *extra]


def gen_cases() -> list[Case]:
    out: list[Case] = []
    common = {"--epsilon": ["abc", "-1", "0", "100.5", "1e308", "-inf"], "--delta": ["0", "1", "-1e-5", "nan", "2"],
              "--clients": ["0", "-1", "2.5", "1000000000"], "--records": ["-5", "1e3"], "--seed": ["-1", "x"],
              "--device": ["tpu", "cuda:99", ""], "--public-records": ["-1"], "--eval-samples": ["0", "-10"],
              "--probe-epochs": ["-1"], "--probe-seeds": ["0", "-2"], "--probe": ["resnet"],
              "--probe-protocol": ["nope"], "--engine": ["ray"], "--randomness": ["weak"],
              "--dataset-budget-epsilon": ["-1", "nan", "0.5"]}
    for flag, values in common.items():
        for v in values:
            pipes = ["dp-mepf", "straightdp"] if flag in ("--epsilon", "--delta", "--clients") else ["dp-vqg"]
            for pipe in pipes:
                argv = [*_gen(pipe, eps=None), *(["--epsilon", "1"] if flag != "--epsilon" else []), flag, v]
                out.append(("gen", f"{pipe} {flag}={v}", argv, {}))
    for pipe in GEN_BASE:
        out += [("gen", f"{pipe} no-epsilon", _gen(pipe, eps=None), {}),
                ("gen", f"{pipe} alpha=0 dirichlet", _gen(pipe, "--partition", "dirichlet", "--alpha", "0"), {}),
                ("gen", f"{pipe} data-path-missing", _gen(pipe, "--data-path", "nope.tgz"), {}),
                ("gen", f"{pipe} data-path-garbage", _gen(pipe, "--data-path", "mnist.tgz"),
                 {"mnist.tgz": _garbage(4096)}),
                ("gen", f"{pipe} data-path-empty-dir", _gen(pipe, "--data-path", "d"), {"d/README": "nothing\n"}),
                ("gen", f"{pipe} ledger-is-dir", [*_gen(pipe), "--dataset-ledger", "L"], {"L/x": ""}),
                ("gen", f"{pipe} out-empty", [*_gen(pipe), "--out", ""], {}),
                ("gen", f"{pipe} out-is-file", ["gen", pipe, *GEN_BASE[pipe], "--epsilon", "1", "--dataset-ledger",
                                                "ledger.jsonl", "--out", "f"], {"f": "a file\n"})]
    out += [("gen", "dp-mepf moments=3", _gen("dp-mepf", "--moments", "3"), {}),
            ("gen", "dp-mepf moments=1,3", _gen("dp-mepf", "--moments", "1,3"), {}),
            ("gen", "dp-mepf generator-steps=0", _gen("dp-mepf", "--generator-steps", "0"), {}),
            ("gen", "dp-mepf inception-missing", _gen("dp-mepf", "--inception-weights", "nope.pth"), {}),
            ("gen", "dp-mepf inception-garbage", _gen("dp-mepf", "--inception-weights", "w.pth"),
             {"w.pth": _garbage(2048)}),
            ("gen", "dp-mepf existing-run-no-force", _gen("dp-mepf"), {"out/metrics.json": "{}\n"})]
    vqg = {"--variant": ["xx"], "--mode": ["C"], "--labels": ["secret"], "--stage2": ["gan"], "--steps": ["0", "-3"],
           "--batch": ["0", "-1", "5000"], "--prior-epochs": ["0"], "--prior-lr": ["nan", "-1", "0"],
           "--prior-steps": ["0"], "--prior-batch": ["0"], "--prior-width": ["0", "-8"],
           "--diagnostic-records": ["-1"], "--reference": ["best"]}
    out += [("gen", f"dp-vqg {k}={v}", _gen("dp-vqg", k, v), {}) for k, vs in vqg.items() for v in vs]
    out.append(("gen", "dp-vqg reference=public stage2=em", _gen("dp-vqg", "--reference", "public", "--stage2", "em"), {}))
    sdp = {"--method": ["gan"], "--port": ["x"], "--beta": ["1.5", "-0.1", "nan"], "--space": ["voxel"],
           "--tau": ["2", "-1", "nan"], "--t0": ["1.5", "nan"], "--pca": ["0", "-4"], "--rank": ["0", "-1"],
           "--q": ["1.5", "nan", "-0.1"], "--multiplicity": ["0"], "--sgd-steps": ["-1"], "--pretrain-steps": ["-1"],
           "--distill-steps": ["-1"]}
    out += [("gen", f"straightdp {k}={v}", _gen("straightdp", k, v), {}) for k, vs in sdp.items() for v in vs]
    out += [("gen", "straightdp rank>pca", _gen("straightdp", "--pca", "4", "--rank", "8"), {}),
            ("gen", "straightdp ae-steps=0 latent", _gen("straightdp", "--space", "latent", "--ae-steps", "0"), {}),
            ("gen", "gen nope", ["gen", "nope"], {}), ("gen", "gen no-pipeline", ["gen"], {})]
    return out


# ----------------------------------------------------------------------------------------------- replay
def replay_cases() -> list[Case]:
    m = material()
    tr, metrics = m["done"]["transcript.jsonl"], m["done"]["metrics.json"]
    L = _lines(tr)  # header, event(s), summary
    H, E, S = L[0], L[1:-1], L[-1]
    R = ["privacy", "replay", "t.jsonl"]

    def t(text: str) -> dict[str, str]:
        return {"t.jsonl": text}

    def ev(**kw: Any) -> list[Any]:
        return [H, {**E[0], **kw}, *E[1:], S]

    def evx(**kw: Any) -> list[Any]:
        return [H, {**E[0], "event": {**E[0]["event"], **kw}}, *E[1:], S]

    rows = tr.splitlines()
    cases: list[tuple[str, list[str], dict[str, str]]] = [
        ("missing-file", R, {}), ("directory", R, {"t.jsonl/x": ""}), ("dev-zero", ["privacy", "replay", "/dev/zero"], {}),
        ("empty", R, t("")), ("whitespace", R, t(" \n\n\t\n")), ("binary", R, t(_garbage(3000))),
        ("not-utf8-mid", R, t(tr[:200] + "\udcff" + tr[200:])), ("header-only", R, t(rows[0] + "\n")),
        ("no-summary", R, t("\n".join(rows[:-1]) + "\n")), ("last-line-cut", R, t(tr[: len(tr) - 40])),
        ("first-line-garbage", R, t("garbage\n" + "\n".join(rows[1:]) + "\n")),
        ("blank-line-mid", R, t(rows[0] + "\n\n" + "\n".join(rows[1:]) + "\n")),
        ("summary-twice", R, t(tr + rows[-1] + "\n")), ("event-after-summary", R, t(rechain([H, *E, S, E[0]]))),
        ("events-swapped", R, t("\n".join([rows[0], rows[2], rows[1], *rows[3:]]) + "\n")),
        ("event-deleted", R, t("\n".join([rows[0], *rows[2:]]) + "\n")),
        ("event-edited-chain-broken", R, t(tr.replace('"epsilon": 3.0', '"epsilon": 0.5', 1))),
        ("rechained-eps-neg", R, t(rechain(evx(epsilon=-1.0)))),
        ("rechained-eps-NaN", R, t(rechain(evx(epsilon=float("nan"))))),
        ("rechained-eps-Infinity", R, t(rechain(evx(epsilon=float("inf"))))),
        ("rechained-eps-1e999", R, t(rechain(ev(), raw={1: json.dumps({**E[0], "prev": "PREV"}, sort_keys=True)
                                                        .replace('"epsilon": 3.0', '"epsilon": 1e999')}))),
        ("rechained-eps-string", R, t(rechain(evx(epsilon="3")))),
        ("rechained-kind-nope", R, t(rechain(evx(kind="nope")))),
        ("rechained-event-relation-nope", R, t(rechain(evx(relation="nope")))),
        ("rechained-count-0", R, t(rechain(ev(count=0)))), ("rechained-count-neg", R, t(rechain(ev(count=-1)))),
        ("rechained-count-1.5", R, t(rechain(ev(count=1.5)))), ("rechained-count-true", R, t(rechain(ev(count=True)))),
        ("rechained-count-1e30", R, t(rechain(ev(count=10**30)))),
        ("rechained-event-unknown-field", R, t(rechain(ev(zzz=1)))),
        ("rechained-event-subset-int", R, t(rechain(ev(subset=3)))),
        ("rechained-event-type-nope", R, t(rechain(ev(type="nope")))),
        ("rechained-event-is-list", R, t(rechain([H, [1, 2], *E[1:], S]))),
        ("event-prev-missing", R, t(rechain(ev()).replace(f'"prev": "{hashlib.sha256(rows[0].encode()).hexdigest()}", ',
                                                          "", 1))),
        ("rechained-event-dup-key", R, t(rechain([H, *E, S], raw={1: json.dumps({**E[0], "prev": "PREV"}, sort_keys=True)
                                                                 [:-1] + ', "count": 5}'}))),
        ("rechained-note-deep", R, t(rechain(ev(), raw={1: json.dumps({**E[0], "prev": "PREV"}, sort_keys=True)[:-1] +
                                                        ', "meta2": ' + _deep(200) + "}"}))),
        ("rechained-note-very-deep", R, t(rechain(ev(), raw={1: json.dumps({**E[0], "prev": "PREV"}, sort_keys=True)
                                                             [:-1] + ', "meta2": ' + _deep(100000) + "}"}))),
        ("header-relation-nope", R, t(rechain([{**H, "relation": "nope"}, *E, S]))),
        ("header-version-99", R, t(rechain([{**H, "version": 99}, *E, S]))),
        ("header-version-string", R, t(rechain([{**H, "version": "3"}, *E, S]))),
        ("header-format-other", R, t(rechain([{**H, "format": "something-else"}, *E, S]))),
        ("header-unknown-key", R, t(rechain([{**H, "zzz": 1}, *E, S]))),
        ("header-discretization-neg", R, t(rechain([{**H, "discretization": -1.0}, *E, S]))),
        ("header-discretization-NaN", R, t(rechain([{**H, "discretization": float("nan")}, *E, S]))),
        ("header-plan-count-neg", R, t(rechain([{**H, "plan": [{**H["plan"][0], "count": -2}]}, *E, S]))),
        ("header-plan-not-list", R, t(rechain([{**H, "plan": 3}, *E, S]))),
        ("header-budget-neg", R, t(rechain([{**H, "budget": -1.0}, *E, S]))),
        ("header-is-list", R, t(rechain([[H], *E, S]))),
        ("summary-delta-2", R, t(rechain([H, *E, {**S, "delta": 2.0}]))),
        ("summary-delta-NaN", R, t(rechain([H, *E, {**S, "delta": float("nan")}]))),
        ("summary-epsilon-string", R, t(rechain([H, *E, {**S, "epsilon": "six"}]))),
        ("summary-no-epsilon", R, t(rechain([H, *E, {k: v for k, v in S.items() if k != "epsilon"}]))),
        ("summary-events-wrong", R, t(rechain([H, *E, {**S, "events": 99}]))),
        ("summary-unknown-type", R, t(rechain([H, *E, {**S, "type": "footer"}]))),
        ("long-garbage-line", R, t(rows[0] + "\n" + "x" * 2_000_000 + "\n")),
        ("metrics-as-transcript", R, t(metrics)),
        ("checkpoint-as-transcript", R, t(m["mid"]["checkpoint.json"])),
        ("crlf-checked-chain", R, t(tr.replace("\n", "\r\n"))),
    ]
    for d in ("nan", "inf", "-1", "1", "2", "abc", ""):
        cases.append((f"--delta={d}", [*R, "--delta", d], t(tr)))
    M = ["privacy", "replay", "t.jsonl", "--metrics", "m.json"]
    mj = json.loads(metrics)

    def mm(obj: Any) -> dict[str, str]:
        return {"t.jsonl": tr, "m.json": json.dumps(obj, indent=1)}

    def edit(path: list[str], value: Any) -> Any:
        obj = json.loads(metrics)
        cur = obj
        for k in path[:-1]:
            cur = cur[k]
        cur[path[-1]] = value
        return obj

    cases += [
        ("metrics-missing", M, t(tr)), ("metrics-directory", M, {"t.jsonl": tr, "m.json/x": ""}),
        ("metrics-empty", M, {"t.jsonl": tr, "m.json": ""}), ("metrics-garbage", M, {"t.jsonl": tr, "m.json": "{no"}),
        ("metrics-binary", M, {"t.jsonl": tr, "m.json": _garbage(500)}), ("metrics-list", M, mm([mj])),
        ("metrics-null", M, mm(None)), ("metrics-no-binding", M, mm({k: v for k, v in mj.items()
                                                                    if k != "privacy_transcript"})),
        ("metrics-binding-sha-edited", M, mm(edit(["privacy_transcript", "sha256"], "0" * 64))),
        ("metrics-binding-run-id-edited", M, mm(edit(["privacy_transcript", "run_id"], "ffffffffffff"))),
        ("metrics-binding-epsilon-edited", M, mm(edit(["privacy_transcript", "epsilon"], 0.5))),
        ("metrics-binding-delta-true", M, mm(edit(["privacy_transcript", "delta"], True))),
        ("metrics-final-epsilon-edited", M, mm(edit(["final", "epsilon_total"], 0.5))),
        ("metrics-round-epsilon-edited", M, mm(edit(["rounds", 0, "epsilon_spent"], 0.1))),  # type: ignore[list-item]
        ("metrics-rounds-not-list", M, mm(edit(["rounds"], {"a": 1}))),
        ("metrics-config-rounds-edited", M, mm(edit(["config", "rounds"], 1))),
        ("metrics-randomness-edited", M, mm(edit(["randomness", "mode"], "secure"))),
        ("metrics-final-epsilon-NaN", M, {"t.jsonl": tr, "m.json": json.dumps(edit(["final", "epsilon_total"],
                                                                                   float("nan")))}),
        ("metrics-deep", M, {"t.jsonl": tr, "m.json": '{"a": ' + _deep(100000) + "}"}),
        ("metrics-dup-key", M, {"t.jsonl": tr, "m.json": metrics.rstrip()[:-1] + ', "final": {}}'}),
        ("metrics-of-other-transcript", ["privacy", "replay", "r/transcript.jsonl", "--metrics", "m.json"],
         {"r/transcript.jsonl": m["mid"]["transcript.jsonl"], "m.json": metrics}),
        ("metrics-with-edited-transcript", M, {"t.jsonl": rechain(evx(epsilon=-1.0)), "m.json": metrics}),
        ("metrics-is-transcript", ["privacy", "replay", "t.jsonl", "--metrics", "t.jsonl"], t(tr)),
    ]
    return [("replay", name, argv, files) for name, argv, files in cases]


def privacy_cases() -> list[Case]:
    plan = ["privacy", "plan", "--ldp-epsilon", "1", "--rounds", "10"]
    c = [("no-subcommand", ["privacy"]), ("unknown-subcommand", ["privacy", "nope"]),
         ("replay-no-file", ["privacy", "replay"]), ("plan-no-rounds", ["privacy", "plan", "--ldp-epsilon", "1"]),
         ("plan-no-epsilon", ["privacy", "plan", "--rounds", "10"]),
         ("plan-rounds-1e7+1", ["privacy", "plan", "--ldp-epsilon", "1", "--rounds", "10000001"]),
         ("plan-rounds-huge", ["privacy", "plan", "--ldp-epsilon", "1", "--rounds", "99999999999999999999"]),
         ("plan-rounds-hex", ["privacy", "plan", "--ldp-epsilon", "1", "--rounds", "0x10"]),
         ("plan-eps-1e301", ["privacy", "plan", "--ldp-epsilon", "1e301", "--rounds", "10"]),
         ("plan-eps-word", ["privacy", "plan", "--ldp-epsilon", "one", "--rounds", "10"]),
         ("plan-shuffle-1.5", [*plan, "--shuffle", "1.5"]), ("plan-shuffle-inf", [*plan, "--shuffle", "inf"]),
         ("plan-shuffle-1e20", [*plan, "--shuffle", "100000000000000000000"]),
         ("plan-sampling-inf", [*plan, "--sampling-rate", "inf"]), ("plan-delta-1e-400", [*plan, "--delta", "1e-400"]),
         ("plan-unknown-flag", [*plan, "--epsilon", "1"])]
    return [("privacy", n, a, {}) for n, a in c]


# ----------------------------------------------------------------------------------------------- bench
def bench_cases() -> list[Case]:
    mse = ["bench", "mse-vs-dim", "--dims", "8", "--trials", "2", "--encoders", "sstq-flat", "--out", "OUT"]
    spd = ["bench", "encode-speed", "--clients", "2", "--dim", "8", "--reps", "1", "--encoders", "clean", "--no-loop",
           "--no-secure", "--out", "OUT"]
    fw = ["bench", "fwht", "--rows", "2", "--sizes", "8", "--out", "OUT"]
    ks = ["bench", "kashin", "--dim", "8", "--out", "OUT"]
    kss = ["bench", "kashin-search", "--dims", "8", "--out", "OUT"]
    led = ["bench", "ledger", "--steps", "10", "--out", "OUT"]
    sh = ["bench", "shuffle", "--rounds", "2", "--out", "OUT"]
    rc = ["bench", "round-cost", "--clients", "2", "--task", "lsq", "--rounds", "1", "--no-reference", "--out", "OUT"]
    bad = {"mse": (mse, {"--dims": ["0", "-5", "", "a,b", "8,,8", "1e12"], "--trials": ["1", "0", "-3"],
                         "--epsilon": ["nan", "0", "-1"], "--bits": ["0", "99"], "--clip": ["-1", "nan", "0"],
                         "--encoders": ["nope", "", "sstq-flat:zz=1"]}),
           "encode-speed": (spd, {"--clients": ["0", "-1"], "--dim": ["0", "-8"], "--reps": ["0"], "--device": ["tpu"],
                                  "--inputs": ["nope"], "--encoders": ["nope"], "--epsilon": ["nan"], "--bits": ["0"]}),
           "fwht": (fw, {"--rows": ["0", "-1"], "--sizes": ["1000", "0", "", "x", "-8"], "--device": ["nope"]}),
           "kashin": (ks, {"--dim": ["0", "-1"], "--rho": ["0.5", "nan", "inf", "1"]}),
           "kashin-search": (kss, {"--dims": ["0", "", "x"], "--rho": ["0.9", "nan"], "--seed": ["-1"]}),
           "ledger": (led, {"--steps": ["0", "-1", "x", "1000000000000"]}),
           "shuffle": (sh, {"--delta": ["0", "1", "nan"], "--rounds": ["0", "-1"], "--sweep-messages": ["0"]}),
           "round-cost": (rc, {"--clients": ["0", "-1"], "--task": ["nope"], "--encoder": ["nope"],
                               "--rounds": ["0"], "--device": ["tpu"]})}
    out: list[Case] = []
    for name, (argv, flags) in bad.items():
        for flag, values in flags.items():
            for v in values:
                out.append(("bench", f"{name} {flag}={v!r}", [*argv, flag, v], {}))
    out += [("bench", "shuffle sweep-missing", [*sh, "--sweep", "nope.csv"], {}),
            ("bench", "shuffle sweep-garbage", [*sh, "--sweep", "f.csv"], {"f.csv": _garbage(600)}),
            ("bench", "shuffle sweep-wrong-columns", [*sh, "--sweep", "f.csv"], {"f.csv": "a,b\n1,2\n"}),
            ("bench", "shuffle reference-missing", [*sh, "--reference", "nope.csv"], {}),
            ("bench", "out-empty", ["bench", "ledger", "--steps", "10", "--out", ""], {}),
            ("bench", "out-is-dir", ["bench", "ledger", "--steps", "10", "--out", "d"], {"d/x": ""}),
            ("bench", "unknown-bench", ["bench", "nope"], {}), ("bench", "no-bench", ["bench"], {})]
    return out


# ----------------------------------------------------------------------------------------------- plot
def plot_cases() -> list[Case]:
    res = json.loads(material()["cmp"]["results.json"])
    P = ["plot", "d"]

    def r(obj: Any) -> dict[str, str]:
        return {"d/results.json": json.dumps(obj)}

    def with_(**kw: Any) -> dict[str, str]:
        return r({**res, **kw})

    row0 = res["rows"][0]
    cases: list[tuple[str, list[str], dict[str, str]]] = [
        ("dir-missing", P, {}), ("dir-is-file", P, {"d": "x\n"}), ("dir-empty", P, {"d/.keep": ""}),
        ("results-garbage", P, {"d/results.json": "{not json"}), ("results-binary", P, {"d/results.json": _garbage(900)}),
        ("results-empty", P, {"d/results.json": ""}), ("results-is-dir", P, {"d/results.json/x": ""}),
        ("results-list", P, r([1, 2])), ("results-pairs-list", P, r([["rows", 3]])), ("results-number", P, r(3)),
        ("results-string", P, r("rows")), ("results-null", P, r(None)), ("results-empty-object", P, r({})),
        ("rows-not-list", P, with_(rows=3)), ("rows-list-of-ints", P, with_(rows=[1, 2, 3])),
        ("rows-empty", P, with_(rows=[], aggregates=[], final=[])),
        ("row-no-encoder", P, with_(rows=[{k: v for k, v in row0.items() if k != "encoder"}])),
        ("row-round-string", P, with_(rows=[{**row0, "round": "x"}])),
        ("row-metric-string", P, with_(rows=[{**row0, "metric": "abc"}])),
        ("aggregates-not-list", P, with_(aggregates="x")), ("aggregates-list-of-null", P, with_(aggregates=[None])),
        ("aggregate-no-metric-mean", P, with_(aggregates=[{k: v for k, v in a.items() if k != "metric_mean"}
                                                          for a in res["aggregates"]])),
        ("aggregate-round-string", P, with_(aggregates=[{**a, "round": "late"} for a in res["aggregates"]])),
        ("final-not-list", P, with_(final={"a": 1})), ("final-missing", P, r({k: v for k, v in res.items() if k != "final"})),
        ("experiment-not-dict", P, with_(experiment=[1])), ("axes-list", P, with_(axes=["encoder"])),
        ("results-deep", P, {"d/results.json": '{"rows": ' + _deep(100000) + "}"}),
        ("results-dup-key", P, {"d/results.json": json.dumps(res)[:-1] + ', "rows": 7}'}),
        ("csv-garbage", P, {"d/results.csv": _garbage(700)}), ("csv-header-only", P, {"d/results.csv": "a,b,c\n"}),
        ("csv-wrong-columns", P, {"d/results.csv": "x,y\n1,2\n3,4\n"}),
        ("csv-gz-not-gzip", P, {"d/results.csv.gz": "not gzip\n"}),
        ("plot-two-dirs", ["plot", "d", "e"], with_()),
    ]
    return [("plot", name, argv, files) for name, argv, files in cases]


# ----------------------------------------------------------------------------------------------- small CLIs
def misc_cases() -> list[Case]:
    fast = ["--trials", "100", "--audit-trials", "100", "--checks", "bits"]
    chk = ["encoders", "check", "sstq-flat:b=4", *fast]
    enc = {"--dim": ["0", "-1", "abc", "1e9", "100000000000"], "--clip": ["0", "-1", "nan", "inf"],
           "--seed": ["-1", "18446744073709551616"], "--trials": ["0", "1", "-5"], "--audit-trials": ["0", "-1"],
           "--alpha": ["0", "1", "nan", "2", "-0.5"], "--checks": ["nope", "bits nope"]}
    out: list[Case] = [("encoders", f"check {k}={v!r}", [*chk, k, v], {}) for k, vs in enc.items() for v in vs]
    out += [("encoders", "check-no-spec", ["encoders", "check"], {}),
            ("encoders", "unknown-subcommand", ["encoders", "nope"], {}),
            ("encoders", "json-extra-arg", ["encoders", "--json", "x"], {}),
            ("options", "extra-arg", ["options", "extra"], {}), ("options", "unknown-flag", ["options", "--json"], {}),
            ("options", "unknown-command", ["nope"], {})]
    demo = {"--rounds": ["0", "-1", "abc", "99999999999999999999"], "--seed": ["-1", "x"], "--engine": ["nope"],
            "--randomness": ["weak"], "--out": ["", "a\nb"]}
    out += [("demo", f"{k}={v!r}", ["demo", k, v], {}) for k, vs in demo.items() for v in vs]
    out += [("demo", "resume-and-force", ["demo", "--out", "OUT", "--resume", "--force"], {}),
            ("demo", "resume-nothing", ["demo", "--out", "OUT", "--resume"], {}),
            ("demo", "out-is-file", ["demo", "--out", "f"], {"f": "x\n"}),
            ("demo", "resume-garbage-folder", ["demo", "--out", "g", "--resume"], {"g/checkpoint.json": "garbage"})]
    return out


# ----------------------------------------------------------------------------------------------- resume
def resume_cases() -> list[Case]:
    mat = material()
    mid = {f"r/{k}": v for k, v in mat["mid"].items()}
    npy = mat["npy"]
    ck = json.loads(mat["mid"]["checkpoint.json"])
    theta = ck["theta_file"]
    tr = mat["mid"]["transcript.jsonl"]
    TL = _lines(tr)

    def with_ck(**kw: Any) -> dict[str, str]:
        return {**mid, "r/checkpoint.json": json.dumps({**ck, **kw}, indent=2)}

    def without(*keys: str) -> dict[str, str]:
        return {**mid, "r/checkpoint.json": json.dumps({k: v for k, v in ck.items() if k not in keys}, indent=2)}

    def swap(rel: str, text: str | None) -> dict[str, str]:
        files = {k: v for k, v in mid.items() if k != f"r/{rel}"}
        if text is not None:
            files[f"r/{rel}"] = text
        return files

    ckj = json.dumps(ck, indent=2)
    cases: list[tuple[str, list[str], dict[str, str]]] = [
        ("checkpoint-garbage", RESUME, swap("checkpoint.json", "garbage{")),
        ("checkpoint-empty", RESUME, swap("checkpoint.json", "")),
        ("checkpoint-binary", RESUME, swap("checkpoint.json", _garbage(800))),
        ("checkpoint-not-utf8", RESUME, swap("checkpoint.json", ckj[:50] + "\udcfe" + ckj[50:])),
        ("checkpoint-list", RESUME, swap("checkpoint.json", "[1, 2]")),
        ("checkpoint-null", RESUME, swap("checkpoint.json", "null")),
        ("checkpoint-truncated", RESUME, swap("checkpoint.json", ckj[: len(ckj) // 2])),
        ("checkpoint-deep", RESUME, swap("checkpoint.json", '{"rounds": ' + _deep(100000) + "}")),
        ("checkpoint-dup-round", RESUME, swap("checkpoint.json", ckj.rstrip()[:-1] + ', "round": 3}')),
        ("checkpoint-old-format-joins", RESUME, with_ck(joins=[1, 1])),
        ("checkpoint-config-not-dict", RESUME, with_ck(config=[1])),
        ("checkpoint-config-clients-3", RESUME, with_ck(config={**ck["config"], "clients": 3})),
        ("checkpoint-config-unknown-key", RESUME, with_ck(config={**ck["config"], "zzz": 1})),
        ("checkpoint-config-epsilon-NaN", RESUME, with_ck(config={**ck["config"], "epsilon": float("nan")})),
        ("checkpoint-extra-field", RESUME, with_ck(zzz=1)), ("checkpoint-no-wall_s", RESUME, without("wall_s")),
        ("checkpoint-no-theta_file", RESUME, without("theta_file")), ("checkpoint-no-config", RESUME, without("config")),
        ("round-4", RESUME, with_ck(round=4, rounds=ck["rounds"] * 4)), ("round-neg", RESUME, with_ck(round=-1)),
        ("round-float", RESUME, with_ck(round=1.0)), ("round-true", RESUME, with_ck(round=True)),
        ("round-string", RESUME, with_ck(round="1")),
        ("round-1e400", RESUME, swap("checkpoint.json", ckj.replace('"round": 1,', '"round": 1e400,', 1))),
        ("round-2-one-record", RESUME, with_ck(round=2)),
        ("round-0-with-charges", RESUME, with_ck(round=0, rounds=[])),
        ("rounds-not-dicts", RESUME, with_ck(rounds=[3])), ("rounds-too-many", RESUME, with_ck(rounds=ck["rounds"] * 2)),
        ("wall_s-NaN", RESUME, with_ck(wall_s=float("nan"))), ("wall_s-Infinity", RESUME, with_ck(wall_s=float("inf"))),
        ("wall_s-neg", RESUME, with_ck(wall_s=-1.0)), ("wall_s-string", RESUME, with_ck(wall_s="1")),
        ("run_id-empty", RESUME, with_ck(run_id="")), ("run_id-int", RESUME, with_ck(run_id=5)),
        ("run_id-other", RESUME, with_ck(run_id="ffffffffffff")),
        ("theta_file-int", RESUME, with_ck(theta_file=5)),
        ("theta_file-traversal", RESUME, with_ck(theta_file="../checkpoint_theta-000001.npy")),
        ("theta_file-absolute", RESUME, with_ck(theta_file="/etc/passwd")),
        ("theta_file-other-name", RESUME, with_ck(theta_file="checkpoint.json")),
        ("theta_file-absent-round", RESUME, with_ck(theta_file="checkpoint_theta-000009.npy")),
        ("theta_file-is-dir", RESUME, {**with_ck(theta_file="checkpoint_theta-dir"), "r/checkpoint_theta-dir/x": ""}),
        ("theta-missing", RESUME, swap(theta, None)), ("theta-empty", RESUME, swap(theta, "")),
        ("theta-text", RESUME, swap(theta, "0.1 0.2 0.3 0.4\n")),
        ("theta-truncated", RESUME, swap(theta, mid[f"r/{theta}"][:100])),
        ("theta-garbage-tail", RESUME, swap(theta, mid[f"r/{theta}"] + _garbage(64))),
        *[(f"theta-{k}", RESUME, swap(theta, npy[f"{k}.npy"]))
          for k in ("shape", "dtype", "nan", "inf", "scalar", "2d", "int", "huge", "object")],
        ("transcript-missing", RESUME, swap("transcript.jsonl", None)),
        ("transcript-empty", RESUME, swap("transcript.jsonl", "")),
        ("transcript-garbage", RESUME, swap("transcript.jsonl", _garbage(1000))),
        ("transcript-is-dir", RESUME, {**swap("transcript.jsonl", None), "r/transcript.jsonl/x": ""}),
        ("transcript-header-only", RESUME, swap("transcript.jsonl", tr.splitlines()[0] + "\n")),
        ("transcript-last-line-cut", RESUME, swap("transcript.jsonl", tr[: len(tr) - 30])),
        ("transcript-edited", RESUME, swap("transcript.jsonl", tr.replace('"epsilon": 3.0', '"epsilon": 0.5'))),
        ("transcript-rechained-eps", RESUME, swap("transcript.jsonl", rechain(
            [TL[0], *[{**e, "event": {**e["event"], "epsilon": 0.5}} if "event" in e else e for e in TL[1:]]]))),
        ("transcript-rechained-count-0", RESUME, swap("transcript.jsonl", rechain([TL[0], *[{**e, "count": 0} if "event" in e
                                                                                         else e for e in TL[1:]]]))),
        ("transcript-of-done-run", RESUME, swap("transcript.jsonl", mat["done"]["transcript.jsonl"])),
        ("transcript-garbage-appended", RESUME, swap("transcript.jsonl", tr + "garbage\n")),
        ("transcript-summary-appended", RESUME, swap("transcript.jsonl", tr + mat["done"]["transcript.jsonl"]
                                                     .splitlines()[-1] + "\n")),
        ("prefix-lines-99", RESUME, with_ck(transcript={**ck["transcript"], "lines": 99})),
        ("prefix-lines-neg", RESUME, with_ck(transcript={**ck["transcript"], "lines": -1})),
        ("prefix-lines-0", RESUME, with_ck(transcript={**ck["transcript"], "lines": 0})),
        ("prefix-lines-1", RESUME, with_ck(transcript={**ck["transcript"], "lines": 1})),
        ("prefix-lines-float", RESUME, with_ck(transcript={**ck["transcript"], "lines": 2.0})),
        ("prefix-sha-wrong", RESUME, with_ck(transcript={**ck["transcript"], "sha256": "0" * 64})),
        ("prefix-sha-int", RESUME, with_ck(transcript={**ck["transcript"], "sha256": 5})),
        ("prefix-string", RESUME, with_ck(transcript="abc")),
        ("prefix-extra-key", RESUME, with_ck(transcript={**ck["transcript"], "x": 1})),
        ("kind-is-sweep", RESUME, {**mid, "r/.sstq-fl-kind": json.dumps({"kind": "sweep"})}),
        ("cli-rounds-differ", ["run", *TINY, "--rounds", "4", "--randomness", "secure", "--out", "r", "--resume"], mid),
        ("cli-seed-differs", [*RESUME, "--seed", "5"], mid),
        ("cli-randomness-differs", ["run", *TINY, "--rounds", "3", "--out", "r", "--resume"], mid),
        ("resume-a-file", ["run", *TINY, "--rounds", "3", "--randomness", "secure", "--out", "f", "--resume"],
         {"f": "x\n"}),
        ("resume-compare-folder", RESUME, {f"r/{k}": v for k, v in mat["cmp"].items()}),
    ]
    return [("resume", name, argv, files) for name, argv, files in cases]


def cases() -> list[Case]:
    """Every case of this module."""
    return gen_cases() + replay_cases() + privacy_cases() + bench_cases() + plot_cases() + misc_cases() + resume_cases()


if __name__ == "__main__":
    import collections

    allc = cases()
    print(len(allc), dict(collections.Counter(c[0] for c in allc)))
