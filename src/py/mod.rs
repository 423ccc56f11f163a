//! PyO3 glue: argument conversion, GIL release and error mapping. Only this
//! module and `lib.rs` touch pyo3.

pub mod batches;
pub mod codec;
pub mod errors;
pub mod files;
pub mod list_column;
pub mod lists;
pub mod memory;
pub mod messages;
pub mod packed_bytes;
pub mod random_access;
pub mod raw;
pub mod records;
pub mod shared;
pub mod shuffle;
pub mod threads;
