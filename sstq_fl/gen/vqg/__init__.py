"""DP-VQG (spec §2): a VQ-VAE tokenizer (Stage I), exponential-mechanism tokens and randomized-response
labels released by the clients (Stage II), and a class-conditional MaskGIT prior trained on the released
tokens only (Stage III, post-processing)."""
