"""Sparse and ragged results of parsing: NumPy-backed, with TensorFlow's layout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, Union

import numpy as np

__all__ = ["SparseArray", "RaggedArray"]


@dataclass(frozen=True, eq=False)
class SparseArray:
    """TensorFlow's ``SparseTensor`` as NumPy arrays.

    Attributes:
        indices: ``int64 [N, rank]``: the position of each value, row-major order.
        values: ``[N]`` values (``int64``, ``float32``, or ``object`` holding ``bytes``).
        dense_shape: ``int64 [rank]``: the shape of the dense array this stands for.
    """

    indices: np.ndarray
    values: np.ndarray
    dense_shape: np.ndarray

    @property
    def dtype(self) -> np.dtype:
        """The values' dtype."""
        return self.values.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The dense shape, as a tuple."""
        return tuple(int(n) for n in self.dense_shape)

    def to_dense(self, default_value: Any = None) -> np.ndarray:
        """The dense array, with ``default_value`` (0 or ``b""``) where nothing is set."""
        if default_value is None:
            default_value = b"" if self.values.dtype == object else 0
        out = np.full(tuple(self.dense_shape.tolist()), default_value, dtype=self.values.dtype)
        if len(self.values):
            out[tuple(self.indices.T)] = self.values
        return out

    def __repr__(self) -> str:
        return (
            f"SparseArray(indices={self.indices!r},\n            values={self.values!r},\n"
            f"            dense_shape={self.dense_shape!r})"
        )


@dataclass(frozen=True, eq=False)
class RaggedArray:
    """TensorFlow's ``RaggedTensor`` as NumPy arrays: rows of varying length.

    Row ``i`` is ``values[row_splits[i]:row_splits[i + 1]]``; ``values`` is
    itself a ``RaggedArray`` for more than one ragged dimension.

    Attributes:
        values: The concatenated rows.
        row_splits: ``[nrows + 1]`` offsets into ``values`` (``int32`` or ``int64``).
    """

    values: Union[np.ndarray, "RaggedArray"]
    row_splits: np.ndarray

    @classmethod
    def from_nested_row_splits(cls, flat_values: np.ndarray, nested_row_splits: Sequence[np.ndarray]) -> "RaggedArray":
        """Builds a ragged array from flat values and splits listed outermost first."""
        result: Union[np.ndarray, RaggedArray] = flat_values
        for splits in reversed(nested_row_splits):
            result = cls(result, splits)
        assert isinstance(result, RaggedArray), "at least one row_splits array is needed"
        return result

    @property
    def flat_values(self) -> np.ndarray:
        """The innermost values, all rows concatenated."""
        values = self.values
        while isinstance(values, RaggedArray):
            values = values.values
        return values

    @property
    def nested_row_splits(self) -> tuple[np.ndarray, ...]:
        """Every level's row splits, outermost first."""
        splits = [self.row_splits]
        values = self.values
        while isinstance(values, RaggedArray):
            splits.append(values.row_splits)
            values = values.values
        return tuple(splits)

    @property
    def ragged_rank(self) -> int:
        """How many ragged dimensions there are."""
        return len(self.nested_row_splits)

    def row_lengths(self) -> np.ndarray:
        """The length of each row."""
        return np.diff(self.row_splits)

    @property
    def dtype(self) -> np.dtype:
        """The values' dtype."""
        return self.flat_values.dtype

    @property
    def shape(self) -> tuple[int | None, ...]:
        """``(rows, None, ..., *inner)``: ``None`` for each ragged dimension, then the
        dense inner dimensions of the values (from ``UniformRowLength`` partitions)."""
        return (len(self),) + (None,) * self.ragged_rank + self.flat_values.shape[1:]

    def to_dense(self, default_value: Any = None) -> np.ndarray:
        """A dense array padded with ``default_value`` (0 or ``b""``), as ``RaggedTensor.to_tensor()``:
        each ragged dimension as wide as its longest row."""
        if default_value is None:
            default_value = b"" if self.dtype == object else 0
        inner = self.values.to_dense(default_value) if isinstance(self.values, RaggedArray) else self.values
        rows = len(self)
        splits = self.row_splits[: rows + 1].astype(np.int64)
        lengths = np.diff(splits)
        width = int(lengths.max()) if rows else 0
        out = np.full((rows, width) + inner.shape[1:], default_value, dtype=inner.dtype)
        if rows:
            positions = np.arange(splits[0], splits[-1])
            out[np.repeat(np.arange(rows), lengths), positions - np.repeat(splits[:-1], lengths)] = inner[positions]
        return out

    def __len__(self) -> int:
        # max: TensorFlow's single-example parser can give empty splits (no rows).
        return max(len(self.row_splits) - 1, 0)

    def __getitem__(self, i: int) -> Union[np.ndarray, "RaggedArray"]:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"row {i} out of range for {n} rows")
        i %= n
        start, end = int(self.row_splits[i]), int(self.row_splits[i + 1])
        if isinstance(self.values, RaggedArray):
            return _slice_ragged(self.values, start, end)
        return self.values[start:end]

    def to_list(self) -> list:
        """Nested Python lists."""
        return [row.to_list() if isinstance(row, RaggedArray) else row.tolist() for row in self]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        return f"RaggedArray({self.to_list()!r}, row_splits_dtype={self.row_splits.dtype})"


def _slice_ragged(ragged: RaggedArray, start: int, end: int) -> RaggedArray:
    """Rows ``start:end`` of ``ragged``, with splits rebased to 0."""
    splits = ragged.row_splits[start : end + 1]
    first, last = int(splits[0]), int(splits[-1])
    values = ragged.values
    inner = _slice_ragged(values, first, last) if isinstance(values, RaggedArray) else values[first:last]
    return RaggedArray(inner, splits - splits[0])
