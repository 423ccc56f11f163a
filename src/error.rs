//! The one error type of the Rust core. `py/errors.rs` maps it to Python exceptions.

use std::fmt;

use crate::example::{DType, Kind};

/// What kind of damage a [`DataLoss`] describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DamageKind {
    /// A TFRecord length field does not match its CRC.
    CorruptLength,
    /// A record's payload does not match its CRC.
    CorruptData,
    /// A record header is complete but the data or footer is cut short.
    TruncatedRecord,
    /// The file ends 1 to 11 (OFRecord: 1 to 7) bytes into a record header.
    PartialHeader,
    /// An OFRecord length of zero or less.
    InvalidLength,
    /// A compressed stream ends before its end marker.
    TruncatedStream,
    /// A compressed stream cannot be decoded, or has data after its end.
    CorruptStream,
    /// A mapped file lost bytes (another process truncated it) while read.
    TruncatedWhileReading,
    /// While skipping damage in a stream, a record over the size that can be checked.
    TooLargeToSkip,
}

impl DamageKind {
    /// A stable name, exposed to Python as `DataLossError.kind`.
    pub fn name(self) -> &'static str {
        match self {
            DamageKind::CorruptLength => "corrupt_length",
            DamageKind::CorruptData => "corrupt_data",
            DamageKind::TruncatedRecord => "truncated_record",
            DamageKind::PartialHeader => "partial_header",
            DamageKind::InvalidLength => "invalid_length",
            DamageKind::TruncatedStream => "truncated_stream",
            DamageKind::CorruptStream => "corrupt_stream",
            DamageKind::TruncatedWhileReading => "truncated_while_reading",
            DamageKind::TooLargeToSkip => "too_large_to_skip",
        }
    }
}

/// Damaged data, located in a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataLoss {
    pub kind: DamageKind,
    /// The file (or a description of the stream) the damage is in.
    pub path: String,
    /// The byte offset TensorFlow reports, in the uncompressed stream.
    pub offset: u64,
    /// Index of the record that could not be read (the number of intact records before it).
    pub record_index: u64,
    /// One line saying what is wrong, without the path.
    pub detail: String,
}

impl fmt::Display for DataLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (record {} of '{}')",
            self.detail, self.record_index, self.path
        )
    }
}

/// Every failure the core reports.
#[derive(Debug)]
pub enum Error {
    /// The operating system (or a Python file object) failed to read or write.
    Io {
        path: String,
        source: std::io::Error,
    },
    /// The data is damaged.
    DataLoss(Box<DataLoss>),
    /// The caller passed an unusable argument.
    InvalidArgument(String),
    /// The reader or writer was already closed.
    Closed(String),
    /// A position past the end (Python's `IndexError`).
    OutOfRange(String),
    /// Records do not fit what was asked of them.
    Parse(ParseFailure),
    /// Memory for data the input really holds could not be had.
    ResourceExhausted(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, source } => write!(f, "{path}: {source}"),
            Error::DataLoss(d) => d.fmt(f),
            Error::InvalidArgument(m)
            | Error::Closed(m)
            | Error::OutOfRange(m)
            | Error::ResourceExhausted(m) => f.write_str(m),
            Error::Parse(p) => p.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

impl From<ParseFailure> for Error {
    fn from(p: ParseFailure) -> Self {
        Error::Parse(p)
    }
}

impl From<DataLoss> for Error {
    fn from(d: DataLoss) -> Self {
        Error::DataLoss(Box::new(d))
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Why a batch could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseFailure {
    /// Record `index` is not a valid message.
    Malformed {
        index: usize,
        key: Option<Vec<u8>>,
        what: &'static str,
    },
    /// Record `index` holds `key` as another kind than asked for.
    WrongType {
        index: usize,
        key: Vec<u8>,
        expected: DType,
        actual: Kind,
        step: Option<usize>,
    },
    /// Record `index` fails the CRC of its footer (`Footers::Crc`): damage,
    /// which the caller reports as framing would have.
    Corrupt { index: usize },
}

impl ParseFailure {
    /// The same failure with its record index moved on by `by` (a chunk's start).
    pub fn shifted(mut self, by: usize) -> Self {
        match &mut self {
            ParseFailure::Malformed { index, .. }
            | ParseFailure::WrongType { index, .. }
            | ParseFailure::Corrupt { index } => *index += by,
        }
        self
    }
}

/// TensorFlow's names for the three types, as its messages use them.
fn type_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Int64 => "int64",
        Kind::Float => "float",
        Kind::Bytes => "string",
        Kind::Double => "double",
        Kind::Int32 => "int32",
    }
}

impl ParseFailure {
    pub fn index(&self) -> usize {
        match self {
            ParseFailure::Malformed { index, .. }
            | ParseFailure::WrongType { index, .. }
            | ParseFailure::Corrupt { index } => *index,
        }
    }

    pub fn key(&self) -> Option<&[u8]> {
        match self {
            ParseFailure::Malformed { key, .. } => key.as_deref(),
            ParseFailure::WrongType { key, .. } => Some(key),
            ParseFailure::Corrupt { .. } => None,
        }
    }
}

impl std::fmt::Display for ParseFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseFailure::Malformed {
                index,
                key: None,
                what,
            } => {
                write!(f, "Index: {index}. Could not parse example input: {what}")
            }
            ParseFailure::Malformed {
                index,
                key: Some(key),
                what,
            } => {
                write!(
                    f,
                    "Key: {}, Index: {index}. Can't parse serialized Example: {what}",
                    String::from_utf8_lossy(key)
                )
            }
            ParseFailure::WrongType {
                index,
                key,
                expected,
                actual,
                step,
            } => {
                let key = String::from_utf8_lossy(key);
                match step {
                    None => write!(f, "Key: {key}, Index: {index}. "),
                    Some(step) => write!(f, "Feature list: {key}, Index: {index}, step: {step}. "),
                }?;
                write!(
                    f,
                    "Data types don't match. Data type: {} but expected type: {}",
                    type_name(*actual),
                    type_name(expected.kind())
                )
            }
            ParseFailure::Corrupt { index } => write!(f, "Index: {index}. The data fails its CRC"),
        }
    }
}
