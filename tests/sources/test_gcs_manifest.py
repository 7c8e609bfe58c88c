"""A CSV manifest on gs:// with relative image paths, written to gs:// (emulator-backed GCS)."""

from __future__ import annotations

import json

from fixtures_gcs import FakeGcs

from beam_tfrecord import storage
from beam_tfrecord.verify import verify_dataset
from pipelines import build_from_manifest


def test_gs_manifest_with_relative_paths_and_allowed_root(tmp_path, gcs_bucket: str, fake_gcs: FakeGcs) -> None:
    local = tmp_path / "raw"
    (local / "data" / "img").mkdir(parents=True)
    from PIL import Image as PILImage

    for name in ("a", "b"):
        PILImage.new("RGB", (4, 4), (10, 20, 30)).save(local / "data" / "img" / f"{name}.png")
    PILImage.new("RGB", (4, 4)).save(local / "secret.png")
    (local / "data" / "m.csv").write_text("id,image,n\na,img/a.png,1\nb,img/b.png,2\nc,../secret.png,3\n")
    assert fake_gcs.upload_tree(str(local), f"{gcs_bucket}/raw") == 4
    output = f"{gcs_bucket}/out"
    manifest = build_from_manifest.run(["--manifest", f"{gcs_bucket}/raw/data/m.csv", "--key_column", "id",
                                        "--restrict_paths", "--max_rejected_fraction", "0.5", "--output", output])
    assert (manifest.num_inputs, manifest.num_rejected) == (3, 1)
    assert verify_dataset(output).num_records == 2
    letter = json.loads(storage.read_bytes(f"{output}/{manifest.dead_letters}"))
    assert letter == {"key": "c", "stage": "read", "error_type": "PathOutsideRootError", "feature": "image",
                      "message": f"feature 'image': cannot read '{gcs_bucket}/raw/secret.png' (it resolves outside "
                                 f"the allowed root '{gcs_bucket}/raw/data') in sample 'c'"}
