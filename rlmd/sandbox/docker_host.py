"""Moved to :mod:`rlmd.sandbox.docker.engine`; this name stays for the callers that still
import it from here."""

from rlmd.sandbox.docker.engine import *  # noqa: F403
