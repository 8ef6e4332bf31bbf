"""Team buckets, one job a module: `bucket` (the storage interface: local, s3://, gs://),
`versions` (names and layout of versions), `manifest` (what a version contains, checked
on every copy), `transfer` (the one checked download and version resolution), `publish`,
`listing`, `fetch` (a whole verified copy in the local cache) and `progress_bars`.

Works on prepared version folders; never imports a builder, the build machinery or the
read path.
"""
