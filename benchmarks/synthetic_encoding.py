"""Size and speed of candidate encodings for synthetic_images' random-noise pixels.

    python benchmarks/synthetic_encoding.py [--images 100]

Prints bytes per 224x224x3 image and encode / decode (tf.io.decode_image) rates for
the encoding we ship (uncompressed PNG) against zlib-compressed PNG and JPEG.
"""

import argparse
import io
import time

import numpy as np
import PIL.Image
import tensorflow as tf

from imagesets.building import png_stored


def _pil(fmt, **kwargs):
  def encode(pixels):
    out = io.BytesIO()
    PIL.Image.fromarray(pixels).save(out, format=fmt, **kwargs)
    return out.getvalue()
  return encode


CANDIDATES = {
    "png, stored blocks (shipped)": png_stored.encode,
    "png, PIL zlib level 6": _pil("PNG", compress_level=6),
    "png, PIL zlib level 9": _pil("PNG", compress_level=9),
    "jpeg q95 (lossy)": _pil("JPEG", quality=95),
}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--images", type=int, default=100)
  args = parser.parse_args()
  images = [np.random.default_rng(i).integers(0, 256, (224, 224, 3), dtype=np.uint8)
            for i in range(args.images)]
  raw = images[0].nbytes
  print(f"{args.images} random 224x224x3 uint8 images, raw {raw:,} bytes each")
  print(f"{'encoding':32s} {'bytes/image':>12s} {'vs raw':>8s} {'encode img/s':>13s} "
        f"{'decode img/s':>13s} {'exact':>6s}")
  for name, encode in CANDIDATES.items():
    started = time.perf_counter()
    encoded = [encode(image) for image in images]
    encode_rate = len(images) / (time.perf_counter() - started)
    started = time.perf_counter()
    decoded = [tf.io.decode_image(blob).numpy() for blob in encoded]
    decode_rate = len(images) / (time.perf_counter() - started)
    exact = all(np.array_equal(a, b) for a, b in zip(images, decoded))
    size = sum(map(len, encoded)) / len(encoded)
    print(f"{name:32s} {size:12,.0f} {size / raw:8.4f} {encode_rate:13,.0f} "
          f"{decode_rate:13,.0f} {str(exact):>6s}")


if __name__ == "__main__":
  main()
