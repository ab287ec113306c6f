"""diffjev studio: `python app.py` here, or as a Hugging Face Space (sdk: gradio, app_file: app.py).

The engine is chosen from the environment: DIFFJEV_VLLM_URL (+ DIFFJEV_VLLM_MODEL) for a vLLM server,
else DIFFJEV_MODEL in-process through transformers, else the offline autoregressive fallback.
"""

import os

from diffjev.engines.auto import EngineChoice, choose_engine
from diffjev.ui.playground import CSS, build_app

if __name__ == "__main__":
    chosen = choose_engine(EngineChoice())
    print(f"diffjev: pre-labels from {chosen.description}", flush=True)
    build_app(chosen).launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                             server_port=int(os.environ.get("PORT", 7860)), css=CSS)
