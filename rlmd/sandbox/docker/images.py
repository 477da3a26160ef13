"""Sandbox templates: ``sandboxes/<name>/Dockerfile`` folders built into docker images.

Every template image is ``rlmd/sandbox-<name>:latest``. The ``base`` template needs no
registry: its ``FROM`` is ``rlmd/sandbox-rootfs:bookworm``, an image ``docker import``-ed
from a Debian root filesystem made by ``debootstrap`` (cached as a tarball under
``platformdirs.user_cache_dir("rlmd")/rootfs/``). Other templates start ``FROM
rlmd/sandbox-base`` (or another template) and are built after it. Every build context gets
the host's CA bundle as ``host-ca.crt`` (pip inside a ``RUN`` needs it behind a
TLS-intercepting proxy; the base Dockerfile points ``PIP_CERT`` at it).

Templates are looked up in ``$RLMD_SANDBOXES_DIR`` if set, else in the ``sandboxes/`` folder
of the rlmd source tree.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from rlmd.sandbox.base import SandboxError

log = logging.getLogger(__name__)

DEBIAN_RELEASE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
ROOTFS_IMAGE = f"rlmd/sandbox-rootfs:{DEBIAN_RELEASE}"
IMAGE_PREFIX = "rlmd/sandbox-"
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
LABEL_TEMPLATE = "rlmd.template"
LABEL_SOURCE = "rlmd.source-sha256"

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_FROM_TEMPLATE = re.compile(r"^\s*FROM\s+rlmd/sandbox-([a-z0-9_.-]+)", re.IGNORECASE | re.MULTILINE)

Progress = Callable[[str], None]


def templates_dir() -> Path:
    """The folder holding one sub-folder per template: ``$RLMD_SANDBOXES_DIR`` or the
    ``sandboxes/`` folder next to the ``rlmd`` package."""
    env = os.environ.get("RLMD_SANDBOXES_DIR")
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[3] / "sandboxes"


def image_name(template: str) -> str:
    """``"base"`` -> ``"rlmd/sandbox-base:latest"``.

    Raises:
        ValueError: not a valid template name (lowercase letters, digits, ``_.-``).
    """
    if not _NAME.match(template):
        raise ValueError(f"invalid sandbox template name {template!r}")
    return f"{IMAGE_PREFIX}{template}:latest"


def template_names() -> list[str]:
    """Names of the template folders (those holding a ``Dockerfile``), sorted."""
    root = templates_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "Dockerfile").is_file())


def template_path(template: str) -> Path:
    """The folder of ``template``.

    Raises:
        SandboxError: no such template (the message lists the known ones).
    """
    image_name(template)  # validates the name
    path = templates_dir() / template
    if not (path / "Dockerfile").is_file():
        known = ", ".join(template_names()) or "none"
        raise SandboxError(
            f"no sandbox template {template!r} in {templates_dir()} (known: {known})"
        )
    return path


def parent_template(template: str) -> str | None:
    """The template named in ``template``'s ``FROM rlmd/sandbox-NAME`` line, if any."""
    text = (template_path(template) / "Dockerfile").read_text(encoding="utf-8")
    m = _FROM_TEMPLATE.search(text)
    if m is None or m.group(1).split(":")[0] == "rootfs":
        return None
    return m.group(1).split(":")[0]


def source_hash(template: str) -> str:
    """SHA-256 over the template folder's files (names and bytes): an image built from other
    sources is reported as stale."""
    root = template_path(template)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


# --------------------------------------------------------------------------- rootfs


def rootfs_tarball() -> Path:
    """Where the cached debootstrap root filesystem lives (it may not exist yet)."""
    return Path(platformdirs.user_cache_dir("rlmd")) / "rootfs" / f"{DEBIAN_RELEASE}-python3.tar"


def rootfs_unavailable_reason() -> str | None:
    """``None`` if the root filesystem tarball exists or can be made here, else why not."""
    if rootfs_tarball().is_file():
        return None
    if shutil.which("debootstrap") is None:
        return "the base image needs debootstrap (apt-get install debootstrap)"
    if os.geteuid() != 0:
        return "debootstrap needs root to make the base image's root filesystem"
    return None


def ensure_rootfs(progress: Progress | None = None) -> Path:
    """The debootstrap tarball, made first if missing (about 2 minutes, needs root).

    Returns: the tarball's path.

    Raises:
        SandboxError: debootstrap is missing, we are not root, or it failed.
    """
    tar = rootfs_tarball()
    if tar.is_file():
        return tar
    reason = rootfs_unavailable_reason()
    if reason:
        raise SandboxError(reason)
    tar.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=tar.parent))
    try:
        root = work / "root"
        _say(progress, f"debootstrap {DEBIAN_RELEASE} (minbase + python3) into {root} ...")
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=python3",
                DEBIAN_RELEASE,
                str(root),
                DEBIAN_MIRROR,
            ]
        )
        partial = work / "rootfs.tar"
        _run(["tar", "-C", str(root), "-cf", str(partial), "."])
        os.replace(partial, tar)  # atomic: a crash never leaves a half tarball behind
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tar


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise SandboxError(f"{argv[0]} failed (exit {proc.returncode}): {tail}")


def _say(progress: Progress | None, text: str) -> None:
    log.info("%s", text)
    if progress is not None:
        progress(text)


# --------------------------------------------------------------------------- images


def find_image(client: Any, name: str) -> Any | None:
    """The docker image ``name`` (an ``Image``), or ``None`` if it is not built."""
    import docker.errors

    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


def ensure_rootfs_image(client: Any, progress: Progress | None = None) -> Any:
    """The ``rlmd/sandbox-rootfs`` image, imported from the tarball first if missing
    (a few seconds; the tarball is made first if needed).

    Raises:
        SandboxError: the tarball cannot be made, or the import failed.
    """
    image = find_image(client, ROOTFS_IMAGE)
    if image is not None:
        return image
    tar = ensure_rootfs(progress)
    _say(progress, f"docker import {tar} as {ROOTFS_IMAGE} ...")
    repo, tag = ROOTFS_IMAGE.split(":")
    client.api.import_image_from_file(str(tar), repository=repo, tag=tag)
    image = find_image(client, ROOTFS_IMAGE)
    if image is None:
        raise SandboxError(f"docker import of {tar} did not produce {ROOTFS_IMAGE}")
    return image


def build_template(
    client: Any, template: str, *, progress: Progress | None = None, _seen: tuple[str, ...] = ()
) -> Any:
    """Build ``template`` as ``rlmd/sandbox-<template>:latest`` (after the templates it is
    built ``FROM`` if they are missing, and the rootfs image for ``base``). The legacy
    builder's layer cache makes a rebuild of an unchanged template take about a second.

    Returns: the built docker ``Image``.

    Raises:
        SandboxError: unknown template, a cycle of ``FROM`` lines, or the build failed (the
            message holds the end of the build log).
    """
    import docker.errors

    if template in _seen:
        raise SandboxError(f"sandbox templates build FROM each other: {' -> '.join(_seen)}")
    folder = template_path(template)
    parent = parent_template(template)
    if parent is None:
        ensure_rootfs_image(client, progress)
    elif find_image(client, image_name(parent)) is None:
        build_template(client, parent, progress=progress, _seen=(*_seen, template))
    tag = image_name(template)
    _say(progress, f"building {tag} from {folder} ...")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rlmd-build-") as ctx:
        shutil.copytree(folder, ctx, dirs_exist_ok=True)
        ca = Path(HOST_CA)
        (Path(ctx) / "host-ca.crt").write_bytes(ca.read_bytes() if ca.is_file() else b"")
        try:
            image, _logs = client.images.build(
                path=ctx,
                tag=tag,
                labels={LABEL_TEMPLATE: template, LABEL_SOURCE: source_hash(template)},
                rm=True,
                forcerm=True,
                pull=False,
            )
        except docker.errors.BuildError as exc:
            lines = [str(c.get("stream") or c.get("error") or "") for c in exc.build_log]
            raise SandboxError(
                f"building {tag} failed: {exc.msg}\n" + "".join(lines)[-3000:]
            ) from None
        except docker.errors.APIError as exc:
            raise SandboxError(f"building {tag} failed: {exc}") from None
    _say(progress, f"built {tag} ({image.short_id}) in {time.monotonic() - t0:.1f} s")
    return image


@dataclass
class TemplateInfo:
    """One template as ``rlmd sandbox ls`` shows it.

    Attributes:
        name: template name; image: its image tag; path: its folder.
        image_id: short image id, or ``None`` when not built.
        size_bytes: image size in bytes (``None`` when not built).
        created: ISO 8601 creation time of the image (``None`` when not built).
        stale: the image was built from other sources than the folder holds now.
    """

    name: str
    image: str
    path: str
    image_id: str | None = None
    size_bytes: int | None = None
    created: str | None = None
    stale: bool = False


def list_templates(client: Any | None) -> list[TemplateInfo]:
    """Every template folder with its image's state (``client`` ``None``: no engine, so
    nothing is reported as built)."""
    infos = []
    for name in template_names():
        info = TemplateInfo(name=name, image=image_name(name), path=str(template_path(name)))
        image = find_image(client, info.image) if client is not None else None
        if image is not None:
            attrs = image.attrs
            info.image_id = image.short_id.removeprefix("sha256:")
            info.size_bytes = int(attrs.get("Size") or 0)
            info.created = str(attrs.get("Created") or "")[:19]
            labels = (attrs.get("Config") or {}).get("Labels") or {}
            info.stale = labels.get(LABEL_SOURCE) != source_hash(name)
        infos.append(info)
    return infos
