"""Publishing a version to a team bucket (`publish`) and listing what a bucket or a local
data dir holds (`listing`), on the storage layer (`imagesets.storage`).

Works on prepared version folders; never imports a builder, the build machinery or the
read path.
"""
