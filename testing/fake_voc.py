"""VOC-shaped trees (and SBD-shaped ones) made from scratch, for tests, dummy data, the
benchmark and the docs.

The real VOCtrainval tar cannot be downloaded here, so we write its layout ourselves:
`VOCdevkit/VOC2012/` with JPEGImages/*.jpg (PIL, quality 90), SegmentationClass/*.png
and SegmentationObject/*.png (palette PNGs with the VOC colormap, class or instance
indices, a void (255) border around each object as in VOC) and
ImageSets/Segmentation/{train,val,trainval}.txt. Extra JPEGs without masks stand for
the detection-only images that make up most of VOC. Every image also gets
Annotations/<id>.xml as VOC writes them (<size>, and per drawn object its <name>,
<pose>, <truncated>, <difficult> and the 1-based pixel corners of the shape drawn, a
person's <part>s nested in it) and ImageSets/Main/{train,val,trainval}.txt list them:
the segmentation lists' ids, with the images without masks shared between train and val.

    python -m imagesets_testing.fake_voc OUT_DIR [--train 3 --val 2 ...]
"""

import argparse
import pathlib
import tarfile

import numpy as np
import PIL.Image
import PIL.ImageDraw

import scipy.io

from imagesets.annotations import masks
from imagesets.voc_segmentation import sbd_pairs
from imagesets.voc_segmentation import voc_boxes
from imagesets.voc_segmentation import voc_pairs

PALETTE_BYTES = masks.pascal_palette().tobytes()


def make_pair(rng: np.random.Generator, height: int, width: int):
  """(RGB image, class indices, object indices) with 1-3 objects on a noisy background."""
  pixels, class_mask, object_mask, _ = make_pair_and_objects(rng, height, width)
  return pixels, class_mask, object_mask


def make_pair_and_objects(rng: np.random.Generator, height: int, width: int):
  """`make_pair`'s three arrays and its objects, [(class id, (x0, y0, x1, y1))]: the
  pixel box (inclusive, may pass the image's edge) PIL drew each shape in."""
  drawn = []
  # A left-to-right gradient between two random colours, then 1-3 random-coloured objects.
  ramp = np.linspace(0, 1, width)[None, :, None]
  left, right = rng.integers(40, 216, (2, 3))
  image = PIL.Image.fromarray(np.broadcast_to(left + (right - left) * ramp, (height, width, 3)).astype(np.uint8))
  class_mask = PIL.Image.new("L", (width, height), 0)
  object_mask = PIL.Image.new("L", (width, height), 0)
  border = max(1, round(min(height, width) / 80))
  for instance in range(1, int(rng.integers(1, 4)) + 1):
    class_id = int(rng.integers(1, len(voc_pairs.CLASS_NAMES)))
    x0, x1 = sorted(rng.integers(0, width, 2))
    y0, y1 = sorted(rng.integers(0, height, 2))
    box = (int(x0), int(y0), int(x1) + 2, int(y1) + 2)
    shape = "ellipse" if rng.random() < 0.5 else "rectangle"
    colour = tuple(int(v) for v in rng.integers(20, 236, 3))
    getattr(PIL.ImageDraw.Draw(image), shape)(box, fill=colour)
    getattr(PIL.ImageDraw.Draw(class_mask), shape)(box, fill=class_id, outline=255, width=border)
    getattr(PIL.ImageDraw.Draw(object_mask), shape)(box, fill=instance, outline=255, width=border)
    drawn.append((class_id, box))
  # Texture, so that JPEG sizes are like photos' rather than like flat drawings'.
  noise = rng.normal(0, 10, (height, width, 3))
  pixels = np.clip(np.asarray(image, np.float64) + noise, 0, 255).astype(np.uint8)
  return pixels, np.asarray(class_mask), np.asarray(object_mask), drawn


def write_palette_png(indices: np.ndarray, path: pathlib.Path) -> None:
  mask = PIL.Image.frombytes("P", indices.shape[::-1], np.ascontiguousarray(indices).tobytes())
  mask.putpalette(PALETTE_BYTES)
  mask.save(path)


def write_tree(root, *, num_train=3, num_val=2, num_unlabelled=2,
               height=(24, 40), width=(24, 48), seed=0) -> pathlib.Path:
  """Writes root/VOCdevkit/VOC2012 and returns that folder. Sizes are [low, high]."""
  folder = pathlib.Path(root) / voc_pairs.IN_ARCHIVE
  for sub in (voc_pairs.JPEG_DIR, voc_pairs.CLASS_DIR, voc_pairs.OBJECT_DIR, voc_pairs.LISTS_DIR,
              voc_boxes.ANNOTATIONS_DIR, voc_boxes.LISTS_DIR):
    (folder / sub).mkdir(parents=True, exist_ok=True)
  ids = [f"2012_{index:06d}" for index in range(num_train + num_val + num_unlabelled)]
  for index, image_id in enumerate(ids):
    rng = np.random.default_rng([seed, index])
    size = (int(rng.integers(height[0], height[1], endpoint=True)),
            int(rng.integers(width[0], width[1], endpoint=True)))
    pixels, class_ids, instance_ids, drawn = make_pair_and_objects(rng, *size)
    PIL.Image.fromarray(pixels).save(folder / voc_pairs.JPEG_DIR / f"{image_id}.jpg", quality=90)
    if index < num_train + num_val:
      write_palette_png(class_ids, folder / voc_pairs.CLASS_DIR / f"{image_id}.png")
      write_palette_png(instance_ids, folder / voc_pairs.OBJECT_DIR / f"{image_id}.png")
    # Its own generator: the images and masks stay those of trees written before the XML.
    flags = np.random.default_rng([seed, index, 1])
    (folder / voc_boxes.ANNOTATIONS_DIR / f"{image_id}.xml").write_text(
        annotation_xml(image_id, size, [voc_object(flags, class_id, box, size)
                                        for class_id, box in drawn]))
  train, val = ids[:num_train], ids[num_train:num_train + num_val]
  for name, listed in (("train", train), ("val", val), ("trainval", train + val)):
    (folder / voc_pairs.LISTS_DIR / f"{name}.txt").write_text("".join(f"{i}\n" for i in listed))
  unlabelled = ids[num_train + num_val:]
  main = {"train": sorted(train + unlabelled[0::2]), "val": sorted(val + unlabelled[1::2])}
  main["trainval"] = sorted(main["train"] + main["val"])
  for name, listed in main.items():
    (folder / voc_boxes.LISTS_DIR / f"{name}.txt").write_text("".join(f"{i}\n" for i in listed))
  return folder


def voc_object(rng: np.random.Generator, class_id: int, box, size: tuple[int, int]) -> dict:
  """One <object> of a drawn shape: VOC's 1-based corners of its pixel box inside the
  image (height, width), at least 2 pixels a side, and random pose, truncated and
  difficult."""
  x0, y0, x1, y1 = box
  height, width = size
  corners = (min(x0, width - 2) + 1, min(y0, height - 2) + 1,
             min(x1, width - 1) + 1, min(y1, height - 1) + 1)
  return {"name": voc_pairs.CLASS_NAMES[class_id], "pose": str(rng.choice(voc_boxes.POSES)),
          "truncated": int(rng.random() < 0.3), "difficult": int(rng.random() < 0.3),
          "bndbox": dict(zip(("xmin", "ymin", "xmax", "ymax"), corners))}


def annotation_xml(image_id: str, size: tuple[int, int], objects: list[dict]) -> str:
  """Annotations/<id>.xml as VOC2012 writes them (size: height, width)."""
  lines = ["<annotation>", "\t<folder>VOC2012</folder>", f"\t<filename>{image_id}.jpg</filename>",
           "\t<source>", "\t\t<database>The VOC2007 Database</database>", "\t</source>",
           "\t<size>", f"\t\t<width>{size[1]}</width>", f"\t\t<height>{size[0]}</height>",
           "\t\t<depth>3</depth>", "\t</size>", "\t<segmented>0</segmented>"]
  for obj in objects:
    box = ["\t\t<bndbox>", *(f"\t\t\t<{k}>{v}</{k}>" for k, v in obj["bndbox"].items()),
           "\t\t</bndbox>"]
    lines += ["\t<object>", f"\t\t<name>{obj['name']}</name>", f"\t\t<pose>{obj['pose']}</pose>",
              f"\t\t<truncated>{obj['truncated']}</truncated>", "\t\t<occluded>0</occluded>",
              *box, f"\t\t<difficult>{obj['difficult']}</difficult>"]
    if obj["name"].lower() == "person":  # person layout: parts with boxes of their own, not objects
      lines += ["\t\t<part>", "\t\t\t<name>head</name>", *("\t" + line for line in box),
                "\t\t</part>"]
    lines.append("\t</object>")
  return "\n".join(lines + ["</annotation>", ""])


def write_tar(root, tar_path) -> pathlib.Path:
  """Packs root/VOCdevkit into an uncompressed tar, as the original archive is."""
  with tarfile.open(tar_path, "w") as tar:
    tar.add(pathlib.Path(root) / "VOCdevkit", arcname="VOCdevkit")
  return pathlib.Path(tar_path)


def write_sbd(root, train_ids, val_ids, *, height=(24, 40), width=(24, 48), seed=1
              ) -> pathlib.Path:
  """Writes root/benchmark_RELEASE/dataset as SBD's benchmark.tgz holds it: img/<id>.jpg,
  cls/<id>.mat (struct GTcls: Segmentation, Boundaries, CategoriesPresent) and
  inst/<id>.mat (struct GTinst: Segmentation, Boundaries, Categories), train.txt and
  val.txt. SBD's masks have no void border: the objects' 255 outlines become the object."""
  folder = pathlib.Path(root) / sbd_pairs.IN_ARCHIVE
  for sub in (sbd_pairs.IMAGE_DIR, sbd_pairs.CLASS_DIR, sbd_pairs.OBJECT_DIR):
    (folder / sub).mkdir(parents=True, exist_ok=True)
  for image_id in [*train_ids, *val_ids]:
    rng = np.random.default_rng([seed, int(image_id.replace("_", ""))])
    size = (int(rng.integers(height[0], height[1], endpoint=True)),
            int(rng.integers(width[0], width[1], endpoint=True)))
    pixels, class_ids, instance_ids = make_pair(rng, *size)
    PIL.Image.fromarray(pixels).save(folder / sbd_pairs.IMAGE_DIR / f"{image_id}.jpg", quality=90)
    write_sbd_mat(folder / sbd_pairs.CLASS_DIR / f"{image_id}.mat", "GTcls", class_ids)
    write_sbd_mat(folder / sbd_pairs.OBJECT_DIR / f"{image_id}.mat", "GTinst", instance_ids)
  for name, listed in (("train.txt", train_ids), ("val.txt", val_ids)):
    (folder / name).write_text("".join(f"{i}\n" for i in listed))
  return folder


def write_sbd_mat(path, struct: str, indices: np.ndarray) -> None:
  """One SBD annotation file: `struct`.Segmentation holds the indices (uint8, as SBD's)."""
  filled = np.where(indices == voc_pairs.VOID, 0, indices).astype(np.uint8)
  present = np.unique(filled[filled > 0]).astype(np.float64)
  boundaries = np.empty((len(present), 1), object)  # a cell array, as SBD's (left empty)
  boundaries[:, 0] = [np.zeros((0, 0)) for _ in present]
  fields = {"Segmentation": filled, "Boundaries": boundaries}
  fields["CategoriesPresent" if struct == "GTcls" else "Categories"] = present
  scipy.io.savemat(path, {struct: fields})


def write_tgz(root, top: str, tgz_path) -> pathlib.Path:
  """Packs root/<top> into a gzipped tar (SBD's benchmark.tgz holds benchmark_RELEASE/)."""
  with tarfile.open(tgz_path, "w:gz") as tar:
    tar.add(pathlib.Path(root) / top, arcname=top)
  return pathlib.Path(tgz_path)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("out_dir")
  parser.add_argument("--train", type=int, default=3)
  parser.add_argument("--val", type=int, default=2)
  parser.add_argument("--unlabelled", type=int, default=2)
  parser.add_argument("--height", type=int, nargs=2, default=(24, 40))
  parser.add_argument("--width", type=int, nargs=2, default=(24, 48))
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  folder = write_tree(args.out_dir, num_train=args.train, num_val=args.val,
                      num_unlabelled=args.unlabelled, height=args.height, width=args.width,
                      seed=args.seed)
  print(folder)


if __name__ == "__main__":
  main()
