"""Table 1 of the paper (ViT hyperparameters of both experiments), generated from the config and
the runs' metrics, the paper's row next to this run's.

One module per part: :mod:`.compute` (the table as a DataFrame), :mod:`.step` (the rule's step),
:mod:`.cli` (the ``table1`` command), :mod:`.registry` (its entry in ``paper/README.md``); its rule is
in ``workflow/rules/studies/table1.smk``."""
