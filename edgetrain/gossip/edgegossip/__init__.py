"""EdgeGossip (Han et al., IEEE TPDS 2021): GoSGD plus the balancer (:mod:`.side`), the
loss-ranked trainer (:mod:`.ranking`) and the throughput predictor (:mod:`.predictor`); its
worker is :mod:`.runner`."""
