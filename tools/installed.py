"""The host's installed Python packages and their versions, read once per run into the fingerprint.

The source is the report the fingerprint already reads: ``python -m sglang.check_env`` prints
``PyTorch: VERSION`` and one ``NAME: VERSION`` line per package of its ``PACKAGE_LIST``, each read with
``importlib.metadata.version`` by the host's own Python (SGLang 0.5.9 and 0.5.23
python/sglang/check_env.py ``get_package_versions``; ``Module Not Found`` for one that is not
installed): the packages SGLang itself reports, not every installed distribution. Names are kept as pip
compares them (PEP 503: ``flashinfer_python`` is ``flashinfer-python``), so a name written in a case or a
note matches whatever spelling the host uses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = ["dist_key", "distributions_of", "installed_from_check_env", "same_version", "toolkit_versions"]

#: check_env's key for the PyTorch line (check_env.py prints it before the package list) and the
#: distribution it is.
_CHECK_ENV_ALIASES = {"pytorch": "torch"}
_VERSION = re.compile(r"^v?\d+(?:\.[0-9A-Za-z+\-_]+)*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")


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


def distributions_of(package: str, installed: Iterable[str]) -> list[str]:
    """The installed distributions an import name (a traceback frame's top-level package, ``sgl_kernel``,
    ``flashinfer``) belongs to: the one of the same name, else those named after it with a suffix
    (``flashinfer`` -> ``flashinfer-python``, ``flashinfer-cubin``), sorted; ``[]`` when none is installed."""
    key = dist_key(package)
    names = sorted(set(installed))
    if key in names:
        return [key]
    return [n for n in names if n.startswith(key + "-")]


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
