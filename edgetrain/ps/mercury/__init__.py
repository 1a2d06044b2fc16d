"""Mercury (Zeng, Yan, Zhang, SenSys 2021) on the parameter-server family: every device is a
trainer and the shard server of one slice of the flat parameter vector; group-wise importance
sampling with an exactly unbiased weight, importance-aware resharding, and the BACC scheduler.

Pure parts (no sockets, files or clocks): :mod:`.group_sampling`, :mod:`.shards`,
:mod:`.reshard`, :mod:`.bacc` (the thread protocol), :mod:`.speedup`, :mod:`.premises`,
:mod:`.codec`. The device process is :mod:`.device` (its peer traffic in :mod:`.net`), the
launcher side :mod:`.side` (its report :mod:`.mercury_report`), the recipe section
:mod:`.config` (torch-free).
"""
