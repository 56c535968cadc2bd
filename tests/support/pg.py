"""A throwaway PostgreSQL cluster for the store tests: Debian's server (``make test`` installs it),
``initdb`` into a temporary directory, ``pg_ctl start`` on a free port of 127.0.0.1 with its socket
in that directory, readiness by polling ``pg_isready``, stopped at the end of the session. Root
cannot run the server, so as root the cluster belongs to the ``postgres`` system user (the Debian
package creates it). Without the server or psycopg the tests that need it are skipped, saying why."""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator

import pytest


def _bin_dir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """One running server: ``dsn()`` names a fresh database on it."""

    def __init__(self, bin_dir: str, fsync: bool = False) -> None:
        self.bin, self.fsync = bin_dir, fsync  # tests: no fsync (a throwaway cluster); the benchmark: the default
        self.root = tempfile.mkdtemp(prefix="fsmchat-pg-")
        self.data = os.path.join(self.root, "data")
        self.port = _free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            os.chmod(self.root, 0o700)
            self.as_user = ["runuser", "-u", "postgres", "--"]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.as_user + list(args), capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        r = self.run(f"{self.bin}/initdb", "-D", self.data, "-U", "fsmchat", "--auth=trust", "--no-sync",
                     "--locale=C.UTF-8", "--encoding=UTF8")
        if r.returncode != 0:
            raise RuntimeError(f"initdb failed: {r.stderr.strip()}")
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root}" + ("" if self.fsync else " -c fsync=off")
        r = self.run(f"{self.bin}/pg_ctl", "-D", self.data, "-l", os.path.join(self.root, "log"), "-o", opts,
                     "-w", "start")
        if r.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {r.stderr.strip()} {self.log()}")
        while True:  # pg_ctl -w waited for startup; pg_isready confirms the TCP socket answers (exit 0)
            r = self.run(f"{self.bin}/pg_isready", "-h", "127.0.0.1", "-p", str(self.port), "-t", "5")
            if r.returncode == 0:
                break
            if r.returncode in (2, 3):  # no response / no attempt: the server is not coming up
                raise RuntimeError(f"pg_isready: {r.stdout.strip()} {self.log()}")

    def log(self) -> str:
        try:
            with open(os.path.join(self.root, "log")) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def dsn(self) -> str:
        """A new, empty database on the cluster (each test's store starts empty)."""
        name = "t" + uuid.uuid4().hex[:12]
        r = self.run(f"{self.bin}/createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "fsmchat", name)
        if r.returncode != 0:
            raise RuntimeError(f"createdb failed: {r.stderr.strip()}")
        return f"host=127.0.0.1 port={self.port} user=fsmchat dbname={name}"

    def stop(self) -> None:
        self.run(f"{self.bin}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """The session's PostgreSQL server (skipped, with the reason, when it cannot run here)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'fsmchat[postgres]')")
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL's server is not installed (no /usr/lib/postgresql/*/bin/initdb; `make test` "
                    "installs Debian's postgresql package)")
    cluster = Cluster(bin_dir)
    try:
        cluster.start()
    except (RuntimeError, OSError, KeyError, subprocess.TimeoutExpired) as exc:
        cluster.stop()
        pytest.skip(f"could not start a PostgreSQL server: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_dsn(pg_cluster: Cluster) -> str:
    """The DSN of a new, empty database on the session's server."""
    return pg_cluster.dsn()
