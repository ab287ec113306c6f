"""Check that Argilla 2.x takes a folder diffjev wrote, the way `Dataset.from_disk` reads it: the dataset
model, `Settings.from_json`, and each record through `Record.from_dict` to the API model `records.log`
sends. Run with a Python that has argilla installed:

    python scripts/interchange/check_argilla_folder.py FOLDER
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import argilla as rg
from argilla._models import DatasetModel

sys.path.insert(0, str(Path(__file__).parent))
from make_argilla_dataset import OfflineArgilla  # noqa: E402


def main(folder: Path) -> None:
    rg.Argilla._set_default(OfflineArgilla(api_url="http://localhost:6900", api_key="offline"))
    DatasetModel(**json.loads((folder / ".argilla" / "dataset.json").read_text()))
    dataset = rg.Dataset(name="check", settings=rg.Settings.from_json(folder / ".argilla" / "settings.json"))
    records = json.loads((folder / "records.json").read_text())
    for data in records:
        rg.Record.from_dict(data, dataset=dataset).api_model()
    print(f"argilla takes {folder}: {len(records)} records")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
