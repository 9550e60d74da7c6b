"""File datasets: idx (MNIST, Fashion-MNIST, EMNIST), CIFAR-10 pickles and LEAF JSON round-trip generated files;
missing or malformed files are configuration errors naming the file; the shipped file scenarios run on them."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import yaml

from hierfl.assemble import build
from hierfl.cli import main
from hierfl.config.errors import ConfigError
from hierfl.data import DATASETS, CIFAR10Config, EMNISTConfig, FEMNISTConfig, MNISTConfig, ShakespeareConfig
from hierfl.data.datasets import DataError
from hierfl.data.files import LEAF_CHARACTERS, read_idx
from hierfl.driver import run_scenario
from hierfl.scenario.loader import load_raw, load_scenario
from tests.conftest import tiny
from tests.datafiles import write_cifar_dir, write_idx, write_leaf_dir, write_mnist_dir

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(0)


def test_leaf_vocabulary_is_leafs_80_characters():
    assert len(LEAF_CHARACTERS) == 80 == len(set(LEAF_CHARACTERS))
    assert LEAF_CHARACTERS.index("\n") == 0 and LEAF_CHARACTERS.index("a") == 53 and LEAF_CHARACTERS[-1] == "}"


@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_idx_round_trip(tmp_path, gz, name):
    raw = write_mnist_dir(tmp_path, n_train=30, n_test=12, gz=gz)
    ds = DATASETS.get(name)(root=str(tmp_path)).build(5, RNG)
    assert ds.input_shape == (1, 28, 28) and ds.num_classes == 10 and ds.name == name
    assert ds.x_train.dtype == np.float32 and ds.x_train.shape == (30, 784)
    np.testing.assert_array_equal(ds.x_train * 255, raw["x_train"].reshape(30, -1).astype(np.float32))
    np.testing.assert_array_equal(ds.y_train, raw["y_train"])
    np.testing.assert_array_equal(ds.x_test.reshape(12, 28, 28) * 255, raw["x_test"])
    np.testing.assert_array_equal(ds.y_test, raw["y_test"])


def test_read_idx_header_and_errors(tmp_path):
    a = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    assert np.array_equal(read_idx(write_idx(tmp_path / "a", a), 3), a)
    with pytest.raises(DataError, match="expected an idx file with 1 dimension"):
        read_idx(tmp_path / "a", 1)
    (tmp_path / "b").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x05abc")
    with pytest.raises(DataError, match=r"promises shape \(5,\) = 5 bytes of data, the file has 3"):
        read_idx(tmp_path / "b", 1)
    (tmp_path / "c").write_bytes(b"PK\x03\x04junk")
    with pytest.raises(DataError, match="not an idx file"):
        read_idx(tmp_path / "c", 1)
    (tmp_path / "d").write_bytes(b"\x00\x00\x0d\x01\x00\x00\x00\x01abcd")
    with pytest.raises(DataError, match="element type 0x0d is not supported"):
        read_idx(tmp_path / "d", 1)
    (tmp_path / "e.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x01\x00\x00\x00\x02ab")[:-6])
    with pytest.raises(DataError, match="not a valid gzip file"):
        read_idx(tmp_path / "e.gz", 1)


def test_emnist_transposes_images_and_shifts_letters(tmp_path):
    raw = write_mnist_dir(tmp_path, 20, 8, prefix="emnist-letters-", test_name="test", num_classes=26, low_label=1)
    ds = EMNISTConfig(root=str(tmp_path), split="letters").build(3, RNG)
    assert ds.num_classes == 26
    np.testing.assert_array_equal(ds.y_train, raw["y_train"].astype(np.int64) - 1)
    img = (ds.x_train[0] * 255).reshape(28, 28)
    np.testing.assert_array_equal(img, raw["x_train"][0].T)  # stored column-major
    write_mnist_dir(tmp_path / "b", 20, 8, prefix="emnist-balanced-", test_name="test", num_classes=47)
    assert EMNISTConfig(root=str(tmp_path / "b")).build(3, RNG).num_classes == 47
    with pytest.raises(DataError, match="emnist-digits-train-images-idx3-ubyte"):
        EMNISTConfig(root=str(tmp_path / "b"), split="digits").build(3, RNG)


def test_subsample_is_seeded_and_checked(tmp_path):
    write_mnist_dir(tmp_path, 30, 12)
    a = MNISTConfig(root=str(tmp_path), train_samples=10, test_samples=5).build(2, np.random.default_rng(1))
    b = MNISTConfig(root=str(tmp_path), train_samples=10, test_samples=5).build(2, np.random.default_rng(1))
    assert a.x_train.shape == (10, 784) and a.x_test.shape == (5, 784)
    assert np.array_equal(a.x_train, b.x_train)
    with pytest.raises(DataError, match="asks for 31 samples but the files hold 30"):
        MNISTConfig(root=str(tmp_path), train_samples=31).build(2, RNG)


def test_cifar_round_trip_and_nested_folder(tmp_path):
    raw = write_cifar_dir(tmp_path / "cifar-10-batches-py", per_batch=4, n_test=6)
    ds = CIFAR10Config(root=str(tmp_path)).build(2, RNG)
    assert ds.input_shape == (3, 32, 32) and ds.x_train.shape == (20, 3072) and ds.x_test.shape == (6, 3072)
    np.testing.assert_array_equal(ds.x_train * 255, raw["x_train"].astype(np.float32))
    np.testing.assert_array_equal(ds.y_train, raw["y_train"])
    np.testing.assert_array_equal(ds.y_test, raw["y_test"])


def test_cifar_refuses_code_and_bad_shapes(tmp_path):
    write_cifar_dir(tmp_path, per_batch=2, n_test=2)

    class Evil:
        def __reduce__(self):
            return (eval, ("print('pwned')",))  # (not print: Ray's tqdm support may have replaced it by then)

    (tmp_path / "data_batch_3").write_bytes(pickle.dumps({b"data": Evil(), b"labels": [1]}))
    with pytest.raises(DataError, match=r"data_batch_3: not a CIFAR-10 python batch.*refusing to load builtins.eval"):
        CIFAR10Config(root=str(tmp_path)).build(2, RNG)
    (tmp_path / "data_batch_3").write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [1, 2]}))
    with pytest.raises(DataError, match=r"data_batch_3: b'data' must be an N x 3072 uint8 array"):
        CIFAR10Config(root=str(tmp_path)).build(2, RNG)
    (tmp_path / "data_batch_3").unlink()
    with pytest.raises(DataError, match="missing training batch 3: expected data_batch_3"):
        CIFAR10Config(root=str(tmp_path)).build(2, RNG)


def test_leaf_femnist_natural_split_by_writer(tmp_path):
    train, test = write_leaf_dir(tmp_path, "femnist", num_users=5, per_user=3, files=2)
    ds = FEMNISTConfig(root=str(tmp_path)).build(4, RNG)
    # files sorted by name, users in each file's order: file 0 has writers 0, 2, 4; file 1 has 1, 3
    order = ["writer_000", "writer_002", "writer_004", "writer_001"]
    assert [len(g) for g in ds.natural_groups] == [len(train[u]["y"]) for u in order]
    first = ds.natural_groups[1]
    np.testing.assert_allclose(ds.x_train[first], np.asarray(train["writer_002"]["x"], dtype=np.float32))
    assert ds.y_train[first].tolist() == train["writer_002"]["y"]
    assert len(ds.y_test) == sum(len(test[u]["y"]) for u in order)  # the chosen writers' test data
    assert ds.input_shape == (1, 28, 28) and ds.num_classes == 62
    with pytest.raises(DataError, match="6 writers needed"):
        FEMNISTConfig(root=str(tmp_path)).build(6, RNG)


def test_leaf_shakespeare_encoding(tmp_path):
    train, _ = write_leaf_dir(tmp_path / "data", "shakespeare", num_users=3, per_user=2, files=1)
    ds = ShakespeareConfig(root=str(tmp_path)).build(3, RNG)  # also finds <root>/data/train
    assert ds.input_shape == (80,) and ds.num_classes == 80 and ds.vocab_size == 80
    s, t = train["writer_000"]["x"][0], train["writer_000"]["y"][0]
    assert ds.x_train[0].tolist() == [float(LEAF_CHARACTERS.index(c)) for c in s]
    assert ds.y_train[0] == LEAF_CHARACTERS.index(t)


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda u: u["writer_000"].update(x=["short"] * len(u["writer_000"]["y"])), "x must be a string of 80 characters"),
    (lambda u: u["writer_000"].update(y=["ab"] * len(u["writer_000"]["y"])), "y must be one character"),
    (lambda u: u["writer_000"]["x"].__setitem__(0, "\t" * 80), "is not in LEAF's 80-character vocabulary"),
    (lambda u: u["writer_000"]["y"].pop(), "lists 'x' and 'y' of equal length"),
])
def test_leaf_malformed_files_name_file_and_user(tmp_path, mutate, needle):
    write_leaf_dir(tmp_path, "shakespeare", num_users=2, per_user=2, files=1)
    f = next((tmp_path / "train").glob("*.json"))
    obj = json.loads(f.read_text())
    mutate(obj["user_data"])
    f.write_text(json.dumps(obj))
    with pytest.raises(DataError) as info:
        ShakespeareConfig(root=str(tmp_path)).build(2, RNG)
    assert needle in info.value.message and f.name in info.value.message


def _scenario_file(tmp_path: Path, dataset: dict, model: dict | str = "logreg", count: int = 3) -> Path:
    sc = {"name": "files", "data": {"dataset": dataset, "partition": {"name": "iid"}}, "model": model,
          "devices": {"count": count}, "protocol": {"name": "fedavg", "fraction": 1.0}, "stop": {"rounds": 1},
          "runtime": {"executor": "local"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    return path


@pytest.mark.parametrize(("setup", "dataset", "needles"), [
    (None, {"name": "mnist", "root": "nowhere/mnist"},
     ["data.dataset.root", "'nowhere/mnist' does not exist", "train-images-idx3-ubyte"]),
    ("mnist-no-labels", {"name": "mnist"}, ["missing the train labels", "train-labels-idx1-ubyte or"]),
    ("mnist-count", {"name": "mnist"}, ["train-labels-idx1-ubyte.gz: 29 labels for the 30 images"]),
    ("mnist-label-range", {"name": "fashion_mnist"}, ["labels must lie in 0..9, found 0..12"]),
    ("cifar-empty", {"name": "cifar10"}, ["missing training batch 1", "data_batch_1"]),
    ("leaf-no-test", {"name": "femnist"}, ["missing the train/ and test/ folders"]),
    ("leaf-bad-json", {"name": "femnist"}, ["not valid JSON"]),
])
def test_bad_dataset_files_exit_2_naming_the_file(tmp_path, capsys, setup, dataset, needles):
    root = tmp_path / "d"
    if setup is not None:
        dataset = {**dataset, "root": str(root)}
    if setup == "mnist-no-labels":
        write_mnist_dir(root, 30, 10)
        (root / "train-labels-idx1-ubyte.gz").unlink()
    elif setup == "mnist-count":
        write_mnist_dir(root, 30, 10)
        write_idx(root / "train-labels-idx1-ubyte.gz", np.zeros(29, np.uint8), gz=True)
    elif setup == "mnist-label-range":
        write_mnist_dir(root, 30, 10)
        write_idx(root / "train-labels-idx1-ubyte.gz", np.arange(30, dtype=np.uint8) % 13, gz=True)
    elif setup == "cifar-empty":
        root.mkdir()
    elif setup == "leaf-no-test":
        write_leaf_dir(root, "femnist", num_users=3)
        for f in (root / "test").iterdir():
            f.unlink()
        (root / "test").rmdir()
    elif setup == "leaf-bad-json":
        write_leaf_dir(root, "femnist", num_users=3)
        next((root / "train").glob("*.json")).write_text("{not json")
    code = main(["validate", str(_scenario_file(tmp_path, dataset)), "--build"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)


def test_model_and_dataset_kinds_must_match(tmp_path):
    write_leaf_dir(tmp_path / "sh", "shakespeare", num_users=3)
    write_mnist_dir(tmp_path / "mn", 30, 10)
    sh = {"name": "shakespeare", "root": str(tmp_path / "sh")}
    with pytest.raises(ConfigError, match="character indices"):
        build(load_scenario(_scenario_file(tmp_path, sh, "logreg")))
    with pytest.raises(ConfigError, match=r"char_lstm needs sequences of character indices, shape \(seq_len,\)"):
        build(load_scenario(_scenario_file(tmp_path, {"name": "mnist", "root": str(tmp_path / "mn")}, "char_lstm")))
    with pytest.raises(ConfigError, match="more than model.vocab_size = 40"):
        build(load_scenario(_scenario_file(tmp_path, sh, {"name": "char_lstm", "vocab_size": 40})))


def test_char_lstm_learns_on_shakespeare_files(tmp_path):
    """FedAvg with a small char LSTM on LEAF files of a learnable text (a repeated 7-letter cycle, so
    the next character follows from the last one): it runs and the test loss falls."""
    text = "abcdefg" * 40
    rng = np.random.default_rng(2)

    def users(n_users: int, per_user: int) -> dict:
        out = {}
        for u in range(n_users):
            starts = rng.integers(0, len(text) - 81, size=per_user)
            out[f"role_{u}"] = {"x": [text[s:s + 80] for s in starts], "y": [text[s + 80] for s in starts]}
        return out

    for split, per in (("train", 12), ("test", 5)):
        (tmp_path / split).mkdir()
        data = users(3, per)
        (tmp_path / split / "all.json").write_text(json.dumps({"users": sorted(data), "user_data": data}))
    sc = tiny(data={"dataset": {"name": "shakespeare", "root": str(tmp_path)}, "partition": {"name": "natural"}},
              model={"name": "char_lstm", "hidden": 16, "layers": 1}, devices={"count": 3},
              training={"epochs": 3, "batch_size": 4, "lr": 1.0}, stop={"rounds": 4})
    res = run_scenario(sc, tmp_path / "run")
    assert res.summary["status"] == "completed" and res.summary["num_params"] > 80 * 8
    assert res.evals[-1]["loss"] < 0.7 * res.evals[0]["loss"]


# -- the shipped file-dataset scenarios run on generated files -------------------------------------

_WRITERS = {
    "mnist": lambda root, sc: write_mnist_dir(root, 24 * sc.devices.count, 40),
    "fashion_mnist": lambda root, sc: write_mnist_dir(root, 24 * sc.devices.count, 40),
    "emnist": lambda root, sc: write_mnist_dir(root, 24 * sc.devices.count, 40, test_name="test",
                                               prefix=f"emnist-{sc.data.dataset.split}-",
                                               num_classes=26 if sc.data.dataset.split == "letters" else 10,
                                               low_label=1 if sc.data.dataset.split == "letters" else 0),
    "cifar10": lambda root, sc: write_cifar_dir(root, per_batch=5 * sc.devices.count, n_test=20),
    "femnist": lambda root, sc: write_leaf_dir(root, "femnist", num_users=sc.devices.count, per_user=3, files=2),
    "shakespeare": lambda root, sc: write_leaf_dir(root, "shakespeare", num_users=sc.devices.count, per_user=2,
                                                   files=2),
}
def _file_scenarios() -> list[Path]:
    """The shipped scenarios on a file dataset (read at collection: a scenario's plug-ins are forgotten after)."""
    from hierfl.config.plugins import isolated

    # only a scenario whose YAML (with what it extends) names a file dataset can be one: the others are not
    # validated here, at collection, where every pytest-xdist worker would validate all of them
    texts = {p: json.dumps(load_raw(p)) for p in (ROOT / "scenarios").glob("*.yaml")}  # each file read once
    named = [p for p, text in texts.items() if any(n in text for n in _WRITERS)]
    with isolated():
        return sorted(p for p in named if load_scenario(p).data.dataset.name in _WRITERS)


FILE_SCENARIOS = _file_scenarios()


def test_every_file_dataset_has_a_scenario():
    assert {load_scenario(p).data.dataset.name for p in FILE_SCENARIOS} == set(_WRITERS)


@pytest.mark.slow  # six shipped-scenario runs (seconds): make test runs them, make test-fast leaves them out
@pytest.mark.parametrize("path", FILE_SCENARIOS, ids=[p.stem for p in FILE_SCENARIOS])
def test_file_scenario_runs_on_generated_files(tmp_path, path):
    sc = load_scenario(path)
    _WRITERS[sc.data.dataset.name](tmp_path / "files", sc)
    sub = {"train_samples": None, "test_samples": None} if "train_samples" in type(sc.data.dataset).model_fields else {}
    if sc.data.dataset.name in ("femnist", "shakespeare"):
        sub = {"test_samples": None}
    sc = load_scenario(path, ["runtime.executor=local", "stop.rounds=1", "evaluation.every_s=null",
                              f"data.dataset.root={tmp_path / 'files'}"]
                       + [f"data.dataset.{k}=null" for k in sub])
    summary = run_scenario(sc, tmp_path / "run").summary
    assert summary["status"] == "completed" and summary["rounds"] == 1
