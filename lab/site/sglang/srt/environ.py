"""Environment variables of the simulated release, one registry like SGLang's ``srt/environ.py``.

Each variable is a class attribute of ``Envs`` read with ``envs.NAME.get()`` (the default applies when
it is unset). Written for the lab after the shape of SGLang 0.5.x's registry, not copied from it.
"""

import os


class EnvField:
    def __init__(self, default):
        self.default = default

    def __set_name__(self, owner, name):
        self.name = name

    def parse(self, value):
        return value

    def get(self):
        value = os.getenv(self.name)
        if value is None:
            return self.default
        return self.parse(value)

    def is_set(self):
        return self.name in os.environ


class EnvBool(EnvField):
    def parse(self, value):
        return value.strip().lower() in ("1", "true", "yes", "y")


class EnvInt(EnvField):
    def parse(self, value):
        return int(value)


class Envs:
    # Vision encoders
    SGLANG_VIT_ENABLE_CUDA_GRAPH = EnvBool(True)
    SGLANG_VLM_MAX_IMAGES_PER_VIT = EnvInt(4)
    SGLANG_VIT_CUDA_GRAPH_MAX_PATCHES = EnvInt(16384)

    # Model config
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN = EnvBool(False)

    # Logging
    SGLANG_LOG_GC = EnvBool(False)


envs = Envs()
