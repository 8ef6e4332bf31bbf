"""Download checksums, one `<dataset>.txt` per dataset in TFDS's url_checksums format.

A package (not a bare folder) so that it resolves the same way from a source checkout,
an editable install and a wheel.
"""

import os

DIRECTORY = os.path.dirname(os.path.abspath(__file__))
