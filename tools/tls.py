"""One TLS context for every HTTP client hypoloop opens to a server it launched.

httpx builds a fresh ``ssl.SSLContext`` for each ``httpx.Client`` and loads the CA bundle into it (about
60 ms on the 2-core CI machine, measured with cProfile on a lab run: ``load_verify_locations``), even when
every URL is plain ``http://``. The health polls, probes and load bursts open a client per request, so that
load was most of the orchestrator's overhead between two launches. The context is built once
(``httpx.create_ssl_context``, httpx 0.28's documented way to configure TLS, passed as ``verify=``) and
shared; an ``ssl.SSLContext`` may be used from several threads at once (Python's ``ssl`` module docs).
"""

from __future__ import annotations

import functools
import ssl

import httpx

__all__ = ["http_client", "tls_context"]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's TLS context for HTTP clients: httpx's default verification (certifi's CA bundle, or
    ``SSL_CERT_FILE``/``SSL_CERT_DIR`` when set), built at the first call and reused."""
    return httpx.create_ssl_context()


def http_client(**options: object) -> httpx.Client:
    """An ``httpx.Client`` for a server hypoloop launched: the shared TLS context (``tls_context``), the
    environment's proxy settings ignored (``trust_env=False``: the server is reached directly or through
    hypoloop's own port forward), and ``options`` (``timeout``, ``headers``, ``limits``) as httpx takes them."""
    return httpx.Client(verify=tls_context(), trust_env=False, **options)  # type: ignore[arg-type]
