"""DP-VQG: a VQ-VAE tokenizer (van den Oord, Vinyals & Kavukcuoglu, "Neural Discrete Representation Learning",
NeurIPS 2017) trained by DP-SGD on the clients or on public data (Stage I); per-location exponential-mechanism tokens
(McSherry & Talwar, FOCS 2007) and randomized-response labels released by the clients (Stage II); and a
class-conditional MaskGIT prior (Chang et al., "MaskGIT: Masked Generative Image Transformer", CVPR 2022) trained
on the released tokens only (Stage III, post-processing).

Importing the package registers the pipeline ``dp-vqg`` (run-config keys ``vqg-*``), its client task
``vqg.tokens`` and its DP-SGD model ``vqg-tokenizer``.
"""

from ...config.vqg import VqgConfig
from ..pipelines import Pipeline, register_pipeline
from . import client_tasks  # noqa: F401  (registers the client task and, through the tokenizer, the model)
from .pipeline import run_dp_vqg, summary

register_pipeline(Pipeline(VqgConfig, run_dp_vqg, summary,
                           help="DP-VQG: VQ tokenizer (DP-SGD or public), exponential-mechanism tokens, MaskGIT prior"))
