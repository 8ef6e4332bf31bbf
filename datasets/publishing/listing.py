"""List the versions published in a bucket (`imagesets list`)."""

import dataclasses

from imagesets.publishing import bucket as bucket_lib
from imagesets.publishing import manifest as manifest_lib
from imagesets.publishing import versions


@dataclasses.dataclass(frozen=True)
class Published:
  """A committed version in a bucket, as `list` shows it."""

  ref: versions.Ref
  manifest: manifest_lib.Manifest | None   # None: committed by another tool, nothing to verify against


def list_published(url: str) -> tuple[list[Published], list[versions.Ref]]:
  """(committed versions, unfinished uploads) in a bucket URL, sorted by name."""
  bucket = bucket_lib.Bucket(url)
  bucket.check()
  published, unfinished = [], []
  for ref, names in sorted(versions.remote_refs(bucket.list_files()).items(),
                           key=lambda item: (item[0].name, item[0].config or "",
                                             tuple(int(x) for x in item[0].version.split(".")))):
    if versions.MARKER not in names:
      unfinished.append(ref)
      continue
    manifest = None
    if versions.MANIFEST in names:
      manifest = manifest_lib.Manifest.from_bytes(bucket.read_bytes(f"{ref.folder}/{versions.MANIFEST}"),
                                     bucket.url_of(ref.folder))
    published.append(Published(ref, manifest))
  return published, unfinished
