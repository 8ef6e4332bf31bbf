"""Team buckets: the storage interface (`bucket`) and publish / list / fetch (`publish`).

Works on prepared version folders; never imports a builder or the build machinery.
"""
