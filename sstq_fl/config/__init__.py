"""Every configuration a user sets, declared once, in one place that imports nothing it configures.

- :mod:`.declare`: the option machinery (a field's help, range, choices, CLI flag, run-config key, CLI words,
  whether the CLI requires it) and what is generated from it: argparse options, the run-config reader and
  defaults, the options reference's tables;
- :mod:`.catalog`: the list of configurations, from which ``pyproject.toml``'s ``[tool.flwr.app.config]`` and
  ``docs/options.md`` are generated;
- :mod:`.train` (:class:`~.train.RunConfig`, the LDP training run, with the demo's and compare's presets),
  :mod:`.partition` (the partition names and :class:`~.partition.PartitionOptions`), :mod:`.tracking`
  (``--log-to``), :mod:`.intervals` (the interval over seeds);
- :mod:`.generative` (:class:`~.generative.PipelineConfig`, what every DP generative pipeline shares) and one
  module per built-in pipeline: :mod:`.mepf`, :mod:`.vqg`, :mod:`.straightdp`;
- :mod:`.vocab`: the words options take (engines, trust models, profiles, probes, DP-VQG's variants, …);
- :mod:`.process`: the process-wide settings an entry point applies at start-up (:mod:`sstq_fl.process`);
- :mod:`.flower`: the Flower run config → these configs (no Flower import).

The package imports only :mod:`sstq_fl.checks`, :mod:`sstq_fl.errors`, NumPy and the standard library (a test
checks): a registry that implements a vocabulary imports it from here and a test checks the two agree.
"""
