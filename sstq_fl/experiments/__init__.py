"""Experiments as data: experiment files (:mod:`.spec`), their grids run in parallel (:mod:`.runner`,
:mod:`.sweep`), tidy results with intervals over seeds (:mod:`.results`) and figures (:mod:`.figures`)."""
