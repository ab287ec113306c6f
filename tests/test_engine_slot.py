"""The studio's engine slot: what the header and the Pre-label tab say when the model could not be loaded."""

import pytest

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
    header = header_text(_Studio(slot), "demo").replace("&#46;", ".")  # as the page shows it
    assert ".." not in header and "Pass a local folder. Annotating" in header


def test_a_vllm_server_whose_model_has_no_tokenizer_here_reads_with_diffjev_tokenizer(
    monkeypatch, vllm_server, tiny_model_folder
):
    from diffjev.engines.auto import EngineChoice, choose_engine
    from diffjev.engines.base import EngineError
    from conftest import SERVED_NAME

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the served model's name is not a folder or cached here
    monkeypatch.setenv("DIFFJEV_VLLM_URL", vllm_server.url)
    monkeypatch.setenv("DIFFJEV_VLLM_MODEL", SERVED_NAME)
    with pytest.raises((EngineError, ModelLoadError), match="DIFFJEV_TOKENIZER"):
        choose_engine(EngineChoice())
    monkeypatch.setenv("DIFFJEV_TOKENIZER", str(tiny_model_folder))
    chosen = choose_engine(EngineChoice())
    assert chosen.engine.tokenizer.name_or_path == str(tiny_model_folder)
