"""The pipeline around the library: the ``transformer-hessian`` command line (:mod:`.cli`, :mod:`.commands`),
the steps of the pipeline's own rules (:mod:`.steps`, :mod:`.report_steps`), the report (:mod:`.report`:
tables and ``summary.json``; :mod:`.report_pages`), the recap printed at the end of a run (:mod:`.recap`)
and the run guard of ``make reproduce`` (:mod:`.runguard`). A study's own steps live in its folder.
"""
