"""A fair comparison of training methods (``make compare``): the study config (:mod:`.config`: arms, the search
every arm gets or the rate it shares, seeds, which run goes where), running its jobs (:mod:`.runs`, with the driver's
:class:`~.options.StudyOptions`) and its stages in order (:mod:`.stages`; :mod:`.report_only` rewrites a finished
study's report from its records), its numbers (:mod:`.stats`: intervals, paired differences, the findings' verdict
rule), the expectations written before the run (:mod:`.expectations`) and its report (:mod:`.report`: what it reads,
computes and writes; :mod:`.report_md`: its markdown).

The diagnostics stand apart from that core: the learning signal at the base (:mod:`.signal`, stage 0), the anatomy
of the picks' groups (:mod:`.anatomy`) and the online runs' training dynamics (:mod:`.dynamics`) import the core,
never the other way; only the report (report, report_md) and the stages (:mod:`.stages`, which run stage 0) import
them."""
