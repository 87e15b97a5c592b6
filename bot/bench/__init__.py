"""The published benchmarks: the gate's fault injection (:mod:`.gate`) and the tuner comparison with its oracle
(:mod:`.tuners`). They drive the product from outside; nothing in the product imports them."""
