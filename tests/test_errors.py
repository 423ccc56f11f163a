"""recordkit's exception classes: what Python sees of each failure."""

from __future__ import annotations

import pickle

import pytest

import recordkit as rk
from recordkit import _native


def test_a_rust_panic_is_an_internal_error_that_except_exception_catches() -> None:
    try:
        _native._panic_for_tests()
    except Exception as e:  # noqa: BLE001 - the point: a plain `except Exception` catches it
        caught = e
    assert isinstance(caught, rk.InternalError)
    assert isinstance(caught, rk.RecordkitError)
    assert "deliberate panic" in str(caught) and "bug" in str(caught)


def test_every_public_error_is_a_recordkit_error() -> None:
    for cls in (rk.DataLossError, rk.ParseError, rk.ResourceExhaustedError, rk.InternalError):
        assert issubclass(cls, rk.RecordkitError)
    assert issubclass(rk.ResourceExhaustedError, MemoryError)


@pytest.mark.parametrize("cls", [rk.ResourceExhaustedError, rk.InternalError])
def test_errors_pickle(cls: type[Exception]) -> None:
    again = pickle.loads(pickle.dumps(cls("message")))
    assert type(again) is cls and str(again) == "message"
