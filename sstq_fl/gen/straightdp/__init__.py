"""StraightDP: a DP release of class moments in a public PCA feature space, the analytic flow field of the
released Gaussian mixture, and DP-SGD (Abadi et al., CCS 2016) flow matching (Lipman et al., "Flow Matching for
Generative Modeling", ICLR 2023) on simulated clients, on one add/remove ledger.

Importing the package registers the pipeline ``straightdp`` (run-config keys ``sdp-*``), its client tasks
``straightdp.class_moments`` and ``straightdp.second_moment``, and its DP-SGD model ``straightdp-flow``.
"""

from ...config.straightdp import StraightConfig
from ..pipelines import Pipeline, register_pipeline
from . import client_tasks  # noqa: F401  (registers the client tasks and, through the flow model, the model)
from .pipeline import run_straightdp, summary

register_pipeline(Pipeline(StraightConfig, run_straightdp, summary,
                           help="StraightDP: DP moment release, analytic flow field, DP-SGD flow matching "
                                "(add/remove ledger)"))
