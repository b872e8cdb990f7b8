"""Tests of transformer_hessian.data.text: the embedded corpus (size, stable sha256, a changed corpus
refused naming both hashes), local text files and folders (UTF-8 checked), Tiny Shakespeare's
download against a local HTTP server on 127.0.0.1 (a file generated here; nothing touches the
internet) and the byte tokens (encode, split, windows)."""

from __future__ import annotations

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from transformer_hessian.data import text
from transformer_hessian.errors import DataError


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def fresh_embedded():
    """The embedded corpus rebuilt on each call of the test (the cache cleared before and after)."""
    text.embedded_corpus.cache_clear()
    yield text.embedded_corpus
    text.embedded_corpus.cache_clear()


# --------------------------------------------------------------------------------------------
# the embedded corpus
# --------------------------------------------------------------------------------------------


def test_embedded_corpus_is_over_a_megabyte_of_text_with_a_stable_sha256(fresh_embedded):
    corpus = fresh_embedded()
    assert corpus.nbytes >= 1 << 20
    assert corpus.nbytes == text.EMBEDDED_BYTES
    assert corpus.sha256 == sha(corpus.data) == text.EMBEDDED_SHA256
    assert corpus.files == text.EMBEDDED_FILES == tuple(sorted(text.EMBEDDED_FILES))
    assert "torch" in corpus.source and text.EMBEDDED_VERSION in corpus.source
    # computed a second time from the files: the same bytes
    text.embedded_corpus.cache_clear()
    again = fresh_embedded()
    assert again is not corpus and again.data == corpus.data
    assert fresh_embedded() is again  # cached
    # English prose: UTF-8, nearly all printable ASCII, many common words
    s = corpus.data.decode("utf-8")
    printable = sum(c.isascii() and (c.isprintable() or c == "\n") for c in s)
    assert printable / len(s) > 0.999
    words = re.findall(r"[a-z]+", s.lower())
    assert words.count("the") > 5_000 and words.count("tensor") > 1_000
    assert corpus.manifest() == {
        "name": corpus.name,
        "bytes": corpus.nbytes,
        "sha256": corpus.sha256,
        "files": list(corpus.files),
        "source": corpus.source,
    }


def _hashes(message: str) -> set[str]:
    return set(re.findall(r"\b[0-9a-f]{64}\b", message))


def test_a_changed_file_list_is_refused_naming_both_hashes_and_the_torch_version(fresh_embedded, monkeypatch):
    monkeypatch.setattr(text, "EMBEDDED_FILES", text.EMBEDDED_FILES[:-1])
    with pytest.raises(DataError) as info:
        fresh_embedded()
    msg = str(info.value)
    hashes = _hashes(msg)
    assert text.EMBEDDED_SHA256 in hashes and len(hashes) == 2
    assert f"torch {text.EMBEDDED_VERSION}" in msg


def test_a_tampered_expected_hash_is_refused(fresh_embedded, monkeypatch):
    real = text.EMBEDDED_SHA256
    monkeypatch.setattr(text, "EMBEDDED_SHA256", "0" * 64)
    with pytest.raises(DataError) as info:
        fresh_embedded()
    assert _hashes(str(info.value)) == {"0" * 64, real}


def test_docstring_texts_keeps_docstrings_and_long_literals_in_source_order():
    long = "x" * 90
    source = f'''"""Module doc."""
def add_docstr(f, s):
    """Short."""
add_docstr(1, r"""
    First line of a long text.
        indented line
    {long}
    """)
class A:
    """Class doc,
       second line."""
    message = "a short literal"
    def f(self):
        return f"{{self}} " "{long}"
'''
    assert text.docstring_texts(source) == [
        "Module doc.",
        "Short.",
        f"First line of a long text.\n    indented line\n{long}",
        "Class doc,\nsecond line.",
        long,
    ]


# --------------------------------------------------------------------------------------------
# local text
# --------------------------------------------------------------------------------------------


def test_local_file_is_taken_as_is(tmp_path):
    body = ("To be, or not to be: that is the question.\n" * 40).encode()
    f = tmp_path / "hamlet.md"
    f.write_bytes(body)
    corpus = text.local_corpus(f)
    assert corpus.data == body and corpus.sha256 == sha(body)
    assert corpus.files == ("hamlet.md",) and corpus.name == "hamlet"
    assert str(f.resolve()) in corpus.source


def test_local_folder_is_every_txt_file_in_path_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "a.txt").write_bytes(b"A" * 600)  # no newline at the end: one is put between
    (tmp_path / "b" / "c.txt").write_bytes("ü\n".encode() * 300)
    (tmp_path / "b" / "d.txt").write_bytes(b"D\n")
    (tmp_path / "notes.md").write_bytes(b"not a .txt file")
    (tmp_path / ".hidden" / "e.txt").write_bytes(b"\xff hidden, never read")
    corpus = text.local_corpus(tmp_path)
    assert corpus.files == ("a.txt", "b/c.txt", "b/d.txt")
    assert corpus.data == b"A" * 600 + b"\n" + "ü\n".encode() * 300 + b"D\n"
    assert corpus.sha256 == sha(corpus.data) and corpus.name == tmp_path.name


def test_local_text_that_is_not_utf8_is_refused_naming_the_file_and_offset(tmp_path):
    (tmp_path / "good.txt").write_bytes(b"fine text\n" * 200)
    bad = tmp_path / "sub" / "latin1.txt"
    bad.parent.mkdir()
    bad.write_bytes(b"caf" + "é".encode("latin-1") + b" au lait\n" * 200)
    with pytest.raises(DataError) as info:
        text.local_corpus(tmp_path)
    msg = str(info.value)
    assert str(bad) in msg and "offset 3" in msg and "0xe9" in msg and "UTF-8" in msg


def test_local_corpus_refuses_empty_short_and_missing(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no .txt file"):
        text.local_corpus(tmp_path / "empty")
    with pytest.raises(DataError, match="neither a file nor a folder"):
        text.local_corpus(tmp_path / "missing")
    short = tmp_path / "short.txt"
    short.write_bytes(b"too short\n")
    with pytest.raises(DataError, match=r"10 bytes in 1 file\(s\), too short.*at least 1,024 bytes"):
        text.local_corpus(short)
    short.write_bytes(b"")
    with pytest.raises(DataError, match="0 bytes"):
        text.local_corpus(short)
    assert text.local_corpus(short, min_bytes=0).data == b""


# --------------------------------------------------------------------------------------------
# Tiny Shakespeare's download, against a local server
# --------------------------------------------------------------------------------------------


class _Server:
    """Serves registered byte strings on 127.0.0.1 (404 for anything else) and counts requests."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append(self.path)
                body = outer.files.get(self.path)
                if body is None:
                    self.send_error(404, "File not found")
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    srv = _Server()
    yield srv
    srv.close()


def _files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_download_shakespeare_verifies_its_sha256_and_keeps_nothing_on_a_mismatch(server, tmp_path):
    body = "".join(f"CITIZEN {i}:\nSpeak, speak.\n\n" for i in range(500)).encode()
    server.files["/input.txt"] = body
    url = server.base + "/input.txt"

    corpus = text.download_shakespeare(tmp_path / "good", url=url, sha256=sha(body), timeout=5)
    assert corpus.data == body and corpus.sha256 == sha(body) and corpus.files == ("input.txt",)
    assert url in corpus.source
    assert _files(tmp_path / "good") == ["tinyshakespeare/input.txt"]  # no temp file left
    # in place and verified: not requested again
    assert text.download_shakespeare(tmp_path / "good", url=url, sha256=sha(body), timeout=5) == corpus
    assert server.requests == ["/input.txt"]

    wrong = "1" * 64
    with pytest.raises(DataError) as info:
        text.download_shakespeare(tmp_path / "bad", url=url, sha256=wrong, timeout=5)
    msg = str(info.value)
    assert wrong in msg and sha(body) in msg and url in msg and "checksum mismatch" in msg
    assert _files(tmp_path / "bad") == []  # the file is not kept

    # a file in place that does not verify is reported and left where it is
    dest = tmp_path / "good" / "tinyshakespeare" / "input.txt"
    dest.write_bytes(b"edited")
    with pytest.raises(DataError, match=f"has sha256 {sha(b'edited')}, expected {sha(body)}"):
        text.download_shakespeare(tmp_path / "good", url=url, sha256=sha(body), timeout=5)
    assert dest.read_bytes() == b"edited" and len(server.requests) == 2


def test_download_shakespeare_names_the_url_when_the_server_has_no_file(server, tmp_path):
    url = server.base + "/missing.txt"
    with pytest.raises(DataError, match=re.escape(url)):
        text.download_shakespeare(tmp_path, url=url, timeout=5)
    assert _files(tmp_path) == []


def test_shakespeare_constants_are_the_published_ones():
    assert text.SHAKESPEARE_URL.endswith("karpathy/char-rnn/master/data/tinyshakespeare/input.txt")
    assert re.fullmatch(r"[0-9a-f]{64}", text.SHAKESPEARE_SHA256) and text.SHAKESPEARE_BYTES == 1115394


# --------------------------------------------------------------------------------------------
# byte tokens
# --------------------------------------------------------------------------------------------


def test_encode_split_and_windows():
    data = bytes(range(256)) + "naïve\n".encode()
    corpus = text.Corpus("t", data, ("t.txt",), sha(data), "test")
    ids = text.encode(corpus)
    assert ids.dtype == torch.long and ids.shape == (len(data),) and text.VOCAB == 256
    assert ids.tolist() == list(data) and text.decode(ids) == data
    assert torch.equal(text.encode(data), ids)

    train, val = text.split(ids, val_fraction=0.1)
    n_val = int(len(data) * 0.1)
    assert len(val) == n_val and len(train) == len(data) - n_val
    assert torch.equal(torch.cat([train, val]), ids)  # contiguous, train first
    with pytest.raises(ValueError):
        text.split(ids, val_fraction=1.0)
    with pytest.raises(DataError):
        text.split(ids[:5], val_fraction=0.1)

    w = text.windows(ids, 7)
    assert w.shape == (len(data) // 7, 7)
    assert torch.equal(w[3], ids[21:28]) and torch.equal(w.reshape(-1), ids[: w.numel()])
    assert torch.equal(text.windows(ids, 7, n=5), w[:5])
    with pytest.raises(DataError, match="hold 37 windows of 7 tokens; 38 were asked for"):
        text.windows(ids, 7, n=38)
