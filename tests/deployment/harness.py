"""A Flower federation of real processes on 127.0.0.1 for the deployment tests.

One ``flower-superlink`` and N ``flower-supernode`` processes, each started through
``docker/launch.py`` (the images' ENTRYPOINT, so the tests run the images' exact command
lines), with or without TLS; runs are submitted with ``flwr run <repo> <connection>`` where
the connection is defined in a private ``FLWR_HOME/config.toml``.

Every process runs in its own session (process group) and logs to a file with timestamps;
:meth:`Federation.close` terminates the groups (SIGTERM, then SIGKILL), also anything whose
command line names one of the federation's ports (the SuperExec and ServerApp/ClientApp
processes that Flower spawns, some in sessions of their own), and checks with ``pgrep`` that
nothing is left.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
BIN = Path(sys.executable).parent


def load_docker_module(name: str) -> ModuleType:
    """``docker/<name>.py`` as a module (docker/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"sstq_docker_{name}", DOCKER / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class Proc:
    """A process in its own session whose output goes, time-stamped, to a log file (and memory)."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], log: Path, t0: float, cwd: Path | None = None):
        self.name, self.cmd, self.path, self.t0 = name, cmd, log, t0
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.p = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.p.pid
        self.reader = threading.Thread(target=self._pump, args=(self.p.stdout, log.open("a")), daemon=True)
        self.reader.start()

    def _pump(self, src: IO[bytes] | None, dst: IO[str]) -> None:
        assert src is not None
        ansi = re.compile(r"\x1b\[[0-9;]*m")
        with dst:
            for raw in src:
                line = ansi.sub("", raw.decode(errors="replace").rstrip())
                dst.write(f"{time.time() - self.t0:7.2f} {line}\n")
                dst.flush()
                with self.cond:
                    self.lines.append(line)
                    self.cond.notify_all()

    def wait_for(self, pattern: str, timeout: float, start: int = 0) -> int:
        """Index of the first log line (from ``start``) matching ``pattern``; raise on timeout or exit."""
        rx = re.compile(pattern)
        deadline = time.time() + timeout
        with self.cond:
            i = start
            while True:
                while i < len(self.lines):
                    if rx.search(self.lines[i]):
                        return i
                    i += 1
                left = deadline - time.time()
                if left <= 0 or (self.p.poll() is not None and not self.reader.is_alive()):
                    raise TimeoutError(f"{self.name}: no log line matching {pattern!r} in {timeout:.0f} s "
                                       f"(exit code {self.p.poll()}); see {self.path}")
                self.cond.wait(min(left, 0.5))

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def alive(self) -> bool:
        return self.p.poll() is None

    def text(self) -> str:
        with self.cond:
            return "\n".join(self.lines)


class Federation:
    """SuperLink + ``clients`` SuperNodes on loopback, optionally with TLS (certificates made here)."""

    def __init__(self, tmp: Path, clients: int, tls: bool, env: dict[str, str] | None = None,
                 client_env: dict[str, str] | None = None, auth: bool = False, trust_aggregator: bool = False):
        self.tmp, self.clients, self.tls = tmp, clients, tls
        self.t0 = time.time()
        self.logs = tmp / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.port, self.spare_port, *self.node_ports = free_ports(2 + clients)
        self.home = tmp / "flwr-home"
        self.procs: list[Proc] = []
        self.superlink: Proc | None = None
        self.nodes: dict[int, Proc] = {}
        self.base_env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "FLWR_DISABLE_UPDATE_CHECK": "1",
                         "FLWR_TELEMETRY_ENABLED": "0", "PYTHONUNBUFFERED": "1", **(env or {})}
        self.client_env = {"SSTQ_TRUST_AGGREGATOR": "true" if trust_aggregator else "false", **(client_env or {})}
        self.tls_dir: Path | None = None
        self.keys: list[tuple[Path, Path]] = []  # SuperNode authentication: (private, public) per partition
        certs = load_docker_module("certs")
        if tls:
            self.tls_dir = tmp / "certs"
            certs.generate(self.tls_dir, ("localhost", "127.0.0.1"))
        if auth:
            assert tls, "Flower's SuperNode authentication needs TLS"
            self.keys = certs.supernode_keys(tmp / "keys", clients)
        self._write_flwr_config()

    # ------------------------------------------------------------------ processes
    def _launch(self, name: str, role: str, env: dict[str, str]) -> Proc:
        cmd = [sys.executable, str(DOCKER / "launch.py"), role]
        p = Proc(name, cmd, env, self.logs / f"{name}.log", self.t0, cwd=self.tmp)
        self.procs.append(p)
        return p

    def start_superlink(self, database: Path | None = None) -> Proc:
        env = {**self.base_env, "FLWR_HOME": str(self.tmp / "superlink-home"), "SSTQ_HOST": "127.0.0.1",
               "SSTQ_PORT": str(self.port), "SSTQ_TLS_DIR": str(self.tls_dir or ""),
               "SSTQ_DATABASE": str(database) if database else ":flwr-in-memory:",
               "SSTQ_SUPERNODE_AUTH": "1" if self.keys else ""}
        n = sum(p.name.startswith("superlink") for p in self.procs)
        self.superlink = self._launch(f"superlink-{n}", "superlink", env)
        self.superlink.wait_for(r"Uvicorn running|Application startup complete", 60)
        return self.superlink

    def start_supernode(self, k: int, key: Path | None = None) -> Proc:
        """SuperNode for partition ``k`` (with the partition's key when authentication is on).

        With ``key``: an extra SuperNode for partition ``k`` with that key, on a spare port, not
        counted as the partition's node.
        """
        extra = key is not None
        key = key or (self.keys[k][0] if self.keys else None)
        env = {**self.base_env, **self.client_env, "FLWR_HOME": str(self.tmp / f"supernode-{k}-home"),
               "SSTQ_SUPERLINK": f"127.0.0.1:{self.port}", "SSTQ_PARTITION_ID": str(k),
               "SSTQ_NUM_PARTITIONS": str(self.clients), "SSTQ_NODE_PORT": str(self.spare_port if extra else self.node_ports[k]),
               "SSTQ_TLS_DIR": str(self.tls_dir or ""), "SSTQ_AUTH_KEY": str(key or "")}
        name = "extra-supernode" if extra else "supernode"
        n = sum(p.name.startswith(f"{name}-{k}") for p in self.procs)
        p = self._launch(f"{name}-{k}.{n}", "supernode", env)
        if not extra:
            self.nodes[k] = p
        return p

    def start(self, database: Path | None = None) -> Federation:
        self.start_superlink(database)
        if self.keys:
            self.register([pub for _, pub in self.keys])
        for k in range(self.clients):
            self.start_supernode(k)
        for k in range(self.clients):
            self.nodes[k].wait_for(r"SuperNode ID:", 60)
        return self

    # ------------------------------------------------------------------ runs
    def _write_flwr_config(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        lines = ["[superlink]", 'default = "deployment"', "", "[superlink.deployment]", f'address = "127.0.0.1:{self.port}"']
        lines.append(f'root-certificates = "{self.tls_dir / "ca.crt"}"' if self.tls_dir else "insecure = true")
        (self.home / "config.toml").write_text("\n".join(lines) + "\n")

    def flwr(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``flwr ARGS...`` with this federation's FLWR_HOME (its ``deployment`` connection)."""
        return subprocess.run([str(BIN / "flwr"), *args], env={**self.base_env, "FLWR_HOME": str(self.home)},
                              capture_output=True, text=True, timeout=timeout, cwd=self.tmp)

    def register(self, public_keys: list[Path]) -> None:
        """``flwr supernode register KEY.pub deployment`` for each key (concurrently)."""
        env = {**self.base_env, "FLWR_HOME": str(self.home)}
        procs = [subprocess.Popen([str(BIN / "flwr"), "supernode", "register", str(pub), "deployment"], env=env,
                                  cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for pub in public_keys]
        for pub, p in zip(public_keys, procs):
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0 and "registered successfully" in out, f"registering {pub}: {out[-2000:]}"

    def submit(self, run_config: dict[str, Any], app: Path = ROOT) -> Proc:
        """``flwr run <app> deployment --stream -c ...`` (``app``: the repo root, or :func:`faulty_app`'s copy;
        returns the CLI process)."""
        override = " ".join(f"{k}={json.dumps(v)}" for k, v in run_config.items())
        cmd = [str(BIN / "flwr"), "run", str(app), "deployment", "--stream", "-c", override]
        env = {**self.base_env, "FLWR_HOME": str(self.home)}
        n = sum(p.name.startswith("flwr-run") for p in self.procs)
        p = Proc(f"flwr-run-{n}", cmd, env, self.logs / f"flwr-run-{n}.log", self.t0, cwd=self.tmp)
        self.procs.append(p)
        return p

    def run(self, run_config: dict[str, Any], timeout: float, app: Path = ROOT) -> Proc:
        p = self.submit(run_config, app)
        try:
            p.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"flwr run did not finish in {timeout:.0f} s (logs: {self.logs})\n{p.text()[-3000:]}") from None
        p.reader.join(5)
        return p

    # ------------------------------------------------------------------ shutdown
    def markers(self) -> str:
        """A regex matching the command line of every process of this federation (its ports)."""
        ports = "|".join(str(p) for p in [self.port, self.spare_port, *self.node_ports])
        return rf"(127\.0\.0\.1:({ports})|--port ({ports}))( |$)"

    def leftovers(self) -> list[str]:
        out = subprocess.run(["pgrep", "-a", "-f", self.markers()], capture_output=True, text=True).stdout
        return [line for line in out.splitlines() if line.strip() and not line.startswith(f"{os.getpid()} ")]

    def kill_runtime(self, sig: int = signal.SIGKILL) -> None:
        """Signal the SuperLink's SuperExec and ServerApp processes (Flower starts them in other sessions)."""
        _signal_matching(rf"--runtime-api-address 127\.0\.0\.1:{self.port}( |$)", sig)

    def kill(self, procs: Iterable[Proc], sig: int = signal.SIGTERM) -> None:
        for p in procs:
            p.signal_group(sig)

    def close(self, grace: float = 15.0) -> list[str]:
        """Stop everything; return what was still running after SIGTERM + grace (killed with SIGKILL)."""
        self.kill(self.procs, signal.SIGTERM)
        _signal_matching(self.markers(), signal.SIGTERM)
        deadline = time.time() + grace
        while time.time() < deadline and (any(p.alive() for p in self.procs) or self.leftovers()):
            time.sleep(0.3)
        stubborn = self.leftovers() + [f"{p.pid} {p.name}" for p in self.procs if p.alive()]
        self.kill(self.procs, signal.SIGKILL)
        _signal_matching(self.markers(), signal.SIGKILL)
        for p in self.procs:
            try:
                p.p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        return stubborn


def _signal_matching(pattern: str, sig: int) -> None:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    for pid in out:
        if int(pid) != os.getpid():
            try:
                os.kill(int(pid), sig)
            except ProcessLookupError:
                pass


def faulty_app(tmp: Path) -> Path:
    """A copy of the repository's Flower app whose ClientApp is the fault-injecting test app
    (tests/flower/faults.py, as ``clients/faulty_client.py``): the shipped app has no fault hook."""
    app = tmp / "faulty-app"
    for part in ("sstq_fl", "clients", "strategies"):
        shutil.copytree(ROOT / part, app / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "README.md", app / "README.md")
    shutil.copy(ROOT / "tests" / "flower" / "faults.py", app / "clients" / "faulty_client.py")
    toml = (ROOT / "pyproject.toml").read_text()
    assert 'clientapp = "clients.sstq_client:app"' in toml
    (app / "pyproject.toml").write_text(toml.replace('clientapp = "clients.sstq_client:app"',
                                                     'clientapp = "clients.faulty_client:faulty_app"'))
    return app


def wait_until(cond: Callable[[], bool], timeout: float, what: str, poll: float = 0.2) -> None:
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)
