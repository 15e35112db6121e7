"""Loaders of the attack benchmark on small files written in the real formats."""

import gzip
import os
import pickle
import struct

import numpy as np
import pytest

from benchmarks.attack import data


def write_idx(path, array, compress=False):
    array = np.asarray(array, np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + array.tobytes()
    if compress:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(payload))
    else:
        path.write_bytes(payload)
    return path


def write_mnist_idx(folder, n_train=12, n_test=5, compress=False, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, 28, 28)),
        "train_labels": rng.integers(0, 10, n_train),
        "test_images": rng.integers(0, 256, (n_test, 28, 28)),
        "test_labels": rng.integers(0, 10, n_test),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for key, name in data.IDX_FILES.items():
        write_idx(folder / name, arrays[key], compress)
    return arrays


def write_cifar(folder, per_batch=3, protocol=pickle.DEFAULT_PROTOCOL):
    folder.mkdir(parents=True, exist_ok=True)
    labels_seen = []
    for i, name in enumerate((*data.CIFAR_TRAIN, data.CIFAR_TEST)):
        rows = np.zeros((per_batch, 3072), np.uint8)
        rows[:, :1024], rows[:, 1024:2048], rows[:, 2048:] = 10, 20, 30 + i  # R, G, B planes
        rows[:, 1] = 255  # red channel, row 0, column 1
        labels = [(i + j) % 10 for j in range(per_batch)]
        labels_seen.append(labels)
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": rows, b"labels": labels, b"batch_label": name.encode()}, f,
                        protocol)
    return labels_seen


@pytest.mark.parametrize("compress", [False, True])
def test_mnist_idx_round_trip(tmp_path, compress):
    arrays = write_mnist_idx(tmp_path, compress=compress)
    ds = data.load("mnist", tmp_path)
    assert ds.source == "mnist-idx"
    assert ds.train_images.shape == (12, 28, 28, 1) and ds.test_images.shape == (5, 28, 28, 1)
    assert ds.train_images.dtype == np.float32
    np.testing.assert_allclose(ds.test_images[..., 0] * 255, arrays["test_images"], atol=1e-3)
    np.testing.assert_array_equal(ds.train_labels, arrays["train_labels"])


def test_mnist_idx_in_torchvision_layout(tmp_path):
    write_mnist_idx(tmp_path / "MNIST" / "raw")
    assert data.load_mnist(tmp_path).test_images.shape == (5, 28, 28, 1)


def test_mnist_npz(tmp_path):
    rng = np.random.default_rng(1)
    x_train = rng.integers(0, 256, (4, 28, 28), np.uint8)
    x_test = rng.integers(0, 256, (3, 28, 28), np.uint8)
    np.savez(tmp_path / "mnist.npz", x_train=x_train, y_train=np.arange(4), x_test=x_test,
             y_test=np.array([7, 8, 9]))
    for path in (tmp_path, tmp_path / "mnist.npz"):
        ds = data.load_mnist(path)
        assert ds.source == "mnist-npz"
        np.testing.assert_array_equal(ds.test_labels, [7, 8, 9])
        np.testing.assert_allclose(ds.train_images[..., 0] * 255, x_train, atol=1e-3)


def test_cifar10_pickles_are_read_as_nhwc(tmp_path):
    labels = write_cifar(tmp_path / "cifar-10-batches-py")
    for path in (tmp_path, tmp_path / "cifar-10-batches-py"):
        ds = data.load("cifar10", path)
        assert ds.train_images.shape == (15, 32, 32, 3) and ds.test_images.shape == (3, 32, 32, 3)
        np.testing.assert_array_equal(ds.test_labels, labels[-1])
        # Channel-major rows become NHWC: planes R, G, B; pixel (0, 1) of red is 255.
        np.testing.assert_allclose(ds.test_images[0, 5, 5] * 255, [10, 20, 35], atol=1e-3)
        assert ds.train_images[0, 0, 1, 0] == 1.0 and ds.train_images[0, 0, 1, 1] < 0.1



@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_cifar10_pickles_of_every_protocol_load(tmp_path, protocol):
    labels = write_cifar(tmp_path, per_batch=2, protocol=protocol)
    np.testing.assert_array_equal(data.load("cifar10", tmp_path).test_labels, labels[-1])


def test_cifar10_pickle_with_python2_numpy_names_loads(tmp_path):
    # The published batches were written by Python 2, whose NumPy lived in numpy.core.
    batch = {b"data": np.full((2, 3072), 7, np.uint8), b"labels": [3, 4]}
    raw = pickle.dumps(batch, protocol=2)
    assert b"numpy._core.multiarray\n" in raw
    path = tmp_path / "batch"
    path.write_bytes(raw.replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n"))
    images, loaded = data._cifar_batch(path)
    np.testing.assert_array_equal(loaded, [3, 4])
    assert images.shape == (2, 32, 32, 3) and np.all(images == np.float32(7 / 255))


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("payload", ["os.system", "builtins.eval", "numpy.load"])
def test_cifar10_pickle_that_would_run_code_is_refused(tmp_path, payload):
    marker = tmp_path / "ran"
    bomb = {"os.system": _RunsCode(marker), "builtins.eval": _Eval(marker),
            "numpy.load": _NumpyLoad(marker)}[payload]
    write_cifar(tmp_path)
    with open(tmp_path / data.CIFAR_TEST, "wb") as f:
        pickle.dump({b"data": np.zeros((1, 3072), np.uint8), b"labels": [bomb]}, f)
    name = {"os.system": os.system.__module__ + ".system"}.get(payload, payload)
    with pytest.raises(pickle.UnpicklingError, match=rf"test_batch: refusing the global {name}"):
        data.load("cifar10", tmp_path)
    assert not marker.exists()


class _Eval(_RunsCode):
    def __reduce__(self):
        return eval, (f"open({str(self.marker)!r}, 'w')",)


class _NumpyLoad(_RunsCode):
    def __reduce__(self):
        return np.load, (str(self.marker),)

def test_bad_inputs_have_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="Unknown dataset"):
        data.load("svhn")
    with pytest.raises(ValueError, match="CIFAR-10 is not available"):
        data.load("cifar10")
    with pytest.raises(FileNotFoundError, match="No MNIST found"):
        data.load("mnist", tmp_path)
    with pytest.raises(FileNotFoundError, match="missing data_batch_1"):
        data.load("cifar10", tmp_path)
    bad = write_idx(tmp_path / "bad", np.zeros((2, 5, 5)))
    bad.write_bytes(b"\x00\x00\x0d\x01" + bad.read_bytes()[4:])
    with pytest.raises(ValueError, match="magic"):
        data.read_idx(bad)
    truncated = write_idx(tmp_path / "short", np.zeros((2, 5, 5)))
    truncated.write_bytes(truncated.read_bytes()[:-3])
    with pytest.raises(ValueError, match="header says"):
        data.read_idx(truncated)
    wrong = tmp_path / "wrong"
    write_mnist_idx(wrong)
    write_idx(wrong / data.IDX_FILES["test_images"], np.zeros((5, 32, 32)))
    with pytest.raises(ValueError, match=r"shaped \(N, 28, 28\)"):
        data.load_mnist(wrong)
    write_idx(wrong / data.IDX_FILES["test_images"], np.zeros((4, 28, 28)))
    with pytest.raises(ValueError, match="expected 4 labels"):
        data.load_mnist(wrong)


def test_fingerprint_tracks_contents(tmp_path):
    write_mnist_idx(tmp_path / "a", seed=0)
    write_mnist_idx(tmp_path / "b", seed=1)
    a, b = data.load_mnist(tmp_path / "a"), data.load_mnist(tmp_path / "b")
    assert a.fingerprint() == data.load_mnist(tmp_path / "a").fingerprint() != b.fingerprint()
