"""What a process prints and whether it is a command: `cli_process` (a command-line
program's own process, or someone else's), `progress_lines` (bars that suit a log) and
`progress_bars` (ours, on them). Imports nothing else of the package.
"""
