"""The studio's engine slot: what the header and the Pre-label tab say when the model could not be loaded."""

from diffjev.engines.slot import EngineSlot
from diffjev.models import ModelLoadError
from diffjev.ui.studio import header_text


class _Studio:  # header_text reads the slot and the project's name only
    project = "demo"

    def __init__(self, slot):
        self.slot = slot


def test_a_failed_load_is_one_sentence_without_a_doubled_full_stop():
    def load():
        raise ModelLoadError("cannot load the tokenizer 'x/y': it is not a local folder. Pass a local folder.\nmore")

    slot = EngineSlot.loading(load).start()
    slot._thread.join(30)
    assert slot.settled and not slot.ready
    assert slot.error == "cannot load the tokenizer 'x/y': it is not a local folder. Pass a local folder"
    header = header_text(_Studio(slot)).replace("&#46;", ".")  # as the page shows it
    assert ".." not in header and "Pass a local folder. Annotating" in header
