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

What one worker holds, at most: a bucket of up to LARGEST_BUCKET entries (about 140 bytes
each), or a stretch of a larger one (about its size / STRETCHES, each picked with the
WINDOW entries on either side of it); a picture's pairs (at most 2 BANDS WINDOW) and checks
(at most PARTNERS). Not bounded: an exact set (every copy of one picture's pixels), the
least node of a component in the components' rounds (large-star links every node of a
component to it), and a component's members and confirmed pairs when its group is made
(the largest group of 1,000,000 real-photo crops holds half of them). The same groups as
`duplicates.find` on the same images (tests/analysis/test_beam_duplicates.py; 100,000
real-photo crops on the DirectRunner in one process); the DirectRunner's multi-processing
mode lost elements at 100,000 under memory pressure, and `Groups.check` refuses such a run
(docs/scaling.md).
"""

import bisect
import collections

import apache_beam as beam
import numpy as np

from imagesets.analysis import beam_components
from imagesets.analysis import duplicates

NAMESPACE = "imagesets.duplicates"
# Entries of a band's bucket one worker sorts and picks; a larger bucket (a crowd of alike
# hashes) is cut into stretches of its order, each picked with the WINDOW entries on
# either side of it.
LARGEST_BUCKET = 20_000
# A large bucket's stretches, cut at approximate quantiles of its order: a worker holds about
# size / STRETCHES of a bucket of more than LARGEST_BUCKET entries (20,000 a stretch up to
# 5 million entries in one band's bucket; more stretches for larger crowds).
STRETCHES = 256


def _keyed(image):
  member, fingerprint = image
  return fingerprint.pixels, (duplicates.member_key(member, fingerprint), member, fingerprint)


def _exact_set(pixels_images):
  """(representative's id, the set's images in member order)."""
  _, images = pixels_images
  images = sorted(images, key=lambda image: image[0])
  return duplicates.picture_id(images[0][1], images[0][2]), images


def _band_entries(picture_set):
  """((band, bucket), (place, id, hash words' bytes, SimHash, flat, mean)) of a
  representative in every band (`duplicates._places`: where it sorts in the bucket)."""
  picture, images = picture_set
  fingerprint = images[0][2]
  words = duplicates._as_words([fingerprint.perceptual])
  thumbnails, _ = duplicates._thumbnail_rows([fingerprint.thumbnail])
  keys = duplicates._thumbnail_keys(thumbnails)
  buckets = duplicates._bucket_keys(words, duplicates._band_positions())[:, 0]
  places = duplicates._places(buckets, words, keys, np.arange(len(buckets)))
  entry = (picture, words.tobytes(), int(keys.simhash[0]), bool(keys.flat[0]),
           int(keys.mean[0]))  # (a 61-bit SimHash: an int64 on the wire)
  for band, (bucket, place) in enumerate(zip(buckets.tolist(), places.tolist())):
    yield (band, bucket), (place, *entry)


def _stretch_of(bucket_entry, bounds):
  """((band, bucket, stretch), entry): an entry of a bucket cut at `bounds` (its
  approximate quantiles of (place, id), `Groups`) goes to the stretch of the order it is
  in; any other bucket is one stretch, -1."""
  key, entry = bucket_entry
  cuts = bounds.get(key)
  if cuts is None:
    return (*key, -1), entry
  return (*key, bisect.bisect_right(cuts, tuple(entry[:2]), 1, len(cuts) - 1) - 1), entry


def _borders(stretch_entries):
  """((band, bucket), (stretch, its first WINDOW entries, its last WINDOW))."""
  (band, bucket, stretch), entries = stretch_entries
  entries = sorted(entries)  # (bucket order: place, then member order)
  window = duplicates.WINDOW
  yield (band, bucket), (stretch, entries[:window], entries[-window:])


def _contexts(bucket_borders):
  """((band, bucket, stretch), (the WINDOW entries before it, the WINDOW after it))."""
  (band, bucket), borders = bucket_borders
  borders = sorted(borders, key=lambda border: border[0])
  window = duplicates.WINDOW
  before, befores = [], []
  for _, _, last in borders:  # (the last WINDOW entries of the stretches so far)
    befores.append(before)
    before = (before + last)[-window:]
  after, afters = [], []
  for _, first, _ in reversed(borders):
    afters.append(after)
    after = (first + after)[:window]
  for (stretch, _, _), before, after in zip(borders, befores, reversed(afters)):
    yield (band, bucket, stretch), (before, after)


def _stretch_picks(joined, threshold, counters):
  (band, bucket, _), held = joined
  [entries] = held["entries"]
  [(before, after)] = held["context"]
  yield from _picks(band, bucket, list(entries), before + after, threshold, counters)


def _bucket_picks(stretch_entries, threshold, counters):
  (band, bucket, _), entries = stretch_entries
  yield from _picks(band, bucket, list(entries), [], threshold, counters)


def _picks(band, bucket, entries, context, threshold, counters):
  """((id, id), distance) of each pick the `entries` of a bucket (or of a stretch of it,
  with the `context` of WINDOW entries on either side) make, a pair twice when both its
  pictures pick it."""
  counters["bucket_entries"].inc(len(entries))
  counters["bucket_size"].update(len(entries))
  every = sorted(entries + context, key=lambda entry: entry[1])  # (member order)
  if len(every) < 2:
    return
  own = {entry[1] for entry in entries}
  ids = [entry[1] for entry in every]
  words = np.frombuffer(b"".join(entry[2] for entry in every), np.uint64).reshape(-1, 2)
  keys = duplicates._Keys(np.array([entry[3] for entry in every], np.uint64),
                          np.array([entry[4] for entry in every], bool),
                          np.array([entry[5] for entry in every], np.uint8))
  key = np.full(len(every), bucket, np.uint64)
  pickers = np.array([picture in own for picture in ids]) if context else None
  codes = duplicates._band_picks(words, key, keys, band, threshold, pickers)
  counters["picks"].inc(len(codes))
  first, second = codes // len(every), codes % len(every)
  for a, b, distance in zip(first.tolist(), second.tolist(),
                            duplicates._distances(words, first, second).tolist()):
    yield (ids[a], ids[b]), distance


def _counted(pair_picks, counter):
  pair, distances = pair_picks
  distances = list(distances)
  counter.inc(len(distances))  # (every pick made must arrive: `Groups.check`)
  yield pair, (len(distances), distances[0])


def _both_ends(pair_votes):
  (a, b), (votes, distance) = pair_votes
  yield a, (b, votes, distance)
  yield b, (a, votes, distance)


def _partners(picture_pairs, repeated):
  """The picture's pairs it keeps ((low id, high id), distance). A pair met twice here
  had its picks counted under two keys (`repeated`: `Groups.check` refuses the run)."""
  picture, pairs = picture_pairs
  pairs = sorted(pairs, key=lambda p: (duplicates.partner_rank(p[1], p[2]), p[0]))
  repeated.inc(len(pairs) - len({other for other, _, _ in pairs}))
  for other, _, distance in pairs[:duplicates.PARTNERS]:
    yield (min(picture, other), max(picture, other)), distance


def _both_kept(pair_keeps, counter):
  pair, distances = pair_keeps
  distances = list(distances)
  if len(distances) == 2:
    counter.inc()
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
  they were enough: `check`). Counters (namespace NAMESPACE, or NAMESPACE.<name> for a
  `name`d one): `bucket_entries` (every
  representative in each band's bucket), `picks`, `kept_pairs`, `checks`, `astray_pairs`,
  `repeated_pairs`, `picks_arrived` (the picks that reached their pair's count);
  the distribution `bucket_size`."""

  def __init__(self, threshold: int = duplicates.THRESHOLD,
               rounds: int = beam_components.ROUNDS, largest_bucket: int = LARGEST_BUCKET,
               stretches: int = STRETCHES, name: str = ""):
    super().__init__()
    if largest_bucket < 1 or stretches < 1:
      raise ValueError(f"duplicates on Beam: largest_bucket ({largest_bucket}) and stretches "
                       f"({stretches}) must be at least 1")
    self.threshold, self.largest_bucket, self.stretches = threshold, largest_bucket, stretches
    # (`name`: two groupings in one pipeline count and check apart)
    self.namespace = f"{NAMESPACE}.{name}" if name else NAMESPACE
    self.components = beam_components.Components(rounds, name=f"duplicates{name}")

  def expand(self, images):
    threshold = self.threshold
    namespace = self.namespace
    counter = lambda name: beam.metrics.Metrics.counter(namespace, name)
    buckets = {"bucket_entries": counter("bucket_entries"), "picks": counter("picks"),
               "bucket_size": beam.metrics.Metrics.distribution(namespace, "bucket_size")}
    checks = counter("checks")
    astray = counter("astray_pairs")
    # (reported as 0 when nothing went astray, so that a missing count is not taken for 0)
    _ = (images.pipeline | "Once" >> beam.Create([0])
         | "Count nothing" >> beam.Map(lambda zero: astray.inc(zero)))
    sets = (images
            | "By pixels" >> beam.Map(_keyed)
            | "Exact sets" >> beam.GroupByKey()
            | "Representatives" >> beam.Map(_exact_set))
    entries = sets | "Band entries" >> beam.FlatMap(_band_entries)
    largest = self.largest_bucket
    large = (entries
             | "Bucket sizes" >> beam.combiners.Count.PerKey()
             | "Large buckets" >> beam.Filter(lambda size: size[1] > largest))
    bounds = (entries
              | "Of large buckets" >> beam.FlatMap(
                  lambda kv, large: [(kv[0], tuple(kv[1][:2]))] if kv[0] in large else [],
                  beam.pvalue.AsDict(large))
              | "Cuts" >> beam.ApproximateQuantiles.PerKey(self.stretches + 1))
    stretches = (entries
                 | "Stretches" >> beam.Map(_stretch_of, beam.pvalue.AsDict(bounds))
                 | "Buckets" >> beam.GroupByKey())
    whole = stretches | "Whole buckets" >> beam.Filter(lambda kv: kv[0][2] < 0)
    cut = stretches | "Cut buckets" >> beam.Filter(lambda kv: kv[0][2] >= 0)
    contexts = (cut
                | "Borders" >> beam.FlatMap(_borders)
                | "Borders of a bucket" >> beam.GroupByKey()
                | "Contexts" >> beam.FlatMap(_contexts))
    picks = ((whole | "Band picks" >> beam.FlatMap(_bucket_picks, threshold, buckets)),
             ({"entries": cut, "context": contexts}
              | "With context" >> beam.CoGroupByKey()
              | "Stretch picks" >> beam.FlatMap(_stretch_picks, threshold, buckets)))
    kept = (picks
            | "All picks" >> beam.Flatten()
            | "Picks of a pair" >> beam.GroupByKey()
            | "Count picks" >> beam.FlatMap(_counted, counter("picks_arrived"))
            | "Both ends" >> beam.FlatMap(_both_ends)
            | "Pairs of a picture" >> beam.GroupByKey()
            | "Partners" >> beam.FlatMap(_partners, counter("repeated_pairs"))
            | "Keeps of a pair" >> beam.GroupByKey()
            | "Kept by both" >> beam.FlatMap(_both_kept, counter("kept_pairs")))
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
    counters = self.counters(result)
    if counters.get("picks", 0) != counters.get("picks_arrived", 0):
      raise beam_components.NotConverged(
          f"duplicates: {counters.get('picks', 0)} picks were made but "
          f"{counters.get('picks_arrived', 0)} arrived where they are counted: the runner "
          "lost or repeated elements; the groups are not those of one process")
    if counters.get("repeated_pairs"):
      raise beam_components.NotConverged(
          f"duplicates: {counters['repeated_pairs']} pair(s) had their picks counted under "
          "two keys (the runner grouped equal keys apart): the groups are not those of "
          "one process")
    if "astray_pairs" not in counters:
      raise beam_components.NotConverged(
          "duplicates: the runner reported no count of pairs given two components: the "
          "groups are not known to be final")
    if counters["astray_pairs"]:
      raise beam_components.NotConverged(
          f"duplicates: {counters['astray_pairs']} confirmed pair(s) joined pictures given "
          "two components: the groups are not final; run with more rounds")
    return {**rounds, **counters}

  def counters(self, result) -> collections.Counter:
    """{counter: value} of this transform in a finished pipeline, unchecked."""
    query = result.metrics().query(
        beam.metrics.MetricsFilter().with_namespace(self.namespace))
    counters = beam_components.summed(query["counters"])
    for distribution in query["distributions"]:
      value = distribution.committed or distribution.attempted
      name = f"{distribution.key.metric.name}_max"
      counters[name] = max(counters[name], value.max or 0)
    return counters

