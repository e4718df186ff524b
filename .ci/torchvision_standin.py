"""TEST STAND-IN for torchvision (hypoloop real-engine bed, made by .ci/real-engines). NOT torchvision.

The registry's torchvision is a CUDA build that breaks beside the CPU torch ("operator torchvision::nms
does not exist"), yet SGLang's config package and transformers' image utilities import torchvision names
at import time, even for text-only models. This package satisfies those imports only: every submodule
(torchvision.io, torchvision.transforms.v2.functional, ...) is made on demand, every name in it is a
placeholder, and calling or instantiating a placeholder raises. Text-only serving never calls one.
"""

import importlib.abc
import importlib.machinery
import sys

__version__ = "0.28.0+hypoloop.standin"
HYPOLOOP_TEST_STANDIN = True


class _Placeholder:
    """A name imported from the stand-in: attributes give more placeholders, calling one raises."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name}: torchvision here is hypoloop's test stand-in (no image support)")

    def __repr__(self):
        return f"<torchvision stand-in {self._name}>"

    def __mro_entries__(self, bases):
        return (object,)


def _module_getattr(modname):
    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{modname}.{attr}")

    return __getattr__


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__getattr__ = _module_getattr(module.__name__)
        module.__path__ = []
        module.HYPOLOOP_TEST_STANDIN = True


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
        return None


sys.meta_path.append(_Finder())
__getattr__ = _module_getattr(__name__)
