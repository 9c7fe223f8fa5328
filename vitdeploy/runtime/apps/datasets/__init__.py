"""Dataset jobs (``embed``, ``segment-all --images``): the job and its workers, the output folder that makes a stop
lose nothing, and the same job on Ray Data."""
