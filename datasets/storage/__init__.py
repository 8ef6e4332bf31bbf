"""Storage, beneath reading and publishing, one job a module: `bucket` (one store interface
over a local folder, s3://, gs://), `versions` (names, refs and the layout of versions),
`manifest` (what a version contains, checked on every copy), `transfer` (the one checked
download and version resolution), `atomic_files` (a file whole under its name or not at
all: replaced, or created exclusively; links and copies), `file_locks` and `fetch` (a whole
verified copy in the local cache).

Imports nothing of the read path, publishing, the build machinery or the builders.
"""
