"""Where a default build's fingerprint time goes per photo, against the seed converter's
decode: the floor under `imagesets build`'s ratio to the seed converter.

    python benchmarks/fingerprint_cost.py [--tree crops] [--images 1500]
                                          [--work /tmp/flowers_bench]

On a tree of `flowers_build.py` (made there if absent: `--tree photo_like|crops|copies|large`),
in this one process, CPU time per photo (medians of 3 passes over the same files, read into
memory first): the seed converter's full decode (`tf.io.decode_jpeg`), our small decode
(`image_hashes.decode_small`, libjpeg's DCT scaled to a shorter side of 64-127 px; its
entropy decoding reads the whole file at any scale), libjpeg at 1/8 scale (the least any
decode costs), what the fingerprint computes from the small decode (thumbnail, the two
hashes, the quality measures, the pixel digest) and the SHA-256 of the bytes (what an
exact copy costs). The floor of a default build's CPU per photo is the build without
fingerprints (`flowers_build.py --kinds flowers_off`) plus the 1/8-scale decode.
"""

import argparse
import statistics
import time

import numpy as np
import simplejpeg

import flowers_build


def _per_photo(work, datas, passes: int = 3) -> float:
  """Median over `passes` of CPU ms per photo of `work` over `datas`."""
  times = []
  for _ in range(passes):
    start = time.process_time()
    for data in datas:
      work(data)
    times.append((time.process_time() - start) / len(datas) * 1000)
  return statistics.median(times)


def _eighth(data: bytes):
  height, width, _, _ = simplejpeg.decode_jpeg_header(data)
  return simplejpeg.decode_jpeg(data, colorspace="RGB", strict=False,
                                min_height=-(-height // 8), min_width=-(-width // 8))


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--tree", choices=flowers_build.TREES, default="crops")
  parser.add_argument("--images", type=int, default=1500)
  parser.add_argument("--work", default="/tmp/flowers_bench")
  args = parser.parse_args()
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from imagesets.analysis import image_hashes  # pylint: disable=import-outside-toplevel

  root = flowers_build.tree_root(args.work, args.tree, args.images)
  flowers_build.make_tree(root, args.images, args.tree)
  datas = [path.read_bytes() for path in sorted(root.glob("*/*.jpg"))]
  smalls = [image_hashes.decode_small(data) for data in datas]
  sizes = np.array([s[3] for s in smalls])
  print(f"{len(datas)} photos of {args.tree}, {np.mean([len(d) for d in datas]) / 1024:.1f} "
        f"KiB, {np.median(sizes[:, 1]):.0f}x{np.median(sizes[:, 0]):.0f} px (median); small "
        f"decode {smalls[0][0].shape[1]}x{smalls[0][0].shape[0]} px")
  tf.io.decode_jpeg(datas[0], channels=3)
  image_hashes._SAME_BYTES_KEPT = 0  # pylint: disable=protected-access  # (every photo anew)
  rows = {
      "seed: tf.io.decode_jpeg (full)": _per_photo(lambda d: tf.io.decode_jpeg(d, channels=3),
                                                   datas),
      "ours: decode_small": _per_photo(image_hashes.decode_small, datas),
      "libjpeg at 1/8 (any decode's least)": _per_photo(_eighth, datas),
      "fingerprint (of_bytes), new bytes": _per_photo(image_hashes.of_bytes, datas),
  }
  image_hashes._SAME_BYTES_KEPT = 1 << 20  # pylint: disable=protected-access
  for data in datas:
    image_hashes.of_bytes(data)
  rows["fingerprint of bytes seen (an exact copy)"] = _per_photo(image_hashes.of_bytes, datas)
  rows["  of which from the small decode"] = (rows["fingerprint (of_bytes), new bytes"]
                                             - rows["ours: decode_small"])
  for name, value in rows.items():
    print(f"| {name} | {value:.3f} |")


if __name__ == "__main__":
  main()
