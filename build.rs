//! Sets pyo3's `Py_3_*` cfgs for the CPython version this extension is built
//! for, so that code reading CPython's objects in place can follow their
//! layout by version (`src/py/lists.rs`).

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
