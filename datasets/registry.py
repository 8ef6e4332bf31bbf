"""The one list of this package's datasets.

Read by the package's `__init__` (which names TFDS may ask us for), `imagesets list`
(which local builds are ours), `imagesets verify` (which configs have no round trip yet;
the check itself is the builder's `ROUND_TRIP`) and the README's dataset table (tests/test_registry.py
checks the table against this list). A new builder is one entry here plus its folder.

Nothing here imports TensorFlow or TFDS: the command line reads it too.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Dataset:
  """One builder of this package, as every part of it that lists datasets needs it."""

  name: str
  source: str                    # the README table's "source" cell
  card: str                      # the README table's "card" link (a page of docs/)
  # (config, why `verify` has no round trip for it yet); config "*": every config
  no_round_trip: tuple[tuple[str, str], ...] = ()
  shown_as: str | None = None    # the README table's "name" cell, when not `name`

  @property
  def module(self) -> str:
    """The module whose import registers the builder (TFDS's dataset-folder convention)."""
    return f"imagesets.{self.name}.{self.name}_dataset_builder"


DATASETS = (
    Dataset("synthetic_images",
            source="seeded random images (`default`, `tiny`, `variable`)",
            card="docs/synthetic_images.md"),
    Dataset("flowers",
            source="TF's flower_photos (`default`, `fast_read`: 3,670 photos, 5 classes)",
            card="docs/flowers.md"),
    Dataset("oxford17",
            source=("Oxford-17 (1,360 photos, 17 classes of 80, the three official splits "
                    "`train1`/`validation1`/`test1` ... `test3`)"),
            card="docs/flowers.md",
            no_round_trip=(("*", "its labels come from image numbers, not from class folders"),)),
    Dataset("class_folders",
            source=("your class-per-folder tree: `imagesets build PATH --name NAME`, or "
                    "`class_folders` with a JSON `--config` for the stock `tfds build`"),
            card="docs/class_folders.md",
            shown_as="your `NAME`"),
    Dataset("annotated",
            source=("your images with a labeling tool's annotations (COCO JSON, VOC XML, "
                    "YOLO, CSV/JSONL): `imagesets build IMAGES --name NAME --annotations "
                    "FILE`, or `annotated` with a JSON `--config`"),
            card="docs/annotations.md",
            shown_as="your `NAME` (annotated)"),
    Dataset("voc_segmentation",
            source=("PASCAL VOC 2012 images + class/instance masks as class ids (`default`: "
                    "train 1,464, validation 1,449; `train_aug`: VOC2012 train + SBD minus "
                    "VOC2012 val, train 10,582, validation 1,449), or + boxes as TFDS's "
                    "voc/2012 (`detection`: train 5,717, validation 5,823)"),
            card="docs/voc_segmentation.md",
            no_round_trip=(("train_aug", "it is built from two sources, VOC2012 and SBD"),
                           ("detection", "its examples are boxes from Annotations/*.xml, "
                            "and the voc_segmentation round trip checks masks"))),
)

NAMES = tuple(dataset.name for dataset in DATASETS)
BY_NAME = {dataset.name: dataset for dataset in DATASETS}
BY_MODULE = {dataset.module: dataset for dataset in DATASETS}


def no_round_trip(name: str, config: str | None) -> str | None:
  """Why `verify` cannot check `name/config` (None: it can, or the name is not ours)."""
  dataset = BY_NAME.get(name)
  if dataset is None:
    return None
  reasons = dict(dataset.no_round_trip)
  return reasons.get(config or "") or reasons.get("*")
