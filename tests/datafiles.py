"""Writers of tiny dataset files in the real on-disk formats (idx, CIFAR-10 pickles, LEAF JSON), for tests."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import numpy as np

from hierfl.data.files import LEAF_CHARACTERS


def write_idx(path: Path, array: np.ndarray, gz: bool = False) -> Path:
    """An idx file of unsigned bytes (big-endian header: 0, 0, 0x08, ndim, sizes)."""
    a = np.asarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, a.ndim]) + np.asarray(a.shape, dtype=">u4").tobytes()
    data = header + a.tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def mnist_arrays(n: int, seed: int, num_classes: int = 10, low_label: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random 28 x 28 uint8 images and labels in ``low_label .. low_label + num_classes - 1``."""
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8),
            rng.integers(low_label, low_label + num_classes, size=n).astype(np.uint8))


def write_mnist_dir(root: Path, n_train: int = 60, n_test: int = 20, gz: bool = True, prefix: str = "",
                    test_name: str = "t10k", num_classes: int = 10, low_label: int = 0) -> dict[str, np.ndarray]:
    """The four idx files of MNIST (or EMNIST with ``prefix='emnist-<split>-'``, ``test_name='test'``)."""
    xtr, ytr = mnist_arrays(n_train, 1, num_classes, low_label)
    xte, yte = mnist_arrays(n_test, 2, num_classes, low_label)
    suffix = ".gz" if gz else ""
    write_idx(root / f"{prefix}train-images-idx3-ubyte{suffix}", xtr, gz)
    write_idx(root / f"{prefix}train-labels-idx1-ubyte{suffix}", ytr, gz)
    write_idx(root / f"{prefix}{test_name}-images-idx3-ubyte{suffix}", xte, gz)
    write_idx(root / f"{prefix}{test_name}-labels-idx1-ubyte{suffix}", yte, gz)
    return {"x_train": xtr, "y_train": ytr, "x_test": xte, "y_test": yte}


def write_cifar_dir(root: Path, per_batch: int = 12, n_test: int = 10) -> dict[str, np.ndarray]:
    """``data_batch_1..5`` and ``test_batch`` as pickled dicts with bytes keys (protocol 2, like the release)."""
    rng = np.random.default_rng(3)
    root.mkdir(parents=True, exist_ok=True)
    xs, ys = [], []
    for k in range(1, 7):
        n = per_batch if k <= 5 else n_test
        x = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        y = [int(v) for v in rng.integers(0, 10, size=n)]
        name = f"data_batch_{k}" if k <= 5 else "test_batch"
        with open(root / name, "wb") as f:
            pickle.dump({b"batch_label": name.encode(), b"labels": y, b"data": x,
                         b"filenames": [b"f%d.png" % i for i in range(n)]}, f, protocol=2)
        xs.append(x)
        ys.append(np.asarray(y))
    return {"x_train": np.concatenate(xs[:5]), "y_train": np.concatenate(ys[:5]), "x_test": xs[5], "y_test": ys[5]}


def leaf_users(kind: str, num_users: int, per_user: int, seed: int = 4, seq_len: int = 80) -> dict[str, dict]:
    """``user → {"x": [...], "y": [...]}`` in LEAF's FEMNIST or Shakespeare encoding."""
    rng = np.random.default_rng(seed)
    out = {}
    for u in range(num_users):
        n = per_user + u % 3
        if kind == "femnist":
            x = np.round(rng.random((n, 784)), 3).tolist()
            y = [int(v) for v in rng.integers(0, 62, size=n)]
        else:
            idx = rng.integers(0, len(LEAF_CHARACTERS), size=(n, seq_len + 1))
            x = ["".join(LEAF_CHARACTERS[i] for i in row[:-1]) for row in idx]
            y = [LEAF_CHARACTERS[row[-1]] for row in idx]
        out[f"writer_{u:03d}"] = {"x": x, "y": y}
    return out


def write_leaf_dir(root: Path, kind: str, num_users: int = 6, per_user: int = 4, test_per_user: int = 2,
                   files: int = 2) -> tuple[dict[str, dict], dict[str, dict]]:
    """``train/`` and ``test/`` folders of LEAF JSON, users spread over ``files`` files."""
    train = leaf_users(kind, num_users, per_user, seed=4)
    test = leaf_users(kind, num_users, test_per_user, seed=5)
    for split, data in (("train", train), ("test", test)):
        d = root / split
        d.mkdir(parents=True, exist_ok=True)
        users = sorted(data)
        for f in range(files):
            part = users[f::files]
            obj = {"users": part, "num_samples": [len(data[u]["y"]) for u in part],
                   "user_data": {u: data[u] for u in part}}
            (d / f"all_data_{f}_niid_0_keep_0_{split}_9.json").write_text(json.dumps(obj), encoding="utf-8")
    return train, test
