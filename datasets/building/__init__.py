"""The shared build machinery every builder stands on (builders -> building -> TFDS).

Rules every builder shares (`builder_base`), one per-example code path locally or on
Beam (`generation`, `parallel_map`), shard policy and byte-reproducible records
(`sharding`, `deterministic_writer`, `prepared_records`), one lock per version being built
(`build_lock`), source checks (`image_checks`, `segmentation_masks`, `class_folders_tree`,
`splits`, `archives`) and one error for every bad item (`problems`). Never imports a
builder, the read path or publishing.
"""
