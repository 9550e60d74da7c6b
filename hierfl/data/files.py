"""Datasets read from local files: MNIST, Fashion-MNIST, EMNIST (idx), CIFAR-10 (python pickles), LEAF JSON.

Nothing is downloaded at run time: every dataset reads the files under its ``root`` directory
(default ``data/<name>``, relative to the working directory) and, when one is missing or
malformed, raises a :class:`~hierfl.data.datasets.DataError` naming the file and what was
expected. docs/howto/file-datasets.md lists where each dataset's files come from.

Formats
-------
* idx (LeCun's MNIST format, also Fashion-MNIST and EMNIST), gzipped or not: a big-endian header
  ``0x00 0x00 <type 0x08 = ubyte> <ndim>``, then ``ndim`` int32 sizes, then the data.
  Pixels become float32 in [0, 1]. EMNIST images are stored transposed (column-major) and are
  transposed back; its ``letters`` labels 1..26 become 0..25.
* CIFAR-10 "python version": pickled dicts ``data_batch_1`` … ``data_batch_5`` and ``test_batch``
  with ``b"data"`` (N × 3072 uint8, channel-major) and ``b"labels"``. They are unpickled with a
  restricted unpickler that only builds plain containers and numpy arrays (a pickle can run code).
* LEAF JSON (Caldas et al., "LEAF: A Benchmark for Federated Settings", arXiv 1812.01097):
  ``train/*.json`` and ``test/*.json``, each ``{"users": [...], "num_samples": [...],
  "user_data": {user: {"x": [...], "y": [...]}}}``. FEMNIST: ``x`` 784 floats in [0, 1],
  ``y`` in 0..61. Shakespeare: ``x`` 80-character strings, ``y`` the next character, both mapped
  to indices in LEAF's 80-character vocabulary (``models/utils/language_utils.py``). The natural
  split is one device per writer (``partition: natural``).
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, PositiveInt

from hierfl.data.datasets import DATASETS, DataError, Dataset, DatasetConfig

__all__ = [
    "LEAF_CHARACTERS", "MNISTConfig", "FashionMNISTConfig", "EMNISTConfig", "CIFAR10Config",
    "FEMNISTConfig", "ShakespeareConfig", "read_idx", "read_cifar_batch", "read_leaf_dir",
]

# LEAF's Shakespeare vocabulary (TalwalkarLab/leaf, models/utils/language_utils.py: ALL_LETTERS)
LEAF_CHARACTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
_CHAR_INDEX = {c: i for i, c in enumerate(LEAF_CHARACTERS)}
_KEY = "dataset.root"


def _open_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(_KEY, f"{path}: cannot read: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DataError(_KEY, f"{path}: not a valid gzip file ({exc})") from None
    return raw


def read_idx(path: Path, ndim: int) -> np.ndarray:
    """An idx file of unsigned bytes with ``ndim`` dimensions, as a uint8 array.

    Raises :class:`DataError` naming the file for a bad magic number, a wrong number of
    dimensions, an unsupported element type or a data size that disagrees with the header.
    """
    data = _open_bytes(path)
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DataError(_KEY, f"{path}: not an idx file (expected the magic 0x0000{8:02x}{ndim:02x}, "
                              f"got {data[:4].hex() or 'an empty file'})")
    if data[2] != 0x08:
        raise DataError(_KEY, f"{path}: idx element type 0x{data[2]:02x} is not supported; expected 0x08 "
                              "(unsigned byte)")
    if data[3] != ndim:
        raise DataError(_KEY, f"{path}: expected an idx file with {ndim} dimension(s) "
                              f"(magic 0x0000{8:02x}{ndim:02x}), got {data[3]}")
    head = 4 + 4 * ndim
    if len(data) < head:
        raise DataError(_KEY, f"{path}: truncated idx header ({len(data)} bytes, need {head})")
    shape = tuple(int(d) for d in np.frombuffer(data[4:head], dtype=">u4"))
    expected = int(np.prod(shape, dtype=np.int64))
    if len(data) - head != expected:
        raise DataError(_KEY, f"{path}: the header promises shape {shape} = {expected} bytes of data, "
                              f"the file has {len(data) - head}")
    return np.frombuffer(data, dtype=np.uint8, offset=head).reshape(shape)


def _find(root: Path, names: list[str], what: str, hint: str) -> Path:
    """The first existing ``root/name`` or ``root/name.gz``; else a DataError listing what was expected."""
    for name in names:
        for candidate in (root / name, root / (name + ".gz")):
            if candidate.is_file():
                return candidate
    raise DataError(_KEY, f"{root}: missing {what}: expected {names[0]} or {names[0]}.gz in that directory "
                          f"(hierfl never downloads data; {hint})")


def _check_root(root: str, name: str, hint: str) -> Path:
    path = Path(root)
    if not path.is_dir():
        raise DataError(_KEY, f"dataset directory {root!r} does not exist; put the {name} files there or set "
                              f"data.dataset.root ({hint})")
    return path


def _subsample(x: np.ndarray, y: np.ndarray, k: int | None, key: str, rng: np.random.Generator
               ) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random subset of ``k`` samples (in file order), or everything when ``k`` is None."""
    if k is None:
        return x, y
    if k > len(y):
        raise DataError(key, f"asks for {k} samples but the files hold {len(y)}; allowed: 1..{len(y)} or null (all)")
    keep = np.sort(rng.choice(len(y), size=k, replace=False))
    return x[keep], y[keep]


def _check_labels(y: np.ndarray, num_classes: int, path: Path) -> None:
    if y.size and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise DataError(_KEY, f"{path}: labels must lie in 0..{num_classes - 1}, found {int(y.min())}..{int(y.max())}")


class _FileDataset(DatasetConfig):
    """Shared keys of the file datasets."""

    root: str
    train_samples: PositiveInt | None = Field(default=None, description="seeded random subset; null = all")
    test_samples: PositiveInt | None = Field(default=None, description="seeded random subset; null = all")


# -- idx: MNIST, Fashion-MNIST, EMNIST --------------------------------------------------------------

_MNIST_FILES = ("train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
                "t10k-labels-idx1-ubyte, each optionally .gz")



class _IdxDataset(_FileDataset):
    def _hint(self) -> str:
        return f"expected files: {_MNIST_FILES}"

    def _prefix(self) -> str:
        return ""

    def _test_split(self) -> str:
        return "t10k"

    def _num_classes(self) -> int:
        return 10

    def _read_split(self, root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
        p = self._prefix()
        img = _find(root, [f"{p}{split}-images-idx3-ubyte"], f"the {split} images", self._hint())
        lab = _find(root, [f"{p}{split}-labels-idx1-ubyte"], f"the {split} labels", self._hint())
        images, labels = read_idx(img, 3), read_idx(lab, 1).astype(np.int64)
        if images.shape[1:] != (28, 28):
            raise DataError(_KEY, f"{img}: expected 28 x 28 images, got {images.shape[1]} x {images.shape[2]}")
        if images.shape[0] != labels.shape[0]:
            raise DataError(_KEY, f"{lab}: {labels.shape[0]} labels for the {images.shape[0]} images of {img.name}")
        labels = self._fix_labels(labels, lab)
        _check_labels(labels, self._num_classes(), lab)
        return self._fix_images(images), labels

    def _fix_images(self, images: np.ndarray) -> np.ndarray:
        return images

    def _fix_labels(self, labels: np.ndarray, path: Path) -> np.ndarray:
        return labels

    def build(self, num_devices: int, rng: np.random.Generator) -> Dataset:
        """Read the four idx files; pixels / 255 as float32, shape (1, 28, 28)."""
        root = _check_root(self.root, self._label(), self._hint())
        (xtr, ytr), (xte, yte) = self._read_split(root, "train"), self._read_split(root, self._test_split())
        xtr, ytr = _subsample(xtr, ytr, self.train_samples, "dataset.train_samples", rng)
        xte, yte = _subsample(xte, yte, self.test_samples, "dataset.test_samples", rng)

        def flat(a: np.ndarray) -> np.ndarray:
            return (a.reshape(a.shape[0], -1).astype(np.float32) / np.float32(255.0))

        return Dataset(flat(xtr), ytr, flat(xte), yte, self._num_classes(), (1, 28, 28), name=self._label())

    def _label(self) -> str:
        return str(getattr(self, "name", "idx"))


@DATASETS.register
class MNISTConfig(_IdxDataset):
    """``{name: mnist, root: data/mnist}``: LeCun et al.'s handwritten digits, 60k/10k, 10 classes."""

    name: Literal["mnist"] = "mnist"
    root: str = Field(default="data/mnist", description="directory with the four idx files")


@DATASETS.register
class FashionMNISTConfig(_IdxDataset):
    """``{name: fashion_mnist, root: data/fashion_mnist}``: Zalando's Fashion-MNIST (same idx file names)."""

    name: Literal["fashion_mnist"] = "fashion_mnist"
    root: str = Field(default="data/fashion_mnist", description="directory with the four idx files")


_EMNIST_CLASSES = {"byclass": 62, "bymerge": 47, "balanced": 47, "letters": 26, "digits": 10, "mnist": 10}


@DATASETS.register
class EMNISTConfig(_IdxDataset):
    """``{name: emnist, split: balanced, root: data/emnist}``: Cohen et al. 2017 (the official gzip release)."""

    name: Literal["emnist"] = "emnist"
    root: str = Field(default="data/emnist", description="directory with emnist-<split>-*-idx?-ubyte(.gz)")
    split: Literal["byclass", "bymerge", "balanced", "letters", "digits", "mnist"] = Field(
        default="balanced", description="EMNIST split (classes: 62, 47, 47, 26, 10, 10)")

    def _hint(self) -> str:
        p = f"emnist-{self.split}-"
        return (f"expected files: {p}train-images-idx3-ubyte, {p}train-labels-idx1-ubyte, "
                f"{p}test-images-idx3-ubyte, {p}test-labels-idx1-ubyte, each optionally .gz")

    def _prefix(self) -> str:
        return f"emnist-{self.split}-"

    def _test_split(self) -> str:
        return "test"

    def _num_classes(self) -> int:
        return _EMNIST_CLASSES[self.split]

    def _fix_images(self, images: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(images.transpose(0, 2, 1))  # stored column-major

    def _fix_labels(self, labels: np.ndarray, path: Path) -> np.ndarray:
        if self.split != "letters":
            return labels
        if labels.size and int(labels.min()) < 1:
            raise DataError(_KEY, f"{path}: EMNIST letters labels must lie in 1..26, found {int(labels.min())}")
        return labels - 1


# -- CIFAR-10 -------------------------------------------------------------------------------------

class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only (a pickle can otherwise run arbitrary code)."""

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
                ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(images (N, 3072) uint8, labels (N,) int64)`` of one CIFAR-10 python batch file."""
    raw = _open_bytes(path)
    try:
        obj = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means a malformed file
        raise DataError(_KEY, f"{path}: not a CIFAR-10 python batch (a pickled dict): {exc}") from None
    if not isinstance(obj, dict):
        raise DataError(_KEY, f"{path}: expected a pickled dict with b'data' and b'labels', got {type(obj).__name__}")
    obj = {(k.decode() if isinstance(k, bytes) else k): v for k, v in obj.items()}
    if "data" not in obj or "labels" not in obj:
        raise DataError(_KEY, f"{path}: expected keys b'data' and b'labels', found {sorted(map(str, obj))}")
    data = np.asarray(obj["data"])
    labels = np.asarray(obj["labels"])
    if data.ndim != 2 or data.shape[1] != 3072 or data.dtype != np.uint8:
        raise DataError(_KEY, f"{path}: b'data' must be an N x 3072 uint8 array, got {data.shape} {data.dtype}")
    if labels.shape != (data.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(_KEY, f"{path}: b'labels' must hold {data.shape[0]} integers, got shape {labels.shape}")
    labels = labels.astype(np.int64)
    _check_labels(labels, 10, path)
    return data, labels


@DATASETS.register
class CIFAR10Config(_FileDataset):
    """``{name: cifar10, root: data/cifar10}``: Krizhevsky's CIFAR-10, 50k/10k 32 x 32 colour images, 10 classes."""

    name: Literal["cifar10"] = "cifar10"
    root: str = Field(default="data/cifar10",
                      description="directory with data_batch_1..5 and test_batch (or its cifar-10-batches-py/)")
    normalize: Literal["none", "channel"] = Field(
        default="none", description="none: pixels / 255 in [0, 1] (default); channel: then (x - mean_c) / std_c per "
                                    "colour channel with the full training set's statistics (CIFAR10_MEAN, CIFAR10_STD), "
                                    "the usual input of CIFAR-10 CNNs")

    def build(self, num_devices: int, rng: np.random.Generator) -> Dataset:
        """Read the six batches; pixels / 255 as float32, shape (3, 32, 32); ``normalize: channel`` standardises
        each colour channel with fixed statistics (the same for any subsample)."""
        hint = "expected data_batch_1 .. data_batch_5 and test_batch from cifar-10-python.tar.gz"
        root = _check_root(self.root, "CIFAR-10", hint)
        if not (root / "test_batch").is_file() and (root / "cifar-10-batches-py").is_dir():
            root = root / "cifar-10-batches-py"
        train = [read_cifar_batch(_find(root, [f"data_batch_{k}"], f"training batch {k}", hint)) for k in range(1, 6)]
        xte, yte = read_cifar_batch(_find(root, ["test_batch"], "the test batch", hint))
        xtr, ytr = np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train])
        xtr, ytr = _subsample(xtr, ytr, self.train_samples, "dataset.train_samples", rng)
        xte, yte = _subsample(xte, yte, self.test_samples, "dataset.test_samples", rng)
        scale = np.float32(255.0)
        xtr, xte = xtr.astype(np.float32) / scale, xte.astype(np.float32) / scale
        if self.normalize == "channel":
            xtr, xte = _channel_normalised(xtr), _channel_normalised(xte)
        return Dataset(xtr, ytr, xte, yte, 10, (3, 32, 32), name=self.name)


CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
"""Per-channel (R, G, B) mean of CIFAR-10's 50,000 training images, pixels in [0, 1]."""
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
"""Per-channel standard deviation of the same images."""


def _channel_normalised(x: np.ndarray) -> np.ndarray:
    """``(x − mean_c) / std_c`` of flat ``(N, 3·32·32)`` float32 images, channel-major as CIFAR-10 stores them."""
    mean = np.asarray(CIFAR10_MEAN, dtype=np.float32)[None, :, None]
    std = np.asarray(CIFAR10_STD, dtype=np.float32)[None, :, None]
    return ((x.reshape(x.shape[0], 3, -1) - mean) / std).reshape(x.shape[0], -1)


# -- LEAF: FEMNIST, Shakespeare -------------------------------------------------------------------

def read_leaf_dir(directory: Path) -> dict[str, tuple[list[Any], list[Any], Path]]:
    """``user → (x list, y list, file)`` over every ``*.json`` in ``directory`` (files sorted by name,
    users in each file's ``users`` order; a user seen twice keeps both parts)."""
    files = sorted(directory.glob("*.json"))
    if not files:
        raise DataError(_KEY, f"{directory}: no LEAF *.json files (expected train/ and test/ folders of "
                              "LEAF's preprocessed JSON)")
    out: dict[str, tuple[list[Any], list[Any], Path]] = {}
    for f in files:
        try:
            obj = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DataError(_KEY, f"{f}: not valid JSON ({exc})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("users"), list) \
                or not isinstance(obj.get("user_data"), dict):
            raise DataError(_KEY, f"{f}: expected LEAF JSON with 'users' (a list) and 'user_data' (a mapping)")
        for user in obj["users"]:
            entry = obj["user_data"].get(user)
            if not isinstance(entry, dict) or not isinstance(entry.get("x"), list) \
                    or not isinstance(entry.get("y"), list) or len(entry["x"]) != len(entry["y"]):
                raise DataError(_KEY, f"{f}: user {user!r} needs user_data with lists 'x' and 'y' of equal length")
            xs, ys, _ = out.get(user, ([], [], f))
            out[str(user)] = (xs + entry["x"], ys + entry["y"], f)
    return out


class _LeafDataset(_FileDataset):
    num_users: PositiveInt | None = Field(
        default=None, description="writers to use (the first ones in file order); default: devices.count")

    def _leaf_dirs(self) -> tuple[Path, Path]:
        hint = f"LEAF's preprocessed {self._label()} JSON: <root>/train/*.json and <root>/test/*.json"
        root = _check_root(self.root, self._label(), hint)
        for base in (root, root / "data"):
            if (base / "train").is_dir() and (base / "test").is_dir():
                return base / "train", base / "test"
        raise DataError(_KEY, f"{root}: missing the train/ and test/ folders ({hint})")

    def _label(self) -> str:
        return str(getattr(self, "name", "leaf"))

    def _encode(self, xs: list[Any], ys: list[Any], user: str, path: Path) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _assemble(self, num_devices: int, num_classes: int, shape: tuple[int, ...],
                  rng: np.random.Generator) -> Dataset:
        if self.train_samples is not None:
            raise DataError("dataset.train_samples", "LEAF datasets keep every writer's samples (the natural split); "
                                                     "use num_users to make the dataset smaller; allowed: null")
        train_dir, test_dir = self._leaf_dirs()
        train, test = read_leaf_dir(train_dir), read_leaf_dir(test_dir)
        want = self.num_users if self.num_users is not None else num_devices
        users = [u for u, (xs, _, _) in train.items() if xs]
        if want > len(users):
            raise DataError("dataset.num_users", f"{want} writers needed (num_users defaults to devices.count) but "
                                                 f"{train_dir} holds {len(users)} with training samples")
        users = users[:want]
        xtr, ytr, xte, yte, groups = [], [], [], [], []
        offset = 0
        for u in users:
            xs, ys, f = train[u]
            x, y = self._encode(xs, ys, u, f)
            xtr.append(x)
            ytr.append(y)
            groups.append(np.arange(offset, offset + len(y), dtype=np.int64))
            offset += len(y)
            if u in test and test[u][0]:
                x, y = self._encode(*test[u][:2], u, test[u][2])
                xte.append(x)
                yte.append(y)
        if not xte:  # LEAF's user-based split: the chosen writers have no test data; use every test writer
            for u, (xs, ys, f) in test.items():
                if xs:
                    x, y = self._encode(xs, ys, u, f)
                    xte.append(x)
                    yte.append(y)
        if not xte:
            raise DataError(_KEY, f"{test_dir}: no test samples")
        x_test, y_test = _subsample(np.concatenate(xte), np.concatenate(yte), self.test_samples,
                                    "dataset.test_samples", rng)
        return Dataset(np.concatenate(xtr), np.concatenate(ytr), x_test, y_test, num_classes, shape,
                       natural_groups=tuple(groups), name=self._label(),
                       vocab_size=len(LEAF_CHARACTERS) if self._label() == "shakespeare" else None)


@DATASETS.register
class FEMNISTConfig(_LeafDataset):
    """``{name: femnist, root: data/femnist}``: LEAF's FEMNIST (EMNIST by writer), 62 classes, natural split."""

    name: Literal["femnist"] = "femnist"
    root: str = Field(default="data/femnist", description="directory with LEAF's train/ and test/ JSON folders")

    def _encode(self, xs: list[Any], ys: list[Any], user: str, path: Path) -> tuple[np.ndarray, np.ndarray]:
        try:
            x = np.asarray(xs, dtype=np.float32)
            y = np.asarray(ys, dtype=np.int64)
        except (TypeError, ValueError) as exc:
            raise DataError(_KEY, f"{path}: user {user!r}: x must be lists of 784 numbers and y integers ({exc})") \
                from None
        if x.ndim != 2 or x.shape[1] != 784:
            raise DataError(_KEY, f"{path}: user {user!r}: each x must have 784 pixel values, got shape {x.shape}")
        _check_labels(y, 62, path)
        return x, y

    def build(self, num_devices: int, rng: np.random.Generator) -> Dataset:
        """One natural group per writer; images (1, 28, 28)."""
        return self._assemble(num_devices, 62, (1, 28, 28), rng)


@DATASETS.register
class ShakespeareConfig(_LeafDataset):
    """``{name: shakespeare, root: data/shakespeare}``: LEAF's next-character prediction, one device per role."""

    name: Literal["shakespeare"] = "shakespeare"
    root: str = Field(default="data/shakespeare", description="directory with LEAF's train/ and test/ JSON folders")
    seq_len: PositiveInt = Field(default=80, description="characters per input string (LEAF: 80)")

    def _encode(self, xs: list[Any], ys: list[Any], user: str, path: Path) -> tuple[np.ndarray, np.ndarray]:
        x = np.empty((len(xs), self.seq_len), dtype=np.float32)  # indices < 2^24: exact in float32
        y = np.empty(len(ys), dtype=np.int64)
        for k, (s, t) in enumerate(zip(xs, ys)):
            if not isinstance(s, str) or len(s) != self.seq_len:
                raise DataError(_KEY, f"{path}: user {user!r} sample {k}: x must be a string of {self.seq_len} "
                                      f"characters, got {s!r:.40}")
            if not isinstance(t, str) or len(t) != 1:
                raise DataError(_KEY, f"{path}: user {user!r} sample {k}: y must be one character, got {t!r:.40}")
            try:
                x[k] = [_CHAR_INDEX[c] for c in s]
                y[k] = _CHAR_INDEX[t]
            except KeyError as exc:
                raise DataError(_KEY, f"{path}: user {user!r} sample {k}: character {exc.args[0]!r} is not in "
                                      "LEAF's 80-character vocabulary") from None
        return x, y

    def build(self, num_devices: int, rng: np.random.Generator) -> Dataset:
        """One natural group per speaking role; inputs are ``seq_len`` character indices, 80 classes."""
        return self._assemble(num_devices, len(LEAF_CHARACTERS), (self.seq_len,), rng)
