"""What an example of a version holds, asked by the stages that compare or show its
annotations (duplicates' conflicts, the page's labels) instead of a hard-wired "label".

A dataset's `Schema` comes from its TFDS features (`of`): the task and where its
annotations are. On the workers, `annotation(example)` takes the part of an example that
says what it shows as plain, picklable, JSON-able data; `Schema.describe` turns that into
the one string duplicates compare and reports print:

| task | features | described as |
|---|---|---|
| classification | `label: ClassLabel` (or a class name) | the class name |
| multi_label | `labels: Sequence(ClassLabel)` | the sorted names joined by "+", "(no labels)" |
| detection | `objects: Sequence({"bbox", "label", ...})` | "2 cat, 1 dog" (counts by class, sorted), "(no objects)" |
| none | anything else (masks alone, no labels) | None |

Beside its task, a schema says where an example's class-id mask is (`mask`), if it has one.

Two copies of one picture conflict when their descriptions differ: another class, another
set of tags, other objects (a class or a count). Boxes that only moved do not conflict: a
near copy (crop, resize) of a photo moves its boxes legitimately.

Duck-typed on TFDS's feature objects (a `ClassLabel` has `names`, a `Sequence` its
`feature`): no TensorFlow here.
"""

import collections
import dataclasses
from typing import Any, Mapping

CLASSIFICATION, MULTI_LABEL, DETECTION, NONE = "classification", "multi_label", "detection", "none"
# What an example without tags or objects is described as (never a class name: refused).
NO_LABELS, NO_OBJECTS = "(no labels)", "(no objects)"
# The feature of a class-id mask (voc_segmentation, annotated builds with masks): one id a
# pixel, 255 void.
MASK = "class_mask"


def _names(feature) -> tuple[str, ...] | None:
  names = getattr(feature, "names", None)
  return tuple(names) if names else None


@dataclasses.dataclass(frozen=True)
class Schema:
  task: str
  key: str | None = None                       # the example's feature holding its annotations
  class_names: tuple[str, ...] | None = None   # label i is class_names[i]; None: not known
  mask: str | None = None   # the feature holding its class-id mask (a PNG), drawn on pages

  def name(self, value) -> str:
    """A class name from a label id (or a name given as such); an id without one (-1: no
    label) as the number."""
    if isinstance(value, str) or self.class_names is None or int(value) < 0:
      return str(value)
    return self.class_names[int(value)]

  @property
  def no_annotation(self) -> str | None:
    """The description of an example without tags or objects; None for other tasks."""
    return {MULTI_LABEL: NO_LABELS, DETECTION: NO_OBJECTS}.get(self.task)

  def classes(self, value: Any) -> tuple[str, ...] | None:
    """The classes an example shows, each once, sorted (what the page counts it under): its
    tags' or its objects' class names; None where its one label says it (classification)."""
    if self.task not in (MULTI_LABEL, DETECTION) or value is None:
      return None
    return tuple(sorted({self.name(v) for v in value}))

  def describe(self, value: Any) -> str | None:
    """The description of what `annotation(example)` gave (see the module's table)."""
    if value is None:
      return None
    if self.task == MULTI_LABEL:
      return "+".join(sorted({self.name(v) for v in value})) or NO_LABELS
    if self.task == DETECTION:
      counts = collections.Counter(self.name(v) for v in value)
      return ", ".join(f"{n} {name}" for name, n in sorted(counts.items())) or NO_OBJECTS
    return self.name(value)


def of(features: Mapping | None) -> Schema:
  """The schema of a dataset with these TFDS features (a FeaturesDict or a mapping)."""
  if not features:
    return Schema(NONE)
  # (a PNG Image feature: what the page decodes as ids)
  mask = (MASK if MASK in features and getattr(features[MASK], "encoding_format", None) == "png"
          else None)
  if "label" in features:
    return Schema(CLASSIFICATION, "label", _names(features["label"]), mask)
  if "labels" in features:
    return Schema(MULTI_LABEL, "labels", _names(getattr(features["labels"], "feature", None)),
                  mask)
  if "objects" in features:
    inner = getattr(features["objects"], "feature", None)
    label = inner["label"] if inner is not None and "label" in inner else None
    return Schema(DETECTION, "objects", _names(label), mask)
  return Schema(NONE, mask=mask)


def annotation(example: Mapping) -> Any:
  """What `example` (a builder's example, before TFDS encodes it) says it shows, as plain
  data: a label id or class name, the sorted label ids of its tags or of its objects;
  None when it has no labels."""
  if "label" in example:
    value = example["label"]
    return value if value is None or isinstance(value, str) else int(value)
  if "labels" in example:
    return sorted(int(v) for v in example["labels"])
  if "objects" in example:
    return sorted(int(v) for v in example["objects"]["label"])
  return None
