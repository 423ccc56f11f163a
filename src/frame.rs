//! The frame format: how one TFRecord or OFRecord record is laid out, and
//! how a frame is written, sealed and recognised. The scanner that finds
//! frames in a file is `framing`; compression detection reads headers here.
//!
//! TFRecord: `u64 length | masked crc32c(length) | data | masked crc32c(data)`,
//! all little-endian. OFRecord: `i64 length | data`, little-endian, no CRC.

use std::io::{self, Write};

use crate::crc::{crc32c_u64, mask, masked_crc32c, unmask};
use crate::error::{Error, Result};

/// Which framing a file uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    TfRecord,
    OfRecord,
}

impl Format {
    pub fn parse(name: &str) -> Result<Format> {
        match name {
            "tfrecord" => Ok(Format::TfRecord),
            "ofrecord" => Ok(Format::OfRecord),
            _ => Err(Error::InvalidArgument(format!(
                "unknown record format {name:?}"
            ))),
        }
    }

    pub(crate) fn header_len(self) -> u64 {
        match self {
            Format::TfRecord => 12,
            Format::OfRecord => 8,
        }
    }

    pub fn footer_len(self) -> u64 {
        match self {
            Format::TfRecord => 4,
            Format::OfRecord => 0,
        }
    }
}

/// Where one record's payload lies in the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub pos: u64,
    pub len: usize,
}

pub(crate) const TF_HEADER: usize = 12;

/// Whether `bytes` starts with a TFRecord header whose length CRC checks.
pub fn is_tfrecord_header(bytes: &[u8]) -> bool {
    bytes.len() >= TF_HEADER && header_crc_ok(&bytes[..TF_HEADER])
}

#[inline]
pub(crate) fn header_crc_ok(header: &[u8]) -> bool {
    let stored = u32::from_le_bytes(header[8..12].try_into().unwrap());
    unmask(stored) == crc32c_u64(u64::from_le_bytes(header[..8].try_into().unwrap()))
}

/// Appends one TFRecord frame holding `data` to `out`.
pub fn write_tfrecord<W: Write>(out: &mut W, data: &[u8]) -> io::Result<()> {
    let len = (data.len() as u64).to_le_bytes();
    let mut header = [0u8; TF_HEADER];
    header[..8].copy_from_slice(&len);
    header[8..].copy_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.write_all(&header)?;
    out.write_all(data)?;
    out.write_all(&masked_crc32c(data).to_le_bytes())
}

/// Bytes a frame puts before its payload.
pub fn header_len(format: Format) -> usize {
    format.header_len() as usize
}

/// Fills in the header and footer of `frame`, a whole frame's bytes whose
/// payload is already in place.
#[inline]
pub fn seal_frame(frame: &mut [u8], format: Format) {
    let payload = frame.len() - header_len(format) - format.footer_len() as usize;
    match format {
        Format::TfRecord => {
            frame[..8].copy_from_slice(&(payload as u64).to_le_bytes());
            let length_crc = mask(crc32c_u64(payload as u64));
            frame[8..12].copy_from_slice(&length_crc.to_le_bytes());
            let (data, footer) = frame[12..].split_at_mut(payload);
            footer.copy_from_slice(&masked_crc32c(data).to_le_bytes());
        }
        Format::OfRecord => frame[..8].copy_from_slice(&(payload as i64).to_le_bytes()),
    }
}

/// Appends one OFRecord frame holding `data` to `out`.
pub fn write_ofrecord<W: Write>(out: &mut W, data: &[u8]) -> io::Result<()> {
    out.write_all(&(data.len() as i64).to_le_bytes())?;
    out.write_all(data)
}

/// Payloads from this size have their CRCs checked after framing, on every
/// core (see `Scanner::check_deferred`): there the CRC is most of framing's
/// cost. Shorter ones are checked while framing, where their bytes are in
/// cache already, and framing a batch of many small records runs beside the
/// parsing of the one before (`ExampleBatches`).
pub(crate) const DEFERRED_CRC_FROM: usize = 16 << 10;

/// The payload of `framed` (a payload and its TFRecord footer, as a scanner
/// that left short payloads' CRCs to the parser frames them), or None where
/// the payload fails the CRC left to be checked here.
#[inline(always)]
pub fn checked_payload(framed: &[u8]) -> Option<&[u8]> {
    let (payload, footer) = framed.split_at_checked(framed.len().checked_sub(4)?)?;
    let left_here = payload.len() < DEFERRED_CRC_FROM;
    let stored = || unmask(u32::from_le_bytes(footer.try_into().unwrap()));
    (!left_here || stored() == crate::crc::crc32c(payload)).then_some(payload)
}
