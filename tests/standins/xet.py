"""The Xet storage formats, as the test Hub's CAS reads them.

Built from the public specification (huggingface/hub-docs ``docs/xet/``: ``api.md``,
``xorb.md``, ``shard.md``, ``download-protocol.md``, ``auth.md``; read 2026-12-01) and checked
against the real client, hf_xet 1.8.0 through huggingface_hub 2.4.0 (``tests/standins/test_hub.py``
uploads with it and downloads byte for byte).

- A xorb is a run of chunks, each an 8-byte header (version 0, compressed size u24, compression
  type u8, uncompressed size u24, little-endian) and its data: 0 none, 1 LZ4, 2 byte grouping of
  4 then LZ4 (``xorb.md``). The client may end a serialized xorb with a footer of its own (it
  starts with bytes that are no chunk header); parsing stops there.
- A shard is a 48-byte header (32-byte tag, version 2, footer size), the file info section and
  the CAS info section, each ended by a bookend (32 bytes of 0xFF, 16 of 0), then the footer,
  which uploads omit (``shard.md``). Each file: a header (file hash, flags, number of terms),
  its terms (xorb hash, flags, unpacked bytes, chunk range ``[start, end)``), a verification
  entry per term when flag 1<<31 is set, and a metadata extension with the file's sha256 when
  flag 1<<30 is set.
- Hashes are written as text by reversing each 8-byte quarter (``api.md``, "Converting Hashes
  to Strings"). The metadata extension's sha256 is stored the same way, as a hash of four
  little-endian u64 (``shard.md`` calls it "the 32 byte SHA256"; hf_xet 1.8.0 writes
  ``f055c7962ef0116c...`` for the sha256 ``6c11f02e96c755f0...``: seen here, 2026-12-01).

Where it simplifies: no hash is recomputed (chunk, xorb, file and verification hashes are taken
as sent; the CAS checks instead that the bytes a file's terms name have the sha256 its shard
claims); the header tag is not compared; no global deduplication (every chunk query is 404).
"""

import struct
from dataclasses import dataclass

BOOKEND = b"\xff" * 32
WITH_VERIFICATION, WITH_METADATA = 1 << 31, 1 << 30


def hash_text(raw: bytes) -> str:
    """A 32-byte hash as the protocol writes it: each 8-byte quarter reversed, then hex."""
    return b"".join(raw[i : i + 8][::-1] for i in range(0, 32, 8)).hex()


def _ungroup4(data: bytes) -> bytes:
    """Undo byte grouping of 4: the groups are bytes 0, 4, 8... then 1, 5, 9... (``xorb.md``)."""
    n = len(data)
    sizes = [n // 4 + (1 if i < n % 4 else 0) for i in range(4)]
    out = bytearray(n)
    start = 0
    for i, size in enumerate(sizes):
        out[i::4] = data[start : start + size]
        start += size
    return bytes(out)


def _lz4(data: bytes, size: int) -> bytes:
    """LZ4, as a frame (what xet-core writes) or, failing that, a raw block."""
    import lz4.block
    import lz4.frame

    try:
        return lz4.frame.decompress(data)
    except RuntimeError:
        return lz4.block.decompress(data, uncompressed_size=size)


@dataclass(frozen=True)
class Chunk:
    """One chunk of a stored xorb: where its serialized bytes lie, and its data."""

    start: int  # offset of its header in the serialized xorb
    end: int  # offset just past its data
    data: bytes


def chunks(xorb: bytes) -> list[Chunk]:
    """A serialized xorb's chunks, decompressed. ``ValueError`` if a chunk is cut short or
    does not decompress to its stated size."""
    found: list[Chunk] = []
    at = 0
    while at + 8 <= len(xorb) and xorb[at] == 0 and xorb[at + 4] in (0, 1, 2):
        packed = int.from_bytes(xorb[at + 1 : at + 4], "little")
        kind, size = xorb[at + 4], int.from_bytes(xorb[at + 5 : at + 8], "little")
        body = xorb[at + 8 : at + 8 + packed]
        if len(body) != packed:
            raise ValueError(f"chunk {len(found)} is cut short")
        data = body if kind == 0 else _lz4(body, size)
        if kind == 2:
            data = _ungroup4(data)
        if len(data) != size:
            raise ValueError(f"chunk {len(found)}: {len(data)} bytes, its header says {size}")
        found.append(Chunk(at, at + 8 + packed, data))
        at += 8 + packed
    if not found:
        raise ValueError("no chunk in the xorb")
    return found


@dataclass(frozen=True)
class Term:
    """A run of chunks ``[start, end)`` of one xorb, ``size`` bytes once unpacked."""

    xorb: str
    start: int
    end: int
    size: int


@dataclass(frozen=True)
class FileInfo:
    """A file a shard registers: its Xet hash, its terms and the sha256 it claims."""

    file_hash: str
    terms: tuple[Term, ...]
    sha256: str | None
    verified: bool  # it carried a verification entry per term


def files(shard: bytes) -> list[FileInfo]:
    """The files of an uploaded shard. ``ValueError`` on a shard that is not well formed."""
    if len(shard) < 48 or struct.unpack_from("<Q", shard, 32)[0] != 2:
        raise ValueError("not a version 2 shard")
    at, found = 48, []
    while True:
        if at + 48 > len(shard):
            raise ValueError("the file info section has no bookend")
        raw, flags, count = shard[at : at + 32], *struct.unpack_from("<II", shard, at + 32)
        at += 48
        if raw == BOOKEND:
            return found
        terms = []
        for _ in range(count):
            xorb, _flags, size, start, end = struct.unpack_from("<32sIIII", shard, at)
            terms.append(Term(hash_text(xorb), start, end, size))
            at += 48
        if flags & WITH_VERIFICATION:
            at += 48 * count
        sha256 = None
        if flags & WITH_METADATA:
            sha256, at = hash_text(shard[at : at + 32]), at + 48
        if at > len(shard):
            raise ValueError("a file info block is cut short")
        found.append(FileInfo(hash_text(raw), tuple(terms), sha256,
                              bool(flags & WITH_VERIFICATION)))  # fmt: skip
