"""diffjev studio: `python app.py` here, or as a Hugging Face Space (sdk: gradio, app_file: app.py).

Settings (all optional): DIFFJEV_DB (database file or URL), DIFFJEV_PROJECT, DIFFJEV_VLLM_URL and
DIFFJEV_VLLM_MODEL (a vLLM server), DIFFJEV_MODEL (a diffusion model in-process), DIFFJEV_USERS
(user:password pairs for a login), GRADIO_SERVER_NAME and PORT (where to listen).
"""

from diffjev.ui.studio import main

if __name__ == "__main__":
    main()
