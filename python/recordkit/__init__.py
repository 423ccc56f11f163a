"""recordkit: TFRecord, tf.train.Example and OFRecord files from Python, without TensorFlow.

Byte-compatible with TensorFlow and OneFlow, CRC-checked, and fast: framing,
checksums and compression run in Rust with the GIL released.

>>> import recordkit as rk
>>> with rk.TFRecordWriter("data.tfrecord") as w:  # doctest: +SKIP
...     w.write(b"hello")
>>> list(rk.TFRecordReader("data.tfrecord"))  # doctest: +SKIP
[b'hello']
"""

from recordkit import ofrecord, train
from recordkit._native import __version__
from recordkit.arrays import RaggedArray, SparseArray
from recordkit.codec import (
    bytes_feature,
    decode_example,
    decode_json_example,
    decode_ofrecord,
    decode_sequence_example,
    double_feature,
    encode_example,
    encode_ofrecord,
    encode_sequence_example,
    float_feature,
    int32_feature,
    int64_feature,
)
from recordkit._shardsets import shard_names
from recordkit.columnar import read_examples
from recordkit.writing import write_examples, write_ofrecords
from recordkit.errors import (
    DataLossError,
    DataLossWarning,
    FailedPreconditionError,
    InternalError,
    ParseError,
    RecordkitError,
    ResourceExhaustedError,
)
from recordkit.features import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    SparseFeature,
    VarLenFeature,
)
from recordkit.parsing import (
    parse_example,
    parse_sequence_example,
    parse_single_example,
    parse_single_sequence_example,
)
from recordkit.images import image_shape
from recordkit.index import IndexedDataset, build_index, read_index
from recordkit.tensors import decode_raw, parse_tensor, serialize_tensor
from recordkit.threads import get_num_threads, set_num_threads
from recordkit.records import (
    DamagedRegion,
    OFRecordReader,
    OFRecordWriter,
    ReadStats,
    TFRecordReader,
    TFRecordWriter,
    count_records,
    tf_record_iterator,
    tf_record_random_reader,
    write_ofrecord_parts,
)
from recordkit.options import TFRecordCompressionType, TFRecordOptions

__all__ = [
    "__version__",
    "train",
    "ofrecord",
    "int64_feature",
    "float_feature",
    "bytes_feature",
    "double_feature",
    "int32_feature",
    "encode_example",
    "decode_example",
    "decode_json_example",
    "encode_sequence_example",
    "decode_sequence_example",
    "encode_ofrecord",
    "decode_ofrecord",
    "read_examples",
    "write_examples",
    "write_ofrecords",
    "shard_names",
    "RecordkitError",
    "DataLossError",
    "DataLossWarning",
    "ParseError",
    "ResourceExhaustedError",
    "FailedPreconditionError",
    "InternalError",
    "FixedLenFeature",
    "VarLenFeature",
    "SparseFeature",
    "RaggedFeature",
    "FixedLenSequenceFeature",
    "SparseArray",
    "RaggedArray",
    "parse_example",
    "parse_single_example",
    "parse_sequence_example",
    "parse_single_sequence_example",
    "serialize_tensor",
    "parse_tensor",
    "decode_raw",
    "image_shape",
    "Dataset",
    "convert",
    "infer_schema",
    "Schema",
    "feature_stats",
    "DatasetStats",
    "FeatureStats",
    "plot_stats",
    "read_table",
    "read_batches",
    "list_files",
    "build_index",
    "read_index",
    "IndexedDataset",
    "TFRecordReader",
    "TFRecordWriter",
    "OFRecordReader",
    "OFRecordWriter",
    "ReadStats",
    "DamagedRegion",
    "count_records",
    "write_ofrecord_parts",
    "tf_record_iterator",
    "tf_record_random_reader",
    "TFRecordOptions",
    "TFRecordCompressionType",
    "set_num_threads",
    "get_num_threads",
]

# Datasets and the tools for the command line and data engineering load on
# first use, keeping `import recordkit` light.
_LAZY = {
    "Dataset": "recordkit.dataset",
    "list_files": "recordkit.discovery",
    "convert": "recordkit.conversion",
    "infer_schema": "recordkit.schema",
    "Schema": "recordkit.schema",
    "feature_stats": "recordkit.stats",
    "DatasetStats": "recordkit.stats",
    "FeatureStats": "recordkit.stats",
    "plot_stats": "recordkit.stats",
    "read_table": "recordkit.tables",
    "read_batches": "recordkit.tables",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'recordkit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
