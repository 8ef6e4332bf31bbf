"""Groups of duplicates as Beam transforms: `duplicates.find`'s groups, computed on the
workers, with nothing of the images gathered in one place.

`duplicates.find` is a function of the set of images that can be computed bucket by
bucket (its module doc, steps 1-4); here each step is a transform over PCollections:

1. exact sets: the images grouped by their fingerprint's pixels; each set's first member
   (member order, `duplicates.member_key`) represents it;
2. band picks: each representative keyed by (band, bucket) for each of the BANDS bands;
   a bucket's pictures sorted and picked as `duplicates._band_picks` picks them (the same
   function, over the bucket alone); a pair's picks counted over the bands;
3. partners: each picture's pairs grouped by the picture and ranked
   (`duplicates.partner_rank`); a pair kept when both its pictures keep it;
4. checks: each kept pair joined with its two thumbnails (two joins, by either picture)
   and checked (`duplicates._alike`: a score is the same bits in any batch);
5. groups: the connected components of the confirmed pairs
   (`beam_components.Components`, a stated number of rounds), then each component's
   exact sets and confirmed pairs gathered by component and made a `Group`
   (`duplicates.component_group`: the spanning forest, every pair of a small
   cross-split group).

What each stage holds on one worker: a bucket (step 2; a crowd of one hash puts a bucket's
pictures on one worker: about 60 bytes a picture), a picture's pairs (at most 2 BANDS
WINDOW), a component (its members and confirmed pairs). The same groups as
`duplicates.find` on the same images (tests/analysis/test_beam_duplicates.py).
"""

import apache_beam as beam
import numpy as np

from imagesets.analysis import beam_components
from imagesets.analysis import duplicates

NAMESPACE = "imagesets.duplicates"


def _keyed(image):
  member, fingerprint = image
  return fingerprint.pixels, (duplicates.member_key(member, fingerprint), member, fingerprint)


def _exact_set(pixels_images):
  """(representative's id, the set's images in member order)."""
  _, images = pixels_images
  images = sorted(images, key=lambda image: image[0])
  return duplicates.picture_id(images[0][1], images[0][2]), images


def _band_entries(picture_set):
  """((band, bucket), (id, hash words' bytes, SimHash, flat, mean)) of a representative in
  every band."""
  picture, images = picture_set
  fingerprint = images[0][2]
  words = duplicates._as_words([fingerprint.perceptual])
  thumbnails, _ = duplicates._thumbnail_rows([fingerprint.thumbnail])
  keys = duplicates._thumbnail_keys(thumbnails)
  buckets = duplicates._bucket_keys(duplicates._bit_rows(words), duplicates._band_positions())
  entry = (picture, words.tobytes(), int(keys.simhash[0]), bool(keys.flat[0]),
           int(keys.mean[0]))  # (a 61-bit SimHash: an int64 on the wire)
  for band, bucket in enumerate(buckets[:, 0].tolist()):
    yield (band, bucket), entry


def _bucket_picks(bucket_entries, threshold, counter):
  """((id, id), distance) of each pick of one bucket, a pair twice when both pick it."""
  (band, bucket), entries = bucket_entries
  entries = sorted(entries)  # (member order: the ids sort as their pictures)
  counter.inc(len(entries))
  if len(entries) < 2:
    return
  ids = [entry[0] for entry in entries]
  words = np.frombuffer(b"".join(entry[1] for entry in entries), np.uint64).reshape(-1, 2)
  keys = duplicates._Keys(np.array([entry[2] for entry in entries], np.uint64),
                          np.array([entry[3] for entry in entries], bool),
                          np.array([entry[4] for entry in entries], np.uint8))
  key = np.full(len(entries), bucket, np.uint64)
  codes = duplicates._band_picks(words, key, keys, band, threshold)
  first, second = codes // len(entries), codes % len(entries)
  for a, b, distance in zip(first.tolist(), second.tolist(),
                            duplicates._distances(words, first, second).tolist()):
    yield (ids[a], ids[b]), distance


def _counted(pair_picks):
  pair, distances = pair_picks
  distances = list(distances)
  return pair, (len(distances), distances[0])


def _both_ends(pair_votes):
  (a, b), (votes, distance) = pair_votes
  yield a, (b, votes, distance)
  yield b, (a, votes, distance)


def _partners(picture_pairs):
  """The picture's pairs it keeps ((low id, high id), distance)."""
  picture, pairs = picture_pairs
  pairs = sorted(pairs, key=lambda p: (duplicates.partner_rank(p[1], p[2]), p[0]))
  for other, _, distance in pairs[:duplicates.PARTNERS]:
    yield (min(picture, other), max(picture, other)), distance


def _both_kept(pair_keeps):
  pair, distances = pair_keeps
  distances = list(distances)
  if len(distances) == 2:
    yield pair, distances[0]


def _with_first_thumbnail(joined):
  _, held = joined
  [thumbnail] = held["thumbnail"]
  for second, first, distance in held["pairs"]:
    yield second, (first, thumbnail, distance)


def _checked(joined, counter):
  """((first, second), distance) of each pair the thumbnails confirm."""
  second, held = joined
  [thumbnail] = held["thumbnail"]
  pairs = list(held["pairs"])
  if not pairs:
    return
  counter.inc(len(pairs))
  rows, blank = duplicates._thumbnail_rows([thumbnail] + [p[1] for p in pairs])
  others = np.arange(1, len(pairs) + 1)
  alike = duplicates._alike(rows, blank, others, np.zeros(len(pairs), np.int64))
  for (first, _, distance), confirmed in zip(pairs, alike.tolist()):
    if confirmed:
      yield (first, second), distance


def _labelled(joined):
  """(component, what of it) for a picture's set and for each pair it is the first of."""
  picture, held = joined
  label = min(held["least"], default=picture)
  for images in held["set"]:
    yield label, ("set", images)
  for second, distance in held["pairs"]:
    yield label, ("pair", (picture, second, distance))


def _group(label_parts, astray):
  """The component's group; a pair whose pictures are not both in it (components not
  converged: `Groups.check` says so) is counted in `astray` and left out."""
  _, parts = label_parts
  sets = [what for kind, what in parts if kind == "set"]
  held = {duplicates.picture_id(*images[0][1:]) for images in sets}
  pairs = []
  for kind, what in parts:
    if kind == "pair":
      if what[0] in held and what[1] in held:
        pairs.append(what)
      else:
        astray.inc()
  group = duplicates.component_group(sets, pairs)
  if group is not None:
    yield group


class Groups(beam.PTransform):
  """(duplicates.Member, image_hashes.Fingerprint) in; each group of duplicates out
  (`duplicates.Group`), as `duplicates.find` gives them. `rounds`: of the connected
  components (`beam_components.check_converged(result, groups.components)` says whether
  they were enough: `check`). Counters (namespace NAMESPACE): `bucket_entries`, `checks`,
  `astray_pairs`."""

  def __init__(self, threshold: int = duplicates.THRESHOLD,
               rounds: int = beam_components.ROUNDS):
    super().__init__()
    self.threshold = threshold
    self.components = beam_components.Components(rounds, name="duplicates")

  def expand(self, images):
    threshold = self.threshold
    entries = beam.metrics.Metrics.counter(NAMESPACE, "bucket_entries")
    checks = beam.metrics.Metrics.counter(NAMESPACE, "checks")
    astray = beam.metrics.Metrics.counter(NAMESPACE, "astray_pairs")
    sets = (images
            | "By pixels" >> beam.Map(_keyed)
            | "Exact sets" >> beam.GroupByKey()
            | "Representatives" >> beam.Map(_exact_set))
    kept = (sets
            | "Band entries" >> beam.FlatMap(_band_entries)
            | "Buckets" >> beam.GroupByKey()
            | "Band picks" >> beam.FlatMap(_bucket_picks, threshold, entries)
            | "Picks of a pair" >> beam.GroupByKey()
            | "Count picks" >> beam.Map(_counted)
            | "Both ends" >> beam.FlatMap(_both_ends)
            | "Pairs of a picture" >> beam.GroupByKey()
            | "Partners" >> beam.FlatMap(_partners)
            | "Keeps of a pair" >> beam.GroupByKey()
            | "Kept by both" >> beam.FlatMap(_both_kept))
    thumbnails = sets | "Thumbnails" >> beam.Map(lambda s: (s[0], s[1][0][2].thumbnail))
    by_first = kept | "By first" >> beam.Map(lambda p: (p[0][0], (p[0][1], p[0][0], p[1])))
    by_second = ({"thumbnail": thumbnails, "pairs": by_first}
                 | "Join first" >> beam.CoGroupByKey()
                 | "To second" >> beam.FlatMap(_with_first_thumbnail))
    confirmed = ({"thumbnail": thumbnails, "pairs": by_second}
                 | "Join second" >> beam.CoGroupByKey()
                 | "Check" >> beam.FlatMap(_checked, checks))
    least = (confirmed
             | "Edges" >> beam.Map(lambda p: p[0])
             | "Components" >> self.components)
    pairs = confirmed | "Pair by first" >> beam.Map(lambda p: (p[0][0], (p[0][1], p[1])))
    return ({"set": sets, "least": least, "pairs": pairs}
            | "Join labels" >> beam.CoGroupByKey()
            | "Labelled" >> beam.FlatMap(_labelled)
            | "By component" >> beam.GroupByKey()
            | "Group" >> beam.FlatMap(_group, astray))

  def check(self, result) -> dict:
    """{counter: value} of this transform in a finished pipeline, the components' rounds
    included; `beam_components.NotConverged` when the groups are not final (the last
    round changed a link, or a confirmed pair's pictures were given two components)."""
    rounds = beam_components.check_converged(result, self.components)
    query = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(NAMESPACE))
    counters = {c.key.metric.name: c.committed if c.committed is not None else c.attempted
                for c in query["counters"]}
    if counters.get("astray_pairs"):
      raise beam_components.NotConverged(
          f"duplicates: {counters['astray_pairs']} confirmed pair(s) joined pictures given "
          "two components: the groups are not final; run with more rounds")
    return {**rounds, **counters}

