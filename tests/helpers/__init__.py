"""Helpers the tests import by name (``from helpers.server import Daemon``); fixtures stay in
``conftest.py``."""
