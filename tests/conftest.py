"""Shared fixtures."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the hypoloop processes the tests start, however the suite itself was started.

    A background job of a non-interactive shell (``pytest &`` in a script or a job runner) starts with
    SIGINT ignored; the ignore is inherited through exec, and Python installs its KeyboardInterrupt
    handler only when SIGINT is not ignored at startup. Every hypoloop the tests start would then ignore
    SIGINT (it respects an inherited ignore, as Unix programs do): the Ctrl-C tests waited 30 s in vain
    and the terminal one saw exit 0 instead of 130. The tests play a user at a terminal, where Ctrl-C
    reaches the foreground job, so the suite takes SIGINT back: a handler is reset to the default at
    exec, so the processes it starts get Python's usual handler.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _private_hugging_face_cache()


def _private_hugging_face_cache() -> None:
    """The suite's own Hugging Face cache: the lab writes each world's model ``config.json`` into the hub
    cache of the server's environment (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, else
    ``~/.cache/huggingface/hub``), and every process a test starts inherits this environment, so without
    it the tests would write into the developer's real cache. A folder under the system's temporary
    directory, removed when the session ends."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="hypoloop-tests-hf-")
    atexit.register(shutil.rmtree, folder, True)
    os.environ["HF_HOME"] = folder
    os.environ.pop("HF_HUB_CACHE", None)


# --- sshd: a throwaway OpenSSH server on 127.0.0.1 (see .ci/sshd.py) ---------------------------------


def _load_ci_script(stem: str) -> ModuleType:
    """The `.ci/STEM.py` module, loaded once (`.ci` is a script directory, not a package)."""
    name = f"hypoloop_ci_{stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / ".ci" / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_sshd_helper() -> ModuleType:
    """The `.ci/sshd.py` module."""
    return _load_ci_script("sshd")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _require_sshd(helper: ModuleType) -> None:
    """Skip when no OpenSSH server can exist here; under CI=true fail instead (.ci/run installs it)."""
    if helper.sshd_available():
        return
    message = f"no OpenSSH server ({helper.SSHD}) or ssh-keygen on this machine"
    if _in_ci():
        pytest.fail(message + "; .ci/run installs openssh-server, so under CI this is an error")
    pytest.skip(message + " (apt-get install -y openssh-server)")


def _start_sshd(helper: ModuleType, workdir: Path) -> Any:
    """Start sshd; where it cannot run (e.g. not root: /run/sshd), skip outside CI, fail under CI."""
    try:
        return helper.start_sshd(workdir)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        if _in_ci():
            raise
        pytest.skip(f"cannot start a test sshd here: {exc}")


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running sshd for the whole test session: `.target`, `.key`, `.wrong_key`, `.known_hosts`,
    `.cut_connections()`; stopped at the end."""
    helper = load_sshd_helper()
    _require_sshd(helper)
    server = _start_sshd(helper, tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_sshd(tmp_path: Path) -> Iterator[Any]:
    """A separate sshd for one test, for tests that stop and restart it."""
    helper = load_sshd_helper()
    _require_sshd(helper)
    server = _start_sshd(helper, tmp_path / "sshd")
    try:
        yield server
    finally:
        server.stop()


# --- Slurm: a throwaway one-node cluster on 127.0.0.1 (see .ci/slurm.py) -----------------------------


def load_slurm_helper() -> ModuleType:
    """The `.ci/slurm.py` module."""
    return _load_ci_script("slurm")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running one-node Slurm cluster (8 CPUs, 8 fake GPUs) for the whole session: `.partition`,
    `.node`, `.env` (SLURM_CONF), `.command(...)`, `.completions()`; SLURM_CONF is set in this process's
    environment meanwhile, so `sbatch` & co. (and hypoloop subprocesses) find it. Skipped only where
    slurm-wlm is not installed, never under CI=true (.ci/run installs it)."""
    helper = load_slurm_helper()
    if not helper.slurm_available():
        message = "no Slurm here (slurmctld, slurmd, sbatch)"
        if _in_ci():
            pytest.fail(message + "; .ci/run installs slurm-wlm, so under CI this is an error")
        pytest.skip(message + " (apt-get install -y slurm-wlm)")
    try:
        cluster = helper.start_cluster(tmp_path_factory.mktemp("slurm"))
    except (OSError, RuntimeError) as exc:
        if _in_ci():
            raise
        pytest.skip(f"cannot start a test Slurm cluster here: {exc}")
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        cluster.stop()


# --- a small disk: a tmpfs of a few MB that a test fills (a full disk without touching the real one) ---


class SmallDisks:
    """Mounts small tmpfs filesystems (`mount(path)`) and fills them (`fill(path)`: every byte taken,
    so the next write there fails with ENOSPC, as on a full disk; `free(path)` gives the room back).
    Everything mounted is unmounted at the end of the test."""

    def __init__(self) -> None:
        self.mounted: list[Path] = []

    def mount(self, path: Path, size_mb: int = 8) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(path)],
            capture_output=True, text=True, stdin=subprocess.DEVNULL,
        )
        if r.returncode != 0:
            message = f"cannot mount a small tmpfs here ({' '.join(r.stderr.split())}): needs root or CAP_SYS_ADMIN"
            if _in_ci():
                pytest.fail(message + "; under CI this is an error")
            pytest.skip(message)
        self.mounted.append(path)
        return path

    @staticmethod
    def fill(path: Path) -> None:
        fd = os.open(path / ".filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for chunk in (1 << 16, 512, 1):  # down to the last byte a write can take
                try:
                    while True:
                        os.write(fd, b"\0" * chunk)
                except OSError:
                    continue
        finally:
            os.close(fd)

    @staticmethod
    def free(path: Path) -> None:
        (path / ".filler").unlink(missing_ok=True)

    def unmount_all(self) -> None:
        for path in reversed(self.mounted):
            if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(path)], capture_output=True)  # still busy: detach it
        self.mounted.clear()


@pytest.fixture
def small_disks() -> Iterator[SmallDisks]:
    """Small tmpfs filesystems a test can fill; skipped where nothing can be mounted (not root), never
    under CI=true."""
    disks = SmallDisks()
    try:
        yield disks
    finally:
        disks.unmount_all()
