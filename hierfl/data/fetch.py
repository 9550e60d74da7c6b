"""``hierfl data fetch NAME``: download a file dataset into ``data/<name>/``, checked and resumable.

Each dataset has its canonical files and their published MD5 checksums (the figures torchvision
and the datasets' pages give). A download goes to ``<file>.part`` and continues from where it
stopped when fetched again (an HTTP ``Range`` request; a server that ignores it sends the whole
file, which then replaces the part). A finished file is checked before it is moved into place and
a file already there with the right checksum is not fetched again. Archives are unpacked into the
layout :mod:`hierfl.data.files` reads (CIFAR-10's tarball as ``cifar-10-batches-py/``, EMNIST's
``gzip.zip`` as the ``emnist-*.gz`` files).

``--from DIR|URL`` names a mirror holding the same file names. A mirror may carry a ``SHA256SUMS``
file (``<sha256>  <name>`` lines, as ``sha256sum`` writes them); its files and checksums are then
used instead of the built-in ones, which is how a mirror of LEAF's preprocessed FEMNIST or
Shakespeare JSON (which have no canonical download: LEAF builds them with its scripts) is fetched.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SOURCES", "Source", "FetchError", "fetch", "read_sums"]

SUMS_FILE = "SHA256SUMS"
CHUNK = 1 << 16


class FetchError(Exception):
    """A fetch that cannot be done; ``status`` is the exit status (2: a usage mistake, 1: a failure)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Source:
    """Where a dataset's files come from and how to unpack them."""

    base_url: str | None                # None: no canonical download (LEAF: built by LEAF's scripts)
    files: dict[str, str] = field(default_factory=dict)  # file name -> md5 (as published)
    unpack: str = "none"                # none | tar (into root) | emnist_zip (gzip/*.gz flattened)
    note: str = ""


_IDX = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz")
_LEAF_NOTE = ("LEAF publishes no preprocessed files: build them with LEAF's preprocess.sh "
              "(TalwalkarLab/leaf, data/{name}) and fetch them with --from DIR, or from a mirror that "
              "carries a SHA256SUMS file")

SOURCES: dict[str, Source] = {
    "mnist": Source("https://ossci-datasets.s3.amazonaws.com/mnist/", dict(zip(_IDX, (
        "f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432",
        "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa0611ce80d1b7f02629c")))),
    "fashion_mnist": Source("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/", dict(zip(_IDX, (
        "8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe",
        "bef4ecab320f06d8554ea6380940ec79", "bb300cfdad3c16e7a12a480ee83cd310")))),
    "emnist": Source("https://biometrics.nist.gov/cs_links/EMNIST/",
                     {"gzip.zip": "58c8d27c78d21e728a6bc7b3cc06412e"}, unpack="emnist_zip"),
    "cifar10": Source("https://www.cs.toronto.edu/~kriz/",
                      {"cifar-10-python.tar.gz": "c58f30108f718f92721af3b95e74349a"}, unpack="tar"),
    "femnist": Source(None, note=_LEAF_NOTE.format(name="femnist")),
    "shakespeare": Source(None, note=_LEAF_NOTE.format(name="shakespeare")),
}


def _is_url(text: str) -> bool:
    return urllib.parse.urlparse(text).scheme in ("http", "https", "file")


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + urllib.parse.quote(name)


def read_sums(text: str) -> dict[str, str]:
    """``SHA256SUMS`` text → {relative path: sha256}."""
    out = {}
    for line in text.splitlines():
        if line.strip():
            digest, _, name = line.strip().partition(" ")
            out[name.strip().lstrip("*")] = digest.lower()
    return out


def _digest(path: Path, algo: str) -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


class _Bar:
    """A rich download bar on stderr (or nothing with ``quiet``)."""

    def __init__(self, quiet: bool) -> None:
        self.progress = None
        if not quiet:
            from rich.console import Console
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                       TransferSpeedColumn)

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                     TransferSpeedColumn(), TimeRemainingColumn(), console=Console(stderr=True))
            self.progress.start()

    def task(self, name: str, total: int | None, done: int) -> object:
        return None if self.progress is None else self.progress.add_task(name, total=total, completed=done)

    def advance(self, task: object, n: int) -> None:
        if self.progress is not None:
            self.progress.advance(task, n)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _download(url: str, dest: Path, bar: _Bar) -> None:
    """``url`` → ``dest`` through ``dest.part``, resuming a part left by an earlier try."""
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    req = urllib.request.Request(url, headers={"User-Agent": "hierfl-data-fetch"})
    if have:
        req.add_header("Range", f"bytes={have}-")
    try:
        resp = urllib.request.urlopen(req, timeout=60)  # noqa: S310 - http(s)/file URLs the user named
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # the part is already whole
            part.replace(dest)
            return
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise FetchError(f"{url}: cannot download: {getattr(exc, 'reason', exc)}") from None
    with resp:
        status = getattr(resp, "status", 200)
        if have and status != 206:
            have = 0  # the server sent the whole file: start over
        length = resp.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        task = bar.task(dest.name, total, have)
        with open(part, "ab" if have else "wb") as fh:
            while True:
                block = resp.read(CHUNK)
                if not block:
                    break
                fh.write(block)
                bar.advance(task, len(block))
    part.replace(dest)


def _unpack(source: Source, archive: Path, root: Path) -> None:
    if source.unpack == "tar":
        with tarfile.open(archive) as tar:
            tar.extractall(root, filter="data")  # the "data" filter refuses absolute paths and links out
    elif source.unpack == "emnist_zip":
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                name = Path(member).name
                if name.startswith("emnist-") and name.endswith(".gz"):
                    with zf.open(member) as src, open(root / name, "wb") as dst:
                        shutil.copyfileobj(src, dst)


def fetch(name: str, root: str | Path | None = None, source: str | None = None, quiet: bool = False) -> Path:
    """Fetch dataset ``name`` into ``root`` (default ``data/<name>``) and return the directory.

    Raises :class:`FetchError`: status 2 for an unknown name or a dataset without a canonical
    download and no ``source``; status 1 for a failed download or a checksum mismatch (the bad file
    is removed; a partial download is kept for the next try).
    """
    if name not in SOURCES:
        raise FetchError(f"unknown dataset {name!r}; allowed: {', '.join(SOURCES)}", status=2)
    src = SOURCES[name]
    root = Path(root) if root is not None else Path("data") / name
    if source is None and src.base_url is None:
        raise FetchError(f"{name}: {src.note}", status=2)
    base = source if source is not None else src.base_url
    assert base is not None
    local = None if _is_url(base) else Path(base)
    if local is not None and not local.is_dir():
        raise FetchError(f"--from {base}: not a directory or an http(s) URL", status=2)
    # the file list and checksums: a mirror's SHA256SUMS if it has one, else the published MD5s
    files: dict[str, tuple[str, str]] = {f: ("md5", d) for f, d in src.files.items()}
    try:
        if local is not None and (local / SUMS_FILE).is_file():
            sums = read_sums((local / SUMS_FILE).read_text(encoding="utf-8"))
        elif local is None:
            with urllib.request.urlopen(_join(base, SUMS_FILE), timeout=30) as resp:  # noqa: S310
                sums = read_sums(resp.read().decode("utf-8"))
        else:
            sums = {}
    except (urllib.error.URLError, OSError, UnicodeDecodeError):
        sums = {}  # no SHA256SUMS on the mirror: its files must match the published checksums
    if sums:
        files = {f: ("sha256", d) for f, d in sums.items()}
    if not files:
        raise FetchError(f"{name}: {src.note} (the mirror has no {SUMS_FILE})", status=2)
    root.mkdir(parents=True, exist_ok=True)
    bar = _Bar(quiet)
    try:
        for rel, (algo, digest) in files.items():
            dest = root / rel
            if ".." in Path(rel).parts or Path(rel).is_absolute():
                raise FetchError(f"{SUMS_FILE}: refusing the path {rel!r}", status=2)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.is_file() and _digest(dest, algo) == digest:
                pass  # already fetched and intact
            elif local is not None:
                if not (local / rel).is_file():
                    raise FetchError(f"--from {base}: missing {rel}")
                shutil.copyfile(local / rel, dest)
            else:
                _download(_join(base, rel), dest, bar)
            got = _digest(dest, algo)
            if got != digest:
                dest.unlink()
                raise FetchError(f"{rel}: {algo} checksum mismatch (expected {digest}, got {got}); the file was "
                                 "removed, fetch again or check the mirror")
            if src.unpack != "none" and rel in src.files:  # the archive, checked: unpack (idempotent)
                _unpack(src, dest, root)
    finally:
        bar.stop()
    return root
