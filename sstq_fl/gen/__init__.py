"""DP generative pipelines on simulated clients, charged to a privacy ledger: a framework with one subpackage
per pipeline.

Shared parts: :mod:`.config` (the fields every pipeline's config has), :mod:`.pipelines` (the pipeline protocol
and registry), :mod:`.runner` (clients, the client-task registry and the releases), :mod:`.dpsgd` (DP-SGD on the
clients and the model registry), :mod:`.client_tasks` (other shared client tasks), :mod:`.evaluation`,
:mod:`.template` (every run's order: plan, the data set's ledger charged, the private compute, the transcript,
the outputs), :mod:`.outputs` (evaluation, sample grid, metrics), :mod:`.tensors` and :mod:`.cli`
(``sstq-fl gen``); the records come from :mod:`sstq_fl.data.workload`, through the template.  Pipelines:
:mod:`.mepf` (DP-MEPF), :mod:`.vqg` (DP-VQG), :mod:`.straightdp` (StraightDP); each registers itself on import.
"""
