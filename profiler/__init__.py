"""Measure a model's per-layer profile and a GPU's efficiency curve with PyTorch.

``profiler.layers`` builds one GPU's share of each layer (embedding, transformer block, head) from
a ``ModelSpec``; ``profiler.measure`` times forward and backward of each and counts the bytes
autograd keeps, producing a ``partitura-profile/1`` document (``solver.io.profile_format``);
``profiler.calibrate`` measures GEMM efficiency and memory bandwidth for a catalog override;
``profiler.pipedream`` imports PipeDream's profiler output; ``profiler.compare`` sets a profile
beside the analytic model; ``profiler.cli`` adds the ``partitura`` sub-commands.

PyTorch is an optional extra (``pip install .[profile]``): importing this package does not import
torch; only ``layers``, ``measure`` and ``calibrate`` need it.
"""
