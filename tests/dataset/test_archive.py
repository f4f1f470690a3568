"""Tar archives: packing is deterministic, extraction refuses anything that escapes."""

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from entrypoint.dataset.packed import archive
from entrypoint.errors import ExitCode, TrainboxError


def make_tar(*members: tuple[str, str, bytes | str]) -> bytes:
    """A tar of (kind, name, payload): kind file/dir/sym/hard/dev."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for kind, name, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "sym": tarfile.SYMTYPE,
                "hard": tarfile.LNKTYPE,
                "dev": tarfile.CHRTYPE,
            }[kind]
            info.linkname = payload if isinstance(payload, str) else ""
            tar.addfile(info)
    return buffer.getvalue()


def extract(data: bytes, dest: Path, chunk: int = 7) -> archive.Reader:
    chunks = (data[i : i + chunk] for i in range(0, len(data), chunk))
    reader = archive.Reader(chunks, lambda _: None)
    archive.extract(reader, dest)
    return reader


def test_extract_from_a_stream_hashes_every_byte(tmp_path: Path) -> None:
    data = make_tar(
        ("dir", "ds", b""),
        ("file", "ds/a.txt", b"alpha"),
        ("file", "ds/b/c", b"x" * 5000),
        ("sym", "ds/link", "a.txt"),
        ("hard", "ds/hard", "ds/a.txt"),
    )
    reader = extract(data, tmp_path, chunk=333)
    assert reader.hexdigest() == hashlib.sha256(data).hexdigest()
    assert reader.size == len(data)
    assert (tmp_path / "ds/b/c").read_bytes() == b"x" * 5000
    assert (tmp_path / "ds/link").read_text() == "alpha"
    assert os.path.samefile(tmp_path / "ds/hard", tmp_path / "ds/a.txt")


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([("file", "../evil", b"x")], "absolute path or '..'"),
        ([("file", "ds/../../evil", b"x")], "absolute path or '..'"),
        ([("file", "/etc/evil", b"x")], "absolute path or '..'"),
        ([("sym", "link", "/etc")], "links outside"),
        ([("sym", "link", "../outside")], "links outside"),
        ([("sym", "here", "."), ("sym", "here/up", "..")], "links outside"),
        ([("dir", "d", b""), ("sym", "d/up", "../..")], "links outside"),
        ([("hard", "hard", "../../etc/passwd")], "absolute path or '..'"),
        ([("dev", "null", b"")], "device, fifo"),
        ([("dir", "d", b""), ("sym", "d", ".")], "clashes with a folder"),
        ([("file", "f", b"x"), ("file", "f/g", b"y")], "clashes with a folder"),
    ],
)
def test_unsafe_members_are_refused(tmp_path: Path, members: list, why: str) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(TrainboxError) as caught:
        extract(make_tar(*members), dest)
    assert caught.value.code == ExitCode.DATASET
    assert why in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest"]


def test_a_member_replaces_a_link_before_it_and_never_writes_through_it(tmp_path: Path) -> None:
    data = make_tar(
        ("file", "ds/real/kept", b"old"),
        ("sym", "ds/link", "real/kept"),
        ("file", "ds/link", b"new"),  # replaces the link: ds/real/kept keeps its bytes
        ("sym", "ds/alias", "real"),  # a folder reached through a link placed after ds/real
        ("file", "ds/alias/more", b"more"),
    )
    extract(data, tmp_path)
    assert (tmp_path / "ds/real/kept").read_bytes() == b"old"
    assert not (tmp_path / "ds/link").is_symlink()
    assert (tmp_path / "ds/link").read_bytes() == b"new"
    assert (tmp_path / "ds/real/more").read_bytes() == b"more"


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_tar_is_an_error(tmp_path: Path, damage: str) -> None:
    data = make_tar(("file", "a", b"a" * 4096), ("file", "b", b"b" * 4096))
    data = data[:3000] if damage == "truncate" else os.urandom(len(data))
    with pytest.raises(TrainboxError, match="truncated or corrupt"):
        extract(data, tmp_path)


def test_pack_is_deterministic_and_normalised(tmp_path: Path) -> None:
    source = tmp_path / "shapes"
    (source / "images").mkdir(parents=True)
    (source / "data.yaml").write_text("names: {0: a}\n")
    (source / "images" / "1.png").write_bytes(b"png")
    archive.pack(source, tmp_path / "one.tar")
    os.utime(source / "data.yaml", (1, 1))
    (source / "images" / "1.png").chmod(0o600)
    archive.pack(source, tmp_path / "two.tar")
    assert (tmp_path / "one.tar").read_bytes() == (tmp_path / "two.tar").read_bytes()
    with tarfile.open(tmp_path / "one.tar") as tar:
        assert tar.getnames() == ["shapes/data.yaml", "shapes/images", "shapes/images/1.png"]
        assert {(m.uid, m.uname, m.mtime) for m in tar} == {(0, "", 0)}


def test_sha256_state_survives_a_save_and_restore() -> None:
    head, tail = os.urandom(3_000_001), os.urandom(1234)
    first = archive.Sha256()
    first.update(head)
    second = archive.Sha256(first.state())  # as a new process would, from the saved bytes
    second.update(memoryview(tail))
    assert second.hexdigest() == hashlib.sha256(head + tail).hexdigest()
    assert first.hexdigest() == hashlib.sha256(head).hexdigest()


def test_a_stream_resumed_at_any_checkpoint_ends_with_the_same_files_and_hash(
    tmp_path: Path,
) -> None:
    files = [(f"ds/f{i}", os.urandom(1_500_000 + i)) for i in range(12)]  # 18 MB > LAG
    data = make_tar(*[("file", name, payload) for name, payload in files])
    points: list[tuple[int, int, bytes | None]] = []
    chunks = (data[i : i + archive.BUFFER] for i in range(0, len(data), archive.BUFFER))
    reader = archive.Reader(chunks, lambda _: None)

    def checkpoint(offset: int, members: int) -> None:
        points.append((offset, members, reader.state_at(offset)))

    assert archive.extract(reader, tmp_path / "full", checkpoint=checkpoint) == len(files)
    assert [m for _, m, _ in points] == list(range(1, len(files) + 1))
    assert all(state for _, _, state in points)  # the lag always covers tarfile's read-ahead
    for offset, members, state in (points[0], points[5], points[-2]):
        dest = tmp_path / f"cut{members}"
        archive.extract(archive.Reader(iter([data[:offset]]), lambda _: None), dest)
        rest = (data[i : i + 65536] for i in range(offset, len(data), 65536))
        resumed = archive.Reader(rest, lambda _: None, offset, state)
        assert archive.extract(resumed, dest, members) == len(files)
        assert resumed.hexdigest() == hashlib.sha256(data).hexdigest()
        assert resumed.size == len(data)
        for name, payload in files:
            assert (dest / name).read_bytes() == payload


def test_a_compressed_stream_has_no_checkpoints(tmp_path: Path) -> None:
    import gzip

    data = gzip.compress(make_tar(("file", "ds/a", b"a"), ("file", "ds/b", b"b")))
    reader = archive.Reader(iter([data]), lambda _: None)
    points: list[int] = []
    assert archive.extract(reader, tmp_path, checkpoint=lambda o, m: points.append(o)) == 2
    assert points == []
