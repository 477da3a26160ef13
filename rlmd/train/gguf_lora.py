"""A trained LoRA adapter back into llama.cpp, as a registry model.

llama.cpp's own converters do the work: the llama-cpp-python 0.3.36 sdist vendors
``convert_lora_to_gguf.py`` and ``convert_hf_to_gguf.py`` (with their ``gguf-py``). They are
taken from that sdist, found in ``$RLMD_HOME/cache/llama-cpp-python/`` or
``~/.cache/rlmd/sdist/`` or fetched with ``pip download llama-cpp-python==0.3.36 --no-deps
--no-binary :all:``, extracted once, and run as scripts (never copied into rlmd).

The adapter GGUF is loaded by the local provider with ``Llama(lora_path=...)`` on top of the
base GGUF; or (:func:`merge_adapter`) the adapter is merged into the base, converted and
quantised into one GGUF that runs at the base model's speed. :func:`register` writes ``<models dir>/adapters/NAME.json``; the registry lists
every such file as a local model (``rlmd models``), usable by ``rlmd run``, the daemon and
the benchmarks.
"""

from __future__ import annotations

import json
import os
import shutil
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
    (``RUN/checkpoints/checkpoint-N`` with the highest N holding an adapter). A checkpoint
    past the steps ``RUN/train.json`` records for ``RUN/adapter`` (the finished run was
    resumed with more ``--steps`` and stopped) wins over that older adapter.

    Raises:
        ConverterError: no such run folder, or the run has neither (it stopped before its
            first checkpoint).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConverterError(f"no training run {run_dir.name!r}: {run_dir} is not a folder")
    final = run_dir / "adapter"
    steps = []
    for ckpt in (run_dir / "checkpoints").glob("checkpoint-*"):
        step = ckpt.name.removeprefix("checkpoint-")
        if step.isdigit() and all((ckpt / f).is_file() for f in _ADAPTER_FILES):
            steps.append((int(step), ckpt))
    if all((final / f).is_file() for f in _ADAPTER_FILES):
        finished = _finished_steps(run_dir)
        if finished is None or not steps or max(steps)[0] <= finished:
            return final
        # the run finished, then was resumed with more --steps and stopped: its last
        # checkpoint is newer than RUN/adapter
    if not steps:
        raise ConverterError(
            f"no adapter in {run_dir}: neither {final} nor a checkpoint under "
            f"{run_dir / 'checkpoints'} holds {' and '.join(_ADAPTER_FILES)} (the run "
            "stopped before its first checkpoint; --save-steps sets how often they are saved)"
        )
    return max(steps)[1]


def _finished_steps(run_dir: Path) -> int | None:
    """The step count ``RUN/train.json`` records for ``RUN/adapter`` (None: no record)."""
    try:
        return int(json.loads((run_dir / "train.json").read_text())["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


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


def convert_model(hf_dir: str | Path, outfile: str | Path, outtype: str = "f32") -> Path:
    """Convert a Hugging Face model folder to a GGUF (``outtype`` f32 or f16) with
    ``convert_hf_to_gguf.py`` (a base model that has no GGUF, such as the tests' tiny one,
    or a merged fine-tune: :func:`merge_adapter`)."""
    _run("convert_hf_to_gguf.py", [str(hf_dir), "--outfile", str(outfile), "--outtype", outtype])
    return Path(outfile)


QUANT_TYPES = {"q4_k_m": 15, "q5_k_m": 17, "q8_0": 7}
"""``rlmd train convert --merge --quant``: llama.cpp's ``LLAMA_FTYPE_MOSTLY_*`` numbers
(q4_k_m is what ``rlmd models pull`` fetches); ``f16`` and ``f32`` skip quantisation."""


def quantize(src: str | Path, dst: str | Path, quant: str) -> Path:
    """Quantise the GGUF ``src`` into ``dst`` with llama.cpp's ``llama_model_quantize``,
    in a child process (llama.cpp logs to stderr and aborts on a bad file).

    Raises:
        ConverterError: unknown ``quant`` or the quantiser failed.
    """
    if quant not in QUANT_TYPES:
        raise ConverterError(f"quantisation {quant!r}: one of {', '.join(QUANT_TYPES)}")
    code = (
        "import ctypes, sys, llama_cpp\n"
        "p = llama_cpp.llama_model_quantize_default_params()\n"
        "p.ftype = int(sys.argv[3])\n"
        "sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(),"
        " ctypes.byref(p)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(src), str(dst), str(QUANT_TYPES[quant])],
        capture_output=True,
        text=True,
    )
    if proc.returncode or not Path(dst).is_file():
        raise ConverterError(
            f"quantising to {quant} failed:\n{(proc.stdout + proc.stderr)[-3000:]}"
        )
    return Path(dst)


def merge_adapter(
    run_dir: str | Path, base: str, outfile: str | Path | None = None, quant: str = "q4_k_m"
) -> Path:
    """Merge the run's adapter (:func:`adapter_dir`) into its base and write one plain GGUF,
    quantised to ``quant`` (default q4_k_m, like the pulled models; ``f16``/``f32`` keep
    floats). Returns its path (default ``RUN/merged-QUANT.gguf``).

    Why: llama.cpp applies a LoRA adapter's tensors without its repacked CPU kernels
    (``cannot use buft CPU_REPACK``), so base + adapter is slower per token than the base,
    which counts against it under a wall-clock budget; the merged model runs at the base's
    speed. The cost is a second rounding: the base was dequantised from its GGUF, the merge
    is quantised again.

    Steps: the base loads as for training (:func:`rlmd.train.sft.load_base`, the cached
    float32 copy of a GGUF base), PEFT's ``merge_and_unload`` folds the adapter in, the
    result goes through ``convert_hf_to_gguf.py`` (f16, or f32 for ``quant="f32"``) and
    ``llama_model_quantize``. The intermediate files live in ``RUN/merge-tmp/`` and are
    removed.

    Raises:
        ConverterError: no adapter, or a converter failed.
    """
    from peft import PeftModel

    from rlmd.train.sft import load_base

    run_dir = Path(run_dir)
    source = adapter_dir(run_dir)
    out = Path(outfile) if outfile else run_dir / f"merged-{quant}.gguf"
    if quant not in (*QUANT_TYPES, "f16", "f32"):
        raise ConverterError(f"quantisation {quant!r}: one of {', '.join(QUANT_TYPES)}, f16, f32")
    work = run_dir / "merge-tmp"
    shutil.rmtree(work, ignore_errors=True)
    try:
        model, tokenizer = load_base(base)
        merged: Any = PeftModel.from_pretrained(model, str(source)).merge_and_unload()
        merged.save_pretrained(work / "hf", safe_serialization=True)
        tokenizer.save_pretrained(work / "hf")
        del model, merged
        floats = work / "model.gguf"
        convert_model(work / "hf", floats, "f32" if quant == "f32" else "f16")
        if quant not in ("f16", "f32"):
            # into the work folder first: a failed or half-written quantisation must not
            # replace the GGUF an earlier merge registered
            floats = quantize(floats, work / f"model-{quant}.gguf", quant)
        os.replace(floats, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def adapters_dir() -> Path:
    return paths.models_dir() / "adapters"


def register(name: str, base: str, lora_path: str | Path | None, **extra: Any) -> Path:
    """Make ``name`` a registry model: the local ``base`` (a pulled model name or a GGUF
    path) with the LoRA GGUF ``lora_path`` (None: ``base`` alone, a merged model's GGUF).
    Returns the entry file written.

    Raises:
        ValueError: ``name`` is not a plain name (:func:`check_name`).
        OSError: the entry could not be written (an earlier entry of that name is kept).
    """
    check_name(name)
    adapters_dir().mkdir(parents=True, exist_ok=True)
    entry = {"base": base, **extra}
    if lora_path is not None:
        entry["lora_path"] = str(Path(lora_path).resolve())
    path = adapters_dir() / f"{name}.json"
    tmp = path.with_name(f".{name}.json.tmp")  # not *.json: the registry never lists it
    tmp.write_text(json.dumps(entry, indent=2))
    os.replace(tmp, path)
    return path


def check_name(name: str) -> None:
    """Check a training run / model name before any work is done under it: letters, digits,
    ``.``, ``-`` and ``_``, not starting with ``.`` (it names ``<home>/train/NAME`` and
    ``<models dir>/adapters/NAME.json``, so no path of its own, no ``..``).

    Raises:
        ValueError: it is not such a name.
    """
    if not name or name.startswith(".") or not all(c.isalnum() or c in "._-" for c in name):
        raise ValueError(
            f"model name {name!r}: use letters, digits, '.', '-' and '_' only "
            "(not starting with '.')"
        )
