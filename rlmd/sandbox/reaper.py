"""Moved to :mod:`rlmd.sandbox.docker.reaper`; the daemon imports it from here."""

from rlmd.sandbox.docker.reaper import reap_in_background

__all__ = ["reap_in_background"]
