//! The message classes (`recordkit.train`, `recordkit.ofrecord`): handles onto
//! the nodes of `crate::message`, with protobuf's Python API.

pub mod examples;
pub mod fast;
pub mod features;
pub mod json;
pub mod lists;
pub mod values;

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::error::Error;
use crate::py::files::Payload;
use crate::wire::Malformed;

/// A message's bytes that do not parse, as `recordkit.ParseError`.
pub fn malformed(m: Malformed) -> PyErr {
    Error::Parse(crate::columns::ParseFailure::Malformed {
        index: 0,
        key: None,
        what: m.0,
    })
    .into()
}

/// Serialized bytes from Python (bytes-like, not str), copied once into shared storage.
pub fn serialized(data: &Bound<'_, PyAny>) -> PyResult<Arc<[u8]>> {
    if let Ok(bytes) = data.cast::<PyBytes>() {
        return Ok(Arc::from(bytes.as_bytes()));
    }
    if data.is_instance_of::<PyString>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "a serialized message is bytes, not str: pass the bytes a file or SerializeToString() gave",
        ));
    }
    let payload = Payload::serialized(data)?;
    Ok(Arc::from(&*payload))
}

/// A record to write: a recordkit message (`Example`, `SequenceExample`,
/// `OFRecord`), encoded straight from its state; else as [`Payload::extract`].
pub fn record_payload(obj: &Bound<'_, PyAny>) -> PyResult<Payload> {
    if obj.is_instance_of::<PyBytes>() || obj.is_instance_of::<PyString>() {
        return Payload::extract(obj); // the common case, without the messages' checks
    }
    match record_bytes(obj) {
        Some(encoded) => Ok(Payload::Encoded(encoded)),
        None => Payload::extract(obj),
    }
}

/// The bytes of a record-level message (`Example`, `SequenceExample`,
/// `OFRecord`), encoded from its state; None for anything else.
pub fn record_bytes(obj: &Bound<'_, PyAny>) -> Option<Vec<u8>> {
    if let Ok(example) = obj.cast::<examples::Example>() {
        return Some(example.get().to_bytes());
    }
    if let Ok(sequence) = obj.cast::<examples::SequenceExample>() {
        return Some(sequence.get().to_bytes());
    }
    obj.cast::<features::OFRecord>()
        .ok()
        .map(|record| record.get().to_bytes())
}

/// What every message class does the same way, given how it reads and writes its bytes.
pub trait Message: Sized {
    /// The message's bytes: protobuf's deterministic serialization.
    fn to_bytes(&self) -> Vec<u8>;
    /// Replaces the contents with the message in `data` (protobuf's `ParseFromString`).
    fn parse_into(&self, data: Arc<[u8]>) -> Result<(), Malformed>;
    /// A new message from `data`.
    fn from_bytes(data: Arc<[u8]>) -> Result<Self, Malformed>;
    /// Protobuf's text format.
    fn text(&self) -> String;
}

/// The methods of protobuf's `Message` that every class has, in a `#[pymethods]`
/// block with the class's own (`$($extra)*`).
#[macro_export]
macro_rules! message_class {
    ($class:ident { $($extra:tt)* }) => {
        #[pymethods]
        #[allow(non_snake_case)]
        impl $class {
            /// The message's bytes: protobuf's deterministic serialization (map keys sorted).
            #[pyo3(signature = (deterministic = None))]
            fn SerializeToString<'py>(&self, py: Python<'py>, deterministic: Option<bool>) -> Bound<'py, pyo3::types::PyBytes> {
                let _ = deterministic;
                pyo3::types::PyBytes::new(py, &$crate::py::messages::Message::to_bytes(self))
            }

            /// Replaces the contents with the message in `data`; returns `len(data)`.
            fn ParseFromString(&self, data: &Bound<'_, PyAny>) -> PyResult<usize> {
                let data = $crate::py::messages::serialized(data)?;
                let len = data.len();
                $crate::py::messages::Message::parse_into(self, data).map_err($crate::py::messages::malformed)?;
                Ok(len)
            }

            /// Merges the message in `data` into this one (protobuf's merge: the
            /// concatenation parsed); returns `len(data)`.
            fn MergeFromString(&self, data: &Bound<'_, PyAny>) -> PyResult<usize> {
                let data = $crate::py::messages::serialized(data)?;
                let mut merged = $crate::py::messages::Message::to_bytes(self);
                merged.extend_from_slice(&data);
                $crate::py::messages::Message::parse_into(self, merged.into()).map_err($crate::py::messages::malformed)?;
                Ok(data.len())
            }

            /// A new message parsed from `data`, checked as protobuf checks it.
            // A static method, not a class method (the classes cannot be
            // subclassed, so the class is not needed): a class method's lookup
            // makes a bound method object on every call.
            #[staticmethod]
            fn FromString(data: &Bound<'_, PyAny>) -> PyResult<Self> {
                let data = $crate::py::messages::serialized(data)?;
                <Self as $crate::py::messages::Message>::from_bytes(data).map_err($crate::py::messages::malformed)
            }

            /// Makes this message a copy of `other`.
            fn CopyFrom(&self, other: &Bound<'_, Self>) -> PyResult<()> {
                let bytes = $crate::py::messages::Message::to_bytes(&*other.borrow());
                $crate::py::messages::Message::parse_into(self, bytes.into()).map_err($crate::py::messages::malformed)
            }

            /// Merges `other` into this message.
            fn MergeFrom(&self, other: &Bound<'_, Self>) -> PyResult<()> {
                let mut merged = $crate::py::messages::Message::to_bytes(self);
                merged.extend_from_slice(&$crate::py::messages::Message::to_bytes(&*other.borrow()));
                $crate::py::messages::Message::parse_into(self, merged.into()).map_err($crate::py::messages::malformed)
            }

            /// The size of the serialized message.
            fn ByteSize(&self) -> usize {
                $crate::py::messages::Message::to_bytes(self).len()
            }

            fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
                match other.cast::<Self>() {
                    Ok(other) => {
                        $crate::py::messages::Message::to_bytes(self)
                            == $crate::py::messages::Message::to_bytes(&*other.borrow())
                    }
                    Err(_) => false,
                }
            }

            fn __ne__(&self, other: &Bound<'_, PyAny>) -> bool {
                !self.__eq__(other)
            }

            fn __str__(&self) -> String {
                $crate::py::messages::Message::text(self)
            }

            fn __repr__(&self) -> String {
                $crate::py::messages::Message::text(self)
            }

            /// Pickles as its bytes: messages cross DataLoader and Ray workers.
            fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, pyo3::types::PyBytes>,))> {
                let bytes = $crate::py::messages::Message::to_bytes(&*slf.borrow());
                Ok((slf.get_type().getattr("FromString")?, (pyo3::types::PyBytes::new(slf.py(), &bytes),)))
            }

            fn __copy__(&self) -> PyResult<Self> {
                <Self as $crate::py::messages::Message>::from_bytes($crate::py::messages::Message::to_bytes(self).into())
                    .map_err($crate::py::messages::malformed)
            }

            fn __deepcopy__(&self, _memo: &Bound<'_, PyAny>) -> PyResult<Self> {
                self.__copy__()
            }

            $($extra)*
        }
    };
}
