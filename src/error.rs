//! The one error type of the Rust core. `py/errors.rs` maps it to Python exceptions.

use std::fmt;

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
    Parse(crate::columns::ParseFailure),
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

impl From<crate::columns::ParseFailure> for Error {
    fn from(p: crate::columns::ParseFailure) -> Self {
        Error::Parse(p)
    }
}

impl From<DataLoss> for Error {
    fn from(d: DataLoss) -> Self {
        Error::DataLoss(Box::new(d))
    }
}

pub type Result<T> = std::result::Result<T, Error>;
