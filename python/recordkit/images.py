"""Image dimensions from JPEG and PNG headers, without decoding and without dependencies.

The TensorFlow tutorial reads ``height``, ``width`` and ``depth`` with
``tf.image.decode_jpeg(image).shape``; ``image_shape`` gives the same
numbers from the file's header.
"""

from __future__ import annotations

import struct

__all__ = ["image_shape"]

_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
# PNG colour type -> channels as TensorFlow decodes them (palettes become RGB).
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}


def image_shape(data: bytes) -> tuple[int, int, int]:
    """``(height, width, channels)`` of a JPEG or PNG image.

    Raises:
        ValueError: If ``data`` is not a JPEG or PNG image with a readable header.
    """
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return height, width, _PNG_CHANNELS.get(data[25], 3)
    if data[:2] == b"\xff\xd8":
        pos = 2
        while pos + 4 <= len(data):
            if data[pos] != 0xFF:
                pos += 1
                continue
            marker = data[pos + 1]
            if marker == 0xFF:
                pos += 1
                continue
            if marker in (0x01, *range(0xD0, 0xDA)):
                pos += 2
                continue
            (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
            if marker in _SOF and pos + 10 <= len(data):
                height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
                return height, width, data[pos + 9]
            pos += 2 + length
        raise ValueError("JPEG image without a frame header")
    raise ValueError("not a JPEG or PNG image")
