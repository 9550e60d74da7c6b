"""hierfl data fetch: tiny files in the real formats from a local HTTP server on 127.0.0.1 (with Range
support, for resume), checksums, --from DIR, and the fetched files load as the scenario's dataset."""

from __future__ import annotations

import hashlib
import http.server
import io
import tarfile
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from hierfl.cli import main
from hierfl.data.fetch import SOURCES, fetch
from hierfl.scenario.loader import validate_raw
from tests.conftest import TINY
from tests.datafiles import write_cifar_dir, write_leaf_dir, write_mnist_dir


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """http.server with byte ranges (it has none), recording the Range headers it was sent."""

    ranges: list[str] = []

    def log_message(self, *args):  # quiet
        pass

    def send_head(self):
        rng = self.headers.get("Range")
        path = Path(self.translate_path(self.path))
        if rng is None or not path.is_file():
            return super().send_head()
        type(self).ranges.append(rng)
        start = int(rng.removeprefix("bytes=").split("-")[0])
        data = path.read_bytes()
        self.send_response(206)
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        return io.BytesIO(data[start:])


@pytest.fixture()
def server(tmp_path):
    root = tmp_path / "mirror"
    root.mkdir()
    handler = lambda *a, **k: _RangeHandler(*a, directory=str(root), **k)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _RangeHandler.ranges = []
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def _sums(root: Path, names: list[str]) -> None:
    lines = [f"{hashlib.sha256((root / n).read_bytes()).hexdigest()}  {n}" for n in names]
    (root / "SHA256SUMS").write_text("\n".join(lines) + "\n")


def test_mnist_over_http_with_resume_then_it_loads(server, tmp_path, capsys):
    mirror, url = server
    arrays = write_mnist_dir(mirror, n_train=30, n_test=10)
    names = sorted(p.name for p in mirror.iterdir())
    _sums(mirror, names)
    dest = tmp_path / "data" / "mnist"
    dest.mkdir(parents=True)
    whole = (mirror / "train-images-idx3-ubyte.gz").read_bytes()
    (dest / "train-images-idx3-ubyte.gz.part").write_bytes(whole[:100])  # an interrupted download
    assert main(["data", "fetch", "mnist", "--root", str(dest), "--from", url, "-q"]) == 0
    assert capsys.readouterr().out.strip() == str(dest)
    assert _RangeHandler.ranges == ["bytes=100-"]  # resumed, not restarted
    assert (dest / "train-images-idx3-ubyte.gz").read_bytes() == whole
    assert sorted(p.name for p in dest.iterdir()) == [n for n in names if n != "SHA256SUMS"]
    assert not list(dest.glob("*.part"))
    sc = validate_raw({**TINY, "data": {"dataset": {"name": "mnist", "root": str(dest)}},
                       "model": {"name": "logreg"}})
    ds = sc.data.dataset.build(4, np.random.default_rng(0))
    assert ds.x_train.shape[0] == 30 and ds.y_test.tolist() == arrays["y_test"].tolist()
    # a second fetch finds everything intact and downloads nothing
    _RangeHandler.ranges = []
    (mirror / "train-images-idx3-ubyte.gz").unlink()
    assert main(["data", "fetch", "mnist", "--root", str(dest), "--from", url, "-q"]) == 0
    assert _RangeHandler.ranges == []


def test_a_corrupt_file_fails_its_checksum_and_is_removed(server, tmp_path, capsys):
    mirror, url = server
    write_mnist_dir(mirror, n_train=10, n_test=5)
    _sums(mirror, sorted(p.name for p in mirror.iterdir()))
    (mirror / "t10k-labels-idx1-ubyte.gz").write_bytes(b"tampered")
    dest = tmp_path / "m"
    assert main(["data", "fetch", "mnist", "--root", str(dest), "--from", url, "-q"]) == 1
    assert "t10k-labels-idx1-ubyte.gz: sha256 checksum mismatch" in capsys.readouterr().err
    assert not (dest / "t10k-labels-idx1-ubyte.gz").exists()


def test_cifar_tarball_and_emnist_zip_from_a_directory(tmp_path):
    mirror = tmp_path / "mirror"
    batches = tmp_path / "build" / "cifar-10-batches-py"
    arrays = write_cifar_dir(batches, per_batch=4, n_test=3)
    mirror.mkdir()
    with tarfile.open(mirror / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(batches, arcname="cifar-10-batches-py")
    _sums(mirror, ["cifar-10-python.tar.gz"])
    dest = fetch("cifar10", root=tmp_path / "c", source=str(mirror), quiet=True)
    ds = validate_raw({**TINY, "data": {"dataset": {"name": "cifar10", "root": str(dest)}}}).data.dataset.build(
        4, np.random.default_rng(0))
    assert ds.x_train.shape == (20, 3072) and ds.y_test.tolist() == arrays["y_test"].tolist()
    # EMNIST's gzip.zip holds gzip/emnist-<split>-*.gz; they are unpacked flat into the root
    build = tmp_path / "eb" / "gzip"
    write_mnist_dir(build, n_train=12, n_test=6, prefix="emnist-balanced-", test_name="test", num_classes=47)
    (tmp_path / "em").mkdir()
    with zipfile.ZipFile(tmp_path / "em" / "gzip.zip", "w") as zf:
        for p in sorted(build.iterdir()):
            zf.write(p, f"gzip/{p.name}")
    _sums(tmp_path / "em", ["gzip.zip"])
    dest = fetch("emnist", root=tmp_path / "e", source=str(tmp_path / "em"), quiet=True)
    ds = validate_raw({**TINY, "data": {"dataset": {"name": "emnist", "root": str(dest)}}}).data.dataset.build(
        4, np.random.default_rng(0))
    assert ds.x_train.shape[0] == 12 and ds.num_classes == 47


def test_leaf_needs_a_mirror_and_unknown_names_are_usage_errors(tmp_path, capsys):
    assert main(["data", "fetch", "femnist", "--root", str(tmp_path / "f")]) == 2
    assert "LEAF publishes no preprocessed files" in capsys.readouterr().err
    assert main(["data", "fetch", "imagenet"]) == 2
    assert "unknown dataset 'imagenet'; allowed: mnist, fashion_mnist" in capsys.readouterr().err
    leaf = tmp_path / "leaf"
    write_leaf_dir(leaf, "femnist")
    _sums(leaf, sorted(str(p.relative_to(leaf)) for p in leaf.rglob("*.json")))
    dest = fetch("femnist", root=tmp_path / "f", source=str(leaf), quiet=True)
    assert sorted(p.name for p in (dest / "train").iterdir()) == sorted(p.name for p in (leaf / "train").iterdir())
    # every canonical source has a published checksum per file
    assert all(len(d) == 32 for s in SOURCES.values() for d in s.files.values())
