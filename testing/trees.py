"""Write file trees ({relative path: bytes}) for tests and benchmarks: local or tf.io.gfile URL."""

import pathlib

import tensorflow as tf


def write_tree(root, files: dict[str, bytes]) -> str:
  """Writes every file under `root` (a local folder); returns `root` as a string."""
  root = pathlib.Path(root)
  for relative, data in files.items():
    (root / relative).parent.mkdir(parents=True, exist_ok=True)
    (root / relative).write_bytes(data)
  return str(root)


def write_gfile_tree(root: str, files: dict[str, bytes]) -> str:
  """`write_tree` for a tf.io.gfile URL (ram://, gs://, ...)."""
  for relative, data in files.items():
    tf.io.gfile.makedirs(f"{root}/{relative}".rsplit("/", 1)[0])
    with tf.io.gfile.GFile(f"{root}/{relative}", "wb") as f:
      f.write(data)
  return root
