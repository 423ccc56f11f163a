"""Per-feature statistics of record files, and histograms a person can look at.

Counts, minimum, maximum and mean are exact over every record read;
quantiles and histograms come from a uniform sample of up to 100 000 values
per feature (exact when there are fewer). Top values are counted exactly while
a feature has up to 40 000 distinct short values; past that, memory stays
bounded and the counts become lower bounds (``FeatureStats.top_error``).
"""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Mapping, Sequence

import numpy as np

from recordkit._sources import PathLike, require
from recordkit.discovery import list_files
from recordkit.columnar import example_column_batches
from recordkit.schema import decode_any, infer_schema, record_batches

__all__ = ["FeatureStats", "DatasetStats", "feature_stats", "plot_stats", "check_plot_path", "shorten_title"]

_RESERVOIR = 100_000
_TOP = 5
_SHORT = 64  # byte strings up to this long are counted for the top values
_TRACKED = 10_000  # distinct values counted exactly; past 4x this, only the most frequent are kept
_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


class _Reservoir:
    """A uniform sample of a stream of numbers (Algorithm R, a chunk at a time)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._values = np.empty(_RESERVOIR)
        self._filled = 0
        self.seen = 0
        self.rng = rng

    @property
    def values(self) -> np.ndarray:
        return self._values[: self._filled]

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        first = values[: _RESERVOIR - self._filled]
        self._values[self._filled : self._filled + len(first)] = first
        self._filled += len(first)
        self.seen += len(first)
        values = values[len(first):]
        if len(values):
            positions = np.arange(self.seen, self.seen + len(values)) + 1
            accepted = self.rng.random(len(values)) < _RESERVOIR / positions
            self._values[self.rng.integers(0, _RESERVOIR, int(accepted.sum()))] = values[accepted]
            self.seen += len(values)


class _TopValues:
    """The most frequent values of a stream, in memory bounded whatever the stream.

    Exact while there are at most ``4 * _TRACKED`` distinct values. Past that,
    Misra-Gries' frequent-items summary, decremented a batch at a time: every
    count drops by the ``_TRACKED + 1``-th largest and the values left at zero
    go. A kept count is then at most ``error`` below the true one, and any value
    more frequent than ``seen / (_TRACKED + 1)`` is kept.
    """

    def __init__(self) -> None:
        self.counts: collections.Counter[bytes] = collections.Counter()
        self.error = 0
        self.seen = 0

    def update(self, values: Any) -> None:
        self.counts.update(values)
        self.seen += len(values)
        if len(self.counts) > 4 * _TRACKED:
            counts = np.fromiter(self.counts.values(), dtype=np.int64, count=len(self.counts))
            cut = int(np.partition(counts, len(counts) - _TRACKED - 1)[len(counts) - _TRACKED - 1])
            self.error += cut
            self.counts = collections.Counter({v: n - cut for v, n in self.counts.items() if n > cut})

    def most_common(self, n: int) -> list[tuple[bytes, int]]:
        return self.counts.most_common(n)


@dataclass
class FeatureStats:
    """Statistics of one feature (of a SequenceExample's feature list: over all its steps).

    ``count``: records holding the feature; ``missing``: records without it.
    ``values_per_record``: min/mean/max of the number of values. Numbers:
    ``min``, ``max``, ``mean``, ``quantiles`` ({0.05: ..., 0.5: ...}). Bytes:
    ``lengths`` (min/mean/max byte length) and ``top`` (the most frequent
    values up to 64 bytes long, with their counts). ``top_error`` is 0 when
    those counts are exact; past 40 000 distinct values it is the most any of
    them may be below the true count (memory stays bounded).
    """

    name: str
    kind: str
    count: int = 0
    missing: int = 0
    values: int = 0
    values_per_record: dict[str, float] = field(default_factory=dict)
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    quantiles: dict[float, float] = field(default_factory=dict)
    lengths: dict[str, float] = field(default_factory=dict)
    top: list[tuple[bytes, int]] = field(default_factory=list)
    top_error: int = 0
    non_finite: int = 0
    sample: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)

    def to_json(self) -> dict[str, Any]:
        """The statistics as JSON-ready values."""
        out: dict[str, Any] = {"kind": self.kind, "count": self.count, "missing": self.missing,
                               "values": self.values, "values_per_record": self.values_per_record}
        if self.kind == "bytes":
            out["lengths"] = self.lengths
            out["top"] = [[_text(v), n] for v, n in self.top]
            out["top_error"] = self.top_error
        elif self.min is not None:
            out.update(min=self.min, max=self.max, mean=self.mean,
                       quantiles={str(q): v for q, v in self.quantiles.items()}, non_finite=self.non_finite)
        return out


@dataclass
class DatasetStats(Mapping[str, FeatureStats]):
    """What ``feature_stats`` found: the records read, and one ``FeatureStats`` per feature.

    It is a mapping from feature name to its statistics (``stats["label"]``,
    ``for name in stats``), which ``plot_stats`` draws.
    """

    records: int
    features: dict[str, FeatureStats]

    def __getitem__(self, name: str) -> FeatureStats:
        return self.features[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.features)

    def __len__(self) -> int:
        return len(self.features)

    def to_json(self) -> dict[str, Any]:
        """``{"records": n, "features": {name: ...}}`` as JSON-ready values."""
        return {"records": self.records, "features": {k: v.to_json() for k, v in self.features.items()}}


def _text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.hex()


class _Accumulator:
    """One feature's statistics, gathered a batch of records at a time."""

    def __init__(self, name: str, rng: np.random.Generator) -> None:
        self.name = name
        self.kinds: set[str] = set()
        self.count = 0
        # Values per record (per step, for a feature list), kept as running totals: memory stays bounded.
        self.counted = self.value_total = self.most_values = 0
        self.fewest_values = np.inf
        self.total = 0.0
        self.numbers = 0
        self.non_finite = 0
        self.low = np.inf
        self.high = -np.inf
        self.reservoir = _Reservoir(rng)
        self.byte_strings = 0
        self.length_total = 0
        self.shortest = np.inf
        self.longest = 0
        self.lengths = _Reservoir(rng)
        self.top = _TopValues()

    def add_counts(self, records: int, counts: np.ndarray) -> None:
        """``records`` more records hold the feature, with ``counts`` values each (per step, for a feature list)."""
        self.count += records
        if len(counts):
            self.counted += len(counts)
            self.value_total += int(counts.sum())
            self.fewest_values = min(self.fewest_values, int(counts.min()))
            self.most_values = max(self.most_values, int(counts.max()))

    def add_values(self, kind: str, values: Any) -> None:
        """Values of ``kind``: a NumPy array (of ``bytes`` objects for byte strings), or a list of bytes."""
        if not len(values):
            return
        self.kinds.add(kind)
        if kind == "bytes_list":
            lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
            self.byte_strings += len(lengths)
            self.length_total += int(lengths.sum())
            self.shortest = min(self.shortest, int(lengths.min()))
            longest = int(lengths.max())
            self.longest = max(self.longest, longest)
            self.lengths.add(lengths)
            # Counted in C (Counter's own loop), not through a filtering generator: 3x faster.
            if longest > _SHORT:
                values = np.asarray(values, dtype=object)[lengths <= _SHORT]
            self.top.update(values)
            return
        numbers = np.asarray(values, dtype=np.float64)
        finite = numbers[np.isfinite(numbers)]
        self.non_finite += len(numbers) - len(finite)
        if len(finite):
            self.low = min(self.low, float(finite.min()))
            self.high = max(self.high, float(finite.max()))
            self.total += float(finite.sum())
            self.numbers += len(finite)
            self.reservoir.add(finite)

    def finish(self, records: int) -> FeatureStats:
        kinds = {"int64_list": "int64", "float_list": "float", "bytes_list": "bytes",
                 "double_list": "double", "int32_list": "int32"}
        names = {kinds[k] for k in self.kinds}
        kind = names.pop() if len(names) == 1 else ("none" if not names else "mixed")
        out = FeatureStats(self.name, kind, count=self.count, missing=records - self.count, values=self.value_total)
        if self.counted:
            out.values_per_record = {"min": int(self.fewest_values), "mean": round(self.value_total / self.counted, 3),
                                     "max": self.most_values}
        if kind == "bytes":
            if self.byte_strings:
                out.lengths = {"min": int(self.shortest), "mean": round(self.length_total / self.byte_strings, 1),
                               "max": int(self.longest)}
            out.top = self.top.most_common(_TOP)
            out.top_error = self.top.error
            out.sample = self.lengths.values
        elif self.numbers:
            out.min, out.max, out.mean = self.low, self.high, self.total / self.numbers
            out.quantiles = {q: float(np.quantile(self.reservoir.values, q)) for q in _QUANTILES}
            out.non_finite = self.non_finite
            out.sample = self.reservoir.values
        return out


_LIST_KINDS = {"int64": "int64_list", "float": "float_list", "bytes": "bytes_list"}
_REQUEST_DTYPES = {"int64": "int64", "float": "float32", "bytes": "string"}


def feature_stats(
    source: PathLike | Sequence[PathLike],
    *,
    limit: int | None = None,
    format: Literal["auto", "tfrecord", "ofrecord"] = "auto",
    compression: str | None = "auto",
    seed: int = 0,
) -> DatasetStats:
    """Statistics of every feature over every record (or the first ``limit``).

    Returns a ``DatasetStats``: ``.records`` read, and a mapping from
    feature name to ``FeatureStats``, ready for ``plot_stats``.

    A SequenceExample's context features keep their names; its feature lists
    are reported as ``name[]``, over all their steps. Plain Examples are
    parsed into columns in Rust, a batch per call; other records are decoded
    one by one and gathered a batch at a time.
    """
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive number of records, not {limit!r}")
    files = list_files(source)
    schema = infer_schema(files, limit=limit, format=format, compression=compression)
    rng = np.random.default_rng(seed)
    features: dict[str, _Accumulator] = {}

    def accumulator(name: str) -> _Accumulator:
        return features.get(name) or features.setdefault(name, _Accumulator(name, rng))

    columnar = (
        schema.container == "example" and not schema.undecodable and schema.features
        and all(info.kind in _LIST_KINDS and not info.kindless for info in schema.features.values())
    )
    records = 0
    if columnar:
        requests = [(name, _REQUEST_DTYPES[info.kind]) for name, info in schema.features.items()]
        for rows, parsed in example_column_batches(files, requests, 4096, compression=compression, limit=limit):
            records += rows
            for (name, info), (values, counts, _) in zip(schema.features.items(), parsed):
                kind, held = _LIST_KINDS[info.kind], counts[counts >= 0]
                accumulator(name).add_counts(len(held), held)
                accumulator(name).add_values(kind, values)
    else:
        ofrecord = schema.container == "ofrecord"
        for _, _, batch in record_batches(files, limit, format=format, compression=compression, batch_size=4096):
            records += len(batch)
            gathered: dict[str, list[list[tuple[str | None, Any]]]] = {}
            for record in batch:
                try:
                    context, lists, _ = decode_any(record, ofrecord)
                except ValueError:
                    continue  # not a message: it counts as a record without any feature
                for name, entry in context.items():
                    gathered.setdefault(name, []).append([entry])
                for name, steps in lists.items():
                    gathered.setdefault(name + "[]", []).append(steps)
            for name, per_record in gathered.items():
                entries = [entry for steps in per_record for entry in steps]
                acc = accumulator(name)
                acc.add_counts(len(per_record), np.fromiter((len(v) for _, v in entries), np.int64, count=len(entries)))
                for kind in {k for k, _ in entries if k is not None}:
                    same = [v for k, v in entries if k == kind]
                    acc.add_values(kind, [b for v in same for b in v] if kind == "bytes_list" else np.concatenate(same))
    return DatasetStats(records, {name: acc.finish(records) for name, acc in sorted(features.items())})


# --- pictures ------------------------------------------------------------------------------


def _histogram(stats: FeatureStats) -> tuple[str, list[str], list[int]] | None:
    """``(title, bar labels, bar heights)`` for one feature, or None when there is nothing to draw."""
    if stats.kind == "bytes":
        if stats.top and stats.top[0][1] > 1:
            return (f"{stats.name}: most frequent values", [_text(v)[:16] for v, _ in stats.top], [n for _, n in stats.top])
        sample = stats.sample
        title = f"{stats.name}: byte length"
    else:
        sample = stats.sample
        title = f"{stats.name}: values"
    if not len(sample):
        return None
    low, high = float(sample.min()), float(sample.max())
    if stats.kind in ("int64", "int32", "bytes") and high - low < 30:
        edges = np.arange(low - 0.5, high + 1.5)
        labels = [f"{int(e + 0.5)}" for e in edges[:-1]]
    elif stats.kind in ("int64", "int32", "bytes"):  # whole-number bins, labelled by their first value
        edges = np.unique(np.ceil(np.histogram_bin_edges(sample, bins=20)))
        edges[-1] = high + 1
        labels = [f"{int(e)}" for e in edges[:-1]]
    else:
        edges = np.histogram_bin_edges(sample, bins=20)
        labels = [f"{e:.3g}" for e in edges[:-1]]
    heights, _ = np.histogram(sample, bins=edges)
    return title, labels, heights.tolist()


def check_plot_path(path: str | os.PathLike[str]) -> str:
    """``path`` if a plot can be written there (``.png`` or ``.html``), else a ``ValueError``."""
    path = os.fspath(path)
    if not path.lower().endswith((".html", ".htm", ".png")):
        raise ValueError(f"{path}: plots are written as .png (needs matplotlib) or .html")
    return path


def shorten_title(text: str, width: int = 80) -> str:
    """``text`` cut to ``width`` characters at a word, comma or path boundary, with an ellipsis."""
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    for mark in (", ", " ", "/"):  # whole items of a list first, then words, then path components
        boundary = cut.rfind(mark)
        if boundary > width // 2:
            return cut[:boundary].rstrip(", /") + "…"
    return cut + "…"


def plot_stats(stats: Mapping[str, FeatureStats], path: str | os.PathLike[str], *, title: str = "") -> str:
    """Draws a histogram per feature into ``path``: ``.png`` (needs matplotlib) or
    ``.html`` (self-contained SVG, no dependency). Returns the path.

    ``stats`` is what ``feature_stats`` returns (or any mapping of
    ``FeatureStats``). Long titles are shortened at a word boundary.
    """
    path = check_plot_path(path)
    title = shorten_title(title)
    charts = [chart for chart in map(_histogram, stats.values()) if chart is not None]
    if path.lower().endswith((".html", ".htm")):
        _write_html(charts, path, title)
    else:
        _write_png(charts, path, title)
    return path


def _write_png(charts: list[tuple[str, list[str], list[int]]], path: str, title: str) -> None:
    matplotlib = require("matplotlib", "plot", "a PNG plot (.html needs nothing)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    columns = 2 if len(charts) > 1 else 1
    rows = max(1, -(-len(charts) // columns))
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(charts):]:
        ax.axis("off")
    for ax, (name, labels, heights) in zip(axes.flat, charts):
        ax.bar(range(len(heights)), heights, color="#4878a8")
        step = max(1, len(labels) // 10)
        ax.set_xticks(range(0, len(labels), step), labels[::step], rotation=30, fontsize=8)
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("count", fontsize=8)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _write_html(charts: list[tuple[str, list[str], list[int]]], path: str, title: str) -> None:
    import html

    width, height, pad = 480, 200, 30
    parts = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(title or 'recordkit stats')}</title>",
             "<style>body{font-family:sans-serif} figure{display:inline-block;margin:10px}</style>",
             f"<h1>{html.escape(title)}</h1>" if title else ""]
    for name, labels, heights in charts:
        top = max(heights) or 1
        bar = (width - 2 * pad) / len(heights)
        svg = [f"<svg width='{width}' height='{height + 40}' xmlns='http://www.w3.org/2000/svg'>"]
        for i, (label, h) in enumerate(zip(labels, heights)):
            x = pad + i * bar
            y = height * (1 - h / top)
            svg.append(f"<rect x='{x:.1f}' y='{y:.1f}' width='{max(bar - 1, 1):.1f}' height='{height - y:.1f}' "
                       f"fill='#4878a8'><title>{html.escape(label)}: {h}</title></rect>")
            if i % max(1, len(labels) // 8) == 0:
                svg.append(f"<text x='{x:.1f}' y='{height + 15}' font-size='10'>{html.escape(label)}</text>")
        svg.append(f"<text x='{pad}' y='{height + 32}' font-size='10'>max bar: {top}</text></svg>")
        parts.append(f"<figure>{''.join(svg)}<figcaption>{html.escape(name)}</figcaption></figure>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
