"""The exit status of every `imagesets` command: one number per kind of outcome, the same
in each subcommand (README, "Exit status").

A script can tell "the answer is no" (1) from "the command could not answer": its command
line was wrong (2, as argparse), something it names is not there (3), or the input was
refused or the work failed (4).
"""

OK = 0
ANSWER_NO = 1    # verify found a mismatch, diff a difference, duplicates --fail-on a group
USAGE = 2        # an unknown command or flag, or a value no run could accept
NOT_FOUND = 3    # a dataset, version, folder, file or bucket prefix that is not there
FAILED = 4       # refused input (bad files, an existing version) or a failed step
INTERRUPTED = 130           # Ctrl-C, as a shell reports SIGINT
READER_LEFT = 128 + 13      # SIGPIPE: the reader of our output left (coreutils' status)


class UsageError(Exception):
  """A value of the command line that no run could accept: the message is all the user
  needs (one line)."""


def of(exc: BaseException, usage: tuple = (), not_there: tuple = ()) -> int:
  """The status of a command that stopped with `exc`: `usage` and `not_there` are the
  exception types of those kinds (a spec or URL that is not one; a dataset, version,
  folder or bucket that is not there). Any other error is FAILED: a file missing inside a
  version that is there is damage, not absence."""
  if isinstance(exc, (UsageError, *usage)):
    return USAGE
  if isinstance(exc, not_there):
    return NOT_FOUND
  return FAILED
