"""The validator (ARCHITECTURE section 7): replay a plan's collectives and GEMMs as torch.distributed
microbenchmarks, compare measured with predicted, and calibrate a hardware profile.

Pure modules (no torch): ``schemas`` (the JSON reports), ``replica`` (fit a plan's mesh into the
world at hand), ``terms`` and ``gemms`` (what to replay and its predicted time, from
``planner.cost``), ``sweep`` (the alpha-beta sweep's points), ``report`` (ratios, Kendall tau,
atomic JSON), ``calibrate`` (least-squares fit of a profile). ``run`` builds and runs a
replay from model, cluster, job and pins objects (``run_validation``, ``run_sweep``; `plan
validate` calls it). torch is imported only by ``runtime``, ``ops``, ``worker`` and ``launch``,
and only when a replay runs, so ``import planner`` and ``plan`` stay torch-free.
"""
