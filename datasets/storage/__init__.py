"""Storage, beneath reading and publishing, one job a module: `bucket` (one store interface
over a local folder, s3://, gs://), `versions` (names, refs and the layout of versions),
`manifest` (what a version contains, checked on every copy), `transfer` (the one checked
download, version resolution and atomic writes), `file_locks`, `fetch` (a whole verified
copy in the local cache) and `linked_files` (a file under a second name, never written
through).

Imports nothing of the read path, publishing, the build machinery or the builders.
"""
