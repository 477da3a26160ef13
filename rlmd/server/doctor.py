"""The setup checks behind ``rlmd doctor`` (drawn by :mod:`rlmd.cli.doctor`).

Each check gives ``ok``, ``warn`` (works, but something is missing or odd) or ``fail``
(rlmd cannot work this way), a one-line detail, and for anything not ok the fix.
The exit code is 1 when a check failed, else 0.
"""

from __future__ import annotations

import asyncio
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rlmd import isolation, paths


@dataclass
class Check:
    """One check's outcome: ``name``, ``status`` (``ok|warn|fail|skip``; ``skip``: not available here, not an error), ``detail``, ``fix``."""

    name: str
    status: str
    detail: str
    fix: str | None = None


def check_home() -> Check:
    try:
        home = paths.home()
        probe = home / ".doctor-probe"
        probe.write_text("x")
        probe.unlink()
    except OSError as exc:
        return Check(
            "home",
            "fail",
            f"the rlmd home is not writable: {exc}",
            "set RLMD_HOME to a writable folder",
        )
    return Check("home", "ok", str(home))


def check_store() -> Check:
    from rlmd.store import Store

    try:
        with Store(paths.store_path(), busy_timeout_s=2.0) as store:
            n = store.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
            mode = store.db.execute("PRAGMA journal_mode").fetchone()[0]
    except Exception as exc:
        return Check(
            "store",
            "fail",
            f"{paths.store_path()}: {type(exc).__name__}: {exc}",
            "move the database file away (rlmd creates a new one) or upgrade rlmd",
        )
    return Check("store", "ok", f"{paths.store_path()} ({n} runs, journal {mode})")


async def _health(path: Path) -> dict:
    from rlmd.server.client import Client

    client = await Client.connect(path, timeout=3)
    try:
        return await client.command("rlmd.health", {}, timeout=5)
    finally:
        await client.close()


def check_daemon() -> list[Check]:
    try:
        path = paths.socket_path()
    except PermissionError as exc:  # a socket folder another user owns
        return [Check("socket", "fail", str(exc), "remove it, or set XDG_RUNTIME_DIR")]
    checks = []
    run = paths.run_dir()
    mode = stat.S_IMODE(run.stat().st_mode)
    checks.append(
        Check("run folder", "ok", f"{run} (mode {mode:o})")
        if mode & 0o077 == 0
        else Check(
            "run folder", "warn", f"{run} is mode {mode:o}: others can enter it", f"chmod 700 {run}"
        )
    )
    if not path.exists():
        checks.append(
            Check(
                "daemon",
                "warn",
                f"not running (no socket at {path})",
                "start it with: rlmd serve  (editors start it via rlmd attach --stdio)",
            )
        )
        return checks
    smode = stat.S_IMODE(path.stat().st_mode)
    if smode & 0o077:
        checks.append(
            Check(
                "socket",
                "fail",
                f"{path} is mode {smode:o}: other users may connect",
                "stop the daemon and start it again with rlmd serve",
            )
        )
    else:
        checks.append(Check("socket", "ok", f"{path} (mode {smode:o})"))
    try:
        health = asyncio.run(asyncio.wait_for(_health(path), 10))
    except Exception as exc:
        pid = paths.running_pid()
        if pid is None:
            checks.append(
                Check(
                    "daemon",
                    "warn",
                    f"stale socket {path}: no daemon answers",
                    "start it with: rlmd serve  (it replaces the stale socket)",
                )
            )
        else:
            checks.append(
                Check(
                    "daemon",
                    "fail",
                    f"pid {pid} holds the socket but did not answer "
                    f"health: {type(exc).__name__}: {exc}",
                    f"look at {paths.log_path()}; restart it: kill {pid}; rlmd serve",
                )
            )
        return checks
    tasks = health.get("tasks", {})
    rss = health.get("memory_rss_bytes") or 0
    checks.append(
        Check(
            "daemon",
            "ok",
            f"pid {health['pid']}, up {health['uptime_s']:.0f} s, {health['clients']} client(s), "
            f"{tasks.get('running', 0)} running / {tasks.get('queued', 0)} queued task(s), "
            f"{rss / 2**20:.0f} MiB",
        )
    )
    return checks


async def sandbox_roundtrip(backend: str, options: dict) -> tuple[str, dict]:
    """Start a sandbox of ``backend`` (with ``options``) and run one cell: (timing detail,
    isolation record)."""
    from rlmd.sandbox import create_sandbox

    async def no_calls(fn, args):
        raise RuntimeError("no host calls in doctor")

    box = create_sandbox(backend, **options)
    t0 = time.perf_counter()
    try:
        await box.start(no_calls)
        await box.load_context("doctor")
        result = await box.execute("print(len(context) + 1)", timeout_s=20)
        record = box.isolation
    finally:
        await box.close()
    if result.error or result.stdout.strip() != "7":
        raise RuntimeError(f"unexpected result: {result.stdout!r} {result.error!r}")
    return f"{(time.perf_counter() - t0) * 1000:.0f} ms start + cell", record


def check_sandboxes() -> list[Check]:
    """Start each available backend; the one the user's ``[run]`` config picks is started
    with its ``sandbox_options``, so the check sees the isolation runs really get."""
    from rlmd import config
    from rlmd.sandbox import BACKENDS, DEFAULT_BACKEND, unavailable_reason

    try:
        run = config.load(None).run
    except ValueError:
        run = {}  # the config check reports it
    checks = []
    for backend in BACKENDS:
        chosen = (run.get("sandbox") or DEFAULT_BACKEND) == backend
        options = dict(run.get("sandbox_options") or {}) if chosen else {}
        reason = unavailable_reason(backend)
        if reason is not None:
            checks.append(Check(f"sandbox {backend}", "skip", reason, ""))
            continue
        try:
            detail, record = asyncio.run(asyncio.wait_for(sandbox_roundtrip(backend, options), 30))
        except Exception as exc:
            checks.append(
                Check(
                    f"sandbox {backend}",
                    "fail",
                    f"{type(exc).__name__}: {exc}",
                    "run rlmd doctor again; if it persists, report it with this text",
                )
            )
            continue
        gap = isolation.missing(record)
        if gap:  # it works, but model code would run unisolated: say what is missing
            checks.append(Check(f"sandbox {backend}", "warn", f"{detail}; {gap}", isolation.FIX))
            continue
        note = " (not isolated: trusted code only)" if backend == "inprocess" else ""
        loose = isolation.unenforced(record)
        if loose:
            note += f"; {loose}"
        checks.append(Check(f"sandbox {backend}", "ok", detail + note))
    return checks


def check_models(project: Path) -> list[Check]:
    from rlmd import config

    try:
        settings = config.load(project)
        registry = settings.registry()
    except ValueError as exc:
        return [Check("config", "fail", str(exc), "fix the config file named in the message")]
    checks = [
        Check(
            "config",
            "ok",
            ", ".join(str(s) for s in settings.sources) or "no config files (defaults)",
        )
    ]
    usable: list[tuple[str, str | None]] = []
    unusable: list[tuple[str, str | None]] = []
    for spec, reason in registry.list():
        (usable if reason is None else unusable).append((spec.name, reason))
    default = settings.run.get("model") or config.DEFAULT_MODEL
    try:
        reason = registry.get(default).availability()
    except (KeyError, ValueError) as exc:
        reason = str(exc)
    if reason is None:
        checks.append(Check("default model", "ok", default))
    else:
        fix = (
            f"rlmd models pull {default}"
            if registry.spec(default).provider == "local"
            else "set [run] model in config.toml to a usable model, or pass --model"
        )
        checks.append(
            Check(
                "default model",
                "warn" if usable else "fail",
                f"{default} is not usable: {reason}",
                fix,
            )
        )
    checks.append(
        Check(
            "models",
            "ok" if usable else "warn",
            f"{len(usable)} usable: {', '.join(n for n, _ in usable) or 'none'}",
            None
            if usable
            else "pull a local model (rlmd models pull qwen2.5-coder-1.5b) "
            "or configure a provider (see rlmd models)",
        )
    )
    return checks


def check_docker() -> Check:
    exe = shutil.which("docker")
    if exe is None:
        return Check(
            "docker",
            "warn",
            "docker is not installed (needed only for container sandboxes)",
            "install Docker Engine to use container sandboxes",
        )
    try:
        out = subprocess.run(
            [exe, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("docker", "warn", f"docker info failed: {exc}", "start the Docker engine")
    if out.returncode != 0:
        return Check(
            "docker",
            "warn",
            f"the docker engine does not answer: {(out.stderr or out.stdout).strip()[:200]}",
            "start it (systemctl start docker) and make sure this user may use it",
        )
    return Check("docker", "ok", f"engine {out.stdout.strip()}")


def run_checks(project: Path, *, sandboxes: bool = True, cluster: str | None = None) -> list[Check]:
    """All checks, in order. ``sandboxes=False`` skips starting sandboxes. The cluster is
    checked when ``cluster`` is given (an address, or ``""`` for the configured one) or the
    user config has a ``[cluster]`` table."""
    checks = [Check("python", "ok", f"{sys.version.split()[0]} at {sys.executable}")]
    checks.append(check_home())
    checks.append(check_store())
    checks += check_daemon()
    if sandboxes:
        checks += check_sandboxes()
    checks += check_models(project)
    checks.append(check_docker())
    if cluster is not None or _has_cluster_table():
        from rlmd.cluster.doctor import check_cluster

        checks += check_cluster(cluster or None)
    return checks


def _has_cluster_table() -> bool:
    from rlmd import config

    try:
        return "cluster" in config.load(None).sections
    except ValueError:
        return False  # the config check reports it
