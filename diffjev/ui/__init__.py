"""The Gradio studio. It calls the core's services and never touches SQL."""
