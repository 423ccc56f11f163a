//! recordkit's Rust core: framing, CRC, compression (and, as they land, the
//! wire codec and columns). This file only declares modules and registers the
//! Python module; `py/` holds the bindings.

pub mod columns;
pub mod compression;
pub mod crc;
pub mod encode;
pub mod error;
pub mod example;
pub mod frame;
pub mod framing;
pub mod index_text;
pub mod interned;
pub mod map_guard;
pub mod message;
pub mod message_sequence;
pub mod message_text;
pub mod parallel_framing;
pub mod pool;
mod py;
pub mod random_access;
pub mod raw;
pub mod read_ahead;
pub mod reserve;
pub mod shuffle;
pub mod survey;
pub mod threads;
pub mod window;
pub mod wire;
pub mod write_pipeline;

use pyo3::prelude::*;

/// The compiled half of recordkit. Private: use the `recordkit` package.
///
/// It reads the items of Python lists and object arrays borrowed, trusting
/// the GIL to keep other threads from changing them (`py/lists.rs`); built
/// for a free-threaded CPython (possible since the extension is built per
/// version, not for the stable ABI), importing it keeps the GIL on.
#[pymodule(gil_used = true)]
mod _native {
    #[pymodule_export]
    use crate::py::batches::PyExampleBatches;

    #[pymodule_export]
    use crate::py::errors::_panic_for_tests;

    #[pymodule_export]
    use crate::py::lists::_columns_from_rows;

    #[pymodule_export]
    use crate::py::messages::lists::{
        BytesList, DoubleList, FloatList, Int32List, Int64List, RepeatedValues,
    };

    #[pymodule_export]
    use crate::py::messages::features::{Features, OFRecord};

    #[pymodule_export]
    use crate::py::messages::fast::{
        _decode_feature_dict, _encode_plain_example, _feature_of_plain, decode_example,
    };

    #[pymodule_export]
    use crate::py::messages::examples::{
        Example, FeatureList, FeatureLists, RepeatedFeatures, SequenceExample,
    };

    #[pymodule_export]
    use crate::py::random_access::{_parse_index, PyFrameReader, PyIndexedFrames};

    #[pymodule_export]
    use crate::py::packed_bytes::{_pack_bytes, _unpack_bytes};

    #[pymodule_export]
    use crate::py::raw::_join_raw;

    #[pymodule_export]
    use crate::py::records::{PyRecordScanner, PyRecordWriter};

    #[pymodule_export]
    use crate::py::shared::PySharedIterator;

    #[pymodule_export]
    use crate::py::shuffle::PyShuffleBuffer;

    #[pymodule_export]
    use crate::py::threads::{_num_threads, _set_num_threads};

    #[pymodule_export]
    use crate::py::codec::{
        decode_feature, decode_features, decode_list, decode_sequence, encode_feature,
        encode_features, encode_list, encode_sequence, parse_example_columns,
        parse_sequence_columns, survey_features,
    };

    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        use crate::py::messages::examples::FeatureListMap;
        use crate::py::messages::features::{MessageMap, OfFeature, TfFeature};
        // Classes whose Python names repeat (each module has its `Feature`), by names of their own.
        let py = m.py();
        m.add("TfFeature", py.get_type::<TfFeature>())?;
        m.add("OfFeature", py.get_type::<OfFeature>())?;
        m.add("MessageMap", py.get_type::<MessageMap>())?;
        m.add("FeatureListMap", py.get_type::<FeatureListMap>())?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add(
            "build_profile",
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
        )?;
        Ok(())
    }
}
