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


#: What makes a test slow: it starts real processes (the hypoloop command, a lab server, sshd, Slurm,
#: Chromium, a terminal). `pytest -m "not slow"` runs the rest, the in-process tests (README, "Tests").
_SLOW_FIXTURES = frozenset({"sshd", "own_sshd", "slurm_cluster", "small_disks"})
_SLOW_SOURCE = ("clirun", "subprocess", "pexpect", "CHROMIUM", "Popen", "TMUX", "run_cli", "launch_server",
                "start_new_session", "connect_host(", "LocalHost(", "run_agent(", "_lab_host", "serve_forever",
                "studio_graph(", "graph.invoke(")
#: How deep calls are followed from a test (test -> helper -> helper ...).
_SLOW_DEPTH = 30


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` every test that starts a process: by its fixtures, or by the source of the test, of
    its fixtures or of any function they call (followed through the modules' globals, a few calls deep)."""
    for item in items:
        fn = getattr(item, "function", None)
        fixtures = set(getattr(item, "fixturenames", ()))
        roots: list[Any] = [fn] if fn is not None else []
        info = getattr(item, "_fixtureinfo", None)
        for defs in (getattr(info, "name2fixturedefs", {}) or {}).values():
            roots += [getattr(d, "func", None) for d in defs]
        if fixtures & _SLOW_FIXTURES or any(_starts_processes(r, _SLOW_DEPTH, set()) for r in roots if r is not None):
            item.add_marker(pytest.mark.slow)


_STARTS: dict[int, bool] = {}


def _starts_processes(fn: Any, depth: int, seen: set[int]) -> bool:
    """Whether ``fn``'s source, or that of a function it calls by a name of its module, starts processes
    (memoised per function)."""
    import inspect
    import re

    fn = inspect.unwrap(fn) if callable(fn) else fn
    key = id(fn)
    if key in _STARTS:
        return _STARTS[key]
    if key in seen or depth < 0:
        return False
    seen.add(key)
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    found = any(word in source for word in _SLOW_SOURCE) or "HYPOLOOP_LAB_TIME_SCALE" in source
    space = getattr(fn, "__globals__", None) or vars(sys.modules.get(getattr(fn, "__module__", ""), sys))
    for name in set(re.findall(r"\b([A-Za-z_]\w*)\(", source)) if not found else ():
        callee = space.get(name)
        if not (inspect.isfunction(callee) or inspect.isclass(callee)):
            continue
        mod = (getattr(callee, "__module__", "") or "").split(".")[0]
        # the project's own code and the tests' helpers; not the standard library or third parties
        if mod in ("agent", "tools", "lab", "bench", "clirun", "fakes", "conftest", "planner_steps", "cpubed", "realrun") \
                or mod.startswith("test"):
            if _starts_processes(callee, depth - 1, seen):
                found = True
                break
    _STARTS[key] = found
    return found


def pytest_runtest_call(item: pytest.Item) -> None:
    """Under ``-m "not slow"``, a test that starts a process anyway fails and says so: the quick subset
    must really start none (the collection above has missed it: mark it ``slow``)."""
    expr = item.config.getoption("markexpr", "") or ""
    if "not slow" not in expr or item.get_closest_marker("slow"):
        return
    _PROCESS_WATCH["test"] = item.nodeid
    _PROCESS_WATCH.setdefault("hooked", _install_process_hook())


_PROCESS_WATCH: dict[str, Any] = {}


def _install_process_hook() -> bool:
    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event in ("subprocess.Popen", "os.posix_spawn", "os.fork") and _PROCESS_WATCH.get("test"):
            test = _PROCESS_WATCH.pop("test")
            raise RuntimeError(f"{test} started a process ({event} {str(args[:2])[:120]}) but is not marked slow")

    sys.addaudithook(hook)
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """The process watch covers a test's call only (fixtures may start what they like: they are marked)."""
    _PROCESS_WATCH.pop("test", None)
    yield


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
    config.addinivalue_line("markers", "slow: starts real processes (deselect with -m 'not slow')")
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


# --- real engines: real SGLang and real vLLM serving a tiny trained Llama on this CPU (.ci/real-engines) ---


class EnginesBed:
    """The real-engine bed built by `.ci/real-engines`: `.root` (the environment), `.python` (its
    interpreter, which has sglang and vllm), `.model` (the tiny trained Llama's folder) and `.healthy`
    (what that model answers greedily when served correctly: a list of {kind, prompt, answer}, written
    by `.ci/tiny_llama.py`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = root / "bin" / "python"
        self.model = root / "tiny-llama"
        healthy = self.model / "healthy.json"
        self.healthy: list[dict[str, str]] = (
            __import__("json").loads(healthy.read_text()) if healthy.is_file() else []
        )

    def env(self) -> dict[str, str]:
        """The environment a launch on this bed needs: its bin first on PATH, nothing downloaded."""
        return {
            **os.environ,
            "PATH": f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }


@pytest.fixture(scope="session")
def engines() -> EnginesBed:
    """The real-engine bed; skipped with the reason where it is not built, a failure under CI=true
    (.ci/run builds it). Build it by hand with `.ci/real-engines` (3-5 minutes, cached)."""
    from bench.real import bed_missing, bed_root

    root = bed_root()
    reason = bed_missing(root)
    if reason is not None:
        if _in_ci():
            pytest.fail(reason + "; .ci/run builds it, so under CI this is an error")
        pytest.skip(reason + " (3-5 minutes, cached outside the checkout)")
    return EnginesBed(root)


def engine_processes(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose environment holds `marker` (e.g. the test's
    HYPOLOOP_HOME, inherited by everything a hypoloop run starts: the engine, its scheduler children
    that rename themselves, its compile workers), read from /proc. Other users of the machine's engines
    do not count."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except (OSError, IndexError):
            continue
        if state in ("Z", "X") or marker not in environ:
            continue
        found.append((int(entry.name), cmd))
    return found
