"""The read path: training and evaluation `tf.data` pipelines and the ops they are made of.

Reads prepared datasets through TFDS (and from team buckets through `imagesets.storage`);
never imports a builder, the build machinery or publishing.
"""
