"""A codebase written into the REPL's folder while it is read (``rlmd.context.Spool``): the
kernel binds it from that file when the read ends (issue 16: writing the stdlib's 37 MB after
the read, encoded a second time, was on the way to the first model request).

Real subprocess kernels; no timing.
"""

from __future__ import annotations

import os

import pytest
from helpers.sandbox_host import FakeHost, ok

from rlmd.context import Spool, load_codebase
from rlmd.kernel.serve import _codebase_files
from rlmd.sandbox import create_sandbox


@pytest.fixture
def odd_codebase(tmp_path):
    """Files whose read order (folder by folder) differs from the context's (sorted paths),
    non-ASCII names and text, an empty file, and files the load skips: binary, undecodable,
    ignored, a FIFO."""
    root = tmp_path / "odd"
    (root / "a" / "deep").mkdir(parents=True)
    (root / "é").mkdir()
    (root / "b.py").write_text("B = 1\n")
    (root / "a" / "x.py").write_text("def x():\n    return 'x'\n" * 50)
    (root / "a" / "deep" / "z.txt").write_text("naïve 🐍\n" * 30)
    (root / "é" / "ü.md").write_text("# ü\n")
    (root / "empty").write_text("")
    (root / "logo.png").write_bytes(b"\x89PNG\x00\x00binary")
    (root / "latin1.txt").write_bytes(b"caf\xe9\n")  # not UTF-8: skipped as binary
    (root / ".gitignore").write_text("*.log\n")
    (root / "debug.log").write_text("noise\n")
    os.mkfifo(root / "pipe")
    return root


def _hex(files: dict[str, str]) -> dict[str, str]:
    return {k: v.encode("utf-8", "surrogatepass").hex() for k, v in files.items()}


@pytest.mark.parametrize("attach", ["before the read", "after the read"])
async def test_a_spooled_codebase_is_bound_from_its_file(odd_codebase, attach):
    sb = create_sandbox("subprocess", spare_kernel=False)
    await sb.start(FakeHost())
    try:
        spool = Spool()
        file = sb.new_context_file()
        assert file is not None and os.path.dirname(file.path) == sb.workdir
        if attach == "before the read":
            spool.offer(lambda: file.file)  # every file written as it is read
        context = load_codebase(odd_codebase, spool=spool)
        if attach == "after the read":
            spool.offer(lambda: file.file)  # the files kept until now are written at once
        assert sorted(context.value) == list(context.value)
        assert set(context.value) == {
            ".gitignore",
            "a/deep/z.txt",
            "a/x.py",
            "b.py",
            "empty",
            "é/ü.md",
        }
        assert context.skipped["binary"] == 2 and context.skipped["special"] == 1
        index_at = spool.finish(list(context.value))
        assert index_at == sum(len(v.encode()) for v in context.value.values())
        await sb.load_context_file(context.value, file, index_at)

        await sb.set_variable("expected", _hex(context.value))
        r = await ok(sb, "print(_hex == expected, list(context))".replace("_hex", _HEX_IN_KERNEL))
        assert r.stdout == f"True {list(context.value)}\n"
        assert (await ok(sb, "print(callable(list_files))")).stdout == "True\n"
        assert not [f for f in os.listdir(sb.workdir) if f.startswith(".rlmd-context")]

        await sb.restart()  # a fresh kernel gets the same context the usual way
        await sb.set_variable("expected", _hex(context.value))
        r = await ok(sb, "print(_hex == expected, list(context))".replace("_hex", _HEX_IN_KERNEL))
        assert r.stdout == f"True {list(context.value)}\n"
    finally:
        await sb.close()


_HEX_IN_KERNEL = "{k: v.encode('utf-8', 'surrogatepass').hex() for k, v in context.items()}"


def test_a_spool_whose_write_fails_gives_up_without_failing_the_read(codebase):
    spool = Spool()
    spool.offer(lambda: open("/dev/full", "wb"))  # noqa: SIM115 - every write: ENOSPC
    context = load_codebase(codebase, spool=spool)  # the read goes on
    assert "pkg/core.py" in context.value
    assert spool.finish(list(context.value)) is None


def test_a_spool_serves_only_the_files_it_took(codebase, tmp_path):
    never_attached = Spool()
    context = load_codebase(codebase, spool=never_attached)
    assert never_attached.finish(list(context.value)) is None

    spool = Spool()
    out = open(tmp_path / "spooled", "wb")  # noqa: SIM115 - the spool closes it
    spool.offer(lambda: out)
    load_codebase(codebase, spool=spool)
    assert spool.finish([*context.value, "not/read.py"]) is None  # bytes it never got
    assert out.closed

    discarded = Spool()
    discarded.add("a.py", b"x = 1\n")
    discarded.discard()
    late = open(tmp_path / "late", "wb")  # noqa: SIM115
    discarded.offer(lambda: late)  # given up before: never asked for a file
    assert not late.closed and (tmp_path / "late").read_bytes() == b""
    late.close()

    no_folder_yet = Spool()
    folder: list = []  # the opener's answer: None until a "folder" exists
    no_folder_yet.offer(lambda: folder[0] if folder else None)
    no_folder_yet.add("a.py", b"x = 1\n")  # kept: nowhere to write yet
    out2 = open(tmp_path / "later", "wb")  # noqa: SIM115
    folder.append(out2)
    no_folder_yet.add("b.py", b"y = 2\n")  # the opener now gives a file: both written
    assert no_folder_yet.finish(["b.py", "a.py"]) == 12
    assert (tmp_path / "later").read_bytes().startswith(b"x = 1\ny = 2\n{")


def test_a_refresh_never_spools(codebase):
    first = load_codebase(codebase)
    (codebase / "pkg" / "util.py").write_text("def helper2():\n    return 3\n")
    spool = Spool()
    spool.offer(lambda: open(os.devnull, "wb"))
    load_codebase(codebase, previous=first, spool=spool)  # unchanged files are not read
    assert spool.finish(list(first.value)) is None


def test_the_kernel_checks_a_spooled_files_index():
    body = b"abcdef"
    good = body + b'{"paths":["y","x"],"offsets":[3,0],"sizes":[3,3]}'
    assert _codebase_files(good, 6) == {"y": "def", "x": "abc"}
    with pytest.raises(ValueError, match="not within it"):
        _codebase_files(good, 60)
    past_index = body + b'{"paths":["x"],"offsets":[4],"sizes":[3]}'
    with pytest.raises(ValueError, match="entry for 'x' is not within it"):
        _codebase_files(past_index, 6)
    negative = body + b'{"paths":["x"],"offsets":[-1],"sizes":[3]}'
    with pytest.raises(ValueError, match="entry for 'x'"):
        _codebase_files(negative, 6)
    no_offsets = body + b'{"paths":["x"],"sizes":[3]}'
    with pytest.raises(ValueError, match="do not add up"):
        _codebase_files(no_offsets, 6)


async def test_a_codebase_larger_than_the_repl_folder_is_bound_all_the_same(tmp_path, rlmd_home):
    """As root the REPL's folder is a tmpfs of ``disk_bytes``: a codebase bigger than that
    fits neither the spool's file nor the usual context file, and the run failed before its
    first turn with "OSError: [Errno 28] No space left on device". It goes in one frame."""
    if os.geteuid() != 0:
        pytest.skip("the working folder is a tmpfs of disk_bytes only as root")
    from helpers.scripted import repl, scripted_registry, turn_of

    from rlmd.context import PendingLoad
    from rlmd.engine import RunConfig, run_task

    root = tmp_path / "big"
    root.mkdir()
    for i in range(18):  # 18 files of 960,000 bytes: over 16 MiB
        (root / f"f{i:02}.txt").write_text(f"line {i:02}\n" * 120_000)

    def model(messages: list[dict]) -> str:
        if turn_of(messages) == 0:
            return repl("print(len(context))")
        return repl("FINAL(str(sum(map(len, context.values()))))")

    registry = scripted_registry(root=model)
    config = RunConfig(
        root_model="root",
        sandbox="subprocess",
        sandbox_options={"limits": {"disk_bytes": 16 << 20}, "spare_kernel": False},
    )
    try:
        result = await run_task("q", PendingLoad(root, spool=True), config, get_model=registry.get)
    finally:
        await registry.aclose()
    assert result.error is None
    assert (result.status, result.answer) == ("completed", str(18 * 960_000))


async def test_a_kernel_restarted_after_model_code_filled_its_folder_gets_its_context():
    """Model code fills the REPL's folder, then its kernel dies: the restart wrote the
    context file into the full folder, and the run failed with ENOSPC."""
    if os.geteuid() != 0:
        pytest.skip("the working folder is a tmpfs of disk_bytes only as root")
    sb = create_sandbox("subprocess", spare_kernel=False, limits={"disk_bytes": 16 << 20})
    await sb.start(FakeHost())
    try:
        text = "0123456789\n" * 200_000  # 2.2 M characters: bound through a file
        await sb.load_context(text)
        fill = await sb.execute("import os\nopen('fill', 'wb').write(b'x' * (17 << 20))")
        assert fill.error is not None and "No space left" in fill.error
        died = await sb.execute("os._exit(3)")
        assert died.kernel_restarted
        r = await ok(sb, "import os\nprint(len(context), os.path.getsize('fill') > 15 << 20)")
        assert r.stdout == f"{len(text)} True\n"
    finally:
        await sb.close()
