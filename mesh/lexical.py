"""Lexical retrieval: BM25 over cell content, row-aligned with a tenant's vectors.

:func:`terms` turns a text into index terms: Unicode words, case-folded,
English stop words removed (scikit-learn's list), Snowball-stemmed (PyStemmer),
at most :data:`MAX_TERMS` per text. The head tokenises a query once and sends
its terms; partitions tokenise the cells they hold.

:class:`LexicalIndex` is an inverted index whose document numbers are the rows
of a :class:`~mesh.vector_index.VectorIndex`, so the masks a filtered dense
search builds (live rows, layer, type, scene, agent, project) select lexical
candidates too. Its statistics (document count, average length, document
frequency) are those of each *project's* live rows at the moment of the query:
a project lives in one partition whatever the shard count, so a cell's BM25
score depends on its project's cells only, never on placement, and a tombstone
or an erase changes the statistics at once.

:func:`terms` shares one stemmer per process, which is not thread-safe: call it
from one thread (the event loop of the head or of an actor), as memesh does.

Guarantees: ``scores`` gives only rows in ``allowed`` with a positive score,
best first, ties by the row's id key (the dense search's tie-break);
``add``/``remove`` are exact inverses for a row; the index keeps no text, only
term postings (an erase removes the row from every posting of its terms).
"""

from __future__ import annotations

import importlib.util
import re
from array import array
from collections import Counter
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mesh.vector_index import BoolMask

MAX_TERMS = 2_048  # terms indexed per text (a cell is at most limits.max_text_chars)
MAX_QUERY_TERMS = 64  # distinct terms a query scores with: each costs a pass over its postings
POSTINGS_PER_PASS = 1 << 18  # postings scored in one numpy pass: bounds a query's working memory (tens of MB)
KEPT_POSTINGS = 1 << 20  # postings whose gains an index keeps across queries (8 bytes each): at most 8 MB a tenant
MAX_WORD = 64  # characters of a word that count: longer words are cut (no stemmer shortens them anyway)
_WORD = re.compile(r"[^\W_]+")


@cache
def _analysis() -> tuple[Any, frozenset[str]]:
    """The English Snowball stemmer and stop-word list, loaded on first use (about a millisecond)."""
    import Stemmer

    return Stemmer.Stemmer("english"), english_stop_words()


def english_stop_words() -> frozenset[str]:
    """scikit-learn's English stop-word list, read from its data module alone.

    Importing ``sklearn.feature_extraction.text`` runs scikit-learn's package (scipy, narwhals, ...):
    0.8 s on an idle machine and over 10 s on a loaded one, paid by the first write a scene shard took
    or the first query a head tokenised (a CI run saw a write take 13 s). The list itself is one
    constant in ``sklearn/feature_extraction/_stop_words.py``; that file is executed on its own here
    (0.3 ms). The package import is the fallback whenever that does not give a non-empty set of words
    (a release that moves the file, renames the constant or imports from its package).
    """
    package = importlib.util.find_spec("sklearn")  # finds the package without running it
    for location in (package.submodule_search_locations or []) if package else []:
        source = Path(location) / "feature_extraction" / "_stop_words.py"
        spec = importlib.util.spec_from_file_location("_memesh_sklearn_stop_words", source)
        if source.is_file() and spec is not None and spec.loader is not None:
            try:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                words = frozenset(module.ENGLISH_STOP_WORDS)
            except Exception:  # noqa: BLE001 - any failure of the shortcut falls back to the package import
                break
            if words and all(isinstance(word, str) for word in words):
                return words
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS  # a release moved or changed the list

    return frozenset(ENGLISH_STOP_WORDS)


@lru_cache(maxsize=65_536)
def _stem(word: str) -> str | None:
    """A word's index term, or None for a stop word (memoised: conversation vocabularies repeat)."""
    stemmer, stop = _analysis()
    if word in stop:
        return None
    stemmed: str = stemmer.stemWord(word)
    return stemmed


def terms(text: str) -> list[str]:
    """The index terms of ``text`` in order (repeats kept): words case-folded, stop words dropped, stemmed."""
    out: list[str] = []
    for match in _WORD.finditer(text.casefold()):
        word = match.group()
        term = _stem(word) if len(word) <= MAX_WORD else word[:MAX_WORD]  # the memo never holds a huge word
        if term is not None:
            out.append(term)
            if len(out) == MAX_TERMS:
                break
    return out


def query_terms(text: str, limit: int = MAX_QUERY_TERMS) -> list[str]:
    """The terms a query scores with: those of its first ``limit`` distinct terms, repeats kept (a
    repeated word weighs more). Bounds a query's cost whatever its length."""
    kept: dict[str, None] = {}
    out: list[str] = []
    for term in terms(text):
        if term not in kept:
            if len(kept) == limit:
                continue
            kept[term] = None
        out.append(term)
    return out


@dataclass(slots=True)
class _Postings:
    rows: array[int] = field(default_factory=lambda: array("i"))
    counts: array[int] = field(default_factory=lambda: array("i"))


@dataclass(slots=True)
class _Statistics:
    """What a query's BM25 needs besides its terms' postings, for one state of the index and one set of live
    rows: per project the live document count, per row its length norm ``k1 * (1 - b + b * length / average
    length of its project's live rows)``. ``key`` is (index generation, rows, k1, b); ``live`` the packed
    live flags it was computed over. ``gains`` keeps, per term a query asked for, its postings' rows and
    BM25 gains at weight 1 (0 for a row not live), so the next query with the term only gathers them: they
    depend on nothing but what ``key`` and ``live`` cover, and go with them."""

    key: tuple[int, int, float, float]
    live: bytes
    docs: npt.NDArray[np.float64]
    norm: npt.NDArray[np.float32]
    gains: dict[str, tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]] = field(default_factory=dict)
    kept: int = 0  # postings held in ``gains``


class LexicalIndex:
    """Term postings over rows, with each row's length and project code (row-aligned).

    The per-project statistics and row norms a query needs are kept for the next query until a row is added
    or removed, or the live rows or ``k1``/``b`` differ: consecutive reads of an unchanged tenant compute them
    once."""

    def __init__(self) -> None:
        self._postings: dict[str, _Postings] = {}
        self._length = np.zeros(256, dtype=np.float32)
        self._project = np.zeros(256, dtype=np.int32)
        self._indexed = np.zeros(256, dtype=np.bool_)
        self._width = 1  # project codes seen are below it
        self._generation = 0  # bumped by every add and remove
        self._statistics: _Statistics | None = None

    def __contains__(self, row: int) -> bool:
        return row < self._indexed.shape[0] and bool(self._indexed[row])

    def add(self, row: int, project: int, text: str) -> None:
        """Index ``text`` as row ``row`` of project code ``project`` (>= 0). A row already indexed is left as it is:
        a cell's content never changes."""
        if row in self:
            return
        self._grow(row)
        counted = Counter(terms(text))
        for term, count in counted.items():
            postings = self._postings.get(term)
            if postings is None:
                postings = self._postings[term] = _Postings()
            postings.rows.append(row)
            postings.counts.append(count)
        self._length[row] = sum(counted.values())
        self._project[row] = project
        self._indexed[row] = True
        self._width = max(self._width, project + 1)
        self._generation += 1

    def remove(self, row: int, text: str) -> None:
        """Take row ``row`` (indexed from ``text``) out of every posting: what an erase does."""
        if row not in self:
            return
        for term in set(terms(text)):
            postings = self._postings.get(term)
            if postings is None:
                continue
            rows = np.frombuffer(postings.rows, dtype=np.int32)
            keep = np.flatnonzero(rows != row)
            if keep.size == 0:
                del self._postings[term]
                continue
            counts = np.frombuffer(postings.counts, dtype=np.int32)
            kept_rows, kept_counts = array("i", rows[keep].tobytes()), array("i", counts[keep].tobytes())
            del rows, counts  # release the buffers before replacing the arrays
            postings.rows, postings.counts = kept_rows, kept_counts
        self._length[row] = 0.0
        self._indexed[row] = False
        self._generation += 1

    def scores(
        self, query: list[str], live: BoolMask, allowed: BoolMask, k1: float = 1.2, b: float = 0.75
    ) -> npt.NDArray[np.float32]:
        """BM25 (``k1``, ``b``) of every row, 0 outside ``allowed``; statistics per project over ``live`` rows.
        ``live`` and ``allowed`` cover rows ``0 .. n-1``."""
        n = live.shape[0]
        total = np.zeros(n, dtype=np.float32)
        if n == 0 or not query:
            return total
        found = [(weight, term, postings) for term, weight in Counter(query).items() if (postings := self._postings.get(term))]
        if not found:
            return total
        live_rows = live & self._indexed[:n]
        statistics = self._statistics_of(live_rows, k1, b)
        summed = np.zeros(n, dtype=np.float64)
        chunk: list[tuple[int, str, _Postings]] = []
        size = 0
        for weight, term, postings in found:  # in the query's order, a bounded number of postings at a time
            chunk.append((weight, term, postings))
            size += len(postings.rows)
            if size >= POSTINGS_PER_PASS:
                summed += self._gains(chunk, live_rows, allowed, statistics, k1)
                chunk, size = [], 0
        if chunk:
            summed += self._gains(chunk, live_rows, allowed, statistics, k1)
        total += summed.astype(np.float32)
        return total

    def _statistics_of(self, live_rows: BoolMask, k1: float, b: float) -> _Statistics:
        """The statistics over ``live_rows`` (rows ``0 .. n-1``), the kept ones when nothing they depend on changed."""
        n = live_rows.shape[0]
        key, packed = (self._generation, n, k1, b), np.packbits(live_rows).tobytes()
        kept = self._statistics
        if kept is not None and kept.key == key and kept.live == packed:
            return kept
        projects, lengths = self._project[:n], self._length[:n]
        docs = np.bincount(projects, weights=live_rows, minlength=self._width).astype(np.float64, copy=False)
        total = np.bincount(projects, weights=np.where(live_rows, lengths, np.float32(0)), minlength=self._width)
        average = np.divide(total, docs, out=np.ones(docs.shape[0]), where=docs > 0)
        norm = k1 * (1.0 - b + b * lengths / average[projects].astype(np.float32))
        self._statistics = _Statistics(key, packed, docs, norm.astype(np.float32, copy=False))
        return self._statistics

    def _gains(
        self,
        found: list[tuple[int, str, _Postings]],
        live_rows: BoolMask,
        allowed: BoolMask,
        statistics: _Statistics,
        k1: float,
    ) -> npt.NDArray[np.float64]:
        """Each row's BM25 over the terms of ``found`` (weight, term, postings): every term's gains at weight 1
        (kept in ``statistics`` from an earlier query, else computed and kept while there is room), times the
        term's weight, summed per row in the terms' order over the rows ``allowed``."""
        n = live_rows.shape[0]
        rows_of, gains_of = [], []
        for weight, term, postings in found:
            rows, gains = statistics.gains.get(term) or self._term_gains(term, postings, live_rows, statistics, k1)
            rows_of.append(rows)
            gains_of.append(gains if weight == 1 else gains * np.float32(weight))
        rows, gains = np.concatenate(rows_of), np.concatenate(gains_of)
        if not allowed.all():
            gains = gains * allowed[rows]
        summed = np.bincount(rows, weights=gains, minlength=n)[:n].astype(np.float64, copy=False)
        return summed

    def _term_gains(
        self, term: str, postings: _Postings, live_rows: BoolMask, statistics: _Statistics, k1: float
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]:
        """One term's postings below the statistics' rows, and each one's gain at weight 1: the idf of the
        term in the row's project (document frequency over live rows) times the saturated term frequency, 0
        for a row not live. Kept in ``statistics`` while it holds fewer than ``KEPT_POSTINGS`` postings.
        The rows are copied: a view would pin the postings' buffer, which a later ``add`` must grow."""
        n = live_rows.shape[0]
        rows = np.frombuffer(postings.rows, dtype=np.int32).copy()
        counts = np.frombuffer(postings.counts, dtype=np.int32)
        inside = rows < n  # rows beyond those asked about (a shorter mask) take no part
        if not inside.all():
            rows, counts = rows[inside], counts[inside]
        alive = live_rows[rows]
        projects = self._project[rows]
        width = statistics.docs.shape[0]
        frequency = np.bincount(projects, weights=alive, minlength=width)
        idf = np.log1p((statistics.docs - frequency + 0.5) / (frequency + 0.5)).astype(np.float32)
        tf = counts.astype(np.float32)
        gains = idf[projects] * tf * (k1 + 1.0) / (tf + statistics.norm[rows])
        gains = np.where(alive, gains, np.float32(0)).astype(np.float32, copy=False)
        if statistics.kept + rows.size <= KEPT_POSTINGS:
            statistics.gains[term] = (rows, gains)
            statistics.kept += rows.size
        return rows, gains

    def _grow(self, row: int) -> None:
        size = self._indexed.shape[0]
        if row < size:
            return
        while size <= row:
            size *= 2
        for name in ("_length", "_project", "_indexed"):
            old = getattr(self, name)
            new = np.zeros(size, dtype=old.dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)
