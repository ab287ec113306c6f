"""diffjev studio: `python app.py` here, or as a Hugging Face Space (sdk: gradio, app_file: app.py).

`python app.py --help` lists every setting (environment variables, all optional) with its default."""

import sys

from diffjev.settings import start_listening

if __name__ == "__main__":
    # --help, a bad port and a taken one are answered before the studio (Gradio, a model) is imported
    listening = start_listening(sys.argv[1:])
    from diffjev.ui.studio import main

    main(listening)
