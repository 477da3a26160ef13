"""A trained LoRA adapter back into llama.cpp, as a registry model.

llama.cpp's own converters do the work: the llama-cpp-python 0.3.36 sdist vendors
``convert_lora_to_gguf.py`` and ``convert_hf_to_gguf.py`` (with their ``gguf-py``). They are
taken from that sdist, found in ``$RLMD_HOME/cache/llama-cpp-python/`` or
``~/.cache/rlmd/sdist/`` or fetched with ``pip download llama-cpp-python==0.3.36 --no-deps
--no-binary :all:``, extracted once, and run as scripts (never copied into rlmd).

The adapter GGUF is loaded by the local provider with ``Llama(lora_path=...)`` on top of the
base GGUF. :func:`register` writes ``<models dir>/adapters/NAME.json``; the registry lists
every such file as a local model (``rlmd models``), usable by ``rlmd run``, the daemon and
the benchmarks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from rlmd import paths

LLAMA_CPP_PYTHON = "0.3.36"
_VENDOR = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/"
_MEMBERS = ("convert_lora_to_gguf.py", "convert_hf_to_gguf.py", "conversion/", "gguf-py/")


class ConverterError(RuntimeError):
    """The llama.cpp converter could not be found or failed (the message has its output)."""


def _sdist_candidates() -> list[Path]:
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    return [
        paths.home() / "cache" / "llama-cpp-python" / name,
        Path.home() / ".cache" / "rlmd" / "sdist" / name,
    ]


def converter_dir() -> Path:
    """The folder holding the extracted converters (extracting or downloading the sdist the
    first time).

    Raises:
        ConverterError: the sdist is not on disk and ``pip download`` failed.
    """
    target = paths.home() / "cache" / "llama-cpp-python" / LLAMA_CPP_PYTHON
    if (target / "convert_lora_to_gguf.py").exists():
        return target
    sdist = next((p for p in _sdist_candidates() if p.exists()), None)
    if sdist is None:
        dest = _sdist_candidates()[0].parent
        dest.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", f"llama-cpp-python=={LLAMA_CPP_PYTHON}"]
        cmd += ["--no-deps", "--no-binary", ":all:", "-d", str(dest)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        sdist = _sdist_candidates()[0]
        if proc.returncode or not sdist.exists():
            raise ConverterError(
                f"could not fetch the llama-cpp-python sdist: {proc.stderr[-2000:]}"
            )
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        members = [
            m
            for m in tar.getmembers()
            if m.name.startswith(_VENDOR) and m.name[len(_VENDOR) :].startswith(_MEMBERS)
        ]
        for m in members:
            m.name = m.name[len(_VENDOR) :]
        tar.extractall(target, members=members, filter="data")
    return target


def _run(script: str, args: list[str]) -> None:
    d = converter_dir()
    env = {**os.environ, "PYTHONPATH": str(d / "gguf-py"), "NO_LOCAL_GGUF": ""}
    proc = subprocess.run(
        [sys.executable, str(d / script), *args], capture_output=True, text=True, env=env
    )
    if proc.returncode:
        raise ConverterError(f"{script} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")


_ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def adapter_dir(run_dir: str | Path) -> Path:
    """The PEFT adapter folder of a training run: ``RUN/adapter`` once the run reached its
    ``--steps``; for a run stopped before (a timeout, Ctrl-C), its last Trainer checkpoint
    (``RUN/checkpoints/checkpoint-N`` with the highest N holding an adapter).

    Raises:
        ConverterError: the run has neither (it stopped before its first checkpoint).
    """
    run_dir = Path(run_dir)
    final = run_dir / "adapter"
    if all((final / f).is_file() for f in _ADAPTER_FILES):
        return final
    steps = []
    for ckpt in (run_dir / "checkpoints").glob("checkpoint-*"):
        step = ckpt.name.removeprefix("checkpoint-")
        if step.isdigit() and all((ckpt / f).is_file() for f in _ADAPTER_FILES):
            steps.append((int(step), ckpt))
    if not steps:
        raise ConverterError(
            f"no adapter in {run_dir}: neither {final} nor a checkpoint under "
            f"{run_dir / 'checkpoints'} holds {' and '.join(_ADAPTER_FILES)} (the run "
            "stopped before its first checkpoint; --save-steps sets how often they are saved)"
        )
    return max(steps)[1]


def convert_adapter(run_dir: str | Path, outfile: str | Path | None = None) -> Path:
    """Convert the run's adapter (PEFT; :func:`adapter_dir`: the final one, or a stopped
    run's last checkpoint) to a llama.cpp LoRA GGUF (f32), using ``RUN/base``'s config.
    Returns the GGUF path (default ``RUN/adapter.gguf``).

    Raises:
        ConverterError: no adapter, or the converter failed.
    """
    run_dir = Path(run_dir)
    out = Path(outfile) if outfile else run_dir / "adapter.gguf"
    source = adapter_dir(run_dir)
    _run(
        "convert_lora_to_gguf.py",
        ["--base", str(run_dir / "base"), "--outfile", str(out), "--outtype", "f32",
         str(source)],
    )  # fmt: skip
    return out


def convert_model(hf_dir: str | Path, outfile: str | Path) -> Path:
    """Convert a Hugging Face model folder to a GGUF (f32) with ``convert_hf_to_gguf.py``
    (for a base model that has no GGUF, such as the tests' tiny one)."""
    _run("convert_hf_to_gguf.py", [str(hf_dir), "--outfile", str(outfile), "--outtype", "f32"])
    return Path(outfile)


def adapters_dir() -> Path:
    return paths.models_dir() / "adapters"


def register(name: str, base: str, lora_path: str | Path, **extra: Any) -> Path:
    """Make ``name`` a registry model: the local ``base`` (a pulled model name or a GGUF
    path) with the LoRA GGUF ``lora_path``. Returns the entry file written.

    Raises:
        ValueError: ``name`` is not a plain name (letters, digits, ``.-_``).
    """
    if not name or not all(c.isalnum() or c in "._-" for c in name):
        raise ValueError(f"model name {name!r}: use letters, digits, '.', '-' and '_' only")
    adapters_dir().mkdir(parents=True, exist_ok=True)
    entry = {"base": base, "lora_path": str(Path(lora_path).resolve()), **extra}
    path = adapters_dir() / f"{name}.json"
    path.write_text(json.dumps(entry, indent=2))
    return path
