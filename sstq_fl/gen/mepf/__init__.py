"""DP-MEPF (Harder, Jalali Asadabadi, Sutherland & Park, "Pre-trained Perceptual Features Improve Differentially
Private Image Generation", TMLR 2023): public perceptual features, one labelled Gaussian release of their class
means on the clients, a generator trained on the release alone.

Importing the package registers the pipeline ``dp-mepf`` (run-config keys ``mepf-*``) and its client task
``mepf.class_sums``.  Modules: :mod:`.features` (Φ and the statistics), :mod:`.generator`, :mod:`.client_tasks`,
:mod:`.pipeline` (the run).
"""

from ...config.mepf import MepfConfig
from ..pipelines import Pipeline, register_pipeline
from . import client_tasks  # noqa: F401  (registers the client task)
from .pipeline import run_dp_mepf, summary

register_pipeline(Pipeline(MepfConfig, run_dp_mepf, summary,
                           help="DP-MEPF: public perceptual features, one labelled release, generator"))
