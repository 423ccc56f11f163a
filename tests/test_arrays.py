"""SparseArray and RaggedArray: dtype, shape and to_dense, as TensorFlow's SparseTensor and RaggedTensor give them."""

from __future__ import annotations

import numpy as np
import pytest

import recordkit as rk


def test_sparse_array_dtype_shape_and_dense() -> None:
    batch = rk.parse_example([rk.encode_example({"v": [1.5, 2.5]}), rk.encode_example({"v": [3.5]})],
                             {"v": rk.VarLenFeature("float32")})
    sparse = batch["v"]
    assert sparse.dtype == np.float32 and sparse.shape == (2, 2)
    assert sparse.to_dense().tolist() == [[1.5, 2.5], [3.5, 0.0]]


def test_ragged_array_dtype_shape_and_dense() -> None:
    ragged = rk.RaggedArray.from_nested_row_splits(np.arange(6), [np.array([0, 2, 3]), np.array([0, 1, 3, 6])])
    assert ragged.dtype == np.int64 and ragged.shape == (2, None, None)
    assert ragged.to_dense().tolist() == [[[0, 0, 0], [1, 2, 0]], [[3, 4, 5], [0, 0, 0]]]
    strings = rk.RaggedArray(np.array([b"a", b"b"], dtype=object), np.array([0, 0, 2]))
    assert strings.to_dense().tolist() == [[b"", b""], [b"a", b"b"]]
    assert strings.to_dense(b"?").tolist() == [[b"?", b"?"], [b"a", b"b"]]
    uniform = rk.RaggedArray(np.arange(6).reshape(3, 2), np.array([0, 1, 3]))  # a dense inner dimension
    assert uniform.shape == (2, None, 2) and uniform.to_dense().shape == (2, 2, 2)
    assert rk.RaggedArray(np.empty(0, np.int64), np.array([0])).to_dense().shape == (0, 0)


def test_to_dense_matches_tensorflow() -> None:
    tf = pytest.importorskip("tensorflow")
    splits = [np.array([0, 2, 2, 3]), np.array([0, 3, 3, 5])]
    ragged = rk.RaggedArray.from_nested_row_splits(np.arange(5, dtype=np.float32), splits)
    expected = tf.RaggedTensor.from_nested_row_splits(np.arange(5, dtype=np.float32), splits).to_tensor().numpy()
    np.testing.assert_array_equal(ragged.to_dense(), expected)
