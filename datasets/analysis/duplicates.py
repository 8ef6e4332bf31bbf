"""Groups of duplicate images in a dataset version, within and across splits.

Two images are duplicates when their fingerprints' pixels are identical (`exact`: the same
size and the same pixels at the small decode, `image_hashes`), or when their 128-bit
perceptual hashes differ by at most `THRESHOLD` bits and their 16x16 thumbnails confirm it
(`similarities`) (`near`: the same picture re-encoded, resized, converted, cropped by a few
percent; on real photos the hashes alone also pair distinct textures and skies). Groups are
the connected components of confirmed pairs: a pair the hashes propose and the thumbnails
refuse joins nothing. A group whose members sit in different splits is leakage; one whose
members carry different labels is a label conflict.

Finding the near pairs compares neither decoded images nor every pair of hashes: it is
bit-sampling LSH. Each of `BANDS` bands is a fixed, seeded choice of `BAND_BITS` of the
128 bits; images whose bits agree on a whole band share a bucket. A pair `d` bits apart
agrees on a band with probability C(128-d, 13)/C(128, 13): at d = 24 (a 5 % crop) 0.058, so
64 bands propose it with probability 0.98 (d <= 16: > 0.9999; d = 28: 0.89); distinct
photos (d ~ 64) agree on a band with probability 6e-5.

The work is bounded per image whatever the clustering (one picture 1,000 times, bursts of
frames, crops of a few scenes, a folder of alike X-rays: real hashes are correlated, and a
bucket can hold thousands), and the groups are a function of the set of images that can
be computed bucket by bucket (`beam_duplicates` does, on Beam's workers):

1. in each band, a bucket is sorted by its thumbnails' SimHash, and each image picks the
   first PICKS of its next and of its previous `WINDOW` neighbours that are at most
   `THRESHOLD` bits away and not far apart by SimHash (`_band_picks`);
2. a picked pair is kept when both its images rank it among their PARTNERS first by the
   picks it got from all bands, then by Hamming distance (`_partnered`);
3. every kept pair is confirmed or refused by the thumbnails (`_alike`); the groups are
   the connected components of the confirmed pairs, their links the minimum spanning
   forest by Hamming distance (`forest_links`);
4. in a cross-split group of at most `_ALL_PAIRS` exact sets every pair is checked
   (`to_drop` needs every copy of a kept member).

So an image costs at most 2 BANDS WINDOW hash comparisons and PARTNERS thumbnail checks
(plus `_ALL_PAIRS` - 1 in a small cross-split group). Here, in one process, step 3 takes
the kept pairs in Kruskal's order and checks only those that can change the components or
the forest (`_near_links`): the same result for fewer checks. Thumbnail checks are numpy
matrix products (about a microsecond a pair); memory is O(N) plus the kept pairs
(docs/know_your_data.md measures 100,000 and 1,000,000 fingerprints of real-photo crops).
"""

import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import mmap
import pathlib
from typing import Callable, Iterable, NamedTuple, Sequence

import numpy as np
import PIL.Image
import scipy.sparse
import scipy.sparse.csgraph

from imagesets.analysis import image_hashes
from imagesets.analysis import terminal_text

THRESHOLD = 28      # bits of image_hashes.HASH_BITS: 5 % crops measured <= 25
SIMILAR = 0.85      # thumbnail correlation confirming a near pair: real copies >= 0.89, distinct pairs the hashes propose <= 0.8 (tiles of 18 real photos)
_CROP = 0.06        # zoom `similarity` tries: copies cropped by up to ~6 %
_CENTRE = 0.85      # share of a thumbnail's side `similarity` compares (borders differ in crops)
_COMPARED = 12      # side the compared centres are resampled to
_MEAN = 8.0         # grey levels a copy's central mean may move (crops, re-encoding)
_CONTRAST = 1.4     # ratio a copy's central contrast may change by
_FLAT = 2.0         # grey-level spread below which a thumbnail is flat
_ALL_PAIRS = 64     # cross-split groups up to this many exact sets get every pair checked
BANDS = 64
BAND_BITS = 13
WINDOW = 8          # in a band, an image's candidates are the WINDOW before and after it
PICKS = 3           # in each band, the candidates an image picks on each side (`_band_picks`)
PARTNERS = 48       # pairs an image is in, in all bands (`_partnered`)
_FAR_BITS = 24      # SimHash bits (of 61) past which two thumbnails are not compared
_FEW_PAIRS = 64     # joins of up to this many pairs go without scipy (`_Components`)
_REGIONS_HELD = 100_000  # pictures whose regions `find` holds at once (1,170 bytes each)
_BATCH = 4096       # pairs whose thumbnails are compared in one numpy step (~50 MB)
_KEYED_BANDS = 8    # bands whose bucket keys `_picked` makes at once
_HELD_PICKS = 1 << 22  # picked pairs `_picked` holds before it merges them (36 MB)
_GATHERED = 64      # hashes up to which `_bucket_keys` gathers every bit at once
_PICKED_APART = 5_000  # pictures from which `begin` has worker processes pick the bands
_RANKED = 1 << 20   # pairs `_partnered` ranks at a time (~100 MB)
_BAND_SEED = 27
SPLIT_ORDER = ("train", "validation", "test")  # `drop` keeps the copy of the earliest split
EXACT, NEAR = "exact", "near"
REPORT_FILE = "duplicates.json"  # beside dataset_info.json: published and fetched with it
# What a build does about cross-split groups: report them (warn), stop naming them (error),
# keep each group's copies of its earliest split only (drop), or fingerprint nothing (off).
LEAKAGE_ACTIONS = ("warn", "error", "drop", "off")


class LeakageError(ValueError):
  """The same picture is in two splits and the build was told to stop (leakage="error")."""


@dataclasses.dataclass(frozen=True)
class Member:
  split: str
  file_name: str
  label: str | None

  def to_json(self) -> dict:
    return {"split": self.split, "file_name": self.file_name, "label": self.label}


@dataclasses.dataclass(frozen=True)
class Group:
  # EXACT: every member has the same fingerprint pixels (size and small decode); else NEAR
  kind: str
  members: tuple[Member, ...]  # in split order, then by file name
  # In a NEAR group, the members with the same fingerprint pixels (positions in `members`).
  exact_sets: tuple[tuple[int, ...], ...] = ()
  # In a NEAR group, the pairs of members (positions) confirmed alike (`similarity`); the
  # group is their connected component, but A ~ B ~ C does not make A a copy of C.
  links: tuple[tuple[int, int], ...] = ()

  @functools.cached_property
  def _splits(self) -> tuple[str, ...]:  # (reports ask a group of thousands many times)
    return tuple(sorted({m.split for m in self.members}, key=split_rank))

  @property
  def splits(self) -> list[str]:
    return list(self._splits)

  @property
  def cross_split(self) -> bool:
    return len(self._splits) > 1

  @functools.cached_property
  def label_conflict(self) -> bool:
    return len({m.label for m in self.members}) > 1

  def same_pixels(self) -> list[str]:
    """'split/file = split/file' for each set of members with the very same pixels."""
    return [" = ".join(printable(f"{self.members[p].split}/{self.members[p].file_name}")
                       for p in positions)
            for positions in self.exact_sets]

  def to_json(self) -> dict:
    return {"kind": self.kind, "cross_split": self.cross_split,
            "label_conflict": self.label_conflict,
            "members": [m.to_json() for m in self.members],
            "exact_sets": [list(positions) for positions in self.exact_sets],
            "links": [list(pair) for pair in self.links]}


@functools.lru_cache(maxsize=64)  # (asked once a member in every sort by member order)
def split_rank(split: str) -> tuple:
  return (SPLIT_ORDER.index(split) if split in SPLIT_ORDER else len(SPLIT_ORDER), split)


def member_order(member: Member) -> tuple:
  """Member order, total: split, file name, then (one name twice) label."""
  return split_rank(member.split), member.file_name, member.label is not None, member.label or ""


def group_order(group: "Group") -> tuple:
  """The order of `find`'s groups, total: by their members in member order (the first
  member's split and file name first), then their exact sets and links."""
  return tuple(map(member_order, group.members)), group.exact_sets, group.links


def member_key(member: Member, fingerprint: image_hashes.Fingerprint) -> tuple:
  """Where an image sorts in member order: split, file name, then (one name twice) label
  and fingerprint. `find` numbers pictures in this order, and its ties follow it."""
  return (*picture_id(member, fingerprint), fingerprint.perceptual, fingerprint.thumbnail)


def picture_id(member: Member, fingerprint: image_hashes.Fingerprint) -> tuple:
  """The start of `member_key` that tells apart the representatives of exact sets (their
  pixels differ), in the same order: what Beam's workers name a picture by."""
  return (split_rank(member.split), member.file_name, member.label is not None,
          member.label or "", fingerprint.pixels)


@functools.cache
def _band_positions() -> np.ndarray:
  """(BANDS, BAND_BITS): the hash bits each band's buckets are keyed by (read-only: made
  once a process, Beam's workers ask it for every picture)."""
  rng = np.random.default_rng(_BAND_SEED)
  positions = np.stack([rng.choice(image_hashes.HASH_BITS, BAND_BITS, replace=False)
                        for _ in range(BANDS)])
  positions.flags.writeable = False
  return positions


def _as_words(hashes: Sequence[int]) -> np.ndarray:
  """N x 2 uint64 (high, low words) of 128-bit hashes."""
  mask = (1 << 64) - 1
  return np.stack([np.array([h >> 64 for h in hashes], np.uint64),
                   np.array([h & mask for h in hashes], np.uint64)], axis=1).reshape(-1, 2)


@functools.cache
def _centre_maps() -> np.ndarray:
  """(2, SMALL, _COMPARED) float32: PIL's bilinear resampling of a thumbnail's central
  `_CENTRE * zoom` to `_COMPARED` pixels, along one side, at zoom 1 and 1 - _CROP. PIL
  resamples an "F" image linearly and one side after the other, so the map of a thumbnail
  T to its region is M^T T M, and many pairs are compared as matrix products (the map of
  each basis row, taken from PIL itself)."""
  side = image_hashes.SMALL
  maps = []
  for zoom in (1.0, 1.0 - _CROP):
    half = side * _CENTRE * zoom / 2
    rows = []
    for k in range(side):
      basis = np.zeros((1, side), np.float32)
      basis[0, k] = 1.0
      rows.append(np.asarray(PIL.Image.fromarray(basis, "F").resize(
          (_COMPARED, 1), PIL.Image.Resampling.BILINEAR,
          box=(side / 2 - half, 0, side / 2 + half, 1))).ravel())
    maps.append(np.stack(rows))
  return np.stack(maps).astype(np.float32)


def _regions(thumbnails: np.ndarray, side_maps: np.ndarray) -> "_Region":
  """The central regions (M^T T M, `_centre_maps`) of B thumbnails at each of the Z zooms
  of `side_maps` (Z x SMALL x _COMPARED): B x Z x _COMPARED² float32. A product per
  thumbnail (stacked matmul): a region's values are the same bits in any batch, which one
  product over the batch's rows does not promise (BLAS blocks by size)."""
  count, side = len(thumbnails), image_hashes.SMALL
  half = np.matmul(thumbnails.reshape(count, 1, side, side), side_maps)
  return _Region(np.matmul(half.transpose(0, 1, 3, 2), side_maps).reshape(
      count, len(side_maps), _COMPARED * _COMPARED))


# The zooms `similarities` compares a pair at: equal scale, the first zoomed in, the second.
_FIRST_ZOOMS, _SECOND_ZOOMS = np.array([0, 1, 0]), np.array([0, 0, 1])
_EQUAL_SCALE = np.array([0])  # (the zoom `_thumbnail_keys` keys)


def _every_region(thumbnails: np.ndarray) -> "_Region":
  """`_regions` of every thumbnail at both zooms, made a block at a time."""
  count, zooms = len(thumbnails), len(_centre_maps())
  held = _Region()
  held.mean = np.empty((count, zooms), np.float32)
  held.spread = np.empty((count, zooms), np.float32)
  held.flat = np.empty((count, zooms), bool)
  held.standard = _in_small_pages((count, zooms, _COMPARED * _COMPARED), np.float32)
  for start in range(0, count, _BATCH):
    block = _regions(thumbnails[start:start + _BATCH].astype(np.float32), _centre_maps())
    for field in ("mean", "spread", "flat", "standard"):
      getattr(held, field)[start:start + _BATCH] = getattr(block, field)
  return held


def _in_small_pages(shape: tuple, dtype) -> np.ndarray:
  """An uninitialised array in a private anonymous mapping of its own (freed with it).
  numpy asks for transparent huge pages for large arrays, and where the kernel compacts
  memory to find them (THP "defrag" set to "madvise", a common default) one first touch of
  the regions' tens of MB costs up to 0.25 s of system time; 4 KiB pages cost ~0.01 s."""
  size = int(np.prod(shape))
  mapping = mmap.mmap(-1, max(size * np.dtype(dtype).itemsize, 1), flags=mmap.MAP_PRIVATE)
  if hasattr(mmap, "MADV_NOHUGEPAGE"):  # (also where every mapping may get them: THP "always";
    with contextlib.suppress(OSError):  # a kernel without huge pages refuses the advice)
      mapping.madvise(mmap.MADV_NOHUGEPAGE)
  return np.frombuffer(mapping, dtype, count=size).reshape(shape)


def similarities(thumbnails: np.ndarray, first: np.ndarray, second: np.ndarray,
                 regions: "_Region | None" = None) -> np.ndarray:
  """How alike the thumbnails (rows of `image_hashes.SMALL`² grey bytes) of each pair
  `first[k]`, `second[k]` are: the best normalised correlation of their central regions,
  at equal scale or one of them zoomed in by `_CROP` (a copy cropped by a few percent). Two
  flat regions count as alike when their means are close (black frames, placeholders).
  Regions whose brightness or contrast differ are not alike (-1), however correlated: on
  real photos, distinct smooth tiles (skies, walls) correlate up to 0.98. Vectorised: a
  few microseconds a pair, in blocks of `_BATCH` pairs; each pair's score is the same bits
  whatever else is compared with it. `regions`: every thumbnail's (`_every_region`), when
  held; else each block makes those of its pictures."""
  scores = np.empty(len(first), np.float64)
  for start in range(0, len(first), _BATCH):
    block = slice(start, start + _BATCH)
    if regions is None:
      # (each picture's regions once: neighbours in a bucket share pictures)
      pictures, where = np.unique(np.concatenate([first[block], second[block]]),
                                  return_inverse=True)
      held = _regions(thumbnails[pictures].astype(np.float32), _centre_maps())
      x, y = where[:len(where) // 2], where[len(where) // 2:]
    else:
      held, x, y = regions, first[block], second[block]
    scores[block] = _correlation(held.at(x, _FIRST_ZOOMS), held.at(y, _SECOND_ZOOMS)).max(1)
  return scores


class _Region:
  """Central regions (the last axis) as their means, spreads and standardised values."""

  def __init__(self, values: np.ndarray | None = None):
    if values is None:
      return
    self.mean = values.mean(-1)
    centred = values - self.mean[..., None]
    self.spread = np.sqrt(np.einsum("...j,...j->...", centred, centred) / values.shape[-1])
    self.flat = self.spread < _FLAT
    self.standard = centred / np.where(self.flat, 1.0, self.spread)[..., None]

  def at(self, rows: np.ndarray, zooms: np.ndarray) -> "_Region":
    """The regions of `rows`, each at `zooms`: len(rows) x len(zooms)."""
    where = rows[:, None], zooms[None, :]
    taken = _Region()
    taken.mean, taken.spread, taken.flat, taken.standard = (
        self.mean[where], self.spread[where], self.flat[where], self.standard[where])
    return taken


def _correlation(x: _Region, y: _Region) -> np.ndarray:
  correlation = np.einsum("...j,...j->...", x.standard, y.standard) / x.standard.shape[-1]
  with np.errstate(divide="ignore", invalid="ignore"):
    ratio = x.spread / y.spread
  # (a copy keeps its brightness and contrast; alike shapes often do not)
  kept = (np.abs(x.mean - y.mean) <= _MEAN) & (1 / _CONTRAST < ratio) & (ratio < _CONTRAST)
  score = np.where(kept, correlation, -1.0)
  flat_alike = x.flat & y.flat & (np.abs(x.mean - y.mean) < 4 * _FLAT)
  return np.where(x.flat | y.flat, np.where(flat_alike, 1.0, 0.0), score)


def similarity(a: bytes, b: bytes) -> float:
  """`similarities` of two stored thumbnails."""
  thumbnails = np.frombuffer(a + b, np.uint8).reshape(2, -1)
  return float(similarities(thumbnails, np.array([0]), np.array([1]))[0])


def _thumbnail_rows(thumbnails: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
  """(N x SMALL² uint8, N bools: no thumbnail stored) of stored thumbnails."""
  size = image_hashes.SMALL ** 2
  blank = np.array([len(t) != size for t in thumbnails], bool)
  rows = np.frombuffer(b"".join(t if len(t) == size else bytes(size) for t in thumbnails),
                       np.uint8).reshape(-1, size)
  return rows, blank


def _alike(thumbnails: np.ndarray, blank: np.ndarray, first: np.ndarray,
           second: np.ndarray, regions: "_Region | None" = None) -> np.ndarray:
  """Which pairs are confirmed alike: the same thumbnail (also both without one), or a
  `similarities` score of at least SIMILAR (`regions`: as there). Every thumbnail check
  goes through here."""
  maybe = np.flatnonzero(thumbnails[first, :8].view(np.uint64)[:, 0]
                         == thumbnails[second, :8].view(np.uint64)[:, 0])  # (cheap first)
  same = np.zeros(len(first), bool)
  same[maybe] = (thumbnails[first[maybe]] == thumbnails[second[maybe]]).all(1)
  same &= blank[first] == blank[second]
  compared = ~same & ~blank[first] & ~blank[second]
  alike = same.copy()
  alike[compared] = similarities(thumbnails, first[compared], second[compared],
                                 regions) >= SIMILAR
  return alike


class _Keys(NamedTuple):
  """What the bands sort pictures by and `_far_apart` asks (`_thumbnail_keys`)."""
  simhash: np.ndarray  # N uint64: 61-bit SimHash of the standardised central region
  flat: np.ndarray     # N bools: the region is flat (its SimHash is noise)
  mean: np.ndarray     # N uint8: the region's mean grey level


def _thumbnail_keys(thumbnails: np.ndarray, regions: "_Region | None" = None) -> _Keys:
  """A picture's 61-bit SimHash of its standardised central region (signs of seeded
  random projections), whether the region is flat, and its mean. Regions that correlate
  agree on most SimHash bits: the share of bits two regions differ in estimates the angle
  between them (a correlation of 0.85 is 32 degrees, about 11 bits of 61), so sorting by
  it puts alike pictures side by side, and a pair far apart in it need not be compared
  (`_FAR_BITS`). A product per picture: the same bits in any batch. `regions`: every
  thumbnail's (`_every_region`), when held: its first zoom is the region keyed (the same
  bits as made here), not made again."""
  planes = _simhash_planes()
  keys = _Keys(np.empty(len(thumbnails), np.uint64), np.empty(len(thumbnails), bool),
               np.empty(len(thumbnails), np.uint8))
  weights = np.uint64(1) << np.arange(61, dtype=np.uint64)
  for start in range(0, len(thumbnails), _BATCH):
    block = thumbnails[start:start + _BATCH]
    region = (_regions(block.astype(np.float32), _centre_maps()[:1]) if regions is None
              else regions.at(np.arange(start, start + len(block)), _EQUAL_SCALE))
    signs = (np.matmul(region.standard[:, :1], planes)[:, 0] > 0).astype(np.uint64)
    keys.simhash[start:start + _BATCH] = signs @ weights
    keys.flat[start:start + _BATCH] = region.flat[:, 0]
    keys.mean[start:start + _BATCH] = np.minimum(region.mean[:, 0], 255)
  return keys


@functools.cache
def _simhash_planes() -> np.ndarray:
  """(_COMPARED**2, 61) float32: `_thumbnail_keys`' seeded projections (read-only: made
  once a process, Beam's workers ask them for every picture)."""
  planes = np.random.default_rng(_BAND_SEED).standard_normal(
      (_COMPARED * _COMPARED, 61)).astype(np.float32)
  planes.flags.writeable = False
  return planes


def _far_apart(keys: _Keys, first: np.ndarray, second: np.ndarray) -> np.ndarray:
  """Pairs whose regions' SimHashes differ in more than _FAR_BITS bits (an angle estimate
  over 71 degrees: unlike, for a copy's 32 at most the chance is below 1e-4); flat
  regions (their SimHash is noise) are never far apart."""
  differ = np.bitwise_count(keys.simhash[first] ^ keys.simhash[second])
  return (differ > _FAR_BITS) & ~keys.flat[first] & ~keys.flat[second]


class _Components:
  """Union-find over N pictures, many at a time: `roots` follows parents (halving the
  paths it walks, then pointing the items at their roots), `join` merges the roots of many pairs at once (their graph's connected
  components, scipy), each component under its smallest root. Work ~ the pairs, not N."""

  def __init__(self, count: int):
    self.parent = np.arange(count)

  def roots(self, items: np.ndarray) -> np.ndarray:
    roots = self.parent[items]
    while True:
      up = self.parent[roots]
      if (up == roots).all():
        self.parent[items] = roots  # (the items' paths are one step now)
        return roots
      self.parent[roots] = self.parent[up]
      roots = up

  def join(self, first: np.ndarray, second: np.ndarray) -> None:
    if len(first) <= _FEW_PAIRS:  # (most joins: scipy's set-up would cost more than them)
      self._join_few(self.roots(first).tolist(), self.roots(second).tolist())
      return
    nodes, inverse = np.unique(np.concatenate([self.roots(first), self.roots(second)]),
                               return_inverse=True)
    graph = scipy.sparse.coo_matrix(
        (np.ones(len(first), np.int8), (inverse[:len(first)], inverse[len(first):])),
        shape=(len(nodes), len(nodes)))
    _, component = scipy.sparse.csgraph.connected_components(graph, directed=False)
    smallest = np.full(component.max() + 1, len(self.parent))
    np.minimum.at(smallest, component, nodes)
    self.parent[nodes] = smallest[component]

  def _join_few(self, first: list[int], second: list[int]) -> None:
    """`join` of a few pairs of roots, in Python (`_joined_in_order`)."""
    up, top, _ = _joined_in_order(first, second)
    if up:
      nodes = list(up)
      self.parent[nodes] = [top(node) for node in nodes]


def _joined_in_order(first, second) -> tuple[dict, Callable, list[int]]:
  """A union-find of a few pairs in Python, in their order: (each joined node's parent,
  the function to a node's root, the positions of the pairs that joined two trees). A
  root joined to a smaller one points to it, so a tree's root is its smallest node."""
  up, taken = {}, []

  def top(node):
    while node in up:
      node = up[node]
    return node
  for position, (a, b) in enumerate(zip(first, second)):
    a, b = top(a), top(b)
    if a != b:
      up[max(a, b)] = min(a, b)
      taken.append(position)
  return up, top, taken


def _band_picks(words: np.ndarray, key: np.ndarray, within: _Keys, band: int, threshold: int,
                pickers: np.ndarray | None = None) -> np.ndarray:
  """Codes i * N + j (i < j) of the picks one band makes, a pair twice when both its
  pictures pick it (`_band_pairs`)."""
  low, high, picks = _band_pairs(words, key, within, band, threshold, pickers)
  return np.repeat(_codes(low, high, len(words)), picks)


def _band_pairs(words: np.ndarray, key: np.ndarray, within: _Keys, band: int, threshold: int,
                pickers: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(i, j, picks), i < j, of the pairs one band picks, each once with the number of its
  pictures that pick it (1 or 2: uint8). Pictures (in member order) with the same `key`
  (their bits at the band's positions, `_bucket_keys`) share a bucket; a bucket is sorted
  by `_places` (the thumbnails' keys, so that neighbours are likely alike whatever their
  hashes: a crowd of one hash, flat frames, one texture), then by member order. A
  picture's window is the WINDOW before and the WINDOW after it; its candidates, the
  window's pictures at most `threshold` bits away whose thumbnails are not far apart
  (`_far_apart`); it picks the PICKS nearest candidates after it and the PICKS nearest
  before it (by place). What a band picks is a function of each bucket's pictures and
  their member order: the same when a bucket is picked alone, or a stretch of its order
  with the WINDOW pictures on either side, the stretch's own pictures (`pickers`) picking
  (Beam's workers)."""
  count = len(words)
  order = _sorted_places(_places(key, words, within, band))
  sorted_keys, high, low = key[order], words[order, 0], words[order, 1]
  placed = _Keys(*(field[order] for field in within))  # (sliced by offset below)
  after, before = np.zeros(count, np.int64), np.zeros(count, np.int64)  # picks so far
  pairs = []
  for offset in range(1, WINDOW + 1):
    same = sorted_keys[:-offset] == sorted_keys[offset:]
    if not same.any():
      break  # buckets are contiguous: none is longer than `offset`
    distance = (np.bitwise_count(high[:-offset] ^ high[offset:])
                + np.bitwise_count(low[:-offset] ^ low[offset:]))
    at = np.flatnonzero(same & (distance <= threshold))
    at = at[~_far_apart(placed, at, at + offset)]
    by_first, by_second = after[at] < PICKS, before[at + offset] < PICKS
    if pickers is not None:
      by_first &= pickers[order[at]]
      by_second &= pickers[order[at + offset]]
    after[at[by_first]] += 1
    before[at[by_second] + offset] += 1
    either = by_first | by_second
    first, second = order[at[either]], order[at[either] + offset]
    pairs.append((np.minimum(first, second), np.maximum(first, second),
                  by_first[either].view(np.uint8) + by_second[either].view(np.uint8)))
  index = _index_type(count)
  if not pairs:
    return np.empty(0, index), np.empty(0, index), np.empty(0, np.uint8)
  low, high, picks = map(np.concatenate, zip(*pairs))
  return low.astype(index), high.astype(index), picks


def _index_type(count: int) -> type:
  return np.int32 if count < 1 << 31 else np.int64


def _codes(low: np.ndarray, high: np.ndarray, count: int) -> np.ndarray:
  """Codes i * count + j of pairs (i, j) given in `_index_type(count)` (64-bit codes:
  32-bit products pass 2**31 at 46,341 pictures)."""
  return low.astype(np.int64) * count + high


def _sorted_places(places: np.ndarray) -> np.ndarray:
  """The indices in order of `places`, equal places in index (member) order."""
  order = np.argsort(places)
  sorted_places = places[order]
  tied = np.r_[False, sorted_places[1:] == sorted_places[:-1]]
  if tied.any():  # (one hash and thumbnail key twice: bursts, re-encodings)
    runs = np.cumsum(~tied)
    tied[:-1] |= tied[1:]
    at = np.flatnonzero(tied)
    held = order[at]
    order[at] = held[np.argsort(runs[at] * len(places) + held)]
  return order


def _bucket_keys(words: np.ndarray, positions: np.ndarray) -> np.ndarray:
  """(bands, N): each hash's bucket in each band of `positions` (bands x BAND_BITS): its
  bits there (bit b: 0 is the high word's highest), the first the highest of BAND_BITS
  (`_places` holds them whole: a bucket is one stretch of a band's order)."""
  positions = np.asarray(positions)
  if len(words) <= _GATHERED:  # (one picture a call on Beam's workers: a few numpy calls)
    bits = (words[:, positions // 64] >> (63 - positions % 64).astype(np.uint64)) & np.uint64(1)
    weights = np.uint64(1) << np.arange(positions.shape[1] - 1, -1, -1, dtype=np.uint64)
    return np.bitwise_or.reduce(bits * weights, axis=2).T
  columns = np.ascontiguousarray(words.T)  # (the high words, the low words)
  keys, bit_of = np.zeros((len(positions), len(words)), np.uint64), np.empty(len(words), np.uint64)
  for key, bits in zip(keys, positions.tolist()):  # (in place: a band's key a bit at a time)
    for bit in bits:
      key <<= np.uint64(1)
      np.right_shift(columns[bit // 64], np.uint64(63 - bit % 64), out=bit_of)
      bit_of &= np.uint64(1)
      key |= bit_of
  return keys


def _places(key: np.ndarray, words: np.ndarray, within: _Keys, band) -> np.ndarray:
  """Where each picture sorts in the band: its bucket, its thumbnail's brightness (3 bits,
  the bins shifted by the band: a copy whose mean crosses a bin's edge is beside its
  original in the other bands), its thumbnail's SimHash rotated by the band's own amount
  (32 bits), 16 bits scrambled from its hash and the band (so that ties differ from band
  to band); each a function of the picture alone. `band`: a band, or an array of them
  (one picture's place in each: `key` its bucket in each)."""
  turn = np.uint64(band * 7 % 60 + 1)
  simhash = within.simhash
  rotated = ((simhash << turn) | (simhash >> (np.uint64(61) - turn))) & np.uint64((1 << 61) - 1)
  brightness = np.minimum(within.mean.astype(np.uint64) + np.uint64(band * 11 % 32), 255) >> 5
  with np.errstate(over="ignore"):
    scrambled = ((words[:, 0] ^ (words[:, 1] * _GOLDEN) ^ np.uint64(band + 1) * _GOLDEN)
                 * _MIX) >> np.uint64(48)
  return ((key << np.uint64(51)) | (brightness << np.uint64(48))
          | ((rotated >> np.uint64(29)) << np.uint64(16)) | scrambled)


_GOLDEN, _MIX = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9)


def _picked(words: np.ndarray, within: _Keys, threshold: int
            ) -> tuple[np.ndarray, np.ndarray]:
  """(sorted distinct codes of the pairs the bands pick, how many picks each got): every
  band's `_band_pairs` (`_picked_in`)."""
  return _picked_in(words, within, threshold, range(BANDS))


def _picked_in(words: np.ndarray, within: _Keys, threshold: int, bands: range
               ) -> tuple[np.ndarray, np.ndarray]:
  """`_picked` of `bands`, counted _HELD_PICKS pairs at a time into runs that are merged as
  a binary counter merges (each run at most half the one before it: a pair is copied a
  logarithmic number of times; memory: the distinct pairs, twice at most)."""
  count = len(words)
  positions = _band_positions() if count > 1 else np.empty((0, BAND_BITS), np.int64)
  runs, held = [], []
  end = min(bands.stop, len(positions))
  for start in range(bands.start, end, _KEYED_BANDS):
    keyed = positions[start:min(start + _KEYED_BANDS, end)]
    for number, key in enumerate(_bucket_keys(words, keyed)):
      held.append(_band_pairs(words, key, within, start + number, threshold))
      last = start + number == end - 1
      if sum(len(low) for low, _, _ in held) > _HELD_PICKS or last:
        runs.append(_counted(*map(np.concatenate, zip(*held)), count))
        held = []
        while len(runs) > 1 and (last or 2 * len(runs[-1][0]) > len(runs[-2][0])):
          runs[-2:] = [_merged(*runs[-2], *runs[-1])]
  return runs[0] if runs else (np.empty(0, np.int64), np.empty(0, np.uint8))


def _counted(low: np.ndarray, high: np.ndarray, picks: np.ndarray, count: int
             ) -> tuple[np.ndarray, np.ndarray]:
  """(sorted distinct codes i * count + j, the picks each got in all) of pairs (i, j)
  picked `picks` times each (uint8; i and j in `_index_type(count)`: the sparse matrix
  below takes them without a copy). Pairs that outnumber the pictures: a sparse matrix's
  rows bucket them by i in one pass, and only each row's few columns are sorted (a sort of
  every code is 2x slower where numpy's sort has no SIMD kernel); fewer: sorted (the rows
  would cost more than the pairs)."""
  if len(low) < count:
    codes = _codes(low, high, count)
    order = np.argsort(codes, kind="stable")
    codes = codes[order]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if len(codes) else codes
    return codes[starts], (np.add.reduceat(picks[order], starts, dtype=np.uint8) if len(codes)
                           else picks[:0])  # (bytes: <= 2 BANDS)
  matrix = scipy.sparse.csr_matrix(  # (sums in bytes: a pair gets at most 2 BANDS picks)
      (picks, (low, high)), shape=(count, count))
  matrix.sum_duplicates()
  rows = np.repeat(np.arange(count, dtype=_index_type(count)), np.diff(matrix.indptr))
  return _codes(rows, matrix.indices, count), matrix.data


def _merged(codes: np.ndarray, votes: np.ndarray, new: np.ndarray,
            times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Two runs of sorted distinct codes and their counts, as one."""
  at = np.searchsorted(codes, new)
  held = at < len(codes)
  held[held] = codes[at[held]] == new[held]
  np.add.at(votes, at[held], times[held])
  return (np.insert(codes, at[~held], new[~held]), np.insert(votes, at[~held], times[~held]))


def _partnered(first: np.ndarray, second: np.ndarray, votes: np.ndarray,
               distance: np.ndarray, count: int) -> np.ndarray:
  """Which picked pairs (sorted by `first`, as `_picked` gives them: the ranges of pictures
  below rely on it) are kept: those both pictures rank among their
  PARTNERS first, by the picks the pair got (a copy sits beside its original in most
  bands; a crowd's neighbours change from band to band), then Hamming distance, then the
  other picture's member order. So a picture is in at most PARTNERS checks whatever its
  buckets hold, and what is kept is a function of each picture's picked pairs (Beam:
  grouped by picture). Ranked a range of pictures at a time (about _RANKED of their
  pairs): memory beyond the pairs is 11 bytes a pair."""
  pairs = len(first)
  taken = np.ones((2, pairs), bool)  # (each pair as its first ranks it, as its second does)
  degree = np.bincount(first, minlength=count) + np.bincount(second, minlength=count)
  if not pairs or degree.max() <= PARTNERS:
    return taken[0]
  by_second = np.argsort(second, kind="stable")
  first_at = np.r_[0, np.cumsum(np.bincount(first, minlength=count))]
  second_at = np.r_[0, np.cumsum(np.bincount(second, minlength=count))]
  ends_at = np.r_[0, np.cumsum(degree)]
  cuts = np.unique(np.r_[np.searchsorted(ends_at, np.arange(0, ends_at[-1], _RANKED)), count])
  for low, high in zip(cuts[:-1], cuts[1:]):
    if degree[low:high].max(initial=0) <= PARTNERS:
      continue
    as_first = np.arange(first_at[low], first_at[high])
    as_second = by_second[second_at[low]:second_at[high]]
    at = np.concatenate([as_first, as_second])
    side = np.r_[np.zeros(len(as_first), np.int64), np.ones(len(as_second), np.int64)]
    ends = np.where(side == 0, first[at], second[at])
    crowded = degree[ends] > PARTNERS
    at, side, ends = at[crowded], side[crowded], ends[crowded]
    others = np.where(side == 0, second[at], first[at])
    worse = partner_rank(votes[at], distance[at])
    if count < 1 << 23:  # (one 64-bit key: a quicker sort)
      order = np.argsort(((ends - low) * (1 << 16) + worse) * count + others)
    else:
      order = np.lexsort((others, worse, ends))
    sorted_ends = ends[order]
    starts = np.flatnonzero(np.r_[True, sorted_ends[1:] != sorted_ends[:-1]])
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    past = order[rank >= PARTNERS]  # (pairs past their picture's PARTNERS)
    taken[side[past], at[past]] = False
  return taken[0] & taken[1]


def partner_rank(votes, distance):
  """How a picture ranks a pair it is in (`_partnered`), before the other picture's member
  order: the more picks, then the nearer, first (at most 2 BANDS picks, HASH_BITS bits)."""
  if isinstance(votes, np.ndarray):
    votes = votes.astype(np.int64)  # (picks are counted in bytes)
  return (2 * BANDS - votes) * 256 + distance


def _distances(words: np.ndarray, first: np.ndarray, second: np.ndarray) -> np.ndarray:
  return (np.bitwise_count(words[first, 0] ^ words[second, 0])
          + np.bitwise_count(words[first, 1] ^ words[second, 1])).astype(np.int64)


@dataclasses.dataclass
class _Links:
  """The spanning forest of the confirmed pairs (`first[k]` ~ `second[k]`, first < second)
  among N pictures, their components (`label`: each component's smallest picture) and the
  pairs checked and found unlike (`checked`, sorted codes first * N + second)."""
  label: np.ndarray
  first: np.ndarray
  second: np.ndarray
  checked: np.ndarray


def _near_links(words: np.ndarray, thumbnails: np.ndarray, blank: np.ndarray,
                threshold: int, regions: "_Region | None" = None) -> _Links:
  """`_links_of` the pairs the bands pick (`_picked`), in this process."""
  return _links_of(words, thumbnails, blank,
                   [*_picked(words, _thumbnail_keys(thumbnails, regions), threshold)], regions)


def _links_of(words: np.ndarray, thumbnails: np.ndarray, blank: np.ndarray,
              picked: list[np.ndarray], regions: "_Region | None") -> _Links:
  """The picked pairs (`_picked`'s sorted codes and votes, in `picked`: emptied, so that
  they are held once) both pictures keep (`_partnered`), confirmed
  or refused by their thumbnails (`_alike`): their components, and as links the spanning
  forest of the confirmed ones by Kruskal's rule (`forest_links`). Pairs are taken in
  that order a distance at a time, and a pair whose pictures are joined already is not
  checked: its answer could change neither the components nor the forest (a path of
  confirmed pairs that come before it joins them). So the result is that of checking every
  kept pair (as Beam's workers do), at the cost of the pairs that can matter."""
  count = len(words)
  codes, votes = picked
  picked.clear()
  first, second = codes // max(count, 1), codes % max(count, 1)
  del codes  # (the picked pairs are most of the memory: held once)
  distance = _distances(words, first, second).astype(np.uint8)  # (<= HASH_BITS)
  kept = _partnered(first, second, votes, distance, count)
  del votes
  first, second, distance = first[kept], second[kept], distance[kept]
  order = np.argsort(distance, kind="stable")  # (by distance, then as the codes were)
  first, second, distance = first[order], second[order], distance[order]
  components = _Components(count)
  alike, unlike = np.zeros(len(first), bool), []
  starts = np.flatnonzero(np.r_[True, distance[1:] != distance[:-1]]) if len(first) else []
  for start, end in zip(starts, [*starts[1:], len(first)]):
    ends = components.roots(first[start:end]), components.roots(second[start:end])
    at = np.flatnonzero(ends[0] != ends[1])
    roots = ends[0][at], ends[1][at]
    at += start
    if not len(at):
      continue
    # The forest the level grows if every pair is alike: its confirmed pairs are in the
    # level's forest whatever the others' answers (a forest without one cannot be grown).
    grown = _kruskal(*roots)
    confirmed = _alike(thumbnails, blank, first[at[grown]], second[at[grown]], regions)
    checked = [(grown, confirmed)]
    components.join(first[at[grown[confirmed]]], second[at[grown[confirmed]]])
    if not confirmed.all():  # (the rest of the forest: of the level joined by those)
      rest = np.setdiff1d(np.arange(len(at)), grown, assume_unique=True)
      rest = rest[components.roots(first[at[rest]]) != components.roots(second[at[rest]])]
      answers = _alike(thumbnails, blank, first[at[rest]], second[at[rest]], regions)
      checked.append((rest, answers))
      rest = rest[answers]
      more = rest[_kruskal(components.roots(first[at[rest]]),
                           components.roots(second[at[rest]]))]
      components.join(first[at[more]], second[at[more]])
    for positions, answers in checked:
      alike[at[positions[answers]]] = True
      refused = at[positions[~answers]]
      unlike.append(first[refused] * count + second[refused])
  links = forest_links(first[alike], second[alike], distance[alike], count)
  return _Links(components.roots(np.arange(count)), first[alike][links],
                second[alike][links], np.sort(np.concatenate(unlike or [np.empty(0, np.int64)])))


def _kruskal(first: np.ndarray, second: np.ndarray) -> np.ndarray:
  """Positions of the pairs (of distinct nodes) that Kruskal's rule takes in this order:
  each pair whose nodes the pairs before it did not join."""
  if len(first) <= _FEW_PAIRS:
    return np.array(_joined_in_order(first.tolist(), second.tolist())[2], np.int64)
  nodes, inverse = np.unique(np.concatenate([first, second]), return_inverse=True)
  low = np.minimum(inverse[:len(first)], inverse[len(first):])
  high = np.maximum(inverse[:len(first)], inverse[len(first):])
  codes = low * len(nodes) + high
  order = np.argsort(codes, kind="stable")
  once = order[np.r_[True, codes[order][1:] != codes[order][:-1]]]  # (a pair's first)
  tree = scipy.sparse.csgraph.minimum_spanning_tree(scipy.sparse.csr_matrix(
      (once + 1.0, (low[once], high[once])), shape=(len(nodes), len(nodes))))
  return np.sort(tree.data.astype(np.int64) - 1)


def forest_links(first: np.ndarray, second: np.ndarray, distance: np.ndarray,
                 count: int) -> np.ndarray:
  """Which of the confirmed pairs (pictures numbered in member order, first < second) are
  the links: the minimum spanning forest by (Hamming distance, first, second), unique
  for these distinct weights, so that any subset holding it gives it (Kruskal's rule)."""
  if not len(first):
    return np.zeros(0, bool)
  order = np.lexsort((second, first, distance))
  rank = np.empty(len(first), np.float64)
  rank[order] = np.arange(1, len(first) + 1)
  tree = scipy.sparse.csgraph.minimum_spanning_tree(
      scipy.sparse.csr_matrix((rank, (first, second)), shape=(count, count)))
  kept = np.zeros(len(first), bool)
  kept[order[tree.data.astype(np.int64) - 1]] = True  # (a kept pair's weight: its rank)
  return kept



def _among(codes: np.ndarray, sorted_codes: np.ndarray) -> np.ndarray:
  """Which of `codes` are in `sorted_codes`."""
  if not len(sorted_codes):
    return np.zeros(len(codes), bool)
  at = np.minimum(np.searchsorted(sorted_codes, codes), len(sorted_codes) - 1)
  return sorted_codes[at] == codes


def near_pairs(hashes: Sequence[int], threshold: int = THRESHOLD) -> set[tuple[int, int]]:
  """Index pairs (i < j) of hashes at most `threshold` bits apart that the LSH bands pick
  and both keep (module doc), without thumbnails: the candidates thumbnails then confirm
  or refuse."""
  words = _as_words(hashes)
  count = max(len(words), 1)
  codes, votes = _picked(words, _Keys(np.zeros(len(words), np.uint64), np.ones(len(words), bool),
                                      np.zeros(len(words), np.uint8)), threshold)
  first, second = codes // count, codes % count
  kept = _partnered(first, second, votes, _distances(words, first, second), count)
  return set(zip(first[kept].tolist(), second[kept].tolist()))


def find(members: Sequence[Member], fingerprints: Sequence[image_hashes.Fingerprint],
         threshold: int = THRESHOLD, pool=None) -> list[Group]:
  """Every group of duplicates among the images, sorted by their first member.

  Images with the very same pixels are one exact set. One representative per set goes to
  `_near_links`, which joins only pairs whose thumbnails confirm them: a group is a
  connected component of confirmed pairs. In a cross-split group of at most _ALL_PAIRS
  sets every pair is checked too, so that `to_drop` sees each copy of a kept member and
  never chains A ~ B ~ C into A ~ C.

  The result is a function of the images, not of the order they come in: they are taken
  in member order (a version built on a base, which lists its kept photos first, gets a
  full build's groups and links). `pool`: the build's worker processes, idle now
  (`begin`)."""
  return begin(members, fingerprints, threshold, pool).groups()


def begin(members: Sequence[Member], fingerprints: Sequence[image_hashes.Fingerprint],
          threshold: int = THRESHOLD, pool=None) -> "Finding":
  """`find` begun. With `pool` (worker processes, `parallel_map.executor`'s) and at least
  _PICKED_APART pictures, two workers pick half the bands each, handed out before this
  returns, while the caller goes on with work that needs no groups (a build's quality
  findings and record index); `Finding.groups()` makes the regions the checks compare,
  takes the workers' picks, checks the pairs and makes the groups: those of `find` alone."""
  return Finding(members, fingerprints, threshold, pool)


class Finding:
  """`find` under way (`begin`)."""

  def __init__(self, members, fingerprints, threshold: int, pool):
    ranks = {split: split_rank(split) for split in {m.split for m in members}}
    placed = [(ranks[m.split], m.file_name) for m in members]  # (`member_order`'s start)
    order = _in_member_order(members, fingerprints, placed)
    self._members = [members[i] for i in order]
    fingerprints = [fingerprints[i] for i in order]
    self._sets = _exact_sets([fingerprint.pixels for fingerprint in fingerprints])
    self._representatives = [same[0] for same in self._sets]
    self._thumbnails, self._blank = _thumbnail_rows(
        [fingerprints[i].thumbnail for i in self._representatives])
    self._words = _as_words([fingerprints[i].perceptual for i in self._representatives])
    self._threshold = threshold
    self._halves = []  # futures of the workers' picks of half the bands each
    if pool is not None and len(self._words) >= _PICKED_APART:
      keys = _thumbnail_keys(self._thumbnails)
      try:
        for bands in (range(BANDS // 2), range(BANDS // 2, BANDS)):
          self._halves.append(pool.submit(_picked_in, self._words, keys, threshold, bands))
      except RuntimeError:  # (a pool shut down: picked here)
        self._halves = []

  def groups(self) -> list[Group]:
    """The groups (`find`), once the workers' picks are in."""
    members, sets, thumbnails, blank = self._members, self._sets, self._thumbnails, self._blank
    # (most pictures take part in a check: their regions made once, up to a bound on
    # memory; made while the workers pick)
    regions = _every_region(thumbnails) if len(thumbnails) <= _REGIONS_HELD else None
    picked = self._picked_by_workers()
    links = (_near_links(self._words, thumbnails, blank, self._threshold, regions)
             if picked is None else _links_of(self._words, thumbnails, blank, picked, regions))
    components = collections.defaultdict(list)  # label -> numbers of exact sets
    for number, label in enumerate(links.label.tolist()):
      components[label].append(number)
    first, second = _every_pair_of_small_leaks(components.values(), sets, members, links)
    alike = _alike(thumbnails, blank, first, second, regions)
    first = np.concatenate([links.first, first[alike]])
    second = np.concatenate([links.second, second[alike]])
    grouped = {}  # label -> its members (indices, in member order), its exact sets' numbers
    place = np.zeros(len(members), np.int64)  # a grouped member's position in its group
    for label, numbers in components.items():
      if len(numbers) == 1 and len(sets[numbers[0]]) == 1:
        continue  # (one picture: no group)
      indices = sorted(i for number in numbers for i in sets[number])  # (member order)
      grouped[label] = indices, numbers
      place[indices] = np.arange(len(indices))
    representative = np.array(self._representatives, np.int64)
    linked = _pairs_by_label(links.label[first], place[representative[first]],
                             place[representative[second]])
    groups = [_group(tuple(members[i] for i in indices), len(numbers),
                     [place[sets[number]].tolist() for number in numbers
                      if len(sets[number]) > 1],
                     linked.get(label, ()))
              for label, (indices, numbers) in grouped.items()]
    return sorted_groups(groups)

  def _picked_by_workers(self) -> list[np.ndarray] | None:
    """[codes, votes] of every band, merged from the workers' halves (`_picked`'s); None
    when none were handed out, or a worker was lost (killed, e.g. out of memory): then
    picked here."""
    halves, self._halves = self._halves, []
    if not halves:
      return None
    try:
      return [*_merged(*halves[0].result(), *halves[1].result())]
    except concurrent.futures.BrokenExecutor:  # (BrokenProcessPool)
      return None


def _exact_sets(pixels: list[str]) -> list[list[int]]:
  """The indices of each distinct `pixels` digest, in order of their first index (each
  list ascending)."""
  if len(set(pixels)) == len(pixels):  # (no copy: most versions)
    return [[index] for index in range(len(pixels))]
  by_pixels = collections.defaultdict(list)
  for index, digest in enumerate(pixels):
    by_pixels[digest].append(index)
  return list(by_pixels.values())


def sorted_groups(groups: list["Group"]) -> list["Group"]:
  """`groups` in `group_order`. Disjoint groups differ in their first members, whose
  member order then decides: only those are keyed, unless two share one (a name twice)."""
  firsts = [member_order(group.members[0]) for group in groups]
  if len(set(firsts)) == len(firsts):
    return [group for _, group in sorted(zip(firsts, groups), key=lambda pair: pair[0])]
  return sorted(groups, key=group_order)


def _pairs_by_label(labels: np.ndarray, a: np.ndarray, b: np.ndarray) -> dict[int, tuple]:
  """label -> its distinct pairs (min(a, b), max(a, b)), sorted."""
  low, high = np.minimum(a, b), np.maximum(a, b)
  order = np.lexsort((high, low, labels))
  labels, low, high = labels[order], low[order], high[order]
  fresh = np.ones(len(labels), bool)
  fresh[1:] = (labels[1:] != labels[:-1]) | (low[1:] != low[:-1]) | (high[1:] != high[:-1])
  labels, pairs = labels[fresh], list(zip(low[fresh].tolist(), high[fresh].tolist()))
  starts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]]).tolist() if len(labels) else []
  ends = starts[1:] + [len(pairs)]
  return {label: tuple(pairs[start:end])
          for label, start, end in zip(labels[starts].tolist(), starts, ends)}


def _in_member_order(members, fingerprints, placed) -> list[int]:
  """The indices sorted by member order (`placed`), ties (one name twice) by label, then
  fingerprint: a function of the images, not of the order they come in."""
  order = sorted(range(len(members)), key=placed.__getitem__)
  if len(set(placed)) == len(placed):
    return order  # (no name twice: no ties)
  start = 0
  for end in range(1, len(order) + 1):  # (runs of one name: rare, sorted by the rest)
    if end == len(order) or placed[order[end]] != placed[order[start]]:
      if end - start > 1:
        order[start:end] = sorted(order[start:end],
                                  key=lambda i: member_key(members[i], fingerprints[i]))
      start = end
  return order


def _every_pair_of_small_leaks(components, sets, members, links: _Links):
  """The pairs of exact sets not checked yet in each component of 2 to _ALL_PAIRS sets
  whose members are in more than one split."""
  count = len(links.label)
  pairs = [np.empty((0, 2), np.int64)]
  for numbers in components:
    every = _every_pair_if_a_small_leak(
        len(numbers), lambda: {members[i].split for number in numbers for i in sets[number]})
    pairs.append(np.array(numbers, np.int64)[every])
  pairs = np.concatenate(pairs)
  codes = pairs[:, 0] * count + pairs[:, 1]
  fresh = ~_among(codes, links.checked) & ~np.isin(codes, links.first * count + links.second)
  return pairs[fresh, 0], pairs[fresh, 1]  # (not those checked already)


def _every_pair_if_a_small_leak(sets: int, splits: Callable[[], set]) -> np.ndarray:
  """(pairs, 2): every pair (i < j) of a component's `sets` exact sets when it is a small
  cross-split group (2 to _ALL_PAIRS sets, more than one split: `splits()`, asked only of
  a small group), whose pairs are all checked; none otherwise."""
  if 1 < sets <= _ALL_PAIRS and len(splits()) > 1:
    return np.stack(np.triu_indices(sets, 1), 1)
  return np.empty((0, 2), np.int64)


def component_group(sets: list, pairs: list) -> "Group | None":
  """The group of one connected component of confirmed pairs, as `find` makes it:
  `sets`, its exact sets (each a list of (member_key, member, fingerprint), in member
  order), `pairs`, its confirmed pairs of representatives ((picture_id, picture_id,
  distance), the first before the second). None for a picture alone."""
  sets = sorted(sets, key=lambda images: images[0][0])
  if len(sets) == 1 and len(sets[0]) == 1:
    return None
  number = {picture_id(*images[0][1:]): n for n, images in enumerate(sets)}
  first, second, distance = (np.array(column, np.int64).reshape(-1) for column in zip(
      *[(number[a], number[b], bits) for a, b, bits in pairs])) if pairs else (
      np.empty(0, np.int64),) * 3
  links = forest_links(first, second, distance, len(sets))
  first, second = first[links], second[links]
  images = sorted((image for images in sets for image in images), key=lambda i: i[0])
  members = [member for _, member, _ in images]
  every = _every_pair_if_a_small_leak(len(sets), lambda: {m.split for m in members})
  if len(every):
    fresh = ~np.isin(every[:, 0] * len(sets) + every[:, 1], first * len(sets) + second)
    every = every[fresh]
    thumbnails, blank = _thumbnail_rows([images[0][2].thumbnail for images in sets])
    alike = _alike(thumbnails, blank, every[:, 0], every[:, 1])
    first = np.concatenate([first, every[alike, 0]])
    second = np.concatenate([second, every[alike, 1]])
  position = {id(image): at for at, image in enumerate(images)}
  place = np.array([position[id(images[0])] for images in sets], np.int64)
  links = _pairs_by_label(np.zeros(len(first), np.int64), place[first], place[second])
  return _group(tuple(members), len(sets), [[position[id(image)] for image in images]
                                            for images in sets if len(images) > 1],
                links.get(0, ()))


def _group(members: tuple, sets: int, copies: list[list[int]], links: tuple) -> Group:
  """The group of `members` (in member order), `sets` exact sets of them; `copies`: those
  of more than one member (positions in `members`, ascending); `links`: confirmed pairs of
  positions, sorted."""
  if sets == 1:
    return Group(EXACT, members)
  return Group(NEAR, members, tuple(sorted(map(tuple, copies))), links)


def to_drop(groups: Iterable[Group]) -> list[Member]:
  """What `leakage="drop"` removes: the members of a cross-split group that are a copy of
  a member kept in an earlier split (train -> validation -> test -> others by name): every
  member outside an exact group's earliest split; in a near group, a member with the same
  pixels as, or confirmed alike (`links`, its own or a member's with its pixels), a kept
  member of an earlier split. A near group
  is not chained: with A ~ B ~ C and A unlike C, dropping B keeps C. Deterministic."""
  dropped = []
  for group in groups:
    if not group.cross_split:
      continue
    if group.kind == EXACT:
      dropped += [m for m in group.members if m.split != group.splits[0]]
      continue
    alike = _alike_positions(group)
    kept = set()
    for position, member in enumerate(group.members):  # (in split order)
      if any(group.members[k].split != member.split for k in alike[position] & kept):
        dropped.append(member)
      else:
        kept.add(position)
  return sorted(dropped, key=member_order)


def _alike_positions(group: Group) -> list[set[int]]:
  """For each member (position) of a near group, the members alike it: those with its
  pixels, and those linked to any of them with their pixels. Links join one member of each
  exact set (`find`'s, its representative): a copy of that member is as alike as it is."""
  unit = list(range(len(group.members)))  # position -> its exact set's first position
  for same in group.exact_sets:
    for p in same:
      unit[p] = same[0]
  of_unit = collections.defaultdict(set)
  for position, first in enumerate(unit):
    of_unit[first].add(position)
  linked = collections.defaultdict(set)
  for a, b in group.links:
    linked[unit[a]].add(unit[b])
    linked[unit[b]].add(unit[a])
  return [of_unit[unit[p]].union(*(of_unit[u] for u in linked[unit[p]]))
          for p in range(len(group.members))]


def raise_if_leaking(groups: Sequence[Group], title: str) -> None:
  """leakage="error": one LeakageError naming every file of every cross-split group."""
  leaks = [group for group in groups if group.cross_split]
  if leaks:
    named = "\n".join("  " + _named(group, limit=len(group.members)) for group in leaks)
    raise LeakageError(
        f"{title}: {len(leaks)} picture(s) are in more than one split:\n{named}\nremove the "
        "copies, or build with --leakage drop (keeps the earliest split's) or warn.")


def _named(group: Group, limit: int = 3) -> str:
  """`limit` members of a group, the first of each split among them (a leak is shown by
  members of two splits however many copies one split holds), then '(+N)' for the rest."""
  firsts = {}
  for position, member in enumerate(group.members):
    firsts.setdefault(member.split, position)
  shown = sorted(list(firsts.values())[:limit])
  shown = sorted(shown + [p for p in range(len(group.members)) if p not in shown]
                 [:limit - len(shown)])
  names = [printable(f"{group.members[p].split}/{group.members[p].file_name}") for p in shown]
  more = f" (+{len(group.members) - limit})" if len(group.members) > limit else ""
  return " = ".join(names) + more


def summary(groups: Sequence[Group], num_images: int, dropped: Sequence[Member] = (),
            show: int = 3) -> str:
  """One line: how many groups, how many cross splits, naming a few of those."""
  if not groups:  # (what a drop left out is still said)
    return f"duplicates: none among {num_images} images" + _dropped(dropped)
  kinds = collections.Counter(g.kind for g in groups)
  leaks = [g for g in groups if g.cross_split]
  conflicts = sum(g.label_conflict for g in groups)
  line = (f"duplicates: {len(groups)} group(s) ({kinds[EXACT]} exact, {kinds[NEAR]} near) "
          f"among {num_images} images; {len(leaks)} cross splits (leakage)")
  if leaks:
    line += ": " + "; ".join(_named(g) for g in leaks[:show])
    line += f"; and {len(leaks) - show} more" if len(leaks) > show else ""
  if conflicts:
    line += f"; {conflicts} label conflict(s)"
  return line + _dropped(dropped)


def _dropped(dropped: Sequence[Member]) -> str:
  return f"; dropped {len(dropped)} leaked example(s)" if dropped else ""


def to_json(groups: Sequence[Group], num_images: int, dropped: Sequence[Member] = ()) -> dict:
  """The stored report (`REPORT_FILE`) and `imagesets duplicates --json`."""
  return {"groups": [g.to_json() for g in groups],
          "num_images": num_images,
          "num_cross_split": sum(g.cross_split for g in groups),
          "num_label_conflicts": sum(g.label_conflict for g in groups),
          "dropped": [m.to_json() for m in dropped],
          "threshold_bits": THRESHOLD}


class BadReport(ValueError):
  """A stored report that cannot be trusted (read from a bucket or edited by hand)."""


def from_json(report, source: str = REPORT_FILE, splits: dict[str, int] | None = None,
              spec: str = "SPEC", command: str = "duplicates", *,
              names_once: bool = True) -> tuple[list[Group], list[Member]]:
  """The groups and dropped members of a stored report, checked: a report read from a
  bucket is untrusted input. `splits` (split -> examples of the version) bounds its claims;
  `names_once`: a (split, file name) is in one group at most (False for what a build's own
  workers found, where one name may stand twice, as `find` allows).
  Raises BadReport naming `source` and the fix (`imagesets COMMAND SPEC --recompute`)."""
  try:
    return _parsed(report, splits, names_once)
  except (KeyError, TypeError, ValueError, IndexError) as why:
    raise _unreadable(source, why, spec, command) from None


def _unreadable(source: str, why: Exception, spec: str = "SPEC",
                command: str = "duplicates") -> BadReport:
  return BadReport(f"{source}: unreadable duplicate report ({why}); run imagesets "
                   f"{command} {spec} --recompute to read the images instead")


def read_stored(path, splits: dict[str, int], *, source: str | None = None, spec: str = "SPEC",
                command: str = "duplicates") -> tuple[list[Group], list[Member], int] | None:
  """(groups, dropped members, images) of the report a build stored at `path`, checked by
  `from_json` against `splits` (split -> examples of the version beside it: a folder may
  come from elsewhere); None when there is none (`leakage` off, a Beam build without
  images), or something else than a file stands at `path` (the images are then read, as
  for a version without one). Messages name the report as `source` (default: its path)."""
  path = pathlib.Path(path)
  if not path.is_file():
    return None
  source = source or str(path)
  try:
    stored = json.loads(path.read_text())
  except (ValueError, RecursionError) as why:  # (RecursionError: JSON nested too deep)
    raise _unreadable(source, why, spec, command) from None
  groups, dropped = from_json(stored, source, splits, spec, command)
  return groups, dropped, stored["num_images"]


def stored_summary(version_dir, splits: dict[str, int]) -> str | None:
  """The summary line of the report a build stored in the local `version_dir` (`read_stored`),
  or None when it stored none."""
  stored = read_stored(pathlib.Path(version_dir) / REPORT_FILE, splits)
  return None if stored is None else summary(stored[0], stored[2], stored[1])


def _member(row, splits) -> Member:
  if not isinstance(row, dict) or set(row) != {"split", "file_name", "label"}:
    raise ValueError(f"a member is not {{split, file_name, label}}: {printable(repr(row))[:80]}")
  if not (isinstance(row["split"], str) and isinstance(row["file_name"], str)
          and (row["label"] is None or isinstance(row["label"], str))):
    raise TypeError(f"a member's fields are not strings: {printable(repr(row))[:80]}")
  if splits is not None and row["split"] not in splits:
    raise ValueError(f"split {printable(row['split'])!r} is not in the version")
  return Member(row["split"], row["file_name"], row["label"])


def _positions(rows, size: int, width: int | None) -> tuple[tuple[int, ...], ...]:
  """Rows of positions in a group of `size`: pairs (`width` 2, links), or disjoint sets of
  distinct members (exact_sets: a member is in one at most, so they hold `size` at most)."""
  if not isinstance(rows, list):
    raise TypeError("exact_sets/links are not lists")
  seen = set()
  for row in rows:
    if (not isinstance(row, list) or (width and len(row) != width)
        or not all(type(p) is int and 0 <= p < size for p in row)):
      raise IndexError(f"positions {printable(repr(row))[:40]} outside the group of {size}")
    if width is None:
      if len(set(row)) != len(row) or seen & set(row):
        raise ValueError(f"exact set {printable(repr(row))[:40]} repeats a member")
      seen |= set(row)
  return tuple(tuple(row) for row in rows)


def _parsed(report, splits, names_once=True):
  if not isinstance(report, dict) or not isinstance(report.get("groups"), list):
    raise ValueError("no list of groups")
  num_images = report["num_images"]
  if type(num_images) is not int or num_images < 0:
    raise TypeError("num_images is not a count")
  if splits is not None and num_images != sum(splits.values()):
    raise ValueError(f"num_images {num_images} but the version holds {sum(splits.values())}")
  groups, grouped, held = [], set(), 0
  for row in report["groups"]:
    if not isinstance(row, dict) or row.get("kind") not in (EXACT, NEAR):
      raise ValueError("a group's kind is not exact or near")
    members = tuple(_member(m, splits) for m in row["members"])
    if len(members) < 2:
      raise ValueError("a group of fewer than two members")
    if names_once:
      names = {(m.split, m.file_name) for m in members}
      if len(names) != len(members) or grouped & names:
        raise ValueError("an image is in two groups, or twice in one")
      grouped |= names
    held += len(members)
    if held > num_images:
      raise ValueError(f"more images in groups than the {num_images} of the version")
    groups.append(Group(row["kind"], members, _positions(row.get("exact_sets", []), len(members),
                                                         None),
                        _positions(row.get("links", []), len(members), 2)))
  dropped = report.get("dropped", [])
  if not isinstance(dropped, list):
    raise TypeError("dropped is not a list")
  return groups, [_member(m, None) for m in dropped]


printable = terminal_text.printable  # (its callers here and beyond)
