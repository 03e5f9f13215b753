"""A fair comparison of training methods (``make compare``): the study config (:mod:`.config`: arms, the search
every arm gets or the rate it shares, seeds, which run goes where), running its jobs (:mod:`.runs`), its numbers
(:mod:`.stats`: intervals, paired differences, the findings' verdict rule), the expectations written before the run
(:mod:`.expectations`) and its report (:mod:`.report`)."""
