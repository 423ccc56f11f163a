//! recordkit's Rust core: framing, CRC, compression (and, as they land, the
//! wire codec and columns). This file only declares modules and registers the
//! Python module; `py/` holds the bindings.

pub mod compression;
pub mod crc;
pub mod error;
pub mod framing;
mod py;
pub mod window;

use pyo3::prelude::*;

/// The compiled half of recordkit. Private: use the `recordkit` package.
#[pymodule(gil_used = false)]
mod _native {
    #[pymodule_export]
    use crate::py::records::{PyRecordScanner, PyRecordWriter};

    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("build_profile", if cfg!(debug_assertions) { "debug" } else { "release" })?;
        Ok(())
    }
}
