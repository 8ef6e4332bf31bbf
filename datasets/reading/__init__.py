"""The read path: training and evaluation `tf.data` pipelines and the ops they are made of.

Reads prepared datasets through TFDS (and from team buckets through `publishing`); never
imports a builder or the build machinery.
"""
