"""HTTP Basic authentication of registry requests against the cluster's SCRAM users.

The check itself is shared with the web console and lives in :mod:`loglake.basic_auth`
(:class:`~loglake.basic_auth.ScramAuthenticator`: the password against the user's stored
SCRAM credential, successes cached for 30 s by a hash of the password; the ``Authorization``
header parsed by :func:`~loglake.basic_auth.basic_credentials`). This module names it for the
registry's command line.
"""

from __future__ import annotations

from loglake.basic_auth import CACHE_SIZE, CACHE_TTL_S, ScramAuthenticator, basic_credentials

__all__ = ["CACHE_SIZE", "CACHE_TTL_S", "ScramAuthenticator", "basic_credentials"]
