"""Annotation files of labeling tools (COCO JSON, Pascal VOC XML, YOLO txt, CSV/JSONL) read
into one model (`objects.Annotations`) by `formats.read`, without TensorFlow.

The parsers never open images and never trust a name, number or size from a file: what
is wrong is collected as problems, all at once, for the builder to list.
"""
