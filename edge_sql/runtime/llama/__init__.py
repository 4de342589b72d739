"""The thin layer over llama.cpp's C API: the backend and its threads, batches, the mapped file, models shared by sessions, contexts and loading a GGUF into them."""
