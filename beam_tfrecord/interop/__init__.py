"""Views of a dataset for other tools (``croissant.json``, ``schema.pbtxt``, DALI indexes), built from the manifest.

See docs/manifest.md, "Files for other tools".
"""

from __future__ import annotations

import json

from beam_tfrecord import storage
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.interop import croissant, tfmd_schema
from beam_tfrecord.interop.croissant import CROISSANT_FILENAME
from beam_tfrecord.interop.tfmd_schema import SCHEMA_FILENAME

INTEROP_FILENAMES = (CROISSANT_FILENAME, SCHEMA_FILENAME)


def interop_files(manifest: Manifest) -> dict[str, bytes]:
    """File name -> contents of the views ``manifest``'s dataset has (none for what a tool cannot express)."""
    files = {}
    if croissant.unsupported_reason(manifest) is None:
        text = json.dumps(croissant.croissant_json(manifest, manifest.dumps().encode("utf-8")), indent=2)
        files[CROISSANT_FILENAME] = (text + "\n").encode("utf-8")
    if tfmd_schema.unsupported_reason(manifest) is None:
        files[SCHEMA_FILENAME] = tfmd_schema.schema_text(manifest)
    return files


def write_interop_files(dataset_dir: str, manifest: Manifest) -> None:
    """Writes ``interop_files(manifest)`` into ``dataset_dir``, each to a temporary name then renamed."""
    for name, data in interop_files(manifest).items():
        storage.write_bytes_atomic(storage.join(dataset_dir, name), data)
