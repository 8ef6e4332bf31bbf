"""Every code block of README.md and docs/*.md runs as written (issue 21 item 1).

Blocks are found in every docs/*.md (a new page is picked up without changing this file)
and run in document order, one page after the other:

* ```sh / ```bash blocks run in bash (`set -eo pipefail`) with the venv's bin first on PATH,
  and before it stand-ins for `imagesets` and `tfds` that run the same entry points in a
  child of the suite's warm interpreter (conftest.warm, warm_commands.py: each command its
  own process, with the page's environment, TensorFlow not loaded again for each; the real
  scripts' start-up is test_startup.py's subject);
* ```python blocks run as `python SCRIPT`, the block written to a file, each its own
  process (so each block stands alone, as a reader's script would, and worker processes
  that Grain spawns import it as they would a reader's), started the same warm way;
* output blocks (```text, ``` without a language, toml, bibtex, ...) are not run.

Each page runs in its own temporary HOME holding what the docs assume a reader has:
`~/photos/pets` (a small class-per-folder tree), `~/Downloads/flower_photos.tgz` with
its contents `~/Downloads/flower_photos/`, and `~/voc/VOCdevkit` (the builders' small
dummy data, so the offline builds work), and the
working directory is the repository. One shared data dir stands for the docs' `/tmp/tfds`
(the only rewrite of a block: this machine's /tmp is shared), prepared once with flowers
and voc_segmentation built from those dummy sources.

A block that cannot run here says so in the markdown, on the line before its fence:
`<!-- skip-test: needs the network: downloads flower_photos.tgz -->`; the test is then
skipped with that reason.
"""

import hashlib
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tarfile

import pytest

from conftest import BIN, REPO, warm, warm_bin

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python", "py": "python"}
FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
SKIP = re.compile(r"<!--\s*skip-test:\s*(.*?)\s*-->\s*$")
TMP_TFDS = "/tmp/tfds"


class Block:
  def __init__(self, page: pathlib.Path, line: int, kind: str, code: str, skip: str | None):
    self.page, self.line, self.kind, self.code, self.skip = page, line, kind, code, skip

  @property
  def id(self) -> str:
    return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: pathlib.Path) -> list[Block]:
  """The runnable blocks of a page (output blocks left out), with their skip reasons."""
  text = page.read_text()
  found = []
  for match in FENCE.finditer(text):
    kind = RUN.get(match.group(1).lower())
    if kind is None:
      continue
    line = text.count("\n", 0, match.start()) + 1
    before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
    skip = SKIP.search(before)
    found.append(Block(page, line, kind, match.group(2), skip.group(1) if skip else None))
  return found


ALL = [block for page in PAGES for block in blocks(page)]


def test_every_page_has_its_blocks_found():
  # The parser sees the fences a reader sees: a page with code has blocks, and every
  # skip marker belongs to a block.
  for page in PAGES:
    text = page.read_text()
    assert len(re.findall(r"<!--\s*skip-test:", text)) == sum(
        1 for block in blocks(page) if block.skip), page
  assert {block.kind for block in ALL} == {"sh", "python"}


# ------------------------------------------------------------------ the reader's machine

def _pets(root: pathlib.Path) -> None:
  from imagesets_testing import sample_images
  from imagesets_testing.trees import write_tree
  write_tree(root, {f"{name}/{i:02d}.jpg": sample_images.jpeg(48, 64, seed=10 * c + i)
                    for c, name in enumerate(["cat", "dog"]) for i in range(8)})


def _flower_photos(folder: pathlib.Path) -> pathlib.Path:
  """flowers' dummy archive and its contents: a manual dir holding flower_photos/ builds
  without the checksum check of the real 229 MB archive."""
  archive = REPO / "datasets/flowers/dummy_data/flower_photos.tgz"
  folder.mkdir(parents=True, exist_ok=True)
  shutil.copy(archive, folder)
  with tarfile.open(archive) as tar:
    tar.extractall(folder, filter="data")
  return folder


@pytest.fixture(scope="session")
def shared_tfds(tmp_path_factory) -> pathlib.Path:
  """The docs' /tmp/tfds: flowers and voc_segmentation built from the dummy sources."""
  import imagesets  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  data_dir = tmp_path_factory.mktemp("docs_tfds")
  flowers = _flower_photos(tmp_path_factory.mktemp("docs_flowers"))
  for name, manual in [("flowers", flowers),
                       ("voc_segmentation", REPO / "datasets/voc_segmentation/dummy_data")]:
    tfds.builder(name, data_dir=data_dir).download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
  return data_dir


def _home(root: pathlib.Path) -> pathlib.Path:
  root.mkdir(parents=True)
  _pets(root / "photos" / "pets")
  _flower_photos(root / "Downloads")
  shutil.copytree(REPO / "datasets/voc_segmentation/dummy_data/VOCdevkit", root / "voc/VOCdevkit")
  return root


def _env(home: pathlib.Path) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items()
         if k not in ("TFDS_DATA_DIR", "IMAGESETS_CACHE", "PYTHONPATH")}
  return {**env, "HOME": str(home), "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
          "TF_CPP_MIN_LOG_LEVEL": "2"}


class Page:
  """One page's reader: its HOME and environment, and its commands."""

  def __init__(self, home: pathlib.Path):
    self.home, self.env = home, _env(home)

  def shell_env(self) -> dict[str, str]:
    """The page's environment with warm `imagesets` and `tfds` first on PATH (not `python`:
    a shell block's `python` is the venv's own)."""
    return {**self.env, "PATH": f"{warm_bin('imagesets', 'tfds')}{os.pathsep}{self.env['PATH']}"}

  def run(self, kind: str, code: str) -> tuple[int, str]:
    """(exit status, stdout + stderr) of a block, run in a session of its own, with no
    stdin (as a reader's script run from a terminal sees none of the test's): on a timeout
    the whole session is killed, whatever the block started."""
    if kind == "sh":
      args, env = ["bash", "-c", "set -eo pipefail\n" + code], self.shell_env()
    else:  # a script file, as a reader runs it (spawned worker processes import it)
      script = self.home.parent / f"block_{hashlib.sha256(code.encode()).hexdigest()[:12]}.py"
      script.write_text(code)
      args, env = [warm("python"), str(script)], self.env
    with subprocess.Popen(args, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True) as process:
      try:
        output = process.communicate(timeout=600)[0]
      except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output = process.communicate()[0] + "\n(killed after 600 s)"
    return process.returncode, output


@pytest.fixture(scope="session")
def readers(tmp_path_factory):
  made: dict[pathlib.Path, Page] = {}

  def reader(page: pathlib.Path) -> Page:
    if page not in made:
      made[page] = Page(_home(tmp_path_factory.mktemp("docs_home") / "home"))
    return made[page]
  return reader


def _only_shared(code: str) -> bool:
  """Whether a block's output goes to the docs' /tmp/tfds only (not to the page's HOME)."""
  return (TMP_TFDS in code and "~/tensorflow_datasets" not in code
          and ("--data_dir /tmp/tfds" in code or 'data_dir="/tmp/tfds"' in code))


def _without_comments(shell: str) -> str:
  return "\n".join(re.sub(r"\s+#.*$", "", line) for line in shell.splitlines())


@pytest.fixture(scope="session")
def passed() -> set[tuple[str, str]]:
  return set()


@pytest.mark.parametrize("block", ALL, ids=[block.id for block in ALL])
def test_block_runs_as_written(block: Block, readers, shared_tfds, passed):
  if block.skip:
    pytest.skip(block.skip)
  page = readers(block.page)
  code = block.code.replace(TMP_TFDS, str(shared_tfds))
  # The same commands into the shared /tmp/tfds ran on an earlier page: not again (a
  # Beam build is minutes of CPU). Blocks that write to a page's HOME always run.
  same = (block.kind, _without_comments(code) if block.kind == "sh" else code,
          None if _only_shared(block.code) else block.page)
  if same in passed:
    return
  status, output = page.run(block.kind, code)
  assert status == 0, f"{block.id} failed:\n{code}\n--- output\n{output[-6000:]}"
  passed.add(same)
