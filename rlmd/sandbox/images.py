"""Moved to :mod:`rlmd.sandbox.docker.images`; this name stays for the callers that still
import it from here."""

from rlmd.sandbox.docker.images import *  # noqa: F403
